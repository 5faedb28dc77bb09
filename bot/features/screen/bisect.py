"""``/compare`` and ``/bisect``: screens of engine revisions under the campaign's frozen
protocol.

Grammar: :mod:`bot.features.screen.bisect_grammar`.

``/compare REV_A REV_B`` queues one revision screen per track (:mod:`evidence.revisions`):
arm A the control config at ``REV_A``, arm B the control config at ``REV_B``, judged as any
candidate against control, through the same authorisation, budget, queue, fork approval,
dispatch, bundle verification and evidence commit as ``/screen`` (it *is* a ``/screen``
request, :func:`bot.features.screen.commands.request_screens`, with revisions).  A revision
screen uses no candidate direction.

``/bisect GOOD BAD --track T`` finds the first commit of ``GOOD..BAD`` (the engine
repository's first-parent line, fetched through the bot's git mirrors) that moves T's
latency by more than the campaign's margin (a no-regression track's ``max_slowdown``, else
the track's ``target_reduction``).  Each step is a revision screen of GOOD against one commit
of the range, committed with its signed bundle like any other; the method and the sessions
per step are :mod:`evidence.bisection`'s (probabilistic bisection, Horstein 1963; Waeber,
Frazier and Henderson 2013).  The bisection is a row of ``bisections``: its posterior over
the culprit and every step's evidence; it advances when a step's screen finishes
(:func:`advance`, called by :mod:`.results` and the watchdog), stops at
``--max-device-hours`` (device-hours charged plus the next step's estimate) with the
narrowed range, is refused at the start when even an error-free bisection could not fit the
cap, and is cancelled by ``/bisect cancel B1`` (its queued or running step too).  Its status
comment shows the steps, the posterior's best range, the next step's place in the pool's
queue and an estimated end.
"""

from __future__ import annotations

import hashlib
import logging
import math
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import JSON, BigInteger, DateTime, Float, Integer, String, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from bot.commands import UserError
from bot.database import Base
from bot.features.screen import budget
from bot.features.screen import queue as screens
from bot.features.screen.bisect_grammar import (
    BISECT_USAGE,
    COMPARE_USAGE,
    BisectCancel,
    BisectStart,
    BisectStatus,
    parse_bisect,
    parse_compare,
)
from bot.features.screen.campaign import authorise, find_campaign
from bot.features.screen.commands import cancel_screen, request_screens
from bot.features.screen.grammar import (
    ScreenCancel,
    ScreenRequest,
    ScreenUsageError,
    check_against_scope,
)
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import (
    CommentContext,
    Replier,
    Runtime,
    ScreenConfig,
    user_error,
)
from bot.features.screen.writes import edit_comment_once, post_comment_once
from bot.github import GitHubError, GitHubPort, GitRemote
from bot.github.git import GitError
from bot.render import marker, render, utc
from bot.repo_config import find_campaign_dirs
from evidence.bisection import Plan, Posterior, answer, plan, step_error
from evidence.revisions import revision_candidate

log = logging.getLogger(__name__)

MAX_COMMITS = 1024
MAX_FAILED_STEPS = 2
"""Steps in a row without an answer (failed run, refused bundle) after which a bisection
stops: something other than the range is wrong."""

RUNNING, FOUND, STOPPED, CANCELLED, FAILED = "running", "found", "stopped", "cancelled", \
    "failed"


