"""Periodic jobs of the /screen flow on APScheduler, registered from one list with stable ids.

:data:`JOBS` is the only place jobs are declared; :func:`register` adds each with its id and
``replace_existing=True``, so registering twice (a restart, a second call) never duplicates a
job.  Jobs run on the scheduler's thread pool, one instance each at a time (a slow pass is
not overlapped by the next; missed runs coalesce into one).

- ``screen-watchdog``: dispatches with no running job after ``dispatch_timeout_s`` and runs
  that never reported (``silence_factor`` x estimate + ``silence_margin_s``) are looked up on
  GitHub; a completion whose webhook was lost is processed, a lost run is cancelled, charged
  and reported; free pools get their next screen (:func:`bot.screen.watchdog_pass`).
- ``screen-status-flush``: status comment edits deferred by the debounce are written
  (:func:`bot.screen.flush_statuses`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from bot import screen

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobSpec:
    """One periodic job: stable ``id``, ``interval_s`` seconds, the function (called with
    the :class:`bot.screen.Runtime`) and a one-line description."""

    id: str
    interval_s: float
    fn: Callable[[screen.Runtime], Any]
    doc: str


def _watchdog(rt: screen.Runtime) -> None:
    for line in screen.watchdog_pass(rt):
        log.warning("watchdog: %s", line)


def _flush(rt: screen.Runtime) -> None:
    n = screen.flush_statuses(rt)
    if n:
        log.info("status flush: %d comment(s) edited", n)


JOBS: tuple[JobSpec, ...] = (
    JobSpec("screen-watchdog", 60.0, _watchdog,
            "fail lost dispatches and silent runs; dispatch free pools"),
    JobSpec("screen-status-flush", 5.0, _flush, "write debounced status comment edits"),
)


def register(
    scheduler: Any, rt: screen.Runtime, jobs: tuple[JobSpec, ...] = JOBS,
    intervals: dict[str, float] | None = None,
) -> list[str]:
    """Add every job of ``jobs`` to ``scheduler`` (APScheduler 3) under its stable id;
    ``intervals`` overrides seconds by id.  Returns the ids registered."""
    ids = []
    for j in jobs:
        seconds = (intervals or {}).get(j.id, j.interval_s)
        scheduler.add_job(
            _guarded(j), "interval", seconds=seconds, id=j.id, name=j.doc, args=[rt],
            replace_existing=True, max_instances=1, coalesce=True,
        )
        ids.append(j.id)
    return ids


def _guarded(j: JobSpec) -> Callable[[screen.Runtime], None]:
    def run(rt: screen.Runtime) -> None:
        try:
            j.fn(rt)
        except Exception:  # noqa: BLE001 - a failing pass is logged; the next one retries
            log.exception("job %s failed", j.id)

    run.__name__ = j.id.replace("-", "_")
    return run


def start(rt: screen.Runtime, intervals: dict[str, float] | None = None) -> BackgroundScheduler:
    """A started background scheduler (UTC) with :data:`JOBS` registered."""
    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one INFO line per run
    sched = BackgroundScheduler(timezone="UTC")
    register(sched, rt, intervals=intervals)
    sched.start()
    return sched
