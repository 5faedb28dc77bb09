"""What the /screen feature tells the campaign status header: the campaign's screen queue
(:mod:`bot.features.screen.queue`), budget (:mod:`bot.features.screen.budget` ledger) and last
finished screens, as :func:`campaign_state` (the header's queue provider, wired by the
composition root: the header feature does not import this one).

Text here never depends on the clock (no "starts in 20 min"), so an unchanged queue renders
the same header and an unchanged refresh writes nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.features.screen import budget as budget_mod
from bot.features.screen import queue as screens
from evidence.header import BudgetLine, QueueItem, ScreenOutcome
from evidence.models import CampaignScope

_NEW_HEAD = re.compile(r"new head ([0-9a-f]{7,40})")


def queue_items(db: Session, repo: str, scope: CampaignScope) -> list[QueueItem]:
    """Running and queued screens of the campaign (running first, then in queue order), plus
    one ``awaiting-approval`` item per fork-PR screen cancelled because its PR got a new head
    and not requested again since (approval is bound to the head SHA)."""
    open_ = [s for s in screens.open_screens(db, repo) if s.campaign == scope.id]
    items: list[QueueItem] = []
    for s in sorted(open_, key=lambda s: (s.state == screens.QUEUED, s.id)):
        if s.state in screens.ACTIVE_STATES:
            run = f" (run {s.run_url})" if s.run_url else ""
            items.append(QueueItem(
                s.name, s.track, "running", pr=s.pr_number, head_sha=s.head_sha, pool=s.pool,
                waits_on=f"the self-hosted runner on pool {s.pool}{run}",
            ))
        else:
            ahead = screens.place(db, s).ahead
            active = screens.pool_active(db, s.pool)
            busy = f"{active.label} holding the pool" if active is not None else "pool free"
            items.append(QueueItem(
                s.name, s.track, "queued", pr=s.pr_number, head_sha=s.head_sha, pool=s.pool,
                waits_on=f"pool {s.pool} ({busy}; {ahead} queued ahead)",
            ))
    cancelled = db.scalars(
        select(screens.Screen)
        .where(
            screens.Screen.repo == repo,
            screens.Screen.campaign == scope.id,
            screens.Screen.state == screens.CANCELLED,
        )
        .order_by(screens.Screen.id)
    )
    for s in cancelled:
        m = _NEW_HEAD.search(s.detail or "")
        if m is None:
            continue
        newer = db.scalar(
            select(screens.Screen.id).where(
                screens.Screen.repo == repo,
                screens.Screen.pr_number == s.pr_number,
                screens.Screen.candidate == s.candidate,
                screens.Screen.track == s.track,
                screens.Screen.id > s.id,
            )
        )
        if newer is None:
            items.append(QueueItem(
                s.name, s.track, "awaiting-approval", pr=s.pr_number, head_sha=m.group(1),
                pool=s.pool, waits_on=f"a requester's `/screen ... sha={m.group(1)[:12]}`",
            ))
    return items


def budget_lines(db: Session, repo: str, scope: CampaignScope) -> list[BudgetLine]:
    """Budget lines from the ledger: charged use of each dimension (failures and retries
    included), reservations of open screens, and the ceiling (scope plus extensions)."""
    st = budget_mod.state(db, repo, scope)
    return [
        BudgetLine("candidate directions", float(st.directions_used),
                   float(st.directions_ceiling), ""),
        BudgetLine("wall-hours", round(st.wall_used_h, 2), st.wall_ceiling_h, "h",
                   reserved=round(st.wall_reserved_h, 2)),
        BudgetLine("device-hours", round(st.device_used_h, 2), st.device_ceiling_h, "h",
                   reserved=round(st.device_reserved_h, 2)),
    ]


def ledger_has_entries(db: Session, repo: str, scope: CampaignScope) -> bool:
    """Whether the budget ledger holds any entry for this campaign."""
    return bool(budget_mod.history(db, repo, scope.id))


def finished_screens(db: Session, repo: str, scope: CampaignScope,
                     limit: int = 3) -> list[ScreenOutcome]:
    """The campaign's last ``limit`` finished or failed screens, newest first, with the
    verdict the flow recorded (from the verified bundle; REFUSED / NOT COUNTED otherwise)."""
    rows = db.scalars(
        select(screens.Screen)
        .where(
            screens.Screen.repo == repo,
            screens.Screen.campaign == scope.id,
            screens.Screen.state.in_((screens.FINISHED, screens.FAILED)),
            screens.Screen.completed_at.is_not(None),
        )
        .order_by(screens.Screen.completed_at.desc(), screens.Screen.id.desc())
        .limit(limit)
    )
    return [
        ScreenOutcome(
            s.label, s.name, s.track, s.verdict or "no verdict", s.conclusion or "unknown",
            pr=s.pr_number, head_sha=s.head_sha, finished=screens.aware(s.completed_at),
        )
        for s in rows
    ]


@dataclass
class CampaignState:
    """A campaign's screens as the header shows them: ``queue`` (running, queued, awaiting
    approval), ``budget`` lines (None: nothing recorded yet, the header computes them from
    receipts) and ``finished`` screens, newest first."""

    queue: list[QueueItem] | None = None
    budget: list[BudgetLine] | None = None
    finished: list[ScreenOutcome] = field(default_factory=list)


def campaign_state(db: Session, repo: str, scope: CampaignScope) -> CampaignState:
    """Queue, budget and finished screens for :func:`evidence.header.build_header`.  The
    budget comes from the ledger once the bot has charged or recorded anything for the
    campaign; before that (evidence produced outside the bot) it is None, and the header
    computes it from the receipts."""
    lines = budget_lines(db, repo, scope) if ledger_has_entries(db, repo, scope) else None
    return CampaignState(queue_items(db, repo, scope), lines, finished_screens(db, repo, scope))
