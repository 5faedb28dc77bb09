"""The /screen flow: authorise, budget, queue per hardware pool, dispatch the screen workflow,
follow it (``workflow_job``, ``workflow_run``), verify what it left, and report verdicts.

Command grammar: :mod:`bot.features.screen.grammar`.  Tables:
:mod:`bot.features.screen.queue` (queue) and :mod:`bot.features.screen.budget` (ledger).
Bundle checks: :mod:`bot.features.screen.bundle`.  Text: ``templates/screen_*.md.j2``.
GitHub: the one port, :class:`bot.github.GitHubPort`, called from the flow's thread (the flow
blocks on the database: handlers run it with ``asyncio.to_thread``), each call through
:func:`_wait`.

The flow, for ``/screen candidate NAME`` on a PR:

1. Authorise: ``write``/``admin`` on the repository (asked of GitHub, never from
   ``author_association``) or a requester of the campaign.  On a PR from a fork the command
   must name the full 40-digit head it approves (``sha=``); it is pinned, and a later push
   cancels the queued screens of the old head (``pull_request`` synchronize).
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
import time
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
from bot.features.screen.bundle import (
    TRUSTED_KEYS_FILE,
    BundleDocuments,
    FetchedBundle,
    fetch_bundle,
    judge_screen,
    read_bundle,
    verify_bundle,
)
from bot.features.screen.evidence import CommitOutcome, commit_screen, evidence_note
from bot.features.screen.grammar import (
    FULL_SHA_RE,
    USAGE,
    ScreenCancel,
    ScreenRequest,
    ScreenStatus,
    ScreenUsageError,
    check_against_scope,
    command_text,
    parse_screen,
)
from bot.features.screen.queue import Screen
from bot.features.screen.report import Decision, build_result
from bot.github import (
    CheckRun,
    Comment,
    DispatchResult,
    GitHubError,
    GitHubNotFound,
    GitHubPort,
    PullInfo,
    WorkflowRunInfo,
    parse_timestamp,
    run_blocking,
)
from bot.github.artifacts import Limits
from bot.github.git import GitMirrors
from bot.links import campaign_page
from bot.render import marker, render, utc
from bot.repo_config import SCREEN_WORKFLOW, RepoConfig, ScreenSection, find_campaign_dirs
from evidence.models import CampaignScope

log = logging.getLogger(__name__)
T = TypeVar("T")

CHECK_PREFIX = "campaign-bot/screen: "
"""Check run name prefix; the full name is ``campaign-bot/screen: NAME``."""
CAMPAIGN_FILE = "campaign.toml"
WRITE_PERMISSIONS = ("admin", "write")

_wait = run_blocking
"""Each GitHub port call of the flow (which runs in a thread without an event loop)."""


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
    GitHub and, if still not complete, cancelled and reported.  ``write_retries``: how often a
    GitHub write refused for now (5xx, rate limit, connection) is tried again, after the
    ``Retry-After`` or rate-limit reset GitHub gave, else ``write_backoff_s`` doubling; a wait
    over ``max_write_wait_s`` is not slept (the delivery is retried later instead).  Before
    each new try the write is looked up: GitHub sometimes does the write and still answers an
    error (:func:`write_once`).
    """

    workflow: str = SCREEN_WORKFLOW
    debounce_s: float = 10.0
    dispatch_timeout_s: float = 1800.0
    silence_factor: float = 2.0
    silence_margin_s: float = 3600.0
    limits: Limits = field(default_factory=Limits)
    campaign_paths: tuple[str, ...] = ()
    write_retries: int = 3
    write_backoff_s: float = 1.0
    max_write_wait_s: float = 60.0
    public_url: str | None = None
    """``CAMPAIGN_BOT_PUBLIC_URL``: screen results link to the campaign's live pages."""


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


