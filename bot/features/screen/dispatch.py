"""Dispatch: the pool's next queued screen goes to a self-hosted runner.

When a pool is free (:func:`dispatch_pool`) its next screen is claimed (one conditional
UPDATE, so no two callers dispatch one screen or fill one pool twice), authorised again and
checked against the PR as it is now (:func:`_check_before_dispatch`), and the default
branch's screen workflow is dispatched (``workflow_dispatch`` with ``return_run_details``;
the request id is an input and goes into ``run-name``); the check run
``campaign-bot/screen: NAME`` is created in progress (:func:`ensure_check_run`).  Pushes
and closes of the PR move or cancel its queued screens (:func:`on_push`,
:func:`on_pr_closed`).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from bot.commands import UserError
from bot.features.screen import budget
from bot.features.screen import queue as screens
from bot.features.screen.buttons import CANCEL, approval_check_run
from bot.features.screen.campaign import load_campaign, recheck, runner_labels
from bot.features.screen.followup import follow_up_input
from bot.features.screen.grammar import FULL_SHA_RE
from bot.features.screen.labels import sync_labels
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import CAMPAIGN_FILE, CHECK_PREFIX, Runtime, refusal_text
from bot.features.screen.writes import refresh_pool, refresh_status, write_once
from bot.github import CheckRun, DispatchResult, GitHubError, GitHubPort, WorkflowRunInfo

log = logging.getLogger(__name__)


def dispatch_pool(
    rt: Runtime, pool: str, default_gh: GitHubPort | None = None
) -> Screen | None:
    """Dispatch the next queued screen of ``pool`` if the pool is free.

    The screen is claimed first (:func:`bot.features.screen.queue.claim`: one conditional
    UPDATE, committed before any GitHub call), so concurrent callers never dispatch one
    screen twice nor two screens onto one pool; the loser returns None.  A claimed screen
    that can no longer run (requester lost permission, fork head moved, dispatch refused) is
    failed with the reason, one whose PR was closed is cancelled, and the next one is tried.
    Returns the dispatched screen, if any."""
    while True:
        with rt.db() as db:
            nxt = screens.next_to_dispatch(db, pool)
            if nxt is None:
                return None
            sid = nxt.id
        with Session(rt.engine, expire_on_commit=False) as db:
            if not screens.claim(db, sid, rt.now()):
                return None  # another caller holds the pool or took this screen
        with rt.db() as db:
            s = db.get(Screen, sid)
            assert s is not None
            gh = rt.port_for(s, default_gh)
        if _dispatch_claimed(rt, gh, s):
            with rt.db() as db:
                refresh_pool(db, gh, pool, rt.now(), rt.options, except_id=sid)
                return db.get(Screen, sid)


class NotDispatched(Exception):
    """A claimed screen that must not be dispatched: ``state`` (``failed`` or
    ``cancelled``) and the status comment's ``detail``."""

    def __init__(self, state: str, detail: str) -> None:
        super().__init__(detail)
        self.state, self.detail = state, detail


def _check_before_dispatch(gh: GitHubPort, s: Screen, ref: str) -> str:
    """Authorisation again (:func:`recheck`), and the PR as it is now: closed cancels the
    screen; a moved head fails a fork's screen (the approval was for the old head) and
    re-pins a same-repository PR's (a push there needs write access).  Returns the head SHA
    to dispatch; raises :class:`NotDispatched`."""
    try:
        recheck(gh, s, ref)
    except UserError as exc:
        raise NotDispatched(screens.FAILED,
                            f"Not dispatched: {refusal_text(exc)}") from None
    pr = gh.get_pull(s.pr_number)
    if pr.state != "open":
        raise NotDispatched(screens.CANCELLED,
                            "Cancelled: the PR was closed before the screen started.")
    if pr.head_sha != s.head_sha:
        if s.from_fork or pr.is_fork:
            raise NotDispatched(
                screens.FAILED, f"Not dispatched: the fork PR head moved to {pr.head_sha[:12]} "
                "after the approval; a new push needs a new /screen")
        return pr.head_sha
    return s.head_sha


def find_dispatched_run(gh: GitHubPort, s: Screen, ref: str,
                        since: datetime | None) -> WorkflowRunInfo | None:
    """The run of ``s``'s workflow on ``ref``, triggered by ``workflow_dispatch`` since
    ``since`` (minus 10 minutes of clock skew), whose title names the screen's request id
    (the workflow's ``run-name`` carries it); None when there is none."""
    after = since - timedelta(minutes=10) if since is not None else None
    for r in gh.list_workflow_runs(s.workflow, branch=ref, event="workflow_dispatch",
                                         created_after=after):
        if screens.names_request(r.display_title, s.request_id) and is_screen_run(
                r.path, r.event, r.head_branch, s.workflow, ref):
            return r
    return None


