"""Campaign budget accounting: candidate directions, wall-hours and device-hours, with
failures and retries counted (campaign #297's frozen scope: "12 candidate directions and
16 wall-hours / 64 logical-device-hours including failures and retries").

The ceiling comes from ``[budget]`` in the campaign's ``campaign.toml`` on the default
branch.  Every change is a row in ``budget_entries`` (never edited, never deleted):

- ``extend``: ``/campaign budget extend ...`` by a requester raises the ceiling;
- ``direction``: the first dispatched screen of a candidate uses one candidate direction;
- ``charge``: a screen that ran (finished, failed or cancelled while running) is charged its
  wall time and its device time (wall time x the pool's device count: a pool is reserved
  whole).  A retry is charged again; a failed run is charged and never counted as a sample.

Queued and running screens *reserve* their estimate so two requests cannot both spend the
last hours.  ``left = ceiling + extensions - charged - reserved``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import DateTime, Float, Integer, String, Text, func, select
from sqlalchemy.orm import Mapped, Session, mapped_column

from bot.database import Base
from bot.features.screen.queue import OPEN_STATES, Screen, observed_session_device_s, utcnow

DEFAULT_STARTUP_S = 600.0
"""Server start to ``/health`` 200 when nothing was observed yet.  Source: campaign #320
("multi-minute" initialisation of the 4-device server); conservative on purpose."""
DEFAULT_REQUEST_S_PER_OUTPUT_S = 165.0
"""Seconds of one request per second of generated video, before any observation.
Source: campaign #320's 5 s baseline: measured request 814.064 s (~163 s per output s)."""


class BudgetEntry(Base):
    """One recorded change of a campaign's budget."""

    __tablename__ = "budget_entries"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    repo: Mapped[str] = mapped_column(String(200), index=True)
    campaign: Mapped[str] = mapped_column(String(200), index=True)
    kind: Mapped[str] = mapped_column(String(16))  # extend | direction | charge
    directions: Mapped[int] = mapped_column(Integer, default=0)
    wall_hours: Mapped[float] = mapped_column(Float, default=0.0)
    device_hours: Mapped[float] = mapped_column(Float, default=0.0)
    screen_id: Mapped[int | None] = mapped_column(Integer, nullable=True)
    by: Mapped[str] = mapped_column(String(100))
    reason: Mapped[str] = mapped_column(Text, default="")
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


@dataclass(frozen=True)
class Estimate:
    """Estimated cost of one screen: ``wall_s`` seconds of pool time, ``device_s`` device
    seconds (wall x devices), and where the per-session figure came from."""

    wall_s: float
    device_s: float
    sessions: int
    per_session_s: float
    basis: str

    @property
    def device_hours(self) -> float:
        """Device seconds in hours."""
        return self.device_s / 3600.0

    @property
    def wall_hours(self) -> float:
        """Wall seconds in hours."""
        return self.wall_s / 3600.0


def estimate_screen(
    db: Session, scope: object, track_id: str, sessions: int, device_count: int
) -> Estimate:
    """Estimate a screen's cost from the scope's protocol.

    Per session: startup + (warmups + measured requests) x request time + shutdown timeout
    + idle wait (``protocol``).  Once the campaign has a finished screen on this track, the
    median charged seconds per session replace the formula (basis ``observed``).
    Raises KeyError for an unknown track (message names the valid ids).
    """
    from evidence.models import CampaignScope

    assert isinstance(scope, CampaignScope)
    track = scope.track(track_id)
    p = scope.protocol
    observed = observed_session_device_s(db, scope.id, track_id)
    if observed is not None:
        per_wall = observed / max(1, device_count)
        basis = "observed median of this campaign's finished screens on this track"
    else:
        req_s = DEFAULT_REQUEST_S_PER_OUTPUT_S * track.duration_s
        per_wall = (
            DEFAULT_STARTUP_S
            + (p.warmups_per_session + p.measured_requests_per_session) * req_s
            + p.shutdown_timeout_s
            + p.idle_wait_s
        )
        basis = (
            f"protocol ({p.warmups_per_session} warmup + {p.measured_requests_per_session} "
            f"measured per session, ~{req_s:.0f} s per request, {DEFAULT_STARTUP_S:.0f} s start)"
        )
    wall = per_wall * sessions
    return Estimate(wall, wall * device_count, sessions, per_wall, basis)