def pin_head(pr: PullInfo, req: ScreenRequest) -> str:
    """The head SHA a screen runs.  Same-repository PRs: the head at authorisation.  Fork
    PRs: the command must name that head in full (``sha=`` and 40 hex digits) so the approval
    is bound to the exact commit the approver saw: a prefix could match a commit pushed after
    the review.  A ``sha=`` given on a same-repository PR is held to the same rule.

    Raises :class:`UserError` (kind ``approve``) when ``sha=`` is missing on a fork PR,
    shorter than 40 digits, or not the head; the reply gives the exact command naming the
    current head in full."""
    head = pr.head_sha.lower()
    approved = req.sha

    def refuse(message: str) -> UserError:
        return UserError("approve", message=message, approve_command=command_text(req, head))

    if approved is None:
        if not pr.is_fork:
            return pr.head_sha
        raise refuse("This PR comes from a fork: its code would run on a self-hosted runner, "
                     "so the approval must name the full SHA of the head commit you reviewed.")
    if not FULL_SHA_RE.match(approved):
        if head.startswith(approved):
            raise refuse(f"sha={approved} is {len(approved)} hex digits; an approval names the "
                         f"full 40-digit head commit (now {head}), never a prefix.")
        raise refuse(f"sha={approved} is not the PR head, which is now {head}: it moved; "
                     "look at the new commits.")
    if approved != head:
        raise refuse(f"sha={approved} is not the PR head, which is now {head}: a new push "
                     "needs a new approval.")
    return pr.head_sha


# ------------------------------------------------------------------- GitHub writes, once


SECONDARY_RATE_WAIT_S = 60.0
"""Wait after a rate limit answered without ``Retry-After`` or a reset: "wait at least one
minute before retrying" (GitHub Docs, "Rate limits for the REST API")."""


def write_once(options: ScreenOptions, what: str, call: Callable[[], Coroutine[Any, Any, T]],
               lookup: Callable[[], T | None] | None = None) -> T:
    """Make one GitHub write through ``call`` and return its result.

    GitHub may do a write and still answer an error (a 502 after the comment was stored, a
    dispatch answered 5xx after the run was created), so when a write fails with an error
    worth another try (:attr:`bot.github.GitHubError.retryable`: 5xx, a primary or secondary
    rate limit, no connection), ``lookup`` (if given) is asked whether the write exists; if it
    does, that is the result.  Otherwise the write is tried again, after the ``Retry-After``
    or rate-limit reset GitHub gave (a rate limit without either: :data:`SECONDARY_RATE_WAIT_S`;
    else ``write_backoff_s``, doubling), at most
    ``write_retries`` times, and the lookup is asked again after each wait.  A wait longer
    than ``max_write_wait_s`` is not slept: the error is raised at once (the delivery is
    retried later).  Errors not worth a retry (4xx) are raised at once; so is the last one.
    A lookup that fails itself makes the write's error the answer: without knowing, a second
    write could duplicate the first.
    """
    attempt = 0
    while True:
        try:
            return _wait(call())
        except GitHubError as exc:
            if not exc.retryable:
                raise
            error = exc
        retry_after = getattr(error, "retry_after", None)
        if retry_after is not None:
            wait = retry_after
        elif error.status in (403, 429):  # a rate limit that did not say how long
            wait = SECONDARY_RATE_WAIT_S
        else:
            wait = options.write_backoff_s * (2 ** attempt)
        last = attempt >= options.write_retries or wait > options.max_write_wait_s
        if not last:
            log.warning("%s: GitHub answered %s; looking it up after %.1f s", what,
                        error.status or type(error).__name__, wait)
            time.sleep(max(0.0, wait))
        if lookup is not None:
            try:
                found = lookup()
            except GitHubError:
                log.exception("%s: the write could not be looked up", what)
                raise error from None
            if found is not None:
                log.warning("%s: GitHub answered %s, but the write was made", what,
                            error.status or type(error).__name__)
                return found
        if last:
            raise error
        attempt += 1


