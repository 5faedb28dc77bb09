"""The one scheduler of a worker process: periodic jobs that features declare in their
``register()`` (a :class:`Job` each), run on one APScheduler 3 ``BackgroundScheduler`` (UTC)
in the process that runs the handlers.

Each job is added under its stable ``id`` with ``replace_existing=True`` (adding twice never
duplicates it), runs one instance at a time (a slow pass is not overlapped by the next) and
coalesces missed runs into one.  A job that raises is logged; the next run tries again.
Jobs are plain functions called on the scheduler's thread pool; the GitHub port they use is
synchronous, like the handlers'.

Several ``serve`` replicas on one PostgreSQL database each run a scheduler, but a job runs
only where ``leader()`` is true (:class:`bot.database.JobLeader`: one replica holds an
advisory lock; when it dies another takes over at its next run), so each job runs once per
interval across the replicas.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Job:
    """One periodic job: stable ``id``, ``interval_s`` seconds between runs, the function
    (no arguments; its result is ignored) and a one-line description."""

    id: str
    interval_s: float
    fn: Callable[[], Any]
    doc: str


def add_jobs(scheduler: Any, jobs: Iterable[Job],
             leader: Callable[[], bool] | None = None) -> list[str]:
    """Add every job to ``scheduler`` (APScheduler 3) under its id, each run skipped unless
    ``leader()`` (default: always run); returns the ids."""
    ids = []
    for j in jobs:
        scheduler.add_job(
            _guarded(j, leader), "interval", seconds=j.interval_s, id=j.id, name=j.doc,
            replace_existing=True, max_instances=1, coalesce=True,
        )
        ids.append(j.id)
    return ids


def start_scheduler(jobs: Iterable[Job], leader: Callable[[], bool] | None = None) -> Any:
    """A started ``BackgroundScheduler`` (UTC) running ``jobs`` where ``leader()`` is true;
    call ``shutdown(wait=False)`` to stop it."""
    from apscheduler.schedulers.background import BackgroundScheduler

    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one INFO line per run
    scheduler = BackgroundScheduler(timezone="UTC")
    add_jobs(scheduler, jobs, leader)
    scheduler.start()
    return scheduler


def _guarded(j: Job, leader: Callable[[], bool] | None = None) -> Callable[[], None]:
    def run() -> None:
        try:
            if leader is not None and not leader():
                return
            j.fn()
        except Exception:  # noqa: BLE001 - a failing pass is logged; the next one retries
            log.exception("job %s failed", j.id)

    run.__name__ = j.id.replace("-", "_")
    return run
