"""Results: a screen's workflow run reports back.

``workflow_job`` in progress records the runner (:func:`on_workflow_job`).  ``workflow_run``
completed (:func:`on_workflow_run_completed`, or the watchdog when that webhook was lost)
finishes the screen (:func:`finish_screen`): charge the run's wall time x devices, download
the artifact (capped, redirect without token), unpack it safely, verify its manifests and
its signature against the campaign's trusted keys, judge it with :mod:`evidence.verdicts`,
commit a verified bundle where the campaign keeps its evidence
(:mod:`bot.features.screen.evidence`, as the repository's ``[screen]`` section says), post
the result, complete the check run; then the pool's next screen is dispatched.  A failed or
cancelled run is reported with what it left, charged, and never counted as a sample.
"""

from __future__ import annotations

import logging
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy.orm import Session

from bot.commands import UserError
from bot.features.screen import budget, followup, notices
from bot.features.screen import queue as screens
from bot.features.screen.bisect import advance
from bot.features.screen.bundle import (
    BundleCheck,
    BundleDocuments,
    FetchedBundle,
    fetch_bundle,
    judge_screen,
    read_bundle,
    scope_problems,
    verify_bundle,
)
from bot.features.screen.buttons import actions_for, more_sessions
from bot.features.screen.campaign import Campaign, load_campaign
from bot.features.screen.dispatch import dispatch_pool, ensure_check_run, is_screen_run
from bot.features.screen.evidence import CommitOutcome, commit_screen, evidence_note
from bot.features.screen.grammar import USAGE
from bot.features.screen.labels import sync_labels
from bot.features.screen.queue import Screen
from bot.features.screen.report import Decision, build_result
from bot.features.screen.reproduce import recipe, reproduce_block
from bot.features.screen.runtime import Runtime, refusal_text
from bot.features.screen.writes import (
    edit_comment_once,
    post_comment_once,
    refresh_status,
    write_once,
)
from bot.github import (
    CheckAction,
    GitHubError,
    GitHubNotFound,
    GitHubPort,
    WorkflowRunInfo,
    parse_timestamp,
)
from bot.links import campaign_page
from bot.render import marker, render
from bot.repo_config import ScreenSection

