"""Follow-up screens and confirmation screens: what a screen remembers for the next one.

A **follow-up** (``/screen continue S12``, or by itself with ``auto_followup = true`` in the
campaign's ``[protocol]``) is the next look of a group-sequential series
(:mod:`evidence.sequential`): a new screen of the same candidate on the same track, with the
sessions the last look's INCONCLUSIVE result projected, whose receipts the runner marks
``look`` and ``continues`` (the first look's ``screen_id``; workflow input ``follow_up``) and
signs.  A **confirmation** (``/screen confirm NAME``) is one fixed-design screen per track on
which the candidate's SUPPORTED is provisional, against the original control.

Both are judged with the earlier screens' receipts: the series' looks, or the candidate's
earlier screens on the track (:func:`evidence.verdicts.confirmation_state`).  Those receipts
come from the bot's own record of each finished screen (``Screen.summary["receipts"]``),
written only after the bundle's manifests and signature verified against the campaign's
trusted keys, never from the pull request's branch, which its author can rewrite.  A series
runs under one frozen scope: a follow-up whose default-branch ``campaign.toml`` blob differs
from the first look's is refused (the protocol, and with it the alpha spending, was declared
before the first look).

What ``Screen.summary`` holds for this, besides the result (:mod:`.results`):

- ``plan`` (set when queued): ``{"purpose": "followup", "first": <screen id>, "look": k,
  "continues": <first look's screen_id>}`` or ``{"purpose": "confirm"}``;
- ``receipts``: the verified receipts of the screen's track (JSON documents);
- ``series``: ``{"first": <screen id>, "screen_id": <first look's screen_id>, "look": k}``;
- ``followup``: the projected follow-up (:class:`evidence.verdicts.FollowUp`) or None;
- ``confirmation``: ``provisional`` / ``confirmed`` / ``not confirmed`` for a SUPPORTED;
- ``scope_blob``: the campaign.toml blob the screen was judged under.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.features.screen import queue as screens
from bot.features.screen.queue import Screen
from evidence.models import CampaignScope, MediaReport, Receipt

FOLLOWUP = "followup"
CONFIRM = "confirm"


def plan_of(s: Screen) -> dict[str, Any]:
    """The screen's plan (``summary["plan"]``; empty for an ordinary screen)."""
    plan = (s.summary or {}).get("plan")
    return plan if isinstance(plan, dict) else {}


def follow_up_input(s: Screen) -> str | None:
    """The workflow input ``follow_up`` (``LOOK:SCREEN_ID``) of a follow-up screen, else
    None."""
    plan = plan_of(s)
    if plan.get("purpose") != FOLLOWUP:
        return None
    return f"{int(plan['look'])}:{plan['continues']}"


def _finished(db: Session, repo: str, campaign: str, candidate: str, track: str,
              before: int | None = None) -> list[Screen]:
    q = select(Screen).where(Screen.repo == repo, Screen.campaign == campaign,
                             Screen.kind == "candidate", Screen.candidate == candidate,
                             Screen.track == track, Screen.state == screens.FINISHED)
    if before is not None:
        q = q.where(Screen.id < before)
    return list(db.scalars(q.order_by(Screen.id)))


def series_screens(db: Session, first: Screen) -> list[Screen]:
    """The finished screens of the series begun by ``first``: ``first``, then its
    follow-ups in look order."""
    rows = _finished(db, first.repo, first.campaign, first.candidate, first.track)
    follow = [s for s in rows if plan_of(s).get("purpose") == FOLLOWUP
              and plan_of(s).get("first") == first.id]
    return [first, *sorted(follow, key=lambda s: int(plan_of(s).get("look", 0)))]


def first_look(db: Session, s: Screen) -> Screen:
    """The first look of the series ``s`` belongs to (``s`` itself when it is one)."""
    first_id = plan_of(s).get("first") if plan_of(s).get("purpose") == FOLLOWUP else None
    first = db.get(Screen, first_id) if first_id is not None else None
    return first if first is not None and first.repo == s.repo else s


def stored_receipts(s: Screen) -> list[Receipt]:
    """The verified receipts the bot recorded for finished screen ``s``."""
    out = []
    for doc in (s.summary or {}).get("receipts") or []:
        out.append(Receipt.model_validate(doc))
    return out