class Bisection(Base):
    """One ``/bisect``: the range, its design, its posterior and its steps.

    ``commits``: the range's commits oldest first (``c_1 .. c_N``; ``c_N`` = BAD);
    ``posterior``: mass per commit; ``steps``: one dict per step (``screen`` id, ``commit``
    index, ``sessions``, ``ratio``, ``answer``, ``verdict``, ``device_h`` charged, ``mass``
    after it); ``outcome``: the result once ended (``first``/``last`` index of the range
    reported, ``mass``, ``reason``)."""

    __tablename__ = "bisections"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)
    pr_number: Mapped[int] = mapped_column(Integer)
    installation_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    campaign: Mapped[str] = mapped_column(String(200))
    campaign_path: Mapped[str] = mapped_column(String(500))
    track: Mapped[str] = mapped_column(String(200))
    pool: Mapped[str] = mapped_column(String(200))
    good: Mapped[str] = mapped_column(String(40))
    bad: Mapped[str] = mapped_column(String(40))
    commits: Mapped[list[str]] = mapped_column(JSON)
    margin: Mapped[float] = mapped_column(Float)
    error_rate: Mapped[float] = mapped_column(Float)
    noise_cv: Mapped[float] = mapped_column(Float)
    sessions: Mapped[int] = mapped_column(Integer)
    max_device_hours: Mapped[float] = mapped_column(Float)
    posterior: Mapped[list[float]] = mapped_column(JSON)
    steps: Mapped[list[dict[str, Any]]] = mapped_column(JSON)
    state: Mapped[str] = mapped_column(String(16), index=True)
    outcome: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    requested_by: Mapped[str] = mapped_column(String(100))
    requested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    completed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True),
                                                          nullable=True)
    cancelled_by: Mapped[str | None] = mapped_column(String(100), nullable=True)
    status_comment_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    source_comment_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    @property
    def label(self) -> str:
        """Short id shown to users, e.g. ``B3``."""
        return f"B{self.id}"


# ----------------------------------------------------------------------------- /compare


def run_compare(rt: Runtime, gh: GitHubPort, ctx: CommentContext, args: tuple[str, ...],
                config: ScreenConfig, say: Replier, admitted_as: str | None) -> None:
    """``/compare REV_A REV_B ...``: one revision screen per track, queued as ``/screen``
    queues (:func:`request_screens`); a :class:`UserError` is the one reply."""
    try:
        try:
            cmp = parse_compare(" ".join(args))
        except ScreenUsageError as exc:
            raise user_error("usage", message=exc.message, valid=exc.valid,
                             usage=COMPARE_USAGE) from None
        req = ScreenRequest(
            kind="candidate", name=revision_candidate(cmp.rev_b), tracks=cmp.tracks,
            sessions=cmp.sessions, campaign=cmp.campaign, sha=cmp.sha,
            control_revision=cmp.rev_a, candidate_revision=cmp.rev_b)
        text = " ".join(["/compare", *args])
        if ctx.comment_id is not None:
            with rt.db() as db:
                if screens.command_seen(db, ctx.repo, ctx.comment_id, text):
                    return
        queued = request_screens(rt, gh, ctx, req, config, say, admitted_as=admitted_as,
                                 command=text)
        say("message", message=(
            f"Comparing engine revision {cmp.rev_a} (arm A) with {cmp.rev_b} (arm B) "
            f"under the frozen protocol: {', '.join(s.label for s in queued)} queued "
            f"({', '.join(s.track for s in queued)})."))
    except UserError as exc:
        say(**exc.context)


# ------------------------------------------------------------------------------ /bisect


def margin_of(track: Any) -> float:
    """The campaign's margin for ``track``: a no-regression track's ``max_slowdown``, else
    the speedup track's ``target_reduction`` (the smallest move the campaign cares about)."""
    return float(track.max_slowdown if track.max_slowdown is not None
                 else track.target_reduction)


def engine_commits(rt: Runtime, gh: GitHubPort, ctx_repo: str, engine_repo: str, good: str,
                   bad: str) -> list[str]:
    """The range ``good..bad`` of the engine repository (first-parent line, oldest first),
    fetched into the bot's mirror with the installation's credentials (a public engine
    repository needs none beyond them).  Raises UserError when it cannot be read."""
    if rt.git is None:
        raise user_error("message", message="this bot keeps no git mirrors "
                         "(CAMPAIGN_BOT_GIT_CACHE_DIR), so it cannot read the engine's history")
    remote = gh.git_remote()
    if remote is None or not remote.url.endswith(f"/{ctx_repo}.git"):
        raise user_error("message", message="no git remote for the engine repository")
    url = remote.url[: -len(f"{ctx_repo}.git")] + f"{engine_repo}.git"
    try:
        rt.git.fetch(GitRemote(url, remote.token), engine_repo, [], shas=[good, bad])
        commits = rt.git.rev_list(engine_repo, good, bad)
    except GitError as exc:
        raise user_error("message", message=f"the range {good[:12]}..{bad[:12]} of "
                         f"{engine_repo} cannot be read: {exc}") from None
    if not commits:
        raise user_error("message", message=f"{good[:12]} is not an ancestor of {bad[:12]} "
                         f"on {engine_repo}'s first-parent line: the range holds no commit")
    if len(commits) > MAX_COMMITS:
        raise user_error("message", message=f"{good[:12]}..{bad[:12]} holds {len(commits)} "
                         f"commits, more than {MAX_COMMITS}: narrow the range")
    return commits