log = logging.getLogger(__name__)


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
            run = gh.get_workflow_run(run_id)
        except GitHubNotFound:
            return None
    if isinstance(run, WorkflowRunInfo):
        fields: tuple[Any, ...] = (run.path, run.event, run.head_branch, run.display_title)
    else:
        fields = (run.get("path"), run.get("event"), run.get("head_branch"),
                  run.get("display_title"))
    path, event, branch, title = (str(f or "") for f in fields)
    ref = default_branch or gh.get_default_branch()
    for w in waiting:
        if screens.names_request(title, w.request_id) and is_screen_run(
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
    rt: Runtime, gh: GitHubPort, payload: dict[str, Any], section: ScreenSection
) -> Screen | None:
    """``workflow_run`` completed: charge, fetch, verify, judge, report (as the repository's
    ``[screen]`` ``section`` says); then the pool's next screen.  Returns the screen, None
    for a run that is not a screen's or one already reported (a redelivery)."""
    run = payload.get("workflow_run") or {}
    repo = (payload.get("repository") or {}).get("full_name")
    if not repo or not isinstance(run, dict):
        return None
    with rt.db() as db:
        s = _match_run(rt, db, gh, repo, run.get("id"), run, _default_branch(payload))
        if s is None or s.state in screens.TERMINAL_STATES:
            return None  # not ours, or already reported (redelivery)
        pool = s.pool
        finish_screen(rt, db, gh, s, run, section)
        step_of = s.bisection_id
    sync_labels(rt, gh, s.pr_number)
    if step_of is not None:  # a /bisect step: the bisection reads it, queues the next one
        advance(rt, gh, s.id)
    dispatch_pool(rt, pool, default_gh=gh)
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
    section: ScreenSection,
) -> None:
    """Complete ``s`` from its run's final state (see module docstring, step 5).

    Verdicts: a successful run whose bundle verifies is judged (:func:`judge_screen`); one
    whose bundle is missing or does not verify is REFUSED.  A run that did not succeed is
    NOT COUNTED whatever it left: what verifies is shown, it is charged, and it is never a
    sample.  A verified bundle of a successful run is committed where the campaign keeps its
    evidence as ``section`` (the repository's ``[screen]``) says: ``commit_bundles``,
    ``evidence_path``, ``max_committed_file_bytes``.
    """
    now = rt.now()
    conclusion = str(run.get("conclusion") or "unknown")
    evidence: CommitOutcome | None = None
    wall = run_wall_s(s, run, now)
    s.completed_at = now
    s.conclusion = conclusion
    budget.charge_screen(db, s, wall, conclusion)
    ref = gh.get_default_branch()
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
        reasons.append(f"campaign not readable: {refusal_text(exc)}")
    body: str | None = None
    how = ""  # the reproduce block (commands), when there is a run to reproduce
    bundle = FetchedBundle(None, None)
    verified = False
    memo: dict[str, Any] = {}
    try:
        try:
            bundle = fetch_bundle(gh, s, rt.options.limits)
            if bundle.problem is not None:
                reasons.append(bundle.problem)
            if camp is not None and bundle.root is not None:
                verdict, reasons, body, verified, memo = _judge_bundle(
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
            evidence = _commit_evidence(rt, gh, s, bundle, verdict, section)
            if evidence is not None:
                body += "\n" + evidence_note(
                    evidence, max_file_bytes=section.max_committed_file_bytes)
        if camp is not None and (verified or failed_run):
            how = reproduce_text(gh, s, camp.blob, ref, evidence, bundle.artifact)
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
    if how:
        body += "\n" + how
    s.verdict = verdict
    plan = followup.plan_of(s)
    s.summary = {**({"plan": plan} if plan else {}), **memo,
                 "verdict": verdict, "reasons": reasons, "conclusion": conclusion}
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
        buttons = actions_for(s, _more_button(db, s, camp))
        write_once(rt.options, f"complete check run {check_id}", lambda: gh.update_check_run(
            check_id, conclusion=check_conclusion(conclusion, verdict),
            title=f"{s.label}: {verdict}", summary="; ".join(reasons)[:60000] or verdict,
            text=how[:60000] or None, actions=buttons,
        ))
    refresh_status(db, gh, s, now, rt.options, force=True)
    notices.screen_done(rt, db, s, camp.scope if camp is not None else None)
    if camp is not None and camp.scope.protocol.auto_followup and memo.get("followup"):
        _auto_followup(rt, db, gh, s, camp)


def _more_button(db: Session, s: Screen, camp: Campaign | None) -> CheckAction | None:
    """The "+N sessions" button of finished screen ``s``: only when its verdict is
    INCONCLUSIVE with a projected follow-up (``FOLLOW_UP``), its campaign declares a
    ``[protocol.sequential]`` design and ``/screen continue`` would be accepted now
    (:func:`followup.plan_followup`); not under ``auto_followup``, which queues that
    follow-up itself."""
    memo = s.summary or {}
    if (camp is None or s.state != screens.FINISHED or memo.get("verdict") != "INCONCLUSIVE"
            or not isinstance(memo.get("followup"), dict)
            or camp.scope.protocol.sequential is None or camp.scope.protocol.auto_followup):
        return None
    try:
        plan = followup.plan_followup(db, s, camp.scope, camp.blob)
        return more_sessions(plan.sessions, plan.look)
    except (followup.FollowUpRefused, ValueError) as exc:
        log.info("%s: no +N sessions button: %s", s.label, exc)
        return None


def _auto_followup(rt: Runtime, db: Session, gh: GitHubPort, s: Screen, camp: Campaign) -> None:
    """``auto_followup = true``: queue the projected follow-up of ``s`` as its requester
    would by ``/screen continue`` (same authorisation, re-checked at dispatch; same budget
    check); a refusal is posted as a reply, never raised."""
    from bot.features.screen.writes import port_replier

    say = port_replier(gh, s.repo, s.pr_number, None)
    try:
        plan = followup.plan_followup(db, s, camp.scope, camp.blob)
    except followup.FollowUpRefused as exc:
        say("message", message=f"auto_followup: no follow-up of {s.label}: {exc.message}")
        return
    est = budget.estimate_screen(db, camp.scope, s.track, plan.sessions, s.device_count)
    no = budget.refusal(budget.state(db, s.repo, camp.scope), est, False)
    if no:
        say("budget", campaign=camp.scope.id, reasons=no, device_h=est.device_hours,
            wall_h=est.wall_hours, basis=est.basis)
        return
    nxt = followup.new_followup(
        db, s, plan, requested_by=s.requested_by, authorised_as=s.authorised_as,
        head_sha=s.head_sha, head_repo=s.head_repo, from_fork=s.from_fork, comment_id=None,
        estimate=est, now=rt.now())
    refresh_status(db, gh, nxt, rt.now(), rt.options, force=True)


def _judge_bundle(
    db: Session, s: Screen, camp: Campaign, root: Path, verdict: str, reasons: list[str],
    conclusion: str, wall: float, public_url: str | None = None,
) -> tuple[str, list[str], str | None, bool, dict[str, Any]]:
    """Verify, read and judge the unpacked bundle at ``root``: ``(verdict, reasons, result
    comment body or None, verified, memo)``.  Body None: the bundle did not verify (only why
    is shown); ``verified``: it verified and its signed documents were read (only such a
    bundle may be committed as evidence); ``memo``: what later screens need of a judged
    candidate screen (its verified receipts and media reports, the projected follow-up,
    the confirmation state, the scope blob: :mod:`bot.features.screen.followup`), empty
    otherwise."""
    memo: dict[str, Any] = {}
    failed_run = conclusion != "success"
    chk = verify_bundle(root, camp.trusted_keys)
    docs = read_bundle(root, chk.documents) if chk.ok else BundleDocuments()
    if chk.ok and not docs.unreadable:
        # signed and readable, but is it the screen that was asked for, on the frozen scope?
        wrong = scope_problems(chk.predicate, camp.blob,
                               s.candidate if s.kind == "candidate" else None)
        if wrong:
            chk, docs = BundleCheck(False, chk.summary, wrong), BundleDocuments()
    if not chk.ok:
        reasons = [*reasons, "the bundle did not verify", *chk.problems]
        decision = Decision(verdict, reasons, no_ratio_reason="the bundle did not verify")
    elif docs.unreadable:
        reasons = [*reasons, "signed documents of the bundle could not be read",
                   *docs.unreadable]
        return verdict, reasons, None, False, memo
    elif failed_run:
        decision = Decision(verdict, reasons, no_ratio_reason=f"the run ended {conclusion}")
    else:
        decision = judge_screen(camp.scope, s, docs.receipts, docs.media, docs.problems,
                                followup.prior_receipts(db, s), followup.prior_media(db, s))
        verdict, reasons = decision.verdict, decision.reasons
        first = followup.first_look(db, s)
        if s.kind == "candidate" and first.id != s.id and (
                (first.summary or {}).get("scope_blob") != camp.blob):
            decision.reasons.append(
                "the default branch's campaign.toml changed since the series' first look "
                f"{first.label}: a series runs under one frozen scope")
            decision.verdict, decision.shown, decision.memo = "INCONCLUSIVE", None, {}
            verdict, reasons = decision.verdict, decision.reasons
        if s.kind == "candidate":
            memo = {**decision.memo, "scope_blob": camp.blob,
                    "receipts": followup.receipts_json(docs.receipts, s.track),
                    "media": followup.media_json(docs.media)}
    if decision.ratio is not None:  # what a /bisect step is read by (bisect.advance)
        memo = {**memo, "ratio": decision.ratio}
    if not (chk.ok or failed_run):
        return verdict, reasons, None, False, memo
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
        dashboard=campaign_page(public_url, s.repo, s.campaign)), chk.ok, memo