def prior_receipts(db: Session, s: Screen) -> list[Receipt]:
    """The receipts ``s`` is judged with besides its own bundle's: a follow-up's earlier
    looks; a confirmation's (or any later screen's) earlier finished screens of the
    candidate on the track.  Empty for an ordinary first screen."""
    plan = plan_of(s)
    if plan.get("purpose") == FOLLOWUP:
        first = db.get(Screen, plan.get("first"))
        if first is None:
            return []
        return [r for x in series_screens(db, first) if x.id != s.id
                for r in stored_receipts(x)]
    if plan.get("purpose") == CONFIRM:
        return [r for x in _finished(db, s.repo, s.campaign, s.candidate, s.track, s.id)
                for r in stored_receipts(x)]
    return []


@dataclass(frozen=True)
class Awaiting:
    """A candidate whose SUPPORTED on ``track`` awaits its confirmation screen; ``label``:
    the screen that said it."""

    candidate: str
    track: str
    label: str


def awaiting_confirmation(db: Session, repo: str, campaign: str) -> list[Awaiting]:
    """Per (candidate, track) of the campaign, the latest finished screen's state, when it
    is a provisional SUPPORTED and no confirmation screen of it is open."""
    rows = list(db.scalars(select(Screen).where(
        Screen.repo == repo, Screen.campaign == campaign, Screen.kind == "candidate",
        Screen.state.in_((screens.FINISHED, *screens.OPEN_STATES))).order_by(Screen.id)))
    latest: dict[tuple[str, str], Screen] = {}
    for s in rows:
        latest[(s.candidate, s.track)] = s
    return [Awaiting(c, t, s.label) for (c, t), s in sorted(latest.items())
            if s.state == screens.FINISHED
            and (s.summary or {}).get("confirmation") == "provisional"]


def receipts_json(receipts: Sequence[Receipt], track: str) -> list[dict[str, Any]]:
    """The JSON documents of ``receipts`` on ``track``, as stored in ``summary``."""
    return [r.model_dump(mode="json", by_alias=True, exclude_none=True)
            for r in receipts if r.track == track]


def media_json(media: Sequence[tuple[str, MediaReport]]) -> list[dict[str, Any]]:
    """The media reports ``(bundle path, report)`` as stored in ``summary["media"]``."""
    return [{"path": p, "report": m.model_dump(mode="json", by_alias=True, exclude_none=True)}
            for p, m in media]


def prior_media(db: Session, s: Screen) -> list[tuple[str, MediaReport]]:
    """The verified media reports of the screens :func:`prior_receipts` reads."""
    plan = plan_of(s)
    if plan.get("purpose") == FOLLOWUP:
        first = db.get(Screen, plan.get("first"))
        rows = [x for x in series_screens(db, first) if x.id != s.id] if first else []
    elif plan.get("purpose") == CONFIRM:
        rows = _finished(db, s.repo, s.campaign, s.candidate, s.track, s.id)
    else:
        rows = []
    return [(f"{x.label}/{d['path']}", MediaReport.model_validate(d["report"]))
            for x in rows for d in (x.summary or {}).get("media") or []]


