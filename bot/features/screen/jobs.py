"""Periodic jobs of the /screen flow, run by the worker's one scheduler (:mod:`bot.scheduler`):

- ``screen-watchdog``: dispatches with no running job after ``dispatch_timeout_s`` and runs
  that never reported (``silence_factor`` x estimate + ``silence_margin_s``) are looked up on
  GitHub; a completion whose webhook was lost is processed, a lost run is cancelled, charged
  and reported; free pools get their next screen (:func:`bot.features.screen.watchdog.
  watchdog_pass`).
- ``screen-status-flush``: status comment edits deferred by the debounce are written
  (:func:`bot.features.screen.watchdog.flush_statuses`).
"""

from __future__ import annotations

import logging

from bot.features.screen.runtime import Runtime
from bot.features.screen.watchdog import flush_statuses, watchdog_pass
from bot.scheduler import Job

log = logging.getLogger(__name__)

WATCHDOG_ID = "screen-watchdog"
FLUSH_ID = "screen-status-flush"


def jobs(rt: Runtime, *, watchdog_interval_s: float = 60.0,
         flush_interval_s: float = 5.0) -> list[Job]:
    """The flow's jobs on runtime ``rt`` (intervals in seconds)."""

    def watchdog() -> None:
        for line in watchdog_pass(rt):
            log.warning("watchdog: %s", line)

    def flush() -> None:
        n = flush_statuses(rt)
        if n:
            log.info("status flush: %d comment(s) edited", n)

    return [
        Job(WATCHDOG_ID, watchdog_interval_s, watchdog,
            "fail lost dispatches and silent runs; dispatch free pools"),
        Job(FLUSH_ID, flush_interval_s, flush, "write debounced status comment edits"),
    ]
