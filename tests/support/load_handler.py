"""A handler module for the replica load test, loaded by ``campaign-bot serve`` through
``CAMPAIGN_BOT_EXTRA_HANDLERS=load_handler`` (with ``tests/support`` on PYTHONPATH).

* ``load_test`` deliveries: one GitHub write each, made idempotent the way the bot's own
  handlers are: the issue named by the payload (``issue.number``) gets one comment carrying
  the hidden marker ``<!-- load:<delivery id> -->``, unless a comment with that marker is
  already there (a retry after ``kill -9`` finds its own earlier write).  So the GitHub
  double's comments show every write, once each, in the order they were made.
* the job ``load-tick`` every ``LOAD_TICK_S`` seconds appends ``tick <serve pid> <unix time>``
  to the file named by ``LOAD_JOB_LOG`` (fsynced): which replica ran the scheduled job when.
"""

from __future__ import annotations

import os
import time
from typing import Any

from bot.inbox.router import Event
from bot.registry import Registry
from bot.scheduler import Job


def marker(delivery_id: str) -> str:
    """The hidden marker of ``delivery_id``'s comment."""
    return f"<!-- load:{delivery_id} -->"


def _tick() -> None:
    line = f"tick {os.getppid()} {time.time():.3f}\n"  # the worker's parent: its serve
    fd = os.open(os.environ["LOAD_JOB_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def register(app: Registry) -> None:
    """Add :func:`write` for ``load_test`` deliveries and the ``load-tick`` job."""
    app.router.on("load_test")(write)
    if os.environ.get("LOAD_JOB_LOG"):
        app.jobs.append(Job("load-tick", float(os.environ.get("LOAD_TICK_S", "1")), _tick,
                            "record which replica runs the scheduled jobs"))


def write(event: Event, gh: Any, config: Any) -> None:
    """Comment once on the payload's issue (see the module docstring)."""
    number = int(event.payload["issue"]["number"])
    mark = marker(event.delivery_id)
    if any(mark in (c.body or "") for c in gh.list_issue_comments(number)):
        return
    gh.create_issue_comment(number, f"{mark}\nn={event.payload['n']}")
