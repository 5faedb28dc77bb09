"""The commands: ``/screen candidate|control|status|cancel ...`` and ``/campaign budget
extend ...``.

``/screen candidate NAME`` on a PR (:func:`request_screens`): authorise (``write``/``admin``
on the repository, asked of GitHub, never read from ``author_association``, or a requester
of the campaign; on a PR from a fork the command names the full 40-digit head it approves,
``sha=``), budget (the screen's device time estimated from the protocol,
:func:`bot.features.screen.budget.estimate_screen`; refused with the numbers when
directions, wall-hours or device-hours do not cover it), enqueue one screen per track in the
pool's queue with one status comment each, then dispatch the pool if it is free
(:mod:`.dispatch`).  A command is run once per comment, however often it is delivered
(:func:`resume_command`).  Grammar: :mod:`.grammar`; reply text: ``screen_reply.md.j2``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.commands import UserError
from bot.features.screen import budget, followup, notices
from bot.features.screen import queue as screens
from bot.features.screen.campaign import authorise, find_campaign, load_campaign, pin_head
from bot.features.screen.dispatch import dispatch_pool
from bot.features.screen.grammar import (
    USAGE,
    ScreenCancel,
    ScreenContinue,
    ScreenRequest,
    ScreenStatus,
    ScreenUsageError,
    check_against_scope,
    parse_screen,
)
from bot.features.screen.labels import sync_labels
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import (
    WRITE_PERMISSIONS,
    CommentContext,
    Replier,
    Runtime,
    ScreenConfig,
    reply_context,
    user_error,
)
from bot.features.screen.writes import port_replier, refresh_pool, refresh_status
from bot.github import GitHubPort
from bot.render import utc
from bot.repo_config import find_campaign_dirs

if TYPE_CHECKING:
    from bot.commands import CommandContext


def request_screens(
    rt: Runtime, gh: GitHubPort, ctx: CommentContext, req: ScreenRequest, config: ScreenConfig,
    say: Replier, admitted_as: str | None = None, command: str | None = None,
    bisection_id: int | None = None,
) -> list[Screen]:
    """Handle ``/screen candidate|control``: authorise, budget, enqueue, reply; then try to
    dispatch the pool.  Returns the queued screens (empty for a dry run).

    ``admitted_as``: how the command framework admitted the commenter
    (:attr:`bot.commands.Decision.how`: ``write``, ``allowed`` or ``requester``; GitHub is
    not asked again); None: :func:`authorise` asks.
    ``command``: the command's normalised text; with ``ctx.comment_id`` it is recorded with
    the screens, in one transaction (:func:`bot.features.screen.queue.claim_command`).
    A request with revisions queues revision screens (``/compare``, a ``/bisect`` step:
    :mod:`evidence.revisions`), which use no candidate direction; ``bisection_id`` links
    them to their bisection.
    Raises :class:`UserError` for anything the requester must fix, :class:`CommandSeen`
    when this command of this comment was already run.
    """
    if not ctx.is_pr:
        raise user_error("message", message="/screen works on pull requests only")
    ref = gh.get_default_branch()
    camp = find_campaign(gh, ctx.repo, ref, config, req.campaign)
    scope = camp.scope
    if admitted_as is not None:
        # noted for the re-check at dispatch: write permission, else a requester of this
        # campaign, else admitted otherwise ([screen] allowed, a requester of another one)
        how = "write" if admitted_as == "write" else (
            "requester" if ctx.login.lower() in {r.lower() for r in scope.requesters}
            else "allowed")
    else:
        how = authorise(gh, ctx.repo, ctx.login, scope)
    if req.confirm and not req.tracks:
        with rt.db() as db:
            waiting = [a.track for a in followup.awaiting_confirmation(db, ctx.repo, scope.id)
                       if a.candidate == req.name]
        if not waiting:
            raise user_error("message", message=(
                f"no SUPPORTED of {req.name} awaits confirmation in campaign {scope.id} "
                "(a confirmation follows a screen whose SUPPORTED is provisional)"))
        req = replace(req, tracks=tuple(waiting))
    try:
        chk = check_against_scope(req, scope)
    except ScreenUsageError as exc:
        raise user_error("usage", message=exc.message, valid=exc.valid, usage=USAGE) from None
    pr = gh.get_pull(ctx.number)
    if pr.state != "open":
        raise user_error("message", message="this PR is closed")
    try:
        head = pin_head(pr, req)
    except UserError:
        if pr.is_fork and req.sha is None:
            notices.fork_awaiting_approval(rt, ctx.repo, ctx.number, pr.head_sha, scope.id)
        raise
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
        new_dir = req.kind == "candidate" and req.candidate_revision is None and \
            budget.uses_new_direction(
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
            raise user_error(
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
                workflow=config.workflow,
                device_count=scope.pool.device_count, head_sha=head, head_repo=pr.head_repo,
                from_fork=pr.is_fork, requested_by=ctx.login, authorised_as=how,
                requested_at=now,
                source_comment_id=ctx.comment_id, state=screens.QUEUED,
                estimate_wall_s=e.wall_s, estimate_device_s=e.device_s,
                control_revision=req.control_revision,
                candidate_revision=req.candidate_revision, bisection_id=bisection_id,
                summary={"plan": {"purpose": followup.CONFIRM}} if req.confirm else None,
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
    sync_labels(rt, gh, ctx.number)  # a new request ends awaiting-approval
    dispatch_pool(rt, pool, default_gh=gh)
    return queued


def continue_screen(
    rt: Runtime, gh: GitHubPort, ctx: CommentContext, cmd: ScreenContinue,
    config: ScreenConfig, admitted_as: str | None = None, command: str | None = None,
) -> Screen:
    """``/screen continue ID``: queue the next look of screen ``ID``'s group-sequential
    series (:func:`bot.features.screen.followup.plan_followup` says when it may), through
    the same gates as ``/screen candidate``: authorisation, the pinned head (``sha=`` on a
    fork), the budget, one command per comment; then dispatch the pool.  The follow-up's
    sessions may be fewer than ``protocol.min_measured_sessions_per_arm``: the series'
    sessions together are judged.  Raises :class:`UserError` for anything to fix,
    :class:`CommandSeen` for a command already run."""
    if not ctx.is_pr:
        raise user_error("message", message="/screen works on pull requests only")
    with rt.db() as db:
        prev = screens.by_label(db, ctx.repo, cmd.screen_id)
        if prev is None or prev.pr_number != ctx.number:
            mine = [x.label for x in screens.recent_screens(db, ctx.repo, ctx.number)]
            raise user_error("usage", message=f"no screen S{cmd.screen_id} on this PR",
                             valid=mine or ["(no screen on this PR)"], usage=USAGE)
        campaign_path = prev.campaign_path
    ref = gh.get_default_branch()
    camp = load_campaign(gh, ctx.repo, ref, campaign_path)
    scope = camp.scope
    if admitted_as is not None:
        how = "write" if admitted_as == "write" else (
            "requester" if ctx.login.lower() in {r.lower() for r in scope.requesters}
            else "allowed")
    else:
        how = authorise(gh, ctx.repo, ctx.login, scope)
    pr = gh.get_pull(ctx.number)
    if pr.state != "open":
        raise user_error("message", message="this PR is closed")
    head = pin_head(pr, cmd)
    now = rt.now()
    with rt.db() as db:
        prev = screens.by_label(db, ctx.repo, cmd.screen_id)
        assert prev is not None
        try:
            plan = followup.plan_followup(db, prev, scope, camp.blob, cmd.sessions)
        except followup.FollowUpRefused as exc:
            raise user_error("message", message=exc.message) from None
        est = budget.estimate_screen(db, scope, prev.track, plan.sessions,
                                     scope.pool.device_count)
        refusals = budget.refusal(budget.state(db, ctx.repo, scope), est, False)
        if refusals:
            raise user_error("budget", campaign=scope.id, reasons=refusals,
                             device_h=est.device_hours, wall_h=est.wall_hours, basis=est.basis)
        if ctx.comment_id is not None and command is not None and not screens.claim_command(
                db, ctx.repo, ctx.comment_id, command, now):
            raise CommandSeen(command)
        s = followup.new_followup(
            db, prev, plan, requested_by=ctx.login, authorised_as=how, head_sha=head,
            head_repo=pr.head_repo, from_fork=pr.is_fork, comment_id=ctx.comment_id,
            estimate=est, now=now)
        refresh_status(db, gh, s, now, rt.options, force=True)
        pool = s.pool
    dispatch_pool(rt, pool, default_gh=gh)
    return s


class CommandSeen(Exception):
    """This command of this comment was already run (a second delivery of the comment, or an
    edit that kept the command): nothing is queued again."""


def resume_command(rt: Runtime, gh: GitHubPort, ctx: CommentContext) -> None:
    """A command already run from comment ``ctx.comment_id``: finish what a failed first
    attempt may have left (status comments not yet posted, a pool not yet dispatched), and
    queue, charge and reply nothing new."""
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
        dispatch_pool(rt, pool, default_gh=gh)


def _direction_reserved(db: Session, repo: str, campaign: str, candidate: str) -> bool:
    """True when an open screen of ``candidate`` already holds a (not yet recorded)
    direction, so a second track of the same candidate does not count another one."""
    return any(
        s.candidate == candidate and s.kind == "candidate"
        for s in screens.open_screens(db, repo)
        if s.campaign == campaign
    )


def cancel_screen(rt: Runtime, gh: GitHubPort, ctx: CommentContext, cmd: ScreenCancel,
                  say: Replier | None = None) -> Screen:
    """``/screen cancel ID``: a queued screen leaves the queue (record kept); a dispatched or
    running one has its workflow run cancelled.  Then the pool's next screen is dispatched."""
    now = rt.now()
    with rt.db() as db:
        s = screens.by_label(db, ctx.repo, cmd.screen_id)
        if s is None:
            open_ids = [x.label for x in screens.open_screens(db, ctx.repo, ctx.number)]
            raise user_error("usage", message=f"no screen S{cmd.screen_id} in this repository",
                            valid=open_ids or ["(no open screen on this PR)"], usage=USAGE)
        if s.state in screens.TERMINAL_STATES or s.state == screens.CANCELLING:
            raise user_error("message", message=f"{s.label} is already {s.state}")
        scope_requesters: list[str] = []
        perm = gh.get_permission(ctx.login)
        if perm not in WRITE_PERMISSIONS and ctx.login != s.requested_by:
            try:
                ref = gh.get_default_branch()
                scope_requesters = list(
                    load_campaign(gh, ctx.repo, ref, s.campaign_path).scope.requesters
                )
            except UserError:
                scope_requesters = []
            if ctx.login.lower() not in {r.lower() for r in scope_requesters}:
                raise user_error("unauthorised", who_login=ctx.login,
                                message=f"repository permission is {perm!r}",
                                requesters=scope_requesters)
        if s.state == screens.QUEUED:
            screens.cancel_queued(db, s, ctx.login, now)
            s.detail = None
            refresh_status(db, gh, s, now, rt.options, force=True)
            refresh_pool(db, gh, s.pool, now, rt.options)
        else:
            s.cancelled_by = ctx.login
            s.cancelled_at = now
            if s.run_id is not None:
                gh.cancel_workflow_run(s.run_id)
            s.state = screens.CANCELLING
            refresh_status(db, gh, s, now, rt.options, force=True)
        pool = s.pool
    dispatch_pool(rt, pool, default_gh=gh)
    return s