@dataclass(frozen=True)
class BudgetState:
    """A campaign's budget now: ceilings (scope + extensions), used (charged), reserved
    (open screens' estimates) and left.  Hours are hours; directions are counts."""

    directions_ceiling: int
    wall_ceiling_h: float
    device_ceiling_h: float
    directions_used: int
    wall_used_h: float
    device_used_h: float
    wall_reserved_h: float
    device_reserved_h: float
    failures_charged: int
    directions_names: tuple[str, ...]

    @property
    def directions_left(self) -> int:
        """Candidate directions not yet used."""
        return self.directions_ceiling - self.directions_used

    @property
    def wall_left_h(self) -> float:
        """Wall-hours left after charges and reservations."""
        return self.wall_ceiling_h - self.wall_used_h - self.wall_reserved_h

    @property
    def device_left_h(self) -> float:
        """Device-hours left after charges and reservations."""
        return self.device_ceiling_h - self.device_used_h - self.device_reserved_h


def state(db: Session, repo: str, scope: object, exclude_screen: int | None = None) -> BudgetState:
    """Compute the budget of ``scope``'s campaign in ``repo`` from the ledger and the open
    screens (``exclude_screen`` leaves one screen's reservation out)."""
    from evidence.models import CampaignScope

    assert isinstance(scope, CampaignScope)
    b = scope.budget
    rows = db.execute(
        select(
            BudgetEntry.kind,
            func.coalesce(func.sum(BudgetEntry.directions), 0),
            func.coalesce(func.sum(BudgetEntry.wall_hours), 0.0),
            func.coalesce(func.sum(BudgetEntry.device_hours), 0.0),
        )
        .where(BudgetEntry.repo == repo, BudgetEntry.campaign == scope.id)
        .group_by(BudgetEntry.kind)
    ).all()
    sums = {k: (int(d), float(w), float(h)) for k, d, w, h in rows}
    ext = sums.get("extend", (0, 0.0, 0.0))
    ch = sums.get("charge", (0, 0.0, 0.0))
    names = tuple(
        db.scalars(
            select(BudgetEntry.reason)
            .where(
                BudgetEntry.repo == repo,
                BudgetEntry.campaign == scope.id,
                BudgetEntry.kind == "direction",
            )
            .order_by(BudgetEntry.id)
        )
    )
    open_q = select(Screen).where(
        Screen.repo == repo, Screen.campaign == scope.id, Screen.state.in_(OPEN_STATES)
    )
    open_screens = [s for s in db.scalars(open_q) if s.id != exclude_screen]
    failures = db.scalar(
        select(func.count(Screen.id)).where(
            Screen.repo == repo,
            Screen.campaign == scope.id,
            Screen.state == "failed",
            Screen.charged_device_s.is_not(None),
        )
    )
    return BudgetState(
        directions_ceiling=b.candidate_directions + ext[0],
        wall_ceiling_h=b.wall_hours + ext[1],
        device_ceiling_h=b.device_hours + ext[2],
        directions_used=len(names),
        wall_used_h=ch[1],
        device_used_h=ch[2],
        wall_reserved_h=sum(s.estimate_wall_s for s in open_screens) / 3600.0,
        device_reserved_h=sum(s.estimate_device_s for s in open_screens) / 3600.0,
        failures_charged=int(failures or 0),
        directions_names=names,
    )


def refusal(st: BudgetState, est: Estimate, new_direction: bool) -> list[str]:
    """Reasons a screen costing ``est`` does not fit ``st`` (empty: it fits).  Each reason
    gives the numbers: needed, left, ceiling."""
    out: list[str] = []
    if new_direction and st.directions_left < 1:
        out.append(
            f"candidate directions: all {st.directions_ceiling} used "
            f"({', '.join(st.directions_names) or 'none'})"
        )
    if est.device_hours > st.device_left_h + 1e-9:
        out.append(
            f"device-hours: this screen needs ~{est.device_hours:.2f} h, "
            f"{max(0.0, st.device_left_h):.2f} h left of {st.device_ceiling_h:.2f} h "
            f"({st.device_used_h:.2f} h charged, {st.device_reserved_h:.2f} h reserved)"
        )
    if est.wall_hours > st.wall_left_h + 1e-9:
        out.append(
            f"wall-hours: this screen needs ~{est.wall_hours:.2f} h, "
            f"{max(0.0, st.wall_left_h):.2f} h left of {st.wall_ceiling_h:.2f} h "
            f"({st.wall_used_h:.2f} h charged, {st.wall_reserved_h:.2f} h reserved)"
        )
    return out


