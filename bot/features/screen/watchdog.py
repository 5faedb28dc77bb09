"""The watchdog: screens that never reported are not waited on forever.

:func:`watchdog_pass` (the ``screen-watchdog`` job, :mod:`.jobs`) looks up dispatches
GitHub answered without run details, fails dispatches that never got a running job
(``dispatch_timeout_s``) and runs that never reported (``silence_factor`` x estimate +
``silence_margin_s``), processes a completion whose webhook was lost exactly as the webhook
would have (with the repository's ``[screen]`` settings), and dispatches free pools.
:func:`flush_statuses` writes the status edits the debounce deferred.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from bot.features.screen import budget, notices
from bot.features.screen import queue as screens
from bot.features.screen.bisect import advance_all
from bot.features.screen.buttons import RERUN
from bot.features.screen.dispatch import dispatch_pool, ensure_check_run, find_dispatched_run
from bot.features.screen.labels import sync_labels
from bot.features.screen.queue import Screen
from bot.features.screen.results import finish_screen, get_run
from bot.features.screen.runtime import Runtime
from bot.features.screen.writes import refresh_status
from bot.github import GitHubError, GitHubPort, WorkflowRunInfo

log = logging.getLogger(__name__)


def watchdog_pass(rt: Runtime) -> list[str]:
    """Find dispatches that never started and runs that never reported; ask GitHub, and
    fail (and report) those that are lost.  Returns one line per action taken."""
    now = rt.now()
    actions: list[str] = []
    pools: set[str] = set()
    ended: list[tuple[GitHubPort, int]] = []  # PRs whose labels follow, once committed
    with rt.db() as db:
        stuck = list(db.scalars(select(Screen).where(Screen.state.in_(screens.ACTIVE_STATES))))
        for s in stuck:
            gh = rt.port_for(s)
            if s.state == screens.DISPATCHED and s.run_id is None:
                # GitHub answered the dispatch with an error, or without run details
                try:
                    found = find_dispatched_run(gh, s, gh.get_default_branch(),
                                                screens.aware(s.dispatched_at))
                except GitHubError:
                    log.exception("watchdog could not look up the run of %s", s.label)
                    continue
                if found is not None:
                    s.run_id, s.run_url, s.detail = found.id, found.html_url, None
                    db.commit()
                    ensure_check_run(rt, gh, s.id, now)
                    db.refresh(s)
                    actions.append(f"{s.label}: run {found.id} found by its request id")
            began = screens.aware(s.started_at) or screens.aware(s.dispatched_at) or now
            age = (now - began).total_seconds()
            if s.state == screens.DISPATCHED:
                overdue = age > rt.options.dispatch_timeout_s
            else:
                limit = s.estimate_wall_s * rt.options.silence_factor + rt.options.silence_margin_s
                overdue = age > limit
            if not overdue:
                continue
            info = get_run(gh, s.run_id) if s.run_id is not None else None
            if info is not None and info.status == "completed":
                # the completion webhook was lost: process it as that webhook would have
                # been, under the repository's [screen] settings (where bundles go, or not)
                try:
                    section = rt.screen_section(gh)
                except GitHubError:
                    log.exception("watchdog could not read the config of %s", s.repo)
                    continue
                finish_screen(rt, db, gh, s, run_fields(info), section)
                ended.append((gh, s.pr_number))
                actions.append(f"{s.label}: completion recovered from GitHub ({info.conclusion})")
                pools.add(s.pool)
                continue
            if info is not None and s.run_id is not None:
                try:
                    gh.cancel_workflow_run(s.run_id)
                except Exception:  # noqa: BLE001 - it may already be gone
                    log.exception("watchdog could not cancel run %s", s.run_id)
            what = (
                f"no runner started the job within {rt.options.dispatch_timeout_s / 60:.0f} min"
                if s.state == screens.DISPATCHED
                else f"the run did not report within {age / 3600:.1f} h "
                f"(estimate {s.estimate_wall_s / 3600:.1f} h)"
            )
            wall = age if s.state != screens.DISPATCHED else 0.0
            budget.charge_screen(db, s, wall, "watchdog: " + what)
            s.state = screens.FAILED
            s.conclusion = "timed_out"
            s.completed_at = now
            s.detail = f"Watchdog: {what}; the run was cancelled and reported here."
            if s.check_run_id is not None:
                gh.update_check_run(s.check_run_id, conclusion="timed_out",
                                    title=f"{s.label}: timed out", summary=s.detail,
                                    actions=[RERUN])
            refresh_status(db, gh, s, now, rt.options, force=True)
            if s.started_at is None:
                notices.queue_stuck(rt, db, s, what)
            else:
                notices.screen_failed(rt, db, s)
            actions.append(f"{s.label}: {what}")
            pools.add(s.pool)
        queued_pools = {q.pool for q in db.scalars(
            select(Screen).where(Screen.state == screens.QUEUED))}
    for port, number in ended:
        sync_labels(rt, port, number)
    actions += advance_all(rt)  # bisections whose step ended here (or whose advance was lost)
    for p in sorted(pools | queued_pools):
        if dispatch_pool(rt, p) is not None:
            actions.append(f"pool {p}: next screen dispatched")
    return actions


def run_fields(info: WorkflowRunInfo) -> dict[str, Any]:
    """The fields of a ``workflow_run`` webhook payload's ``workflow_run`` that
    :func:`~.results.finish_screen` reads, from the run as the REST API gives it."""
    return {
        "id": info.id, "conclusion": info.conclusion,
        "run_started_at": info.run_started_at.isoformat() if info.run_started_at else None,
        "updated_at": info.updated_at.isoformat() if info.updated_at else None,
    }


def flush_statuses(rt: Runtime) -> int:
    """Write status edits deferred by the debounce; returns the number of comments edited."""
    now = rt.now()
    n = 0
    with rt.db() as db:
        recent = now - timedelta(days=2)
        for s in db.scalars(select(Screen).where(Screen.requested_at >= recent)):
            if s.status_comment_id is None:
                continue
            try:
                if refresh_status(db, rt.port_for(s), s, now, rt.options):
                    n += 1
            except Exception:  # noqa: BLE001
                log.exception("status flush of %s failed", s.label)
    return n


# ------------------------------------------------------------------------------ handlers