def status_reply(rt: Runtime, gh: GitHubPort, ctx: CommentContext, say: Replier) -> None:
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
            ref = gh.get_default_branch()
            for name, s in sorted(campaigns.items()):
                try:
                    scope = load_campaign(gh, ctx.repo, ref, s.campaign_path).scope
                except UserError:
                    continue
                budgets.append({"campaign": name, "state": budget.state(db, ctx.repo, scope)})
        say("status", rows=rows, budgets=budgets)


def extend_budget(rt: Runtime, gh: GitHubPort, ctx: CommentContext, args: str,
                  config: ScreenConfig, say: Replier) -> None:
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
        raise user_error("message", message=str(exc)) from None
    ref = gh.get_default_branch()
    camp = find_campaign(gh, ctx.repo, ref, config, want)
    if ctx.login.lower() not in {r.lower() for r in camp.scope.requesters}:
        raise user_error("unauthorised", who_login=ctx.login,
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


def run_sync(rt: Runtime, gh: GitHubPort, ctx: CommentContext, args: tuple[str, ...],
             config: ScreenConfig, say: Replier, admitted_as: str | None = None) -> None:
    """Run one ``/screen`` command (its arguments after ``/screen``); a :class:`UserError`
    becomes the one reply through ``say``.  Blocking."""
    try:
        try:
            cmd = parse_screen(" ".join(args))
        except ScreenUsageError as exc:
            raise user_error("usage", message=exc.message, valid=exc.valid) from None
        if isinstance(cmd, ScreenRequest):
            text = " ".join(["/screen", *args])
            if not cmd.dry_run and ctx.comment_id is not None:
                with rt.db() as db:
                    seen = screens.command_seen(db, ctx.repo, ctx.comment_id, text)
                if seen:
                    resume_command(rt, gh, ctx)
                    return
            try:
                request_screens(rt, gh, ctx, cmd, config, say, admitted_as=admitted_as,
                                command=text)
            except CommandSeen:
                resume_command(rt, gh, ctx)
        elif isinstance(cmd, ScreenContinue):
            text = " ".join(["/screen", *args])
            if ctx.comment_id is not None:
                with rt.db() as db:
                    if screens.command_seen(db, ctx.repo, ctx.comment_id, text):
                        resume_command(rt, gh, ctx)
                        return
            try:
                continue_screen(rt, gh, ctx, cmd, config, admitted_as=admitted_as,
                                command=text)
            except CommandSeen:
                resume_command(rt, gh, ctx)
        elif isinstance(cmd, ScreenCancel):
            cancel_screen(rt, gh, ctx, cmd, say)
        elif isinstance(cmd, ScreenStatus):
            status_reply(rt, gh, ctx, say)
    except UserError as exc:
        say(**exc.context)


def run_budget_sync(rt: Runtime, gh: GitHubPort, ctx: CommentContext, args: tuple[str, ...],
                    config: ScreenConfig, say: Replier) -> None:
    """Run ``/campaign budget extend ...`` (``args`` after ``budget``)."""
    try:
        if not args or args[0] != "extend":
            raise user_error("message", message=f"usage: {budget.EXTEND_USAGE}")
        extend_budget(rt, gh, ctx, " ".join(args[1:]), config, say)
    except UserError as exc:
        say(**exc.context)


def run_command(
    rt: Runtime, gh: GitHubPort, ctx: CommentContext, command: str, args: str,
    config: ScreenConfig | None = None,
) -> None:
    """Run one command line without the command framework (tests, replay): ``command`` is
    ``screen`` or ``campaign``, ``args`` the rest of the line.  Replies go through ``gh``;
    ``config`` None: :meth:`ScreenConfig.from_options`."""
    config = config or ScreenConfig.from_options(rt.options)
    say = port_replier(gh, ctx.repo, ctx.number, ctx.comment_id)
    toks = tuple(args.split())
    if command == "campaign":
        if toks[:1] == ("budget",):
            run_budget_sync(rt, gh, ctx, toks[1:], config, say)
        return
    run_sync(rt, gh, ctx, toks, config, say)


def run_from_command(rt: Runtime, cmd_ctx: CommandContext, args: tuple[str, ...],
                     budget: bool) -> None:
    """Entry from the command framework (:mod:`bot.commands`) of ``/screen`` and
    ``/campaign budget``: as :func:`run_revisions`, running :func:`run_budget_sync` or
    :func:`run_sync`."""
    if budget:
        run_revisions(rt, cmd_ctx, args, lambda rt_, gh, ctx, a, cfg, say, _how:
                      run_budget_sync(rt_, gh, ctx, a, cfg, say))
    else:
        run_revisions(rt, cmd_ctx, args, run_sync)


def run_revisions(rt: Runtime, cmd_ctx: CommandContext, args: tuple[str, ...],
                  fn: Callable[..., None]) -> None:
    """Entry from the command framework (:mod:`bot.commands`; ``/compare`` and ``/bisect``
    call it directly): resolve the repository's campaign directories and ``[screen]``
    settings, then run ``fn(rt, gh, ctx, args, config, say, admitted_as)``, replying through
    the framework's one-reply-per-command plumbing (:meth:`CommandContext.reply`)."""
    repo_config = cmd_ctx.config
    assert repo_config is not None  # every such command is ``needs_config``: never None here
    ref = cmd_ctx.gh.get_default_branch()
    cfg = ScreenConfig(tuple(find_campaign_dirs(cmd_ctx.gh, repo_config, ref)),
                       repo_config.screen)

    def say(kind: str, **kw: Any) -> None:
        cmd_ctx.reply("screen_reply.md.j2", **reply_context(kind, **kw))

    ctx = CommentContext(cmd_ctx.event.repo_full_name or "", cmd_ctx.number, cmd_ctx.login,
                         cmd_ctx.comment_id, cmd_ctx.event.installation_id, cmd_ctx.is_pull)
    fn(rt, cmd_ctx.gh, ctx, args, cfg, say, cmd_ctx.admitted_as)
