"""The one scheduler of a worker process: periodic jobs that features declare in their
``register()`` (a :class:`Job` each), run on one APScheduler 3 ``BackgroundScheduler`` (UTC)
in the process that runs the handlers.

Each job is added under its stable ``id`` with ``replace_existing=True`` (adding twice never
duplicates it), runs one instance at a time (a slow pass is not overlapped by the next) and
coalesces missed runs into one.  A job that raises is logged; the next run tries again.
Jobs are plain functions called on the scheduler's thread pool: a job that needs the GitHub
port (a coroutine API) runs its coroutine with ``asyncio.run`` there.
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


def add_jobs(scheduler: Any, jobs: Iterable[Job]) -> list[str]:
    """Add every job to ``scheduler`` (APScheduler 3) under its id; returns the ids."""
    ids = []
    for j in jobs:
        scheduler.add_job(
            _guarded(j), "interval", seconds=j.interval_s, id=j.id, name=j.doc,
            replace_existing=True, max_instances=1, coalesce=True,
        )
        ids.append(j.id)
    return ids


def start_scheduler(jobs: Iterable[Job]) -> Any:
    """A started ``BackgroundScheduler`` (UTC) running ``jobs``; call ``shutdown(wait=False)``
    to stop it."""
    from apscheduler.schedulers.background import BackgroundScheduler

    logging.getLogger("apscheduler").setLevel(logging.WARNING)  # one INFO line per run
    scheduler = BackgroundScheduler(timezone="UTC")
    add_jobs(scheduler, jobs)
    scheduler.start()
    return scheduler


def _guarded(j: Job) -> Callable[[], None]:
    def run() -> None:
        try:
            j.fn()
        except Exception:  # noqa: BLE001 - a failing pass is logged; the next one retries
            log.exception("job %s failed", j.id)

    run.__name__ = j.id.replace("-", "_")
    return run