def _commit_evidence(rt: Runtime, gh: GitHubPort, s: Screen, bundle: FetchedBundle,
                     verdict: str, cfg: ScreenSection) -> CommitOutcome | None:
    """Commit the verified bundle (:func:`bot.features.screen.evidence.commit_screen`);
    None when the runtime has no mirrors.  A failure is an outcome, never raised."""
    if rt.git is None or bundle.root is None:
        return None
    if not cfg.commit_bundles:
        return CommitOutcome("off", "[screen] commit_bundles is false", "")
    try:
        pr = gh.get_pull(s.pr_number)
    except GitHubError as exc:
        if exc.retryable:
            raise
        return CommitOutcome("failed", f"the pull request cannot be read: {exc}", "")
    try:
        out = commit_screen(rt.git, gh, s, bundle.root, verdict, pr=pr,
                            evidence_path=cfg.evidence_path,
                            max_file_bytes=cfg.max_committed_file_bytes,
                            run_url=s.run_url or "", artifact=bundle.artifact,
                            max_files=cfg.max_committed_files,
                            max_bytes=cfg.max_committed_bytes)
    except Exception as exc:  # noqa: BLE001 - the verdict stands; the artifact keeps the bundle
        log.exception("screen %s: the verified bundle could not be committed", s.label)
        return CommitOutcome("failed", f"the bundle could not be committed: "
                             f"{type(exc).__name__}: {str(exc)[:300]}", "")
    log.info("screen %s evidence: %s (%s)", s.label, out.state, out.message)
    return out


def reproduce_text(gh: GitHubPort, s: Screen, scope_blob: str, ref: str,
                   evidence: CommitOutcome | None, artifact: str | None) -> str:
    """The "Reproduce this result" block of ``s`` (:mod:`.reproduce`); "" when the port
    knows no clone URL or there is nothing to re-check."""
    r = recipe(gh, s, scope_blob, ref)
    return reproduce_block(r, s, evidence, artifact) if r is not None else ""


def check_conclusion(run_conclusion: str, verdict: str) -> str:
    """Check-run conclusion: a cancelled run is ``cancelled``; a refused bundle or failed run
    ``failure``; then SUPPORTED and EQUIVALENT (a no-regression track) ``success``,
    FAILED/REJECTED ``failure``, else ``neutral``."""
    if run_conclusion == "cancelled":
        return "cancelled"
    if run_conclusion == "timed_out":
        return "timed_out"
    if verdict == "REFUSED" or run_conclusion != "success":
        return "failure"
    return {"SUPPORTED": "success", "EQUIVALENT": "success", "FAILED": "failure",
            "REJECTED": "failure"}.get(
        verdict, "neutral"
    )



def get_run(gh: GitHubPort, run_id: int) -> WorkflowRunInfo | None:
    """Workflow run ``run_id`` as GitHub has it now; None when GitHub does not know it."""
    try:
        return gh.get_workflow_run(run_id)
    except GitHubNotFound:
        return None