def design(db: Session, scope: Any, track_id: str, n_commits: int, error_rate: float,
           noise: float) -> tuple[Plan, float, float]:
    """``(plan, step device-hours per session, step wall-hours per session)`` of a bisection
    of ``n_commits`` on ``track_id`` (:func:`evidence.bisection.plan` with the protocol's
    per-session estimate, :func:`bot.features.screen.budget.estimate_screen`)."""
    track = scope.track(track_id)
    est = budget.estimate_screen(db, scope, track_id, 2, scope.pool.device_count)
    per_session_dev_h = est.device_s / 2 / 3600
    per_session_wall_h = est.wall_s / 2 / 3600
    p = plan(n_commits, sigma=noise, margin=margin_of(track), error_rate=error_rate,
             session_device_h=per_session_dev_h,
             min_per_arm=scope.protocol.min_measured_sessions_per_arm, max_per_arm=12)
    return p, per_session_dev_h, per_session_wall_h


def _campaign_of(gh: GitHubPort, ctx: CommentContext, cmd: BisectStart,
                 config: ScreenConfig, admitted_as: str | None) -> Any:
    """The campaign a ``/bisect`` names, its requester authorised (as ``/screen``) and its
    track checked; raises UserError."""
    if not ctx.is_pr:
        raise user_error("message", message="/bisect works on pull requests only")
    camp = find_campaign(gh, ctx.repo, gh.get_default_branch(), config, cmd.campaign)
    if admitted_as is None:
        authorise(gh, ctx.repo, ctx.login, camp.scope)
    try:
        check_against_scope(ScreenRequest("control", "control", (cmd.track,)), camp.scope)
    except ScreenUsageError as exc:
        raise user_error("usage", message=exc.message, valid=exc.valid,
                         usage=BISECT_USAGE) from None
    return camp


def _refuse_over_cap(p: Plan, cap: float, n_commits: int, error_rate: float) -> None:
    """Raise UserError, with the numbers, when even an error-free bisection of
    ``n_commits`` (``ceil(log2 N)`` steps) would pass the cap."""
    if n_commits > 1 and p.min_device_h > cap:
        raise user_error("message", message=(
            f"Bisection refused: {n_commits} commits need at least {p.min_steps} "
            f"steps (ceil(log2 {n_commits})) of {2 * p.n_per_arm} sessions, "
            f"~{p.step_device_h:.2f} device-hours each: {p.min_device_h:.2f} device-hours "
            f"even if every answer is right, over the cap of {cap:.2f}. The expected cost "
            f"at error rate {error_rate:g} is ~{p.expected_device_h:.2f} "
            "device-hours; raise --max-device-hours or narrow GOOD..BAD."))