class FollowUpRefused(Exception):
    """Why a follow-up of a screen cannot be queued: ``message`` for the reply."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True)
class FollowUpPlan:
    """The next look of a series: ``first`` screen, ``look`` number, the first look's
    bundle ``screen_id`` (receipts' ``continues``), ``sessions`` of the screen (both arms)
    and the session ``order``."""

    first: Screen
    look: int
    continues: str
    sessions: int
    order: str


def plan_followup(db: Session, s: Screen, scope: CampaignScope, blob: str,
                  sessions: int | None = None) -> FollowUpPlan:
    """The follow-up ``/screen continue`` (or ``auto_followup``) would queue after screen
    ``s``: refused (:class:`FollowUpRefused`, with what to do instead) unless ``s`` is the
    latest finished look of its series, INCONCLUSIVE with a projected follow-up (or
    ``sessions`` given), under the same frozen scope blob, with no look of the series open
    and the design's looks not used up."""
    from bot.features.screen.grammar import session_order

    if s.kind != "candidate":
        raise FollowUpRefused(f"{s.label} is a control-vs-control screen: nothing to continue")
    if s.state != screens.FINISHED:
        raise FollowUpRefused(f"{s.label} is {s.state}: a follow-up continues a finished "
                              "screen")
    seq = scope.protocol.sequential
    if seq is None:
        raise FollowUpRefused(
            f"campaign {scope.id!r} declares no [protocol.sequential] design: looking again at "
            "more sessions would overstate the evidence, and a design declared now, after "
            "the first look, would not be honest either; start a new screen instead")
    if plan_of(s).get("purpose") == CONFIRM:
        raise FollowUpRefused(f"{s.label} is a confirmation screen: one fixed-design screen, "
                              "never continued")
    first = first_look(db, s)
    earliest = _finished(db, s.repo, s.campaign, s.candidate, s.track)[0]
    if earliest.id != first.id:
        raise FollowUpRefused(
            f"the series of {s.candidate} on {s.track} began with {earliest.label}: a later "
            "screen is a confirmation or a new screen, not a look of that series")
    looks = series_screens(db, first)
    last = looks[-1]
    if last.id != s.id:
        raise FollowUpRefused(f"{s.label} is not the latest look of its series: continue "
                              f"{last.label}")
    open_ = [x for x in db.scalars(select(Screen).where(
        Screen.repo == s.repo, Screen.state.in_(screens.OPEN_STATES)))
        if plan_of(x).get("purpose") == FOLLOWUP and plan_of(x).get("first") == first.id]
    if open_:
        raise FollowUpRefused(f"look {plan_of(open_[0]).get('look')} of this series is "
                              f"already {open_[0].state} as {open_[0].label}")
    memo = s.summary or {}
    if memo.get("verdict") != "INCONCLUSIVE":
        more = (f"; `/screen confirm {s.candidate} track={s.track}` queues its confirmation"
                if memo.get("confirmation") == "provisional" else "")
        raise FollowUpRefused(f"{s.label} says {memo.get('verdict')}: the series has "
                              f"decided{more}")
    if (first.summary or {}).get("scope_blob") != blob:
        raise FollowUpRefused(
            f"the default branch's campaign.toml changed since the first look {first.label} "
            f"(blob {str((first.summary or {}).get('scope_blob'))[:12]}, now {blob[:12]}): a "
            "series runs under the scope frozen before its first look")
    look = len(looks) + 1
    if look > seq.looks:
        raise FollowUpRefused(f"the series of {first.label} has had its {seq.looks} looks "
                              "([protocol.sequential] looks)")
    proj = memo.get("followup")
    if sessions is None:
        if not isinstance(proj, dict):
            raise FollowUpRefused(f"{s.label}'s result projects no follow-up (the design "
                                  "allows no further look, or the look was not INCONCLUSIVE "
                                  "for lack of power); give sessions=N to choose one")
        sessions = 2 * int(proj["sessions_per_arm"])
    continues = next((r.screen_id for r in stored_receipts(first)), None)
    if continues is None:
        raise FollowUpRefused(f"the bot holds no verified receipts of {first.label}")
    return FollowUpPlan(first, look, continues, sessions,
                        session_order(scope.protocol.order, sessions))


def new_followup(db: Session, template: Screen, plan: FollowUpPlan, *, requested_by: str,
                 authorised_as: str, head_sha: str, head_repo: str | None, from_fork: bool,
                 comment_id: int | None, estimate: Any, now: Any) -> Screen:
    """Add the follow-up screen ``plan`` (queued) like ``template`` (the series' last
    look: campaign, candidate, track, pool, workflow)."""
    s = Screen(
        request_id=screens.new_request_id(), repo=template.repo,
        pr_number=template.pr_number, installation_id=template.installation_id,
        campaign=template.campaign, campaign_path=template.campaign_path, kind="candidate",
        candidate=template.candidate, track=template.track, session_order=plan.order,
        pool=template.pool, workflow=template.workflow, device_count=template.device_count,
        head_sha=head_sha, head_repo=head_repo, from_fork=from_fork,
        requested_by=requested_by, authorised_as=authorised_as, requested_at=now,
        source_comment_id=comment_id, state=screens.QUEUED,
        estimate_wall_s=estimate.wall_s, estimate_device_s=estimate.device_s,
        summary={"plan": {"purpose": FOLLOWUP, "first": plan.first.id, "look": plan.look,
                          "continues": plan.continues}},
    )
    db.add(s)
    db.flush()
    return s
