"""The /screen flow: authorise, budget, queue per hardware pool, dispatch the screen workflow,
follow it (``workflow_job``, ``workflow_run``), verify what it left, and report verdicts.

Command grammar: :mod:`bot.features.screen.grammar`.  Tables:
:mod:`bot.features.screen.queue` (queue) and :mod:`bot.features.screen.budget` (ledger).
Text: ``templates/screen_*.md.j2``.  GitHub: the one port, :class:`bot.github.GitHubPort`,
called from the flow's thread (the flow blocks on the database: handlers run it with
``asyncio.to_thread``), each call through :func:`_wait`.

The flow, for ``/screen candidate NAME`` on a PR:

1. Authorise: ``write``/``admin`` on the repository (asked of GitHub, never from
   ``author_association``) or a requester of the campaign.  On a PR from a fork the command
   must name the head it approves (``sha=``); it is pinned, and a later push cancels the
   queued screens of the old head (``pull_request`` synchronize).
2. Budget: estimate the screen's device time from the protocol
   (:func:`bot.features.screen.budget.estimate_screen`), refuse with the numbers when
   directions, wall-hours or device-hours do not cover it (charged + reserved).
3. Enqueue one screen per track in the pool's queue; one status comment per screen says the
   position and estimated start.
4. When the pool is free: dispatch the default-branch workflow (``workflow_dispatch`` with
   ``return_run_details``; the request id is an input and goes into ``run-name``), create
   the check run ``campaign-bot/screen: NAME`` in progress.
5. ``workflow_job`` in progress: "running on runner X".  ``workflow_run`` completed: charge
   the run's wall time x devices, download the artifact (capped, redirect without token),
   unpack it safely, verify its manifests and its signature against the campaign's trusted
   keys, judge it with :mod:`evidence.verdicts`, commit a verified bundle where the campaign
   keeps its evidence (:mod:`bot.features.screen.evidence`), post the result, complete the
   check run, and dispatch the pool's next screen.  A failed or cancelled run is reported
   with what it left, charged, and never counted as a sample.
6. The watchdog (:mod:`bot.features.screen.jobs`) fails dispatches that never got a
   running job and runs that never reported, instead of waiting forever.

Status comment edits are debounced (at most one edit per screen per ``debounce_s`` while it
moves; the final state is always written): comment edits count against GitHub's secondary
rate limit for content creation (GitHub Docs, "Rate limits for the REST API").
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import tempfile
import tomllib
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError
from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from bot.features.screen import budget
from bot.features.screen import queue as screens
from bot.features.screen.evidence import CommitOutcome, commit_screen, evidence_note
from bot.features.screen.grammar import (
    USAGE,
    ScreenCancel,
    ScreenRequest,
    ScreenStatus,
    ScreenUsageError,
    check_against_scope,
    parse_screen,
)
from bot.features.screen.queue import Screen
from bot.features.screen.report import Decision, build_result
from bot.github import (
    ArtifactInfo,
    GitHubError,
    GitHubNotFound,
    GitHubPort,
    PullInfo,
    WorkflowRunInfo,
)
from bot.github.artifacts import ArtifactError, Limits, safe_extract
from bot.github.git import GitMirrors
from bot.render import marker, render, utc
from bot.repo_config import SCREEN_WORKFLOW, RepoConfig, ScreenSection, find_campaign_dirs
from evidence.models import CampaignScope, MediaReport, Receipt

log = logging.getLogger(__name__)

CHECK_PREFIX = "campaign-bot/screen: "
"""Check run name prefix; the full name is ``campaign-bot/screen: NAME``."""
CAMPAIGN_FILE = "campaign.toml"
TRUSTED_KEYS_FILE = "trusted-keys.pem"
"""Runner public keys a campaign trusts (PEM ed25519 public key blocks, ``#`` comments; the
format of ``campaign-bot check --trusted-keys``), beside its campaign.toml on the default
branch: keys in a PR are never trusted."""
WRITE_PERMISSIONS = ("admin", "write")

T = TypeVar("T")


def _wait(call: Coroutine[Any, Any, T]) -> T:
    """Run one GitHub port call from the flow's thread, which has no event loop of its own
    (a handler's ``asyncio.to_thread``, a scheduler job, a test); ports hold no loop."""
    return asyncio.run(call)


def _read(gh: GitHubPort, path: str, ref: str) -> bytes | None:
    """File bytes at ``ref``, None when absent."""
    try:
        return _wait(gh.get_file(path, ref))
    except GitHubNotFound:
        return None


@dataclass
class ScreenOptions:
    """Tunables of the flow (seconds unless named otherwise).

    ``workflow``: the screen workflow file on the default branch.  ``debounce_s``: least
    time between two edits of one status comment.  ``dispatch_timeout_s``: a dispatched
    screen whose job never starts is failed after this.  ``silence_factor`` x estimate +
    ``silence_margin_s``: a running screen with no completion after this is checked against
    GitHub and, if still not complete, cancelled and reported.
    """

    workflow: str = SCREEN_WORKFLOW
    debounce_s: float = 10.0
    dispatch_timeout_s: float = 1800.0
    silence_factor: float = 2.0
    silence_margin_s: float = 3600.0
    limits: Limits = field(default_factory=Limits)
    campaign_paths: tuple[str, ...] = ()


@dataclass
class Campaign:
    """A campaign as read from the default branch: its directory, scope and trusted keys."""

    path: str
    scope: CampaignScope
    trusted_keys: bytes | None


class UserError(Exception):
    """Becomes one short reply comment; ``ctx`` feeds the reply template."""

    def __init__(self, kind: str, **ctx: Any) -> None:
        super().__init__(kind)
        self.kind = kind
        self.ctx = ctx


Replier = Callable[..., None]
"""``say(kind, **context)``: post the command's one reply from ``screen_reply.md.j2``."""

GitHubFor = Callable[[Screen], GitHubPort]
"""Returns the GitHub port for a screen's repository (pools are shared across repos)."""


@dataclass
class Runtime:
    """What the flow needs beyond ``(event, gh, config)``: the database, the options, and a
    way to reach GitHub for another repository's screen (``gh_for``; None: only the
    handler's own port)."""

    engine: Engine
    options: ScreenOptions = field(default_factory=ScreenOptions)
    gh_for: GitHubFor | None = None
    now: Callable[[], datetime] = screens.utcnow
    git: GitMirrors | None = None
    """Where verified bundles are committed from (None: they are not committed)."""

    @contextmanager
    def db(self) -> Iterator[Session]:
        """A session committed on success, rolled back on error."""
        with Session(self.engine, expire_on_commit=False) as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise


# ------------------------------------------------------------------------------ campaigns


@dataclass
class FlowConfig:
    """The repository's settings the flow uses, resolved from ``.github/campaign-bot.toml``
    on the default branch by the command wrapper: campaign directories (globs expanded) and
    the screen workflow file."""

    campaign_dirs: list[str]
    workflow: str


def _campaign_dirs(config: Any, options: ScreenOptions) -> list[str]:
    if isinstance(config, FlowConfig):
        dirs = config.campaign_dirs
    else:
        dirs = list(options.campaign_paths)
    return [("" if d.strip("/") in ("", ".") else d.strip("/")) for d in dirs] or [""]


def _workflow(config: Any, options: ScreenOptions) -> str:
    return config.workflow if isinstance(config, FlowConfig) else options.workflow


def load_campaign(gh: GitHubPort, repo: str, ref: str, path: str) -> Campaign:
    """Read ``PATH/campaign.toml`` (and ``trusted-keys.json``) at ``ref``.

    Raises :class:`UserError` naming the file and the field when it is absent or invalid.
    """
    f = f"{path}/{CAMPAIGN_FILE}" if path else CAMPAIGN_FILE
    raw = _read(gh, f, ref)
    if raw is None:
        raise UserError("message", message=f"no {f} on the default branch ({ref})")
    try:
        scope = CampaignScope.model_validate(tomllib.loads(raw.decode("utf-8")))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UserError("message", message=f"{f} on {ref} is not valid TOML: {exc}") from None
    except ValidationError as exc:
        e = exc.errors()[0]
        loc = ".".join(str(x) for x in e["loc"])
        raise UserError("message", message=f"{f} on {ref}: field {loc}: {e['msg']}") from None
    kf = f"{path}/{TRUSTED_KEYS_FILE}" if path else TRUSTED_KEYS_FILE
    return Campaign(path, scope, _read(gh, kf, ref))


def find_campaign(
    gh: GitHubPort, repo: str, ref: str, config: Any, options: ScreenOptions, want: str | None
) -> Campaign:
    """The campaign a command is about: the only one, or the one named ``campaign=ID``."""
    found: list[Campaign] = []
    errors: list[UserError] = []
    for d in _campaign_dirs(config, options):
        try:
            found.append(load_campaign(gh, repo, ref, d))
        except UserError as exc:
            errors.append(exc)
    if want is not None:
        for c in found:
            if c.scope.id == want:
                return c
        raise UserError(
            "usage", message=f"no campaign {want!r} in this repository",
            valid=[c.scope.id for c in found], usage=USAGE,
        )
    if len(found) == 1:
        return found[0]
    if not found:
        raise errors[0] if errors else UserError("message", message="no campaign configured")
    raise UserError(
        "usage", message="this repository holds several campaigns; name one with campaign=ID",
        valid=[c.scope.id for c in found], usage=USAGE,
    )


# --------------------------------------------------------------------------- authorisation


def authorise(gh: GitHubPort, repo: str, login: str, scope: CampaignScope) -> str:
    """How ``login`` may screen: ``"write"`` (repository permission) or ``"requester"``.

    Raises :class:`UserError` (kind ``unauthorised``) otherwise.
    """
    perm = _wait(gh.get_permission(login))
    if perm in WRITE_PERMISSIONS:
        return "write"
    if login.lower() in {r.lower() for r in scope.requesters}:
        return "requester"
    raise UserError(
        "unauthorised", who_login=login, message=f"repository permission is {perm!r}",
        requesters=list(scope.requesters),
    )


def pin_head(pr: PullInfo, approved: str | None) -> str:
    """The head SHA a screen runs.  Same-repository PRs: the head at authorisation.  Fork
    PRs: the command must name that head (``sha=``) so the approval is bound to the exact
    commit the approver saw; a mismatch or a missing ``sha=`` raises :class:`UserError`."""
    if not pr.is_fork:
        if approved and not pr.head_sha.startswith(approved):
            raise UserError(
                "message", message=f"sha={approved} is not the PR head {pr.head_sha[:12]}; "
                "it moved: look at the new commits and approve again",
            )
        return pr.head_sha
    if not approved:
        raise UserError(
            "message",
            message=(
                "this PR comes from a fork: its code would run on a self-hosted runner, so "
                f"approve the exact commit you reviewed with sha=, e.g. sha={pr.head_sha[:12]}"
            ),
        )
    if not pr.head_sha.startswith(approved):
        raise UserError(
            "message", message=f"sha={approved} is not the PR head {pr.head_sha[:12]}; "
            "a new push needs a new approval",
        )
    return pr.head_sha


# --------------------------------------------------------------------------------- replies


def reply_context(kind: str, **ctx: Any) -> dict[str, Any]:
    """The context of ``screen_reply.md.j2`` for ``kind`` (defaults filled in)."""
    ctx.setdefault("message", "")
    ctx.setdefault("valid", [])
    ctx.setdefault("usage", USAGE)
    return {"kind": kind, **ctx}


def port_replier(gh: GitHubPort, repo: str, number: int, comment_id: int | None) -> Replier:
    """A replier posting through ``gh`` (used where no command context exists)."""

    def say(kind: str, **ctx: Any) -> None:
        body = render("screen_reply.md.j2",
                      marker_text=marker("reply", comment=comment_id or 0, line=1),
                      **reply_context(kind, **ctx))
        _wait(gh.create_issue_comment(number, body))

    return say


def status_body(db: Session, s: Screen, now: datetime) -> str:
    """The status comment of ``s`` as it should read now."""
    return render("screen_status.md.j2", marker_text=marker("screen-status", screen=s.label),
                  s=s, place=screens.place(db, s, now))


def refresh_status(
    db: Session, gh: GitHubPort, s: Screen, now: datetime, options: ScreenOptions,
    force: bool = False,
) -> bool:
    """Create or edit the status comment of ``s`` when its text changed.  Returns True when
    a write was made.  Without ``force``, an edit within ``debounce_s`` of the previous one
    is deferred (the watchdog's flush job writes it later)."""
    body = status_body(db, s, now)
    if s.status_comment_id is not None and body == s.status_body:
        return False
    last = screens.aware(s.status_posted_at)
    if (
        not force
        and s.status_comment_id is not None
        and last is not None
        and (now - last).total_seconds() < options.debounce_s
    ):
        return False
    if s.status_comment_id is None:
        s.status_comment_id = _wait(gh.create_issue_comment(s.pr_number, body)).id
    else:
        _wait(gh.edit_issue_comment(s.status_comment_id, body))
    s.status_body = body
    s.status_posted_at = now
    return True


# ---------------------------------------------------------------------------- the requests


@dataclass
class CommentContext:
    """Where a command came from."""

    repo: str
    number: int
    login: str
    comment_id: int | None
    installation_id: int | None
    is_pr: bool


def request_screens(
    rt: Runtime, gh: GitHubPort, ctx: CommentContext, req: ScreenRequest, config: Any,
    say: Replier, authorised: bool = False,
) -> list[Screen]:
    """Handle ``/screen candidate|control``: authorise, budget, enqueue, reply; then try to
    dispatch the pool.  Returns the queued screens (empty for a dry run).

    ``authorised``: the command framework already admitted the commenter (write
    permission, ``[screen] allowed`` or a requester); otherwise :func:`authorise` asks.
    Raises :class:`UserError` for anything the requester must fix.
    """
    if not ctx.is_pr:
        raise UserError("message", message="/screen works on pull requests only")
    ref = _wait(gh.get_default_branch())
    camp = find_campaign(gh, ctx.repo, ref, config, rt.options, req.campaign)
    scope = camp.scope
    if authorised:
        # admitted by the command framework: note how, for the re-check at dispatch
        perm = _wait(gh.get_permission(ctx.login))
        how = "write" if perm in WRITE_PERMISSIONS else (
            "requester" if ctx.login.lower() in {r.lower() for r in scope.requesters}
            else "allowed")
    else:
        how = authorise(gh, ctx.repo, ctx.login, scope)
    try:
        chk = check_against_scope(req, scope)
    except ScreenUsageError as exc:
        raise UserError("usage", message=exc.message, valid=exc.valid, usage=USAGE) from None
    pr = _wait(gh.get_pull(ctx.number))
    if pr.state != "open":
        raise UserError("message", message="this PR is closed")
    head = pin_head(pr, req.sha)
    now = rt.now()
    with rt.db() as db:
        est = [
            budget.estimate_screen(db, scope, t, len(chk.order), scope.pool.device_count)
            for t in chk.tracks
        ]
        total = budget.Estimate(
            sum(e.wall_s for e in est), sum(e.device_s for e in est),
            sum(e.sessions for e in est), est[0].per_session_s, est[0].basis,
        )
        st = budget.state(db, ctx.repo, scope)
        new_dir = req.kind == "candidate" and budget.uses_new_direction(
            db, ctx.repo, scope.id, req.name
        ) and not _direction_reserved(db, ctx.repo, scope.id, req.name)
        refusals = budget.refusal(st, total, new_dir)
        if req.dry_run:
            plans = [
                {"track": t, "order": chk.order, "wall_h": e.wall_hours, "device_h": e.device_hours}
                for t, e in zip(chk.tracks, est, strict=True)
            ]
            say("dry-run", name=req.name, plans=plans, basis=total.basis, budget=st,
                refusals=refusals)
            return []
        if refusals:
            raise UserError(
                "budget", campaign=scope.id, reasons=refusals, device_h=total.device_hours,
                wall_h=total.wall_hours, basis=total.basis,
            )
        queued: list[Screen] = []
        for t, e in zip(chk.tracks, est, strict=True):
            s = Screen(
                request_id=screens.new_request_id(), repo=ctx.repo, pr_number=ctx.number,
                installation_id=ctx.installation_id, campaign=scope.id,
                campaign_path=camp.path, kind=req.kind, candidate=req.name, track=t,
                session_order=chk.order, pool=scope.pool.name,
                workflow=_workflow(config, rt.options),
                device_count=scope.pool.device_count, head_sha=head, head_repo=pr.head_repo,
                from_fork=pr.is_fork, requested_by=ctx.login, authorised_as=how,
                requested_at=now,
                source_comment_id=ctx.comment_id, state=screens.QUEUED,
                estimate_wall_s=e.wall_s, estimate_device_s=e.device_s,
            )
            db.add(s)
            db.flush()
            queued.append(s)
        for s in queued:
            refresh_status(db, gh, s, now, rt.options, force=True)
        pool = scope.pool.name
    dispatch_pool(rt, pool, default_gh=gh, config=config)
    return queued


def _direction_reserved(db: Session, repo: str, campaign: str, candidate: str) -> bool:
    """True when an open screen of ``candidate`` already holds a (not yet recorded)
    direction, so a second track of the same candidate does not count another one."""
    return any(
        s.candidate == candidate and s.kind == "candidate"
        for s in screens.open_screens(db, repo)
        if s.campaign == campaign
    )


def dispatch_pool(
    rt: Runtime, pool: str, default_gh: GitHubPort | None = None, config: Any = None
) -> Screen | None:
    """Dispatch the next queued screen of ``pool`` if the pool is free.  A screen that can
    no longer run (fork head moved, requester lost permission, dispatch refused) is failed
    with the reason and the next one is tried.  Returns the dispatched screen, if any."""
    while True:
        with rt.db() as db:
            s = screens.next_to_dispatch(db, pool)
            if s is None:
                return None
            gh = _gh(rt, s, default_gh)
            now = rt.now()
            try:
                _dispatch_one(rt, db, gh, s, now)
            except UserError as exc:
                s.state = screens.FAILED
                s.conclusion = "not dispatched"
                s.completed_at = now
                s.detail = f"Not dispatched: {exc.ctx.get('message', exc.kind)}"
                refresh_status(db, gh, s, now, rt.options, force=True)
                continue
            except Exception as exc:  # noqa: BLE001 - GitHub refused: report, keep the queue going
                log.exception("dispatch of %s failed", s.label)
                s.state = screens.FAILED
                s.conclusion = "not dispatched"
                s.completed_at = now
                s.detail = f"Dispatch failed: {type(exc).__name__}: {str(exc)[:200]}"
                refresh_status(db, gh, s, now, rt.options, force=True)
                continue
            _refresh_pool(db, gh, pool, now, rt.options, except_id=s.id)
            return s


def _gh(rt: Runtime, s: Screen, default: GitHubPort | None) -> GitHubPort:
    if rt.gh_for is not None:
        return rt.gh_for(s)
    if default is None:
        raise RuntimeError(f"no GitHub port for {s.repo}")
    return default


def recheck(gh: GitHubPort, s: Screen, ref: str) -> None:
    """Authorisation again, just before the dispatch (permissions change while a screen
    waits: a check at request time alone is a time-of-check/time-of-use gap): a requester by
    write permission must still have it, a campaign requester must still be listed on the
    default branch.  ``[screen] allowed`` logins are not re-read
    here.  Raises :class:`UserError` naming what changed."""
    if s.authorised_as == "write":
        perm = _wait(gh.get_permission(s.requested_by))
        if perm not in WRITE_PERMISSIONS:
            raise UserError("message", message=f"{s.requested_by} no longer has write "
                            f"permission (now {perm!r}); ask again")
    elif s.authorised_as == "requester":
        scope = load_campaign(gh, s.repo, ref, s.campaign_path).scope
        if s.requested_by.lower() not in {r.lower() for r in scope.requesters}:
            raise UserError("message", message=f"{s.requested_by} is no longer a requester "
                            f"of campaign {scope.id}; ask again")


def _dispatch_one(rt: Runtime, db: Session, gh: GitHubPort, s: Screen, now: datetime) -> None:
    ref = _wait(gh.get_default_branch())
    recheck(gh, s, ref)
    if s.from_fork:
        pr = _wait(gh.get_pull(s.pr_number))
        if pr.head_sha != s.head_sha:
            raise UserError(
                "message", message=f"the fork PR head moved to {pr.head_sha[:12]} after the "
                "approval; a new push needs a new /screen",
            )
    inputs = {
        "campaign": s.campaign_path or ".",
        "candidate": s.candidate if s.kind == "candidate" else "control",
        "track": s.track,
        "pr": str(s.pr_number),
        "head_sha": s.head_sha,
        "request_id": s.request_id,
        "sessions": str(len(s.session_order)),
    }
    run = _wait(gh.dispatch_workflow(s.workflow, ref, inputs))
    if run.run_id is None:
        raise GitHubError("workflow dispatch returned no run details")
    s.run_id = run.run_id
    s.run_url = run.html_url
    s.state = screens.DISPATCHED
    s.dispatched_at = now
    if s.kind == "candidate" and budget.uses_new_direction(db, s.repo, s.campaign, s.candidate):
        budget.record(db, s.repo, s.campaign, "direction", s.requested_by, s.candidate,
                      directions=1, screen_id=s.id, at=now)
    s.check_run_id = _wait(gh.create_check_run(
        CHECK_PREFIX + s.name, s.head_sha, status="in_progress",
        external_id=s.request_id, details_url=run.html_url, started_at=datetime.now(UTC),
        title=f"{s.label} dispatched", summary=f"{s.label}: `{s.name}` on `{s.track}`, "
        f"order `{s.session_order}`, pool `{s.pool}`.",
    )).id
    refresh_status(db, gh, s, now, rt.options, force=True)


def _refresh_pool(
    db: Session, gh: GitHubPort, pool: str, now: datetime, options: ScreenOptions,
    except_id: int | None = None,
) -> None:
    """Queue positions moved: refresh the status of the pool's queued screens (same repo
    only through ``gh``; others are refreshed by the flush job)."""
    for q in screens.pool_queue(db, pool):
        if q.id != except_id:
            try:
                refresh_status(db, gh, q, now, options)
            except Exception:  # noqa: BLE001 - a status line is not worth failing the flow
                log.exception("status refresh of %s failed", q.label)


def cancel_screen(rt: Runtime, gh: GitHubPort, ctx: CommentContext, cmd: ScreenCancel,
                  config: Any, say: Replier | None = None) -> Screen:
    """``/screen cancel ID``: a queued screen leaves the queue (record kept); a dispatched or
    running one has its workflow run cancelled.  Then the pool's next screen is dispatched."""
    now = rt.now()
    with rt.db() as db:
        s = screens.by_label(db, ctx.repo, cmd.screen_id)
        if s is None:
            open_ids = [x.label for x in screens.open_screens(db, ctx.repo, ctx.number)]
            raise UserError("usage", message=f"no screen S{cmd.screen_id} in this repository",
                            valid=open_ids or ["(no open screen on this PR)"], usage=USAGE)
        if s.state in screens.TERMINAL_STATES or s.state == screens.CANCELLING:
            raise UserError("message", message=f"{s.label} is already {s.state}")
        scope_requesters: list[str] = []
        perm = _wait(gh.get_permission(ctx.login))
        if perm not in WRITE_PERMISSIONS and ctx.login != s.requested_by:
            try:
                ref = _wait(gh.get_default_branch())
                scope_requesters = list(
                    load_campaign(gh, ctx.repo, ref, s.campaign_path).scope.requesters
                )
            except UserError:
                scope_requesters = []
            if ctx.login.lower() not in {r.lower() for r in scope_requesters}:
                raise UserError("unauthorised", who_login=ctx.login,
                                message=f"repository permission is {perm!r}",
                                requesters=scope_requesters)
        if s.state == screens.QUEUED:
            screens.cancel_queued(db, s, ctx.login, now)
            s.detail = None
            refresh_status(db, gh, s, now, rt.options, force=True)
            _refresh_pool(db, gh, s.pool, now, rt.options)
        else:
            s.cancelled_by = ctx.login
            s.cancelled_at = now
            if s.run_id is not None:
                _wait(gh.cancel_workflow_run(s.run_id))
            s.state = screens.CANCELLING
            refresh_status(db, gh, s, now, rt.options, force=True)
        pool = s.pool
    dispatch_pool(rt, pool, default_gh=gh, config=config)
    return s


def status_reply(rt: Runtime, gh: GitHubPort, ctx: CommentContext, config: Any,
                 say: Replier) -> None:
    """``/screen status``: the PR's open screens with positions, and each campaign's budget."""
    now = rt.now()
    with rt.db() as db:
        rows = []
        campaigns: dict[str, Screen] = {}
        for s in screens.open_screens(db, ctx.repo, ctx.number):
            pl = screens.place(db, s, now)
            rows.append({
                "label": s.label, "name": s.name, "track": s.track, "state": s.state,
                "pool": s.pool, "position": pl.position if s.state == screens.QUEUED else "-",
                "start": utc(pl.estimated_start) if s.state == screens.QUEUED else "-",
            })
        for s in screens.recent_screens(db, ctx.repo, ctx.number):
            campaigns.setdefault(s.campaign, s)
        budgets = []
        if campaigns:
            ref = _wait(gh.get_default_branch())
            for name, s in sorted(campaigns.items()):
                try:
                    scope = load_campaign(gh, ctx.repo, ref, s.campaign_path).scope
                except UserError:
                    continue
                budgets.append({"campaign": name, "state": budget.state(db, ctx.repo, scope)})
        say("status", rows=rows, budgets=budgets)


def extend_budget(rt: Runtime, gh: GitHubPort, ctx: CommentContext, args: str,
                  config: Any, say: Replier) -> None:
    """``/campaign budget extend ...`` by a requester of the campaign: one ledger entry."""
    ext_args = args
    want = None
    m = re.search(r"(?:^|\s)campaign=([A-Za-z0-9._-]+)", ext_args)
    if m:
        want = m.group(1)
        ext_args = (ext_args[: m.start()] + " " + ext_args[m.end():]).strip()
    try:
        ext = budget.parse_extend(ext_args)
    except ValueError as exc:
        raise UserError("message", message=str(exc)) from None
    ref = _wait(gh.get_default_branch())
    camp = find_campaign(gh, ctx.repo, ref, config, rt.options, want)
    if ctx.login.lower() not in {r.lower() for r in camp.scope.requesters}:
        raise UserError("unauthorised", who_login=ctx.login,
                        message="only the campaign's requesters may extend its budget",
                        requesters=list(camp.scope.requesters))
    with rt.db() as db:
        budget.record(
            db, ctx.repo, camp.scope.id, "extend", ctx.login, ext.reason or "(no reason given)",
            directions=ext.directions, wall_hours=ext.wall_hours,
            device_hours=ext.device_hours, at=rt.now(),
        )
        db.flush()
        st = budget.state(db, ctx.repo, camp.scope)
        say("budget-extended", campaign=camp.scope.id, who_login=ctx.login, ext=ext, state=st)


# ----------------------------------------------------------------------- workflow events


def on_workflow_job(rt: Runtime, gh: GitHubPort, payload: dict[str, Any]) -> Screen | None:
    """``workflow_job``: record the runner and the start (``in_progress``)."""
    job = payload.get("workflow_job") or {}
    repo = (payload.get("repository") or {}).get("full_name")
    if not repo or payload.get("action") != "in_progress":
        return None
    now = rt.now()
    with rt.db() as db:
        s = screens.by_run(db, repo, job.get("run_id"), job.get("workflow_name"))
        if s is None or s.state not in (screens.DISPATCHED, screens.RUNNING):
            return None
        s.state = screens.RUNNING
        s.runner_name = str(job.get("runner_name") or "unknown runner")
        started = job.get("started_at")
        s.started_at = _parse_time(started) or now
        refresh_status(db, gh, s, now, rt.options)
        return s


def _parse_time(v: Any) -> datetime | None:
    if not v:
        return None
    try:
        t = datetime.fromisoformat(str(v).replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=UTC)


def on_workflow_run_completed(
    rt: Runtime, gh: GitHubPort, payload: dict[str, Any], config: Any = None
) -> Screen | None:
    """``workflow_run`` completed: charge, fetch, verify, judge, report; next screen."""
    run = payload.get("workflow_run") or {}
    repo = (payload.get("repository") or {}).get("full_name")
    if not repo:
        return None
    with rt.db() as db:
        s = screens.by_run(db, repo, run.get("id"), run.get("display_title"))
        if s is None or s.state in screens.TERMINAL_STATES:
            return None  # not ours, or already reported (redelivery)
        if s.run_id is None:
            s.run_id = run.get("id")
        pool = s.pool
        finish_screen(rt, db, gh, s, run, config=config)
    dispatch_pool(rt, pool, default_gh=gh, config=config)
    return s


def run_wall_s(s: Screen, run: dict[str, Any], now: datetime) -> float:
    """Seconds the pool was charged for: from the job's start on a runner (``workflow_job``
    in progress), else the run's ``run_started_at``, to the run's ``updated_at`` (else now).
    A run cancelled before any runner took its job used no device: 0."""
    if s.started_at is None and run.get("conclusion") == "cancelled":
        return 0.0
    start = (
        screens.aware(s.started_at)
        or _parse_time(run.get("run_started_at"))
        or screens.aware(s.dispatched_at)
        or now
    )
    end = _parse_time(run.get("updated_at")) or now
    return max(0.0, (end - start).total_seconds())


def finish_screen(
    rt: Runtime, db: Session, gh: GitHubPort, s: Screen, run: dict[str, Any],
    config: Any = None,
) -> None:
    """Complete ``s`` from its run's final state (see module docstring, step 5).

    Verdicts: a successful run whose bundle verifies is judged (:func:`judge_screen`); one
    whose bundle is missing or does not verify is REFUSED.  A run that did not succeed is
    NOT COUNTED whatever it left: what verifies is shown, it is charged, and it is never a
    sample.  A verified bundle of a successful run is committed where the campaign keeps its
    evidence (``[screen]`` of the repository config ``config``; defaults without one).
    """
    now = rt.now()
    conclusion = str(run.get("conclusion") or "unknown")
    evidence: CommitOutcome | None = None
    wall = run_wall_s(s, run, now)
    s.completed_at = now
    s.conclusion = conclusion
    budget.charge_screen(db, s, wall, conclusion)
    ref = _wait(gh.get_default_branch())
    failed_run = conclusion != "success"
    verdict = "NOT COUNTED" if failed_run else "REFUSED"
    reasons: list[str] = []
    if failed_run:
        reasons.append(f"the workflow run ended {conclusion}: charged, never counted as a "
                       "sample")
    try:
        camp: Campaign | None = load_campaign(gh, s.repo, ref, s.campaign_path)
    except UserError as exc:
        camp = None
        reasons.append(f"campaign not readable: {exc.ctx.get('message')}")
    bundle = fetch_bundle(gh, s, rt.options.limits)
    if bundle.problem is not None:
        reasons.append(bundle.problem)
    body: str | None = None
    if camp is not None and bundle.root is not None:
        chk = verify_bundle(bundle.root, camp.trusted_keys)
        receipts, media, load_problems = read_bundle(bundle.root)
        if not chk.ok:
            reasons += ["the bundle did not verify", *chk.problems]
            decision = Decision(verdict, reasons, no_ratio_reason="the bundle did not verify")
            receipts = [] if not failed_run else receipts
        elif failed_run:
            decision = Decision(verdict, reasons, no_ratio_reason=f"the run ended {conclusion}")
        else:
            decision = judge_screen(camp.scope, s, receipts, media, load_problems)
            verdict, reasons = decision.verdict, decision.reasons
        if chk.ok or failed_run:
            st = budget.state(db, s.repo, camp.scope, exclude_screen=s.id)
            track = camp.scope.track(s.track)
            view = build_result(
                label=s.label, name=s.name, kind=s.kind, campaign=s.campaign, track=s.track,
                quality_mode=track.quality_mode, target_reduction=track.target_reduction,
                head_sha=s.head_sha, order=s.session_order, run_url=s.run_url or "",
                integrity=chk.summary, receipts=receipts if chk.ok else [], media=media,
                decision=decision, charged_wall_s=wall, device_count=s.device_count,
                device_left_h=st.device_left_h, wall_left_h=st.wall_left_h,
                directions_left=st.directions_left,
            )
            body = render("screen_result.md.j2",
                          marker_text=marker("screen-result", screen=s.label), r=view)
            if chk.ok and not failed_run and verdict != "REFUSED":
                evidence = _commit_evidence(rt, gh, s, bundle, verdict, config)
                if evidence is not None:
                    body += "\n" + evidence_note(evidence, max_file_bytes=_screen_config(
                        config).max_committed_file_bytes)
    if body is None:
        body = render(
            "screen_reply.md.j2", marker_text=marker("screen-result", screen=s.label),
            kind="message", valid=[], usage=USAGE,
            message=f"Screen {s.label} ({s.name} on {s.track}) ended {conclusion}: "
            f"{verdict}. {'; '.join(reasons)}. Charged {wall * s.device_count / 3600:.2f} "
            "device-hours.",
        )
    bundle.cleanup()
    s.verdict = verdict
    s.summary = {"verdict": verdict, "reasons": reasons, "conclusion": conclusion}
    if evidence is not None:
        s.summary["evidence"] = evidence.record()
    if not failed_run and verdict != "REFUSED":
        s.state = screens.FINISHED
        s.detail = None
    else:
        s.state = screens.FAILED
        s.detail = "; ".join(reasons)[:1000]
    if s.result_comment_id is None:
        s.result_comment_id = _wait(gh.create_issue_comment(s.pr_number, body)).id
    else:
        _wait(gh.edit_issue_comment(s.result_comment_id, body))
    if s.check_run_id is not None:
        _wait(gh.update_check_run(
            s.check_run_id, conclusion=check_conclusion(conclusion, verdict),
            title=f"{s.label}: {verdict}", summary="; ".join(reasons)[:60000] or verdict,
        ))
    refresh_status(db, gh, s, now, rt.options, force=True)


def _screen_config(config: Any) -> ScreenSection:
    return config.screen if isinstance(config, RepoConfig) else ScreenSection()


def _commit_evidence(rt: Runtime, gh: GitHubPort, s: Screen, bundle: FetchedBundle,
                     verdict: str, config: Any) -> CommitOutcome | None:
    """Commit the verified bundle (:func:`bot.features.screen.evidence.commit_screen`);
    None when the runtime has no mirrors.  A failure is an outcome, never raised."""
    cfg = _screen_config(config)
    if rt.git is None or bundle.root is None:
        return None
    if not cfg.commit_bundles:
        return CommitOutcome("off", "[screen] commit_bundles is false", "")
    try:
        pr = _wait(gh.get_pull(s.pr_number))
    except GitHubError as exc:
        if exc.retryable:
            raise
        return CommitOutcome("failed", f"the pull request cannot be read: {exc}", "")
    out = commit_screen(rt.git, gh, s, bundle.root, verdict, pr=pr,
                        evidence_path=cfg.evidence_path,
                        max_file_bytes=cfg.max_committed_file_bytes, run_url=s.run_url or "",
                        artifact=bundle.artifact)
    log.info("screen %s evidence: %s (%s)", s.label, out.state, out.message)
    return out


def check_conclusion(run_conclusion: str, verdict: str) -> str:
    """Check-run conclusion: a cancelled run is ``cancelled``; a refused bundle or failed run
    ``failure``; then SUPPORTED ``success``, FAILED/REJECTED ``failure``, else ``neutral``."""
    if run_conclusion == "cancelled":
        return "cancelled"
    if run_conclusion == "timed_out":
        return "timed_out"
    if verdict == "REFUSED" or run_conclusion != "success":
        return "failure"
    return {"SUPPORTED": "success", "FAILED": "failure", "REJECTED": "failure"}.get(
        verdict, "neutral"
    )


# ------------------------------------------------------------------- bundle: fetch, verify


@dataclass
class FetchedBundle:
    """The unpacked artifact (``root``) or why there is none (``problem``)."""

    root: Path | None
    problem: str | None
    _tmp: tempfile.TemporaryDirectory[str] | None = None
    artifact: str | None = None
    """The artifact's name (where files not committed stay)."""

    def cleanup(self) -> None:
        """Remove the unpacked files."""
        if self._tmp is not None:
            self._tmp.cleanup()


def fetch_bundle(gh: GitHubPort, s: Screen, limits: Limits) -> FetchedBundle:
    """Download the run's bundle artifact (the one named after the request id, else the only
    one) and unpack it safely into a temporary directory."""
    if s.run_id is None:
        return FetchedBundle(None, "no workflow run")
    try:
        arts = [a for a in _wait(gh.list_run_artifacts(s.run_id)) if not a.expired]
    except Exception as exc:  # noqa: BLE001
        return FetchedBundle(None, f"cannot list artifacts: {type(exc).__name__}")
    pick: ArtifactInfo | None = None
    for a in arts:
        if s.request_id in a.name:
            pick = a
    if pick is None and len(arts) == 1:
        pick = arts[0]
    if pick is None:
        return FetchedBundle(None, f"the run left no bundle artifact ({len(arts)} artifacts)")
    tmp = tempfile.TemporaryDirectory(prefix="campaign-bot-bundle-")
    try:
        data = _wait(gh.download_artifact(pick.id, limits.max_compressed, pick.size_in_bytes))
        safe_extract(data, Path(tmp.name) / "bundle", limits)
    except (ArtifactError, GitHubError) as exc:
        tmp.cleanup()
        if isinstance(exc, GitHubError) and exc.retryable:
            raise  # transient: the delivery is retried
        return FetchedBundle(None, f"artifact {pick.name!r} refused: {exc}")
    return FetchedBundle(Path(tmp.name) / "bundle", None, tmp, pick.name)


@dataclass
class BundleCheck:
    """Integrity of an unpacked bundle: ``ok``, one-line ``summary``, ``problems``."""

    ok: bool
    summary: str
    problems: list[str]


def verify_bundle(root: Path, trusted_keys: bytes | None) -> BundleCheck:
    """Verify every manifest under ``root`` (:func:`evidence.manifest.verify_tree`) and the
    runner's DSSE signature against the campaign's trusted keys (:mod:`evidence.signing`).

    Any failure (mismatch, missing or extra file, bad or untrusted signature, no trusted keys)
    makes ``ok`` False with the reasons.
    """
    from evidence.manifest import verify_tree

    problems: list[str] = []
    res = verify_tree(root)
    if res.hashes_checked == 0:
        problems.append("the bundle carries no manifest")
    if res.errors or res.extra:
        problems.append(
            f"manifest check failed: {res.mismatched} mismatched, {res.missing} missing, "
            f"{res.extra} extra, {res.unsafe} unsafe, {res.malformed} malformed"
        )
        for f in res.findings[:5]:
            if f.severity in ("P0", "P1"):
                problems.append(f"{f.path}: {f.message}")
    sig_text = "signature not checked"
    if trusted_keys is None:
        problems.append(f"the campaign has no {TRUSTED_KEYS_FILE} on the default branch")
    else:
        try:
            sig_text, sig_problems = _verify_signature(root, trusted_keys)
        except Exception as exc:  # noqa: BLE001 - a bad signature file is a refusal
            sig_problems = [f"signature check failed: {type(exc).__name__}: {exc}"]
            sig_text = "signature REFUSED"
        problems += sig_problems
    summary = (
        f"Manifests: {res.hashes_ok} of {res.hashes_checked} hashes verified; {sig_text}."
    )
    # paths relative to the bundle: the bot's temporary directory means nothing to readers
    problems = [p.replace(f"{root}/", "").replace(str(root), ".") for p in problems]
    return BundleCheck(not problems, summary, problems)


def _verify_signature(root: Path, trusted_keys: bytes) -> tuple[str, list[str]]:
    """DSSE signature of the bundle against the campaign's trusted keys
    (:func:`evidence.signing.verify_bundle`): returns (summary, problems)."""
    from evidence import signing

    with tempfile.TemporaryDirectory(prefix="campaign-bot-keys-") as tmp:
        kf = Path(tmp) / TRUSTED_KEYS_FILE
        kf.write_bytes(trusted_keys)
        try:
            keys = signing.load_trusted_keys(kf)
        except signing.KeyFileError as exc:
            return "signature not checked", [
                f"{TRUSTED_KEYS_FILE} of the campaign: {str(exc).split(': ', 1)[-1]}"
            ]
    problems = signing.verify_bundle(root, keys)
    if problems:
        return "signature REFUSED", [f"signature: {p}" for p in problems]
    try:
        env = json.loads((root / signing.ATTESTATION_FILE).read_text())
        kid = next((x.get("keyid") for x in env.get("signatures", []) if x.get("keyid") in keys),
                   None)
    except (OSError, ValueError, AttributeError):
        kid = None
    return f"signed by trusted runner key {str(kid)[:19]}", []


def read_bundle(root: Path) -> tuple[list[Receipt], list[tuple[str, MediaReport]], list[str]]:
    """Receipts and media reports found under ``root`` (by their ``schema`` field), and the
    problems of documents that claim a schema but do not validate."""
    receipts: list[Receipt] = []
    media: list[tuple[str, MediaReport]] = []
    problems: list[str] = []
    for p in sorted(root.rglob("*.json")):
        if p.is_symlink() or p.stat().st_size > 16 * 1024 * 1024:
            continue
        try:
            obj = json.loads(p.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(obj, dict):
            continue
        rel = p.relative_to(root).as_posix()
        schema = obj.get("schema")
        try:
            if schema == "campaign-bot/receipt@1":
                receipts.append(Receipt.model_validate(obj))
            elif schema == "campaign-bot/media-report@1":
                media.append((rel, MediaReport.model_validate(obj)))
        except ValidationError as exc:
            e = exc.errors()[0]
            problems.append(f"{rel}: field {'.'.join(map(str, e['loc']))}: {e['msg']}")
    return receipts, media, problems


def judge_screen(
    scope: CampaignScope, s: Screen, receipts: list[Receipt],
    media: list[tuple[str, MediaReport]], load_problems: list[str],
) -> Decision:
    """The verdict of this screen alone, by :func:`evidence.verdicts.judge` (exact bounds,
    gates, reasons); load problems make it INCONCLUSIVE.  A control-vs-control screen is
    judged on repeatability instead (:func:`evidence.verdicts.control_repeatability`):
    REPEATABLE, NOT REPEATABLE (lossless verdicts are then INCONCLUSIVE) or UNPROVEN."""
    from evidence.verdicts import Evidence, ReportIn, control_repeatability, judge

    mine = [r for r in receipts if r.track == s.track]
    if not mine:
        return Decision("INCONCLUSIVE", ["no receipts for this track in the bundle",
                                         *load_problems])
    if s.kind == "control":
        controls = [r for r in mine if r.arm == "control"]
        state, why = control_repeatability(controls, [m for _, m in media])
        problems = [f"session {r.slot + 1}: {p}" for r in controls
                    for p in r.lifecycle.problems()]
        verdict = {"established": "REPEATABLE", "differs": "NOT REPEATABLE"}.get(
            state, "UNPROVEN")
        if problems and verdict == "REPEATABLE":
            verdict = "UNPROVEN"
        return Decision(verdict, [why, *problems, *load_problems],
                        no_ratio_reason="a control-vs-control screen has no candidate arm")
    ev = Evidence.from_lists(scope, mine, [ReportIn(m, p) for p, m in media])
    verdicts = [v for v in judge(ev) if v.track == s.track and v.candidate == s.candidate]
    if not verdicts:
        return Decision("INCONCLUSIVE", [f"no candidate-arm receipts of {s.candidate}",
                                         *load_problems])
    v = verdicts[0]
    reasons = [f"{r.code}: {r.text}" for r in v.reasons] + load_problems
    verdict = "INCONCLUSIVE" if load_problems else v.verdict
    return Decision(verdict, reasons, v.ratio, v.lower, v.upper,
                    no_ratio_reason="no qualified session median in one arm")


# ---------------------------------------------------------------------------- the watchdog


def watchdog_pass(rt: Runtime) -> list[str]:
    """Find dispatches that never started and runs that never reported; ask GitHub, and
    fail (and report) those that are lost.  Returns one line per action taken."""
    now = rt.now()
    actions: list[str] = []
    pools: set[str] = set()
    with rt.db() as db:
        from sqlalchemy import select

        stuck = list(db.scalars(select(Screen).where(Screen.state.in_(screens.ACTIVE_STATES))))
        for s in stuck:
            gh = _gh(rt, s, None)
            began = screens.aware(s.started_at) or screens.aware(s.dispatched_at) or now
            age = (now - began).total_seconds()
            if s.state == screens.DISPATCHED:
                overdue = age > rt.options.dispatch_timeout_s
            else:
                limit = s.estimate_wall_s * rt.options.silence_factor + rt.options.silence_margin_s
                overdue = age > limit
            if not overdue:
                continue
            info = _get_run(gh, s.run_id) if s.run_id is not None else None
            if info is not None and info.status == "completed":
                # the completion webhook was lost: process it now
                finish_screen(rt, db, gh, s, {
                    "id": info.id, "conclusion": info.conclusion,
                    "run_started_at": info.run_started_at.isoformat()
                    if info.run_started_at else None,
                    "updated_at": info.updated_at.isoformat() if info.updated_at else None,
                })
                actions.append(f"{s.label}: completion recovered from GitHub ({info.conclusion})")
                pools.add(s.pool)
                continue
            if info is not None and s.run_id is not None:
                try:
                    _wait(gh.cancel_workflow_run(s.run_id))
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
                _wait(gh.update_check_run(s.check_run_id, conclusion="timed_out",
                                          title=f"{s.label}: timed out", summary=s.detail))
            refresh_status(db, gh, s, now, rt.options, force=True)
            actions.append(f"{s.label}: {what}")
            pools.add(s.pool)
        queued_pools = {q.pool for q in db.scalars(
            select(Screen).where(Screen.state == screens.QUEUED))}
    for p in sorted(pools | queued_pools):
        if dispatch_pool(rt, p) is not None:
            actions.append(f"pool {p}: next screen dispatched")
    return actions


def flush_statuses(rt: Runtime) -> int:
    """Write status edits deferred by the debounce; returns the number of comments edited."""
    now = rt.now()
    n = 0
    with rt.db() as db:
        from sqlalchemy import select

        recent = now - timedelta(days=2)
        for s in db.scalars(select(Screen).where(Screen.requested_at >= recent)):
            if s.status_comment_id is None:
                continue
            try:
                if refresh_status(db, _gh(rt, s, None), s, now, rt.options):
                    n += 1
            except Exception:  # noqa: BLE001
                log.exception("status flush of %s failed", s.label)
    return n


# ------------------------------------------------------------------------------ handlers


def run_sync(rt: Runtime, gh: GitHubPort, ctx: CommentContext, args: tuple[str, ...],
             config: Any, say: Replier, authorised: bool = False) -> None:
    """Run one ``/screen`` command (its arguments after ``/screen``); a :class:`UserError`
    becomes the one reply through ``say``.  Blocking (call it in a thread)."""
    try:
        try:
            cmd = parse_screen(" ".join(args))
        except ScreenUsageError as exc:
            raise UserError("usage", message=exc.message, valid=exc.valid) from None
        if isinstance(cmd, ScreenRequest):
            request_screens(rt, gh, ctx, cmd, config, say, authorised=authorised)
        elif isinstance(cmd, ScreenCancel):
            cancel_screen(rt, gh, ctx, cmd, config, say)
        elif isinstance(cmd, ScreenStatus):
            status_reply(rt, gh, ctx, config, say)
    except UserError as exc:
        say(exc.kind, **exc.ctx)


def run_budget_sync(rt: Runtime, gh: GitHubPort, ctx: CommentContext, args: tuple[str, ...],
                    config: Any, say: Replier) -> None:
    """Run ``/campaign budget extend ...`` (``args`` after ``budget``)."""
    try:
        if not args or args[0] != "extend":
            raise UserError("message", message=f"usage: {budget.EXTEND_USAGE}")
        extend_budget(rt, gh, ctx, " ".join(args[1:]), config, say)
    except UserError as exc:
        say(exc.kind, **exc.ctx)


async def run_command(
    rt: Runtime, gh: GitHubPort, ctx: CommentContext, command: str, args: str, config: Any
) -> None:
    """Run one command line without the command framework (tests, replay): ``command`` is
    ``screen`` or ``campaign``, ``args`` the rest of the line.  Replies go through ``gh``."""
    say = port_replier(gh, ctx.repo, ctx.number, ctx.comment_id)
    toks = tuple(args.split())
    if command == "campaign":
        if toks[:1] == ("budget",):
            await asyncio.to_thread(run_budget_sync, rt, gh, ctx, toks[1:], config, say)
        return
    await asyncio.to_thread(run_sync, rt, gh, ctx, toks, config, say)


async def run_from_command(rt: Runtime, cmd_ctx: Any, args: tuple[str, ...],
                           budget: bool) -> None:
    """Entry from the command framework (:mod:`bot.commands`): resolve the repository's
    campaign directories and workflow, then run the command in a thread, replying through
    the framework's one-reply-per-command plumbing."""
    ref = await cmd_ctx.gh.get_default_branch()
    dirs = await find_campaign_dirs(cmd_ctx.gh, cmd_ctx.config, ref)
    cfg = FlowConfig(dirs, cmd_ctx.config.screen.workflow)
    loop = asyncio.get_running_loop()

    def say(kind: str, **kw: Any) -> None:
        coro = cmd_ctx.reply("screen_reply.md.j2", **reply_context(kind, **kw))
        asyncio.run_coroutine_threadsafe(coro, loop).result()

    ctx = CommentContext(cmd_ctx.event.repo_full_name or "", cmd_ctx.number, cmd_ctx.login,
                         cmd_ctx.comment_id, cmd_ctx.event.installation_id, cmd_ctx.is_pull)
    if budget:
        await asyncio.to_thread(run_budget_sync, rt, cmd_ctx.gh, ctx, args, cfg, say)
    else:
        await asyncio.to_thread(run_sync, rt, cmd_ctx.gh, ctx, args, cfg, say, True)


def cancel_on_push(rt: Runtime, gh: GitHubPort, payload: dict[str, Any]) -> None:
    """``pull_request`` synchronize: a new push to a fork PR cancels its queued screens of the
    old head (approval was for that head).  Blocking."""
    pr = payload.get("pull_request") or {}
    head = (pr.get("head") or {}).get("sha")
    repo = (payload.get("repository") or {}).get("full_name") or ""
    now = rt.now()
    with rt.db() as db:
        for s in screens.open_screens(db, repo, int(pr.get("number") or 0)):
            if s.from_fork and s.state == screens.QUEUED and s.head_sha != head:
                screens.cancel_queued(db, s, "campaign-bot", now)
                s.detail = (f"Cancelled: the fork PR got a new head {str(head)[:12]}; "
                            "a new push needs a new approval.")
                refresh_status(db, gh, s, now, rt.options, force=True)


def _get_run(gh: GitHubPort, run_id: int) -> WorkflowRunInfo | None:
    try:
        return _wait(gh.get_workflow_run(run_id))
    except GitHubNotFound:
        return None