def start_bisect(rt: Runtime, gh: GitHubPort, ctx: CommentContext, cmd: BisectStart,
                 config: ScreenConfig, say: Replier, admitted_as: str | None,
                 text: str) -> Bisection | None:
    """``/bisect GOOD BAD --track T``: authorise, read the range, plan, refuse when the cap
    cannot hold even an error-free bisection, record the bisection and queue its first step
    (:func:`_queue_step`).  Raises UserError for anything the requester must fix."""
    camp = _campaign_of(gh, ctx, cmd, config, admitted_as)
    scope = camp.scope
    commits = engine_commits(rt, gh, ctx.repo, scope.engine.repo, cmd.good, cmd.bad)
    with rt.db() as db:
        if ctx.comment_id is not None and screens.command_seen(db, ctx.repo, ctx.comment_id,
                                                               text):
            return None
        p, per_dev, _per_wall = design(db, scope, cmd.track, len(commits), cmd.error_rate,
                                       cmd.noise)
        st = budget.state(db, ctx.repo, scope)
        cap = cmd.max_device_hours if cmd.max_device_hours is not None else st.device_left_h
        _refuse_over_cap(p, cap, len(commits), cmd.error_rate)
        if ctx.comment_id is not None and not screens.claim_command(
                db, ctx.repo, ctx.comment_id, text, rt.now()):
            return None
        b = Bisection(
            repo=ctx.repo, pr_number=ctx.number, installation_id=ctx.installation_id,
            campaign=scope.id, campaign_path=camp.path, track=cmd.track,
            pool=scope.pool.name, good=cmd.good, bad=cmd.bad, commits=commits,
            margin=margin_of(scope.track(cmd.track)), error_rate=cmd.error_rate,
            noise_cv=cmd.noise, sessions=2 * p.n_per_arm, max_device_hours=cap,
            posterior=Posterior.uniform(len(commits)).mass, steps=[], state=RUNNING,
            requested_by=ctx.login, requested_at=rt.now(), source_comment_id=ctx.comment_id)
        db.add(b)
        db.flush()
        bid = b.id
        if len(commits) == 1:
            _end(b, FOUND, 1, 1, 1.0, "the range holds one commit: BAD is the first slow one",
                 rt.now())
    say("message", message=(
        f"Bisection B{bid} of {len(commits)} commits on {cmd.track} started: "
        f"probabilistic bisection (Horstein 1963; Waeber, Frazier and Henderson 2013), "
        f"{2 * p.n_per_arm} sessions per step, margin {margin_of(scope.track(cmd.track)):.0%}, "
        f"error rate {cmd.error_rate:g}, cap {cap:.2f} device-hours (expected "
        f"~{p.expected_device_h:.2f}, per step ~{p.step_device_h:.2f}; per session "
        f"{per_dev:.3f}). Its status comment follows the steps."))
    _next(rt, gh, bid)
    with rt.db() as db:
        return db.get(Bisection, bid)


def _u(b: Bisection) -> float:
    """A fraction in [0, 1) fixed by the bisection and its step number: the randomised
    median's coin (:meth:`evidence.bisection.Posterior.query`), the same on every retry."""
    h = hashlib.sha256(f"bisect:{b.repo}:{b.id}:{len(b.steps)}".encode()).digest()
    return int.from_bytes(h[:8], "big") / 2**64


def _end(b: Bisection, state: str, first: int, last: int, mass: float, reason: str,
         now: datetime) -> None:
    b.state = state
    b.completed_at = now
    b.outcome = {"first": first, "last": last, "mass": mass, "reason": reason}


def _charged_h(db: Session, b: Bisection) -> float:
    """Device-hours charged to the bisection's steps so far."""
    rows = db.scalars(select(Screen).where(Screen.bisection_id == b.id))
    return sum((s.charged_device_s or 0.0) for s in rows) / 3600


def _next(rt: Runtime, gh: GitHubPort, bid: int) -> None:
    """Queue the next step of running bisection ``bid``, or end it (found, cap reached),
    then write its status comment."""
    now = rt.now()
    with rt.db() as db:
        b = db.get(Bisection, bid)
        assert b is not None
        if b.state == RUNNING:
            post = Posterior(list(b.posterior))
            k, mass = post.best()
            if mass >= 1 - b.error_rate:
                _end(b, FOUND, k, k, mass, f"posterior mass {mass:.3f} >= {1 - b.error_rate:g}",
                     now)
            else:
                charged = _charged_h(db, b)
                step_h = _step_device_h(db, b)
                if charged + step_h > b.max_device_hours:
                    lo, hi = post.interval(1 - b.error_rate)
                    _end(b, STOPPED, lo, hi, sum(post.mass[lo - 1:hi]),
                         f"the next step (~{step_h:.2f} device-hours) would pass the cap of "
                         f"{b.max_device_hours:.2f} ({charged:.2f} charged)", now)
        state, m = b.state, None
        if state == RUNNING:
            m = Posterior(list(b.posterior)).query(_u(b))
        commit = b.commits[m - 1] if m is not None else None
        snapshot = (b.repo, b.pr_number, b.installation_id, b.requested_by, b.campaign_path,
                    b.track, b.good, b.sessions, b.campaign)
    if state == RUNNING and commit is not None:
        _queue_step(rt, gh, bid, commit, snapshot)
    _status(rt, gh, bid)