def is_screen_run(path: str | None, event: str | None, branch: str | None, workflow: str,
                   ref: str) -> bool:
    """True for a run of ``.github/workflows/WORKFLOW`` dispatched on the default branch
    ``ref`` (a path given as ``path@ref`` by reusable-workflow payloads counts too)."""
    return ((path or "").split("@", 1)[0] == f".github/workflows/{workflow}"
            and event == "workflow_dispatch" and branch == ref)


def _dispatch_claimed(rt: Runtime, gh: GitHubPort, s: Screen) -> bool:
    """Dispatch the claimed screen ``s`` (state ``dispatched``, no run yet).  Returns True
    when the pool stays held: dispatched, or GitHub's answer left it unknown whether the run
    exists (then the run is matched by its request id when it reports, or the watchdog finds
    it); False when the screen was failed or cancelled instead."""
    now = rt.now()
    inputs: dict[str, str] = {}
    try:
        ref = gh.get_default_branch()
        head = _check_before_dispatch(gh, s, ref)
        # the labels as the default branch names them now (a PR cannot route its own screen)
        camp = load_campaign(gh, s.repo, ref, s.campaign_path or "")
        try:
            labels = runner_labels(camp.scope, f"{s.campaign_path or '.'}/{CAMPAIGN_FILE}")
        except UserError as exc:
            raise NotDispatched(screens.FAILED, f"Not dispatched: "
                                f"{refusal_text(exc)}") from None
        inputs = {
            "campaign": s.campaign_path or ".",
            "candidate": s.candidate if s.kind == "candidate" else "control",
            "track": s.track,
            "pr": str(s.pr_number),
            "head_sha": head,
            "request_id": s.request_id,
            "sessions": str(len(s.session_order)),
            "runs_on": json.dumps(labels, separators=(",", ":")),
            # the runner takes control, protocol, pool and serving from this file only
            "scope_blob": camp.blob,
        }
        if s.candidate_revision is not None:  # a revision screen (/compare, /bisect)
            inputs["candidate"] = "control"
            inputs["control_revision"] = s.control_revision or camp.scope.engine.commit
            inputs["candidate_revision"] = s.candidate_revision
        follow = follow_up_input(s)
        if follow is not None:  # the next look of a group-sequential series
            inputs["follow_up"] = follow

        def lookup() -> DispatchResult | None:
            r = find_dispatched_run(gh, s, ref, s.dispatched_at or now)
            return DispatchResult(r.id, None, r.html_url) if r is not None else None

        try:
            run = write_once(rt.options, f"dispatch {s.label}",
                             lambda: gh.dispatch_workflow(s.workflow, ref, inputs), lookup)
            if run.run_id is None:  # GitHub gave no run details: find the run
                run = lookup() or run
        except GitHubError as exc:
            if not exc.retryable:
                raise
            # 5xx or no answer, and no run found yet: it may still appear; hold the pool
            with rt.db() as db:
                cur = db.get(Screen, s.id)
                assert cur is not None
                cur.head_sha = head
                cur.detail = (f"GitHub answered the dispatch with an error ({exc}); waiting "
                              f"for a run named with request {s.request_id}.")
                refresh_status(db, gh, cur, now, rt.options, force=True)
            return True
    except NotDispatched as nd:
        _not_dispatched(rt, gh, s, nd.state, nd.detail, now)
        return False
    except Exception as exc:  # noqa: BLE001 - GitHub refused: report, keep the queue going
        log.exception("dispatch of %s failed", s.label)
        _not_dispatched(rt, gh, s, screens.FAILED,
                        f"Dispatch failed: {type(exc).__name__}: {str(exc)[:200]}", now)
        return False
    with rt.db() as db:
        cur = db.get(Screen, s.id)
        assert cur is not None
        cur.head_sha = head
        cur.run_id = run.run_id
        cur.run_url = run.html_url
        cur.detail = None
        if cur.kind == "candidate" and cur.candidate_revision is None and \
                budget.uses_new_direction(db, cur.repo, cur.campaign,
                                                                  cur.candidate):
            budget.record(db, cur.repo, cur.campaign, "direction", cur.requested_by,
                          cur.candidate, directions=1, screen_id=cur.id, at=now)
        cancel = cur.state == screens.CANCELLING and run.run_id is not None
    if cancel and run.run_id is not None:  # /screen cancel arrived while dispatching
        gh.cancel_workflow_run(run.run_id)
    ensure_check_run(rt, gh, s.id, now)
    return True