def record(
    db: Session,
    repo: str,
    campaign: str,
    kind: str,
    by: str,
    reason: str,
    *,
    directions: int = 0,
    wall_hours: float = 0.0,
    device_hours: float = 0.0,
    screen_id: int | None = None,
    at: datetime | None = None,
) -> BudgetEntry:
    """Append one ledger entry (``kind``: extend, direction or charge)."""
    if kind not in ("extend", "direction", "charge"):
        raise ValueError(f"unknown budget entry kind {kind!r}")
    e = BudgetEntry(
        repo=repo,
        campaign=campaign,
        kind=kind,
        directions=directions,
        wall_hours=wall_hours,
        device_hours=device_hours,
        screen_id=screen_id,
        by=by,
        reason=reason,
        at=at or utcnow(),
    )
    db.add(e)
    return e


def uses_new_direction(db: Session, repo: str, campaign: str, candidate: str) -> bool:
    """True when ``candidate`` has not used a direction of this campaign yet."""
    hit = db.scalar(
        select(func.count(BudgetEntry.id)).where(
            BudgetEntry.repo == repo,
            BudgetEntry.campaign == campaign,
            BudgetEntry.kind == "direction",
            BudgetEntry.reason == candidate,
        )
    )
    return not hit


def charge_screen(db: Session, s: Screen, wall_s: float, conclusion: str) -> BudgetEntry:
    """Charge screen ``s`` for ``wall_s`` seconds of pool time (device time = wall x
    devices), whatever its ``conclusion``: failures and retries count."""
    wall_s = max(0.0, wall_s)
    s.charged_wall_s = wall_s
    s.charged_device_s = wall_s * s.device_count
    return record(
        db,
        s.repo,
        s.campaign,
        "charge",
        "campaign-bot",
        f"{s.label} {s.name} on {s.track}: {conclusion}",
        wall_hours=wall_s / 3600.0,
        device_hours=wall_s * s.device_count / 3600.0,
        screen_id=s.id,
    )


def history(db: Session, repo: str, campaign: str) -> list[BudgetEntry]:
    """Every ledger entry of a campaign, oldest first."""
    return list(
        db.scalars(
            select(BudgetEntry)
            .where(BudgetEntry.repo == repo, BudgetEntry.campaign == campaign)
            .order_by(BudgetEntry.id)
        )
    )


EXTEND_USAGE = (
    "/campaign budget extend [directions=N] [wall-hours=H] [device-hours=H] [campaign=ID] "
    "[reason=TEXT]"
)
"""``campaign=ID`` picks the campaign when the repository has several; the command takes it
out before :func:`parse_extend` sees the rest."""


@dataclass(frozen=True)
class Extension:
    """A parsed ``/campaign budget extend``: non-negative increments and a free-text reason."""

    directions: int
    wall_hours: float
    device_hours: float
    reason: str


def parse_extend(args: str) -> Extension:
    """Parse the text after ``/campaign budget extend``.

    Grammar: ``[directions=N] [wall-hours=H] [device-hours=H] [reason=TEXT...]`` with at
    least one increment; N a non-negative integer, H a non-negative number of hours
    (at most 10000); ``reason=`` takes the rest of the line.  Raises ValueError with the
    usage line.
    """
    directions, wall, device = 0, 0.0, 0.0
    reason = ""
    rest = args.strip()
    if "reason=" in rest:
        rest, _, reason = rest.partition("reason=")
        reason = reason.strip()
    for tok in rest.split():
        key, eq, value = tok.partition("=")
        try:
            if key == "directions" and eq:
                directions = int(value)
                if directions < 0:
                    raise ValueError
            elif key in ("wall-hours", "device-hours") and eq:
                v = float(value)
                if not (0 <= v <= 10000):
                    raise ValueError
                if key == "wall-hours":
                    wall = v
                else:
                    device = v
            else:
                raise KeyError(tok)
        except KeyError:
            raise ValueError(f"unknown argument {tok!r}; usage: {EXTEND_USAGE}") from None
        except ValueError:
            raise ValueError(f"bad value in {tok!r}; usage: {EXTEND_USAGE}") from None
    if not (directions or wall or device):
        raise ValueError(f"nothing to extend; usage: {EXTEND_USAGE}")
    return Extension(directions, wall, device, reason)