def _step_device_h(db: Session, b: Bisection) -> float:
    """Estimated device-hours of one step (the protocol's estimate of ``b.sessions``)."""
    last = db.scalars(select(Screen).where(Screen.bisection_id == b.id)
                      .order_by(Screen.id.desc()).limit(1)).first()
    if last is not None:
        return last.estimate_device_s / 3600
    return 0.0


def _queue_step(rt: Runtime, gh: GitHubPort, bid: int, commit: str,
                snap: tuple[Any, ...]) -> None:
    """Queue one step: a revision screen of GOOD (arm A) against ``commit`` (arm B),
    through :func:`request_screens` (authorisation asked of GitHub again, budget, queue,
    fork pinning); a refusal stops the bisection with the refusal's words."""
    repo, pr, inst, login, path, track, good, sessions, campaign = snap
    ref = gh.get_default_branch()
    repo_cfg = rt.configs.load(gh).config
    cfg = ScreenConfig(tuple(find_campaign_dirs(gh, repo_cfg, ref)) if repo_cfg else ("",),
                       repo_cfg.screen if repo_cfg else ScreenConfig(("",)).screen)
    pull = gh.get_pull(pr)
    req = ScreenRequest(kind="candidate", name=revision_candidate(commit), tracks=(track,),
                        sessions=sessions, campaign=campaign,
                        sha=pull.head_sha if pull.is_fork else None,
                        control_revision=good, candidate_revision=commit)
    ctx = CommentContext(repo, pr, login, None, inst, True)

    def say(kind: str, **kw: Any) -> None:  # a step has no command to reply to
        log.info("bisection B%s step: %s %s", bid, kind, kw.get("message", ""))

    try:
        queued = request_screens(rt, gh, ctx, req, cfg, say, bisection_id=bid)
    except UserError as exc:
        with rt.db() as db:
            b = db.get(Bisection, bid)
            assert b is not None
            post = Posterior(list(b.posterior))
            lo, hi = post.interval(1 - b.error_rate)
            _end(b, STOPPED, lo, hi, sum(post.mass[lo - 1:hi]),
                 f"the next step was refused: {exc.message or exc.context.get('kind')}",
                 rt.now())
        return
    with rt.db() as db:
        b = db.get(Bisection, bid)
        assert b is not None
        idx = b.commits.index(commit) + 1
        b.steps = [*b.steps, {"screen": queued[0].id, "commit": idx, "sha": commit,
                              "sessions": sessions, "ratio": None, "answer": None,
                              "verdict": None, "device_h": None, "mass": None}]


def _open_step(db: Session, screen_id: int) -> tuple[Screen, Bisection, dict[str, Any]] | None:
    """The ended screen, its running bisection and its step not yet read; None otherwise."""
    s = db.get(Screen, screen_id)
    if s is None or s.bisection_id is None or s.state not in screens.TERMINAL_STATES:
        return None
    b = db.get(Bisection, s.bisection_id)
    if b is None or b.state != RUNNING:
        return None
    step = next((x for x in b.steps if x["screen"] == s.id), None)
    if step is None or step.get("verdict") is not None:
        return None
    return s, b, step