def find_comment(gh: GitHubPort, number: int, mark: str) -> Comment | None:
    """The bot's comment on issue/PR ``number`` carrying ``mark``: found by the marker AND
    the bot's login (a user quoting the marker is ignored); None when there is none."""
    for c in _wait(gh.list_issue_comments(number)):
        if c.user == gh.bot_login and mark in c.body:
            return c
    return None


def post_comment_once(options: ScreenOptions, gh: GitHubPort, number: int, body: str,
                      mark: str) -> Comment:
    """Create the bot's comment carrying ``mark`` on ``number`` (:func:`write_once`; found by
    marker and login when GitHub answers an error after storing it)."""
    return write_once(options, f"comment {mark.strip()} on #{number}",
                      lambda: gh.create_issue_comment(number, body),
                      lambda: find_comment(gh, number, mark))


def edit_comment_once(options: ScreenOptions, gh: GitHubPort, comment_id: int,
                      body: str) -> None:
    """Replace the body of the bot's comment ``comment_id`` (an edit is idempotent: tried
    again as :func:`write_once` says)."""
    write_once(options, f"edit comment {comment_id}",
               lambda: gh.edit_issue_comment(comment_id, body))


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
        s.status_comment_id = post_comment_once(
            options, gh, s.pr_number, body, marker("screen-status", screen=s.label)).id
    else:
        edit_comment_once(options, gh, s.status_comment_id, body)
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
    say: Replier, authorised: bool = False, command: str | None = None,
) -> list[Screen]:
    """Handle ``/screen candidate|control``: authorise, budget, enqueue, reply; then try to
    dispatch the pool.  Returns the queued screens (empty for a dry run).

    ``authorised``: the command framework already admitted the commenter (write
    permission, ``[screen] allowed`` or a requester); otherwise :func:`authorise` asks.
    ``command``: the command's normalised text; with ``ctx.comment_id`` it is recorded with
    the screens, in one transaction (:func:`bot.features.screen.queue.claim_command`).
    Raises :class:`UserError` for anything the requester must fix, :class:`CommandSeen`
    when this command of this comment was already run.
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
    head = pin_head(pr, req)
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
        if ctx.comment_id is not None and command is not None and not screens.claim_command(
                db, ctx.repo, ctx.comment_id, command, now):
            raise CommandSeen(command)
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
        pool = scope.pool.name
    # the screens and the command's record are committed: from here a failure (GitHub down)
    # leaves the delivery to be retried, and the retry resumes (resume_command)
    for q in queued:
        with rt.db() as db:
            cur = db.get(Screen, q.id)
            if cur is not None and cur.status_comment_id is None:
                refresh_status(db, gh, cur, now, rt.options, force=True)
    dispatch_pool(rt, pool, default_gh=gh, config=config)
    return queued


class CommandSeen(Exception):
    """This command of this comment was already run (a second delivery of the comment, or an
    edit that kept the command): nothing is queued again."""


def resume_command(rt: Runtime, gh: GitHubPort, ctx: CommentContext, config: Any) -> None:
    """A command already run from comment ``ctx.comment_id``: finish what a failed first
    attempt may have left (status comments not yet posted, a pool not yet dispatched), and
    queue, charge and reply nothing new."""
    from sqlalchemy import select

    now = rt.now()
    pools: set[str] = set()
    with rt.db() as db:
        mine = list(db.scalars(select(Screen).where(
            Screen.repo == ctx.repo, Screen.source_comment_id == ctx.comment_id)))
        for s in mine:
            if s.state == screens.QUEUED:
                pools.add(s.pool)
                if s.status_comment_id is None:
                    refresh_status(db, gh, s, now, rt.options, force=True)
    for pool in sorted(pools):
        dispatch_pool(rt, pool, default_gh=gh, config=config)


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
            gh = _gh(rt, s, default_gh)
        if _dispatch_claimed(rt, gh, s):
            with rt.db() as db:
                _refresh_pool(db, gh, pool, rt.now(), rt.options, except_id=sid)
                return db.get(Screen, sid)


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


def runner_labels(scope: CampaignScope, where: str) -> list[str]:
    """The self-hosted runner labels a screen of ``scope`` runs on: its ``[pool]
    runner_labels`` (the one place they are named; the workflow gets them as its ``runs_on``
    input).  Raises :class:`UserError` when the pool names none."""
    labels = [x for x in scope.pool.runner_labels if x.strip()]
    if not labels:
        raise UserError("message", message=f"{where}: [pool] runner_labels is empty; name the "
                        "self-hosted runner labels of the pool (e.g. [\"self-hosted\", "
                        "\"ascend910b1\", \"x4\"]) so the screen workflow can be routed")
    return labels


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
                            f"Not dispatched: {exc.ctx.get('message', exc.kind)}") from None
    pr = _wait(gh.get_pull(s.pr_number))
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
    for r in _wait(gh.list_workflow_runs(s.workflow, branch=ref, event="workflow_dispatch",
                                         created_after=after)):
        if screens.names_request(r.display_title, s.request_id) and _is_screen_run(
                r.path, r.event, r.head_branch, s.workflow, ref):
            return r
    return None


def _is_screen_run(path: str | None, event: str | None, branch: str | None, workflow: str,
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
        ref = _wait(gh.get_default_branch())
        head = _check_before_dispatch(gh, s, ref)
        # the labels as the default branch names them now (a PR cannot route its own screen)
        camp = load_campaign(gh, s.repo, ref, s.campaign_path or "")
        try:
            labels = runner_labels(camp.scope, f"{s.campaign_path or '.'}/{CAMPAIGN_FILE}")
        except UserError as exc:
            raise NotDispatched(screens.FAILED, f"Not dispatched: "
                                f"{exc.ctx.get('message', exc.kind)}") from None
        inputs = {
            "campaign": s.campaign_path or ".",
            "candidate": s.candidate if s.kind == "candidate" else "control",
            "track": s.track,
            "pr": str(s.pr_number),
            "head_sha": head,
            "request_id": s.request_id,
            "sessions": str(len(s.session_order)),
            "runs_on": json.dumps(labels, separators=(",", ":")),
        }

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
        if cur.kind == "candidate" and budget.uses_new_direction(db, cur.repo, cur.campaign,
                                                                  cur.candidate):
            budget.record(db, cur.repo, cur.campaign, "direction", cur.requested_by,
                          cur.candidate, directions=1, screen_id=cur.id, at=now)
        cancel = cur.state == screens.CANCELLING and run.run_id is not None
    if cancel and run.run_id is not None:  # /screen cancel arrived while dispatching
        _wait(gh.cancel_workflow_run(run.run_id))
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
                return next((c for c in _wait(gh.list_check_runs(sha, name))
                             if c.external_id == rid), None)

            try:
                s.check_run_id = write_once(rt.options, f"check run of {s.label}", lambda: (
                    gh.create_check_run(
                        name, sha, status="in_progress", external_id=rid, details_url=url,
                        started_at=datetime.now(UTC), title=f"{s.label} dispatched",
                        summary=f"{s.label}: `{s.name}` on `{s.track}`, order "
                        f"`{s.session_order}`, pool `{s.pool}`.")), lookup).id
            except GitHubError:
                log.exception("check run of %s not created (the screen goes on)", s.label)
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
                        requesters=list(camp.scope.requesters), requesters_only=True)
    with rt.db() as db:
        text = " ".join(["/campaign budget extend", args]).strip()
        if ctx.comment_id is not None and not screens.claim_command(
                db, ctx.repo, ctx.comment_id, text, rt.now()):
            return  # a second delivery of the same comment: extended once already
        budget.record(
            db, ctx.repo, camp.scope.id, "extend", ctx.login, ext.reason or "(no reason given)",
            directions=ext.directions, wall_hours=ext.wall_hours,
            device_hours=ext.device_hours, at=rt.now(),
        )
        db.flush()
        st = budget.state(db, ctx.repo, camp.scope)
        say("budget-extended", campaign=camp.scope.id, who_login=ctx.login, ext=ext, state=st)


# ----------------------------------------------------------------------- workflow events


def _match_run(rt: Runtime, db: Session, gh: GitHubPort, repo: str, run_id: Any,
               run: WorkflowRunInfo | dict[str, Any] | None,
               default_branch: str | None) -> Screen | None:
    """The screen a workflow run belongs to, or None (every other run is ignored).

    By the run id recorded at dispatch (GitHub's run details, or the run found by request
    id).  Only while a dispatched screen's run id is unknown is a run matched otherwise: it
    must be a run of that screen's workflow file, triggered by ``workflow_dispatch`` on the
    default branch, titled with the screen's request id (``run`` gives path, event, branch
    and title; None: asked of GitHub); the id is then recorded.  A title alone never matches:
    any workflow's ``run-name``, and a pull request's title, are chosen by whoever wrote
    them."""
    if not isinstance(run_id, int) or isinstance(run_id, bool):
        return None
    s = screens.by_run(db, repo, run_id)
    if s is not None:
        return s
    waiting = screens.awaiting_run(db, repo)
    if not waiting:
        return None
    if run is None:
        try:
            run = _wait(gh.get_workflow_run(run_id))
        except GitHubNotFound:
            return None
    if isinstance(run, WorkflowRunInfo):
        fields: tuple[Any, ...] = (run.path, run.event, run.head_branch, run.display_title)
    else:
        fields = (run.get("path"), run.get("event"), run.get("head_branch"),
                  run.get("display_title"))
    path, event, branch, title = (str(f or "") for f in fields)
    ref = default_branch or _wait(gh.get_default_branch())
    for w in waiting:
        if screens.names_request(title, w.request_id) and _is_screen_run(
                path, event, branch, w.workflow, ref):
            w.run_id = run_id
            w.detail = None
            return w
    return None


def _default_branch(payload: dict[str, Any]) -> str | None:
    repo = payload.get("repository") or {}
    ref = repo.get("default_branch") if isinstance(repo, dict) else None
    return ref if isinstance(ref, str) and ref else None


def on_workflow_job(rt: Runtime, gh: GitHubPort, payload: dict[str, Any]) -> Screen | None:
    """``workflow_job``: record the runner and the start (``in_progress``) of a screen's run
    (matched by :func:`_match_run`; a job carries no workflow path, so a run not yet known
    is asked of GitHub)."""
    job = payload.get("workflow_job") or {}
    repo = (payload.get("repository") or {}).get("full_name")
    if not repo or payload.get("action") != "in_progress" or not isinstance(job, dict):
        return None
    now = rt.now()
    with rt.db() as db:
        s = _match_run(rt, db, gh, repo, job.get("run_id"), None, _default_branch(payload))
        if s is None or s.state not in (screens.DISPATCHED, screens.RUNNING):
            return None
        needs_check = s.check_run_id is None
        s.state = screens.RUNNING
        s.runner_name = str(job.get("runner_name") or "unknown runner")[:200]
        started = job.get("started_at")
        s.started_at = parse_timestamp(started) or now
        sid = s.id
        if not needs_check:
            refresh_status(db, gh, s, now, rt.options)
    if needs_check:  # a run found only now, or a check run GitHub refused at dispatch
        ensure_check_run(rt, gh, sid, now)
    with rt.db() as db:
        return db.get(Screen, sid)


def on_workflow_run_completed(
    rt: Runtime, gh: GitHubPort, payload: dict[str, Any], config: Any = None
) -> Screen | None:
    """``workflow_run`` completed: charge, fetch, verify, judge, report; next screen."""
    run = payload.get("workflow_run") or {}
    repo = (payload.get("repository") or {}).get("full_name")
    if not repo or not isinstance(run, dict):
        return None
    with rt.db() as db:
        s = _match_run(rt, db, gh, repo, run.get("id"), run, _default_branch(payload))
        if s is None or s.state in screens.TERMINAL_STATES:
            return None  # not ours, or already reported (redelivery)
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
        or parse_timestamp(run.get("run_started_at"))
        or screens.aware(s.dispatched_at)
        or now
    )
    end = parse_timestamp(run.get("updated_at")) or now
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
    body: str | None = None
    bundle = FetchedBundle(None, None)
    verified = False
    try:
        try:
            bundle = fetch_bundle(gh, s, rt.options.limits)
            if bundle.problem is not None:
                reasons.append(bundle.problem)
            if camp is not None and bundle.root is not None:
                verdict, reasons, body, verified = _judge_bundle(
                    db, s, camp, bundle.root, verdict, reasons, conclusion, wall,
                    rt.options.public_url)
        except GitHubError as exc:
            if exc.retryable:
                raise  # transient: the delivery is retried, nothing was written
            body = None
            reasons.append(f"the bundle could not be fetched: {exc}")
        except Exception as exc:  # noqa: BLE001 - any failure on the bundle is a refusal
            log.exception("bundle of %s could not be checked", s.label)
            body = None
            verified = False
            verdict = "NOT COUNTED" if failed_run else "REFUSED"
            reasons.append(f"the bundle could not be checked: {type(exc).__name__}: "
                           f"{str(exc)[:300]}")
        if body is not None and verified and not failed_run and verdict != "REFUSED":
            # after the verdict, outside the refusal net: a commit that fails is reported
            # beside the verdict, never turned into one
            evidence = _commit_evidence(rt, gh, s, bundle, verdict, config)
            if evidence is not None:
                body += "\n" + evidence_note(evidence, max_file_bytes=_screen_config(
                    config).max_committed_file_bytes)
    finally:
        bundle.cleanup()
    if body is None:
        body = render(
            "screen_reply.md.j2", marker_text=marker("screen-result", screen=s.label),
            kind="message", valid=[], usage=USAGE,
            message=f"Screen {s.label} ({s.name} on {s.track}) ended {conclusion}: "
            f"{verdict}. {'; '.join(reasons)}. Charged {wall * s.device_count / 3600:.2f} "
            "device-hours.",
        )
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
        s.result_comment_id = post_comment_once(
            rt.options, gh, s.pr_number, body, marker("screen-result", screen=s.label)).id
    else:
        edit_comment_once(rt.options, gh, s.result_comment_id, body)
    if s.check_run_id is not None:
        check_id = s.check_run_id
        write_once(rt.options, f"complete check run {check_id}", lambda: gh.update_check_run(
            check_id, conclusion=check_conclusion(conclusion, verdict),
            title=f"{s.label}: {verdict}", summary="; ".join(reasons)[:60000] or verdict,
        ))
    refresh_status(db, gh, s, now, rt.options, force=True)


def _judge_bundle(
    db: Session, s: Screen, camp: Campaign, root: Path, verdict: str, reasons: list[str],
    conclusion: str, wall: float, public_url: str | None = None,
) -> tuple[str, list[str], str | None, bool]:
    """Verify, read and judge the unpacked bundle at ``root``: ``(verdict, reasons, result
    comment body or None, verified)``.  Body None: the bundle did not verify (only why is
    shown); ``verified``: it verified and its signed documents were read (only such a bundle
    may be committed as evidence)."""
    failed_run = conclusion != "success"
    chk = verify_bundle(root, camp.trusted_keys)
    docs = read_bundle(root, chk.documents) if chk.ok else BundleDocuments()
    if not chk.ok:
        reasons = [*reasons, "the bundle did not verify", *chk.problems]
        decision = Decision(verdict, reasons, no_ratio_reason="the bundle did not verify")
    elif docs.unreadable:
        reasons = [*reasons, "signed documents of the bundle could not be read",
                   *docs.unreadable]
        return verdict, reasons, None, False
    elif failed_run:
        decision = Decision(verdict, reasons, no_ratio_reason=f"the run ended {conclusion}")
    else:
        decision = judge_screen(camp.scope, s, docs.receipts, docs.media, docs.problems)
        verdict, reasons = decision.verdict, decision.reasons
    if not (chk.ok or failed_run):
        return verdict, reasons, None, False
    st = budget.state(db, s.repo, camp.scope, exclude_screen=s.id)
    track = camp.scope.track(s.track)
    view = build_result(
        label=s.label, name=s.name, kind=s.kind, campaign=s.campaign, track=s.track,
        quality_mode=track.quality_mode, target_reduction=track.target_reduction,
        head_sha=s.head_sha, order=s.session_order, run_url=s.run_url or "",
        integrity=chk.summary, receipts=docs.receipts, media=docs.media,
        decision=decision, charged_wall_s=wall, device_count=s.device_count,
        device_left_h=st.device_left_h, wall_left_h=st.wall_left_h,
        directions_left=st.directions_left,
    )
    return verdict, reasons, render(
        "screen_result.md.j2", marker_text=marker("screen-result", screen=s.label), r=view,
        dashboard=campaign_page(public_url, s.repo, s.campaign)), chk.ok


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
    try:
        out = commit_screen(rt.git, gh, s, bundle.root, verdict, pr=pr,
                            evidence_path=cfg.evidence_path,
                            max_file_bytes=cfg.max_committed_file_bytes,
                            run_url=s.run_url or "", artifact=bundle.artifact)
    except Exception as exc:  # noqa: BLE001 - the verdict stands; the artifact keeps the bundle
        log.exception("screen %s: the verified bundle could not be committed", s.label)
        return CommitOutcome("failed", f"the bundle could not be committed: "
                             f"{type(exc).__name__}: {str(exc)[:300]}", "")
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
            if s.state == screens.DISPATCHED and s.run_id is None:
                # GitHub answered the dispatch with an error, or without run details
                try:
                    found = find_dispatched_run(gh, s, _wait(gh.get_default_branch()),
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
            text = " ".join(["/screen", *args])
            if not cmd.dry_run and ctx.comment_id is not None:
                with rt.db() as db:
                    seen = screens.command_seen(db, ctx.repo, ctx.comment_id, text)
                if seen:
                    resume_command(rt, gh, ctx, config)
                    return
            try:
                request_screens(rt, gh, ctx, cmd, config, say, authorised=authorised,
                                command=text)
            except CommandSeen:
                resume_command(rt, gh, ctx, config)
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


def on_push(rt: Runtime, gh: GitHubPort, payload: dict[str, Any]) -> None:
    """``pull_request`` synchronize: the PR has a new head; its queued screens of the old
    head are

    - cancelled on a PR from a fork: the approval (``sha=``) was for the old head, and a new
      push needs a new approval;
    - re-pinned to the new head on a same-repository PR: a push there needs write access to
      the repository, and the request was for the PR, not for one commit (the status comment
      says so).

    Screens already dispatched keep the head they run.  Blocking."""
    pr = payload.get("pull_request") or {}
    head = (pr.get("head") or {}).get("sha") if isinstance(pr, dict) else None
    repo = (payload.get("repository") or {}).get("full_name") or ""
    if not isinstance(head, str) or not FULL_SHA_RE.match(head.lower()):
        return
    now = rt.now()
    with rt.db() as db:
        for s in screens.open_screens(db, repo, int(pr.get("number") or 0)):
            if s.state != screens.QUEUED or s.head_sha == head:
                continue
            if s.from_fork:
                screens.cancel_queued(db, s, "campaign-bot", now)
                s.detail = (f"Cancelled: the fork PR got a new head {head[:12]}; "
                            "a new push needs a new approval.")
            else:
                s.detail = (f"Re-pinned to the new head {head[:12]} pushed while queued "
                            f"(was {s.head_sha[:12]}).")
                s.head_sha = head
            refresh_status(db, gh, s, now, rt.options, force=True)


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
            _refresh_pool(db, gh, s.pool, now, rt.options)


def _get_run(gh: GitHubPort, run_id: int) -> WorkflowRunInfo | None:
    try:
        return _wait(gh.get_workflow_run(run_id))
    except GitHubNotFound:
        return None
