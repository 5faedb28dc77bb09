"""Which server sessions qualify, and every count built on that: one computation for every
view (``campaign-bot check``'s arm table, the status header's board, the static report and
the live pages).

A session (one receipt) **qualifies** when the verdict engine's validity gate would accept it
on its own (:mod:`evidence.verdicts`, "Validity"):

- its lifecycle is clean (:meth:`evidence.models.Lifecycle.problems` is empty: every worker
  exits 0 without a signal, no terminate or kill action, server and container exit 0, the
  devices shown idle before and after; a device idle check that was never recorded counts
  against it, as it does for a verdict);
- every request answered HTTP 200 without an error and every measured request has a finite,
  positive client wall time (:func:`evidence.verdicts.request_issues`), so the session has a
  median (:func:`evidence.verdicts.session_median`);
- its receipt verified against its manifest (not listed in ``unverified``).

Sessions are counted once per ``(screen_id, session_id)`` (a receipt present twice is one
session).  What a session does not show here (its track's design, its revision, its inputs)
is judged per verdict, not per session.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from evidence.models import Receipt
from evidence.verdicts import request_issues, session_median


@dataclass(frozen=True)
class SessionStanding:
    """One session and why it does or does not qualify.

    ``median_s``: median measured client wall seconds (None when a measured request failed or
    none was made); ``problems``: the lifecycle's problems, then the requests', then
    ``"receipt not verified by its manifest"``; empty exactly when ``qualifies``."""

    screen_id: str
    session_id: str
    track: str
    arm: str
    candidate: str | None
    pool: str | None
    median_s: float | None
    problems: tuple[str, ...]

    @property
    def qualifies(self) -> bool:
        """True when the session may stand as a sample (see the module docstring)."""
        return not self.problems and self.median_s is not None


def standing(r: Receipt, *, verified: bool = True) -> SessionStanding:
    """The :class:`SessionStanding` of receipt ``r`` (``verified``: its manifest entry
    verified)."""
    problems = [*r.lifecycle.problems(), *(t for _, t in request_issues(r))]
    if not verified:
        problems.append("receipt not verified by its manifest")
    med = session_median(r)
    if med is None and not problems:
        problems.append("no measured request")
    return SessionStanding(r.screen_id, r.session_id, r.track, r.arm, r.candidate, r.pool,
                           med, tuple(problems))


@dataclass
class SessionCounts:
    """Every session of a campaign once, with the counts the views show."""

    sessions: list[SessionStanding] = field(default_factory=list)
    by_key: dict[tuple[str, str], SessionStanding] = field(default_factory=dict)
    """``(screen_id, session_id)`` -> its standing."""

    def select(self, *, track: str | None = None, arm: str | None = None,
               screen_id: str | None = None, candidate: str | None = None,
               pool: str | None = None) -> list[SessionStanding]:
        """The sessions matching every given field (None: any)."""
        return [s for s in self.sessions
                if (track is None or s.track == track) and (arm is None or s.arm == arm)
                and (screen_id is None or s.screen_id == screen_id)
                and (candidate is None or s.candidate == candidate)
                and (pool is None or s.pool == pool)]

    def qualifying(self, **where: str | None) -> list[SessionStanding]:
        """:meth:`select`, qualifying sessions only."""
        return [s for s in self.select(**where) if s.qualifies]

    def qualifying_controls(self, track: str) -> int:
        """Qualifying control sessions of ``track`` (the header's and the index's "N clean
        control session(s)")."""
        return len(self.qualifying(track=track, arm="control"))

    def control_baseline_s(self, track: str) -> float | None:
        """Median of the qualifying control sessions' medians on ``track``, seconds."""
        meds = [s.median_s for s in self.qualifying(track=track, arm="control")
                if s.median_s is not None]
        return statistics.median(meds) if meds else None

    def qualifies(self, screen_id: str, session_id: str) -> bool:
        """Whether that session qualifies (False when it is unknown)."""
        s = self.by_key.get((screen_id, session_id))
        return s is not None and s.qualifies


def session_counts(receipts: Iterable[tuple[Receipt, str | None]],
                   unverified: Iterable[str | tuple[str, str]] = ()) -> SessionCounts:
    """:class:`SessionCounts` of ``(receipt, path)`` pairs; a receipt whose ``path`` or
    ``(screen_id, session_id)`` is in ``unverified`` (its manifest entry did not verify) does
    not qualify.  The first receipt of a ``(screen_id, session_id)`` stands for the
    session."""
    bad = set(unverified)
    out = SessionCounts()
    for r, path in receipts:
        key = (r.screen_id, r.session_id)
        if key in out.by_key:
            continue
        s = standing(r, verified=key not in bad and (path is None or path not in bad))
        out.by_key[key] = s
        out.sessions.append(s)
    return out