def _read_step(b: Bisection, s: Screen, step: dict[str, Any]) -> Posterior:
    """Record step ``step`` of ``b`` from its ended screen ``s`` and update the posterior
    (wrong with the design's probability :func:`evidence.bisection.step_error`)."""
    ratio = (s.summary or {}).get("ratio")
    ans = answer(ratio, b.margin) if s.state == screens.FINISHED else None
    q = step_error(b.noise_cv, b.margin, max(1, b.sessions // 2))
    post = Posterior(list(b.posterior))
    if ans is not None:
        post.update(step["commit"], ans, q)
    words = {None: None, True: "slow", False: "not slow"}
    done = {**step, "ratio": ratio, "answer": words[ans], "verdict": s.verdict or s.state,
            "q": q, "device_h": (s.charged_device_s or 0.0) / 3600, "mass": post.best()[1],
            "label": s.label}
    b.steps = [done if x["screen"] == s.id else x for x in b.steps]
    b.posterior = post.mass
    return post


def advance(rt: Runtime, gh: GitHubPort, screen_id: int) -> None:
    """A step's screen ended (finished or failed): read its ratio, update the posterior
    (:meth:`evidence.bisection.Posterior.update`, error probability from the design), and
    queue the next step or end the bisection (:data:`MAX_FAILED_STEPS` steps in a row
    without an answer end it failed).  Idempotent: a step already read is not read again (a
    redelivered completion)."""
    with rt.db() as db:
        got = _open_step(db, screen_id)
        if got is None:
            return
        s, b, step = got
        post = _read_step(b, s, step)
        last = b.steps[-MAX_FAILED_STEPS:]
        if len(last) == MAX_FAILED_STEPS and all(x.get("answer") is None for x in last):
            lo, hi = post.interval(1 - b.error_rate)
            _end(b, FAILED, lo, hi, sum(post.mass[lo - 1:hi]),
                 f"{MAX_FAILED_STEPS} steps in a row gave no answer (failed run or refused "
                 "bundle)", rt.now())
        bid = b.id
    _next(rt, gh, bid)


def advance_all(rt: Runtime) -> list[str]:
    """Advance every running bisection whose last step has ended (the watchdog's pass:
    a step's completion recovered there, or an advance lost to a crash)."""
    done = []
    with rt.db() as db:
        todo = []
        for b in db.scalars(select(Bisection).where(Bisection.state == RUNNING)):
            if b.steps and b.steps[-1].get("verdict") is None:
                s = db.get(Screen, b.steps[-1]["screen"])
                if s is not None and s.state in screens.TERMINAL_STATES:
                    todo.append(s)
    for s in todo:
        try:
            advance(rt, rt.port_for(s), s.id)
            done.append(f"B{s.bisection_id}: advanced after {s.label}")
        except (GitHubError, RuntimeError):
            log.exception("bisection of %s could not advance", s.label)
    return done


def _live_steps(rt: Runtime, ctx: CommentContext, bid: int) -> list[int]:
    """Screen ids of running bisection ``bid``'s steps still queued or running; raises
    UserError when there is no such running bisection in the repository."""
    with rt.db() as db:
        b = db.get(Bisection, bid)
        if b is None or b.repo != ctx.repo:
            raise user_error("message", message=f"no bisection B{bid} in this repository")
        if b.state != RUNNING:
            raise user_error("message", message=f"{b.label} is already {b.state}")
        rows = [db.get(Screen, x["screen"]) for x in b.steps if x.get("verdict") is None]
        return [s.id for s in rows if s is not None and s.state not in (
            *screens.TERMINAL_STATES, screens.CANCELLING)]


def cancel_bisect(rt: Runtime, gh: GitHubPort, ctx: CommentContext, cmd: BisectCancel,
                  say: Replier) -> None:
    """``/bisect cancel B1``: the bisection ends cancelled (the narrowed range kept), its
    queued or running step is cancelled as ``/screen cancel`` does (same permission)."""
    for sid in _live_steps(rt, ctx, cmd.bisection_id):
        cancel_screen(rt, gh, ctx, ScreenCancel(sid), say)  # permission checked there
    with rt.db() as db:
        b = db.get(Bisection, cmd.bisection_id)
        assert b is not None
        if b.state == RUNNING:
            post = Posterior(list(b.posterior))
            lo, hi = post.interval(1 - b.error_rate)
            _end(b, CANCELLED, lo, hi, sum(post.mass[lo - 1:hi]),
                 f"cancelled by {ctx.login}", rt.now())
            b.cancelled_by = ctx.login
    _status(rt, gh, cmd.bisection_id)
    say("message", message=f"Bisection B{cmd.bisection_id} cancelled.")


def status_view(db: Session, b: Bisection, now: datetime) -> dict[str, Any]:
    """What the status comment shows: steps, best range, next step's queue place, ETA."""
    post = Posterior(list(b.posterior))
    lo, hi = post.interval(1 - b.error_rate)
    best_k, best_mass = post.best()
    eta = place = None
    if b.state == RUNNING and b.steps:
        s = db.get(Screen, b.steps[-1]["screen"])
        if s is not None and s.state in screens.OPEN_STATES:
            pl = screens.place(db, s, now)
            place = pl.position
            # expected steps still needed at the design's error probability, at least one
            from evidence.bisection import capacity, step_error

            q = step_error(b.noise_cv, b.margin, max(1, b.sessions // 2))
            bits = max(0.0, math.log2(1 / max(1e-9, 1 - best_mass)) -
                       math.log2(1 / b.error_rate) + math.log2(max(2, hi - lo + 1)))
            left = max(1.0, bits / max(capacity(q), 1e-3))
            start = screens.aware(pl.estimated_start) or now
            eta = utc(start + timedelta(seconds=s.estimate_wall_s * left))
    return {
        "b": b, "n": len(b.commits), "lo": lo, "hi": hi, "lo_sha": b.commits[lo - 1],
        "hi_sha": b.commits[hi - 1], "mass": sum(post.mass[lo - 1:hi]), "best": best_k,
        "best_sha": b.commits[best_k - 1], "best_mass": best_mass, "place": place,
        "eta": eta, "charged": _charged_h(db, b), "steps": b.steps,
    }


def _status(rt: Runtime, gh: GitHubPort, bid: int) -> None:
    """Post or edit bisection ``bid``'s status comment."""
    with rt.db() as db:
        b = db.get(Bisection, bid)
        assert b is not None
        mark = marker("bisect-status", bisection=b.label)
        body = render("bisect_status.md.j2", marker_text=mark, **status_view(db, b, rt.now()))
        if b.status_comment_id is None:
            b.status_comment_id = post_comment_once(rt.options, gh, b.pr_number, body,
                                                    mark).id
        else:
            edit_comment_once(rt.options, gh, b.status_comment_id, body)


def status_reply(rt: Runtime, ctx: CommentContext, say: Replier) -> None:
    """``/bisect status``: this PR's bisections, one line each."""
    with rt.db() as db:
        rows = list(db.scalars(select(Bisection).where(
            Bisection.repo == ctx.repo, Bisection.pr_number == ctx.number)
            .order_by(Bisection.id)))
        lines = [f"{b.label} on {b.track}, {b.good[:8]}..{b.bad[:8]}: {b.state}, "
                 f"{len(b.steps)} step(s), {_charged_h(db, b):.2f} of "
                 f"{b.max_device_hours:.2f} device-hours" for b in rows]
    say("message", message="; ".join(lines) if lines else "No bisection on this PR.")


def run_bisect(rt: Runtime, gh: GitHubPort, ctx: CommentContext, args: tuple[str, ...],
               config: ScreenConfig, say: Replier, admitted_as: str | None) -> None:
    """Run one ``/bisect`` command; a :class:`UserError` is the one reply."""
    try:
        try:
            cmd = parse_bisect(" ".join(args))
        except ScreenUsageError as exc:
            raise user_error("usage", message=exc.message, valid=exc.valid,
                             usage=BISECT_USAGE) from None
        if isinstance(cmd, BisectStatus):
            status_reply(rt, ctx, say)
        elif isinstance(cmd, BisectCancel):
            cancel_bisect(rt, gh, ctx, cmd, say)
        else:
            start_bisect(rt, gh, ctx, cmd, config, say, admitted_as,
                         " ".join(["/bisect", *args]))
    except UserError as exc:
        say(**exc.context)
