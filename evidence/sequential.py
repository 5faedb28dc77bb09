"""Group-sequential looks: follow-up screens under alpha spending, and the follow-up each
INCONCLUSIVE look projects.

A campaign may declare ``[protocol.sequential]`` (:class:`evidence.models.SequentialDesign`)
before its first screen.  Then the first screen of a candidate on a track is **look 1** of a
series, and each follow-up screen (``/screen continue``; its receipts carry ``look`` and
``continues``, the first look's ``screen_id``, signed with the bundle) adds the next look.
Every look decides on the cumulative session medians of the series with the exact rank rule
of :func:`evidence.verdicts.decide`, at the share of alpha the look is allotted:

- **Spending** (K. K. G. Lan and D. L. DeMets, "Discrete sequential boundaries for clinical
  trials", *Biometrika* 70(3) (1983) 659-663): a function ``alpha*(t)`` of the information
  fraction ``t`` with ``alpha*(0) = 0`` and ``alpha*(1) = alpha``.  O'Brien-Fleming type
  ``alpha*(t) = 2 - 2 Phi(z_{1 - alpha/2} / sqrt(t))`` (spends almost nothing early), or
  Pocock type ``alpha*(t) = alpha ln(1 + (e - 1) t)``.  The information of ``m`` control
  and ``n`` candidate sessions is their harmonic mean ``2 m n / (m + n)`` (the Mann-Whitney
  statistic's variance scales with ``m n / (m + n)``), and ``t`` is that over the design's
  ``max_sessions_per_arm``, capped at 1.  The last look the design allows (``looks``, or
  ``t = 1``) spends what is left of alpha.
- **Boundaries on the exact distribution**: look ``k`` may use
  ``alpha_k = alpha*(t_k) - spent_{k-1}``, where ``spent_{k-1}`` is the sum of the exact
  null probabilities ``P0(U_j <= u_j)`` of the boundaries the earlier looks actually used
  (alpha a discrete look could not use carries forward).  Its boundary is the exact
  Mann-Whitney ``u(m_k, n_k, alpha_k)`` (:func:`evidence.stats.exact_u`), counted from the
  exact null distribution, no normal approximation.  SUPPORTED and FAILED use the same
  boundary, each one-sided.
- **Why the total stays at alpha**: the looks' statistics are dependent, and their exact
  joint null distribution is not computed; Bonferroni's inequality bounds the chance that
  any look falsely says SUPPORTED by the sum of the looks' exact levels, which the
  construction keeps at or below ``alpha*(t_K) <= alpha``.  This is conservative (the
  simulation in ``benchmarks/sequential_error_rates.py`` measures how much;
  docs/verdict-statistics.md).

The projection of a follow-up is **conditional power** (K. K. G. Lan, R. Simon and
M. Halperin, "Stochastically curtailed tests in long-term clinical trials", *Commun.
Statist. C* 1 (1982) 207-219): keeping the sessions already measured, new log session
medians are drawn from normal distributions at each arm's observed mean with the pooled
within-arm standard deviation, and the next look's exact rule is applied; the share of
draws that decide is the probability shown.  It is a projection from the observed effect,
not a promise, and it never enters a verdict.

Pure: no I/O; numpy is imported on first use by the projection only.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from evidence import stats
from evidence.models import SequentialDesign

TARGET_PROBABILITY = 0.80
"""The follow-up projection proposes the fewest sessions per arm whose probability of a
decisive next look reaches this (the conventional 80 % power), else the most likely one."""
PROJECTION_DRAWS = 2000
"""Monte Carlo draws of the projection: the probability's standard error is at most
0.5 / sqrt(2000) = 1.1 points."""
PROJECTION_SEED = 20260
"""Fixed seed: the same evidence always projects the same follow-up (check is offline and
repeatable)."""
MIN_SPREAD = 0.005
"""Floor for the projection's standard deviation of log session medians (0.5 %): two or
three sessions may agree to the millisecond, which does not mean the next ones will."""
MAX_FOLLOWUP_SESSIONS_PER_ARM = 12
"""A follow-up screen runs at most 24 sessions (the bot's ``sessions=`` bound)."""


def information(m: int, n: int) -> float:
    """Information of ``m`` control and ``n`` candidate sessions, in sessions per arm: the
    harmonic mean ``2 m n / (m + n)`` (``n`` for a balanced design).  0 for an empty arm."""
    return 0.0 if m < 1 or n < 1 else 2.0 * m * n / (m + n)


def spent(t: float, alpha: float, spending: str) -> float:
    """Cumulative alpha spent at information fraction ``t`` (clipped to [0, 1]) by the
    Lan-DeMets spending function ``spending`` (see the module docstring).

    Raises ValueError for an unknown spending function or ``alpha`` outside (0, 1)."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    t = min(1.0, max(0.0, t))
    if t <= 0:
        return 0.0
    if spending == "obrien-fleming":
        z = NormalDist().inv_cdf(1 - alpha / 2)
        return min(alpha, 2.0 - 2.0 * NormalDist().cdf(z / math.sqrt(t)))
    if spending == "pocock":
        return min(alpha, alpha * math.log(1 + (math.e - 1) * t))
    raise ValueError(f"unknown spending function {spending!r} (obrien-fleming, pocock)")


@dataclass(frozen=True)
class Look:
    """One look of a series.

    ``m``/``n``: cumulative sessions per arm with a median; ``fraction``: information
    fraction ``t``; ``cumulative``: ``alpha*(t)`` (alpha itself at the last look);
    ``level``: the alpha this look may use; ``u``: its exact boundary (None: this look
    cannot decide); ``attained``: ``P0(U <= u)`` (0 without ``u``); ``spent_before`` /
    ``spent_after``: the exact alpha the earlier looks used / with this one; ``final``:
    the design allows no further look."""

    number: int
    m: int
    n: int
    fraction: float
    cumulative: float
    level: float
    u: int | None
    attained: float
    spent_before: float
    spent_after: float
    final: bool


def plan_looks(design: SequentialDesign, sizes: Sequence[tuple[int, int]],
               alpha: float = stats.ALPHA) -> list[Look]:
    """The looks of a series whose cumulative ``(m, n)`` per look are ``sizes`` (look 1
    first).  Raises ValueError with more sizes than ``design.looks``, with sizes that shrink
    or an empty arm, or after a final look."""
    if len(sizes) > design.looks:
        raise ValueError(f"{len(sizes)} looks, but the design declares at most {design.looks}")
    out: list[Look] = []
    before = 0.0
    for k, (m, n) in enumerate(sizes, start=1):
        if m < 1 or n < 1:
            raise ValueError(f"look {k}: need a session median on each arm, got {m} vs {n}")
        if out and (m < out[-1].m or n < out[-1].n):
            raise ValueError(f"look {k}: sessions cannot shrink ({out[-1].m} vs {out[-1].n} "
                             f"-> {m} vs {n})")
        if out and out[-1].final:
            raise ValueError(f"look {k} follows look {k - 1}, the design's last")
        t = min(1.0, information(m, n) / design.max_sessions_per_arm)
        final = k == design.looks or t >= 1.0
        cum = alpha if final else spent(t, alpha, design.spending)
        level = max(0.0, cum - before)
        u = stats.exact_u(m, n, level) if level > 0 else None
        att = stats.null_cdf(m, n, u) if u is not None else 0.0
        out.append(Look(k, m, n, t, cum, level, u, att, before, before + att, final))
        before += att
    return out


def next_look(design: SequentialDesign, sizes: Sequence[tuple[int, int]], extra: int,
              alpha: float = stats.ALPHA) -> Look:
    """The look that ``extra`` more sessions per arm would make after ``sizes``.
    Raises ValueError when the design allows no further look (see :func:`plan_looks`)."""
    m, n = sizes[-1]
    return plan_looks(design, [*sizes, (m + extra, n + extra)], alpha)[-1]


@dataclass(frozen=True)
class Projection:
    """A projected follow-up: ``sessions_per_arm`` more sessions per arm (the screen runs
    twice as many), ``probability`` of a decisive next look (SUPPORTED or FAILED;
    conditional power), ``look`` the look it would be, with ``level`` its alpha share."""

    sessions_per_arm: int
    probability: float
    look: int
    level: float


def conditional_power(control: Sequence[float], candidate: Sequence[float], theta0: float,
                      extra: int, u: int | None, *, draws: int = PROJECTION_DRAWS,
                      seed: int = PROJECTION_SEED) -> float:
    """Probability that ``extra`` more sessions per arm make the exact rule decide at
    boundary ``u`` (None: 0), keeping the observed session medians (seconds) and drawing
    the new ones from the normal model of the module docstring.  Raises ValueError for an
    empty arm."""
    if not control or not candidate:
        raise ValueError("need at least one session median per arm")
    if u is None:
        return 0.0
    import numpy as np

    lc = np.log(np.asarray(control, dtype=float))
    lt = np.log(np.asarray(candidate, dtype=float)) - math.log(theta0)
    devs = [*(lc - lc.mean()), *(lt - lt.mean())]
    dof = len(devs) - 2
    sd = math.sqrt(sum(d * d for d in devs) / dof) if dof > 0 else 0.0
    sd = max(sd, MIN_SPREAD)
    rng = np.random.default_rng(seed)
    new_c = lc.mean() + sd * rng.standard_normal((draws, extra))
    new_t = lt.mean() + sd * rng.standard_normal((draws, extra))
    c = np.concatenate([np.broadcast_to(lc, (draws, lc.size)), new_c], axis=1)
    t = np.concatenate([np.broadcast_to(lt, (draws, lt.size)), new_t], axis=1)
    diff = t[:, None, :] - c[:, :, None]  # log(t_j / theta0) - log(c_i)
    eps = math.log1p(stats.TIE_RTOL)
    above = (diff >= -eps).sum(axis=(1, 2))
    below = (diff <= eps).sum(axis=(1, 2))
    return float(((above <= u) | (below <= u)).mean())


def project_followup(design: SequentialDesign, sizes: Sequence[tuple[int, int]],
                     control: Sequence[float], candidate: Sequence[float], theta0: float,
                     alpha: float = stats.ALPHA) -> Projection | None:
    """The follow-up to propose after the looks ``sizes`` (cumulative ``(m, n)``) on the
    observed session medians: the fewest more sessions per arm (1 to the design's remaining
    information, at most :data:`MAX_FOLLOWUP_SESSIONS_PER_ARM`) whose conditional power
    reaches :data:`TARGET_PROBABILITY`, else the one with the highest.  None when the design
    allows no further look."""
    if not sizes or len(sizes) >= design.looks:
        return None
    m, n = sizes[-1]
    if information(m, n) >= design.max_sessions_per_arm:
        return None
    room = max(1, design.max_sessions_per_arm - min(m, n))
    best: Projection | None = None
    for extra in range(1, min(room, MAX_FOLLOWUP_SESSIONS_PER_ARM) + 1):
        lk = next_look(design, sizes, extra, alpha)
        p = conditional_power(control, candidate, theta0, extra, lk.u)
        cand = Projection(extra, p, lk.number, lk.level)
        if best is None or p > best.probability + 1e-12:
            best = cand
        if p >= TARGET_PROBABILITY:
            return cand
    return best


def session_device_seconds(durations_s: Sequence[float], devices: Sequence[int]) -> float | None:
    """Mean device-seconds of one session from measured sessions' wall seconds and device
    counts (a session without devices recorded counts one); None without a duration."""
    vals = [d * max(1, k) for d, k in zip(durations_s, devices, strict=True) if d > 0]
    return statistics.fmean(vals) if vals else None
