"""Session plan of one screen and its device-time estimate.

The plan follows the scope's frozen protocol (``Protocol.order`` such as ``ABBAAB``, A =
control, B = candidate; ``warmups_per_session``; ``measured_requests_per_session``).
``sessions`` cuts or cycles the order to N sessions; ``control_only`` makes every session a
control session (a baseline repeatability screen).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from evidence.models import Protocol

Arm = Literal["control", "candidate"]


@dataclass(frozen=True)
class PlannedSession:
    """One session of the plan: its 0-based ``slot``, arm and request counts."""

    slot: int
    arm: Arm
    warmups: int
    measured: int


def make_plan(protocol: Protocol, *, sessions: int | None = None,
              control_only: bool = False) -> list[PlannedSession]:
    """Sessions in order.  Raises ValueError when ``sessions`` < 1."""
    order = protocol.order
    n = len(order) if sessions is None else sessions
    if n < 1:
        raise ValueError("--sessions must be at least 1")
    letters = "A" * n if control_only else (order * (n // len(order) + 1))[:n]
    return [PlannedSession(i, "control" if c == "A" else "candidate",
                           protocol.warmups_per_session, protocol.measured_requests_per_session)
            for i, c in enumerate(letters)]


@dataclass(frozen=True)
class Estimate:
    """Wall-clock estimate of a screen in seconds (the pool is held that long; device time is
    this x the pool's devices): ``typical`` (None without a per-request estimate) and
    ``upper_bound`` (every init, request and shutdown running to its timeout)."""

    typical_s: float | None
    upper_bound_s: float


def estimate(plan: list[PlannedSession], protocol: Protocol, *,
             request_s: float | None = None, init_s: float | None = None) -> Estimate:
    """Estimate wall time: per session init + requests + shutdown + the idle wait.

    ``request_s``: expected seconds per request (e.g. a previous control's client wall);
    ``init_s``: expected server start seconds (default: a tenth of the init timeout)."""
    n_req = sum(s.warmups + s.measured for s in plan)
    per_session_fixed = protocol.shutdown_timeout_s + protocol.idle_wait_s
    upper = len(plan) * (protocol.init_timeout_s + per_session_fixed) + \
        n_req * protocol.request_timeout_s
    typical = None
    if request_s is not None:
        start = init_s if init_s is not None else protocol.init_timeout_s / 10
        typical = len(plan) * (start + protocol.idle_wait_s) + n_req * request_s
    return Estimate(typical, upper)
