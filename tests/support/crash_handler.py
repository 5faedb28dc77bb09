"""A handler module for the crash test, loaded by ``campaign-bot serve`` through
``CAMPAIGN_BOT_EXTRA_HANDLERS=crash_handler`` (with ``tests/support`` on PYTHONPATH): its
``register(app)`` adds the handler, as a feature does.

Each ``crash_test`` delivery appends ``start <id>`` then ``end <id>`` to the file named by
``CRASH_LOG`` (fsynced).  Deliveries whose payload ``n`` is at least ``CRASH_BLOCK_FROM``
block (sleep for an hour) between the two lines, so the test knows exactly what is in
flight when it kills the process.  ``CRASH_SLEEP_S`` makes every delivery take that long
(the replica test).
"""

from __future__ import annotations

import os
import time
from typing import Any

from bot.inbox.router import Event
from bot.registry import Registry


def _append(line: str) -> None:
    fd = os.open(os.environ["CRASH_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def register(app: Registry) -> None:
    """Add :func:`record` for ``crash_test`` deliveries."""
    app.router.on("crash_test")(record)


def record(event: Event, gh: Any, config: Any) -> None:
    """Record the start and end of processing one delivery."""
    _append(f"start {event.delivery_id}")
    time.sleep(float(os.environ.get("CRASH_SLEEP_S", "0")))
    block_from = os.environ.get("CRASH_BLOCK_FROM")
    if block_from is not None and event.payload["n"] >= int(block_from):
        time.sleep(3600)
    _append(f"end {event.delivery_id}")