def _not_dispatched(rt: Runtime, gh: GitHubPort, s: Screen, state: str, detail: str,
                    now: datetime) -> None:
    """Record that claimed screen ``s`` was not dispatched (failed or cancelled)."""
    with rt.db() as db:
        cur = db.get(Screen, s.id)
        assert cur is not None
        cur.state = state
        cur.completed_at = now
        cur.detail = detail
        if state == screens.CANCELLED:
            cur.conclusion = "cancelled"
            cur.cancelled_by = cur.cancelled_by or "campaign-bot"
            cur.cancelled_at = now
        else:
            cur.conclusion = "not dispatched"
        try:
            refresh_status(db, gh, cur, now, rt.options, force=True)
        except GitHubError:
            log.exception("status of %s could not be written", cur.label)


def ensure_check_run(rt: Runtime, gh: GitHubPort, screen_id: int, now: datetime) -> None:
    """Create the check run ``campaign-bot/screen: NAME`` of a dispatched screen if it has
    none (external id = request id, so an answer lost after GitHub stored it is found
    again), and write the status comment.  A check run GitHub still refuses is left for the
    next event of the screen: the screen itself is dispatched all the same."""
    with rt.db() as db:
        s = db.get(Screen, screen_id)
        assert s is not None
        if s.check_run_id is None and s.run_id is not None:
            name = CHECK_PREFIX + s.name
            sha, rid, url = s.head_sha, s.request_id, s.run_url

            def lookup() -> CheckRun | None:
                return next((c for c in gh.list_check_runs(sha, name)
                             if c.external_id == rid), None)

            try:
                s.check_run_id = write_once(rt.options, f"check run of {s.label}", lambda: (
                    gh.create_check_run(
                        name, sha, status="in_progress", external_id=rid, details_url=url,
                        started_at=datetime.now(UTC), title=f"{s.label} dispatched",
                        actions=[CANCEL],
                        summary=f"{s.label}: `{s.name}` on `{s.track}`, order "
                        f"`{s.session_order}`, pool `{s.pool}`.")), lookup).id
            except GitHubError:
                log.exception("check run of %s not created (the screen goes on)", s.label)
        refresh_status(db, gh, s, now, rt.options, force=True)




def on_push(rt: Runtime, gh: GitHubPort, payload: dict[str, Any]) -> None:
    """``pull_request`` synchronize: the PR has a new head; its queued screens of the old
    head are

    - cancelled on a PR from a fork: the approval (``sha=``) was for the old head, and a new
      push needs a new approval;
    - re-pinned to the new head on a same-repository PR: a push there needs write access to
      the repository, and the request was for the PR, not for one commit (the status comment
      says so).

    A fork's cancelled screen gets a check run on the new head with the **Approve head**
    button (:func:`bot.features.screen.buttons.approval_check_run`).

    Screens already dispatched keep the head they run.  Blocking."""
    pr = payload.get("pull_request") or {}
    head = (pr.get("head") or {}).get("sha") if isinstance(pr, dict) else None
    repo = (payload.get("repository") or {}).get("full_name") or ""
    if not isinstance(head, str) or not FULL_SHA_RE.match(head.lower()):
        return
    now = rt.now()
    forks = 0
    with rt.db() as db:
        for s in screens.open_screens(db, repo, int(pr.get("number") or 0)):
            if s.state != screens.QUEUED or s.head_sha == head:
                continue
            if s.from_fork:
                forks += 1
                screens.cancel_queued(db, s, "campaign-bot", now)
                s.detail = (f"Cancelled: the fork PR got a new head {head[:12]}; "
                            "a new push needs a new approval.")
                approval_check_run(gh, s, head)
            else:
                s.detail = (f"Re-pinned to the new head {head[:12]} pushed while queued "
                            f"(was {s.head_sha[:12]}).")
                s.head_sha = head
            refresh_status(db, gh, s, now, rt.options, force=True)
    if forks:
        sync_labels(rt, gh, int(pr.get("number") or 0))  # awaiting-approval


def on_pr_closed(rt: Runtime, gh: GitHubPort, payload: dict[str, Any]) -> None:
    """``pull_request`` closed (merged or not): its queued screens are cancelled, each
    status comment saying why; screens already dispatched run on and report.  Blocking."""
    pr = payload.get("pull_request") or {}
    repo = (payload.get("repository") or {}).get("full_name") or ""
    number = pr.get("number") if isinstance(pr, dict) else None
    if not repo or not isinstance(number, int):
        return
    now = rt.now()
    merged = bool(pr.get("merged"))
    with rt.db() as db:
        for s in screens.open_screens(db, repo, number):
            if s.state != screens.QUEUED:
                continue
            screens.cancel_queued(db, s, "campaign-bot", now)
            s.detail = (f"Cancelled: the PR was {'merged' if merged else 'closed'} before "
                        "the screen started.")
            refresh_status(db, gh, s, now, rt.options, force=True)
            refresh_pool(db, gh, s.pool, now, rt.options)
