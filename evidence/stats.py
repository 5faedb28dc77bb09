"""Exact distribution-free statistics for per-track verdicts.

The unit is the independent server session: each session contributes one number, the median
of its measured client wall seconds.  With control session medians ``c_1..c_m`` and
candidate session medians ``t_1..t_n``, everything here works on the ``m * n`` pairwise ratios
``t_j / c_i`` (the Mann-Whitney / Hodges-Lehmann family on the log scale):

- ``u(m, n)`` is the largest count of contrary pairs the exact one-sided Mann-Whitney test
  tolerates at level ``alpha``: the largest ``k`` with ``P(U <= k) <= alpha`` under the null of
  equal distributions.  It is computed from :func:`scipy.stats.mannwhitneyu` with
  ``method="exact"`` on tie-free data built to have ``U = k`` (no typed table); it is None
  when even ``P(U <= 0) = 1 / C(m + n, m)`` exceeds ``alpha`` (1v1, 2v2, 3v2 at 0.05).
- The exact one-sided bounds for the candidate/control ratio are the ``(u + 1)``-th smallest
  and ``(u + 1)``-th largest pairwise ratio (Moses' construction), each with actual
  confidence ``1 - P(U <= u)``.
- The Hodges-Lehmann estimate is the median of the pairwise ratios (geometric mean of the two
  middle ratios when ``m * n`` is even).

Source of ``alpha = 0.05`` (one-sided): the conventional 5 % level; Moses' bounds and the
Hodges-Lehmann estimate are those of Hollander, Wolfe and Chicken, *Nonparametric Statistical
Methods* (3rd ed., 2014), section 4.3, applied to log latencies.  Beyond
:data:`EXACT_LIMIT_PAIRS` pairs the null distribution comes from scipy's normal
approximation instead, and the verdict says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np
from scipy import stats

ALPHA = 0.05
"""One-sided significance level of the decision rule (see the module docstring)."""

_P_EPS = 1e-12  # 3v3 gives P(U <= 0) = 1/20 = 0.05 exactly; float noise must not lose it.
TIE_RTOL = 1e-12
"""Relative tolerance under which a pairwise ratio counts as equal to the threshold (a tie
counts as contrary in both directions, which is the conservative choice)."""


def _data_with_u(m: int, n: int, k: int) -> tuple[list[float], list[float]]:
    """Tie-free samples x (n values) and y (m values) with exactly ``k`` pairs ``x > y``."""
    y = [float(i) for i in range(m)]
    x: list[float] = []
    rest = k
    for j in range(n):
        below = min(m, rest)
        rest -= below
        # ``below - 0.5`` sits above exactly ``below`` of y; the tiny offset keeps x tie-free.
        x.append(below - 0.5 + (j + 1) / (4.0 * (n + 1)))
    return x, y


EXACT_LIMIT_PAIRS = 10_000
"""Designs with more than this many pairs (beyond 100 vs 100 sessions) use scipy's normal
approximation with continuity correction: scipy's exact distribution takes seconds per call
there (benchmarks/verdicts.py).  :func:`u_method` says which one a design uses."""


def u_method(m: int, n: int) -> str:
    """``"exact"`` or ``"asymptotic"`` (see :data:`EXACT_LIMIT_PAIRS`)."""
    return "exact" if m * n <= EXACT_LIMIT_PAIRS else "asymptotic"


@lru_cache(maxsize=4096)
def null_cdf(m: int, n: int, k: int) -> float:
    """``P(U <= k)`` for the Mann-Whitney statistic of ``n`` candidate against ``m`` control
    values under the null of equal continuous distributions, from scipy: exact up to
    :data:`EXACT_LIMIT_PAIRS` pairs, normal approximation beyond.

    Raises ValueError for ``m < 1``, ``n < 1`` or ``k`` outside ``[0, m * n]``.
    """
    if m < 1 or n < 1:
        raise ValueError(f"need at least one value per arm, got m={m}, n={n}")
    if not 0 <= k <= m * n:
        raise ValueError(f"k={k} outside [0, {m * n}]")
    x, y = _data_with_u(m, n, k)
    res = stats.mannwhitneyu(x, y, alternative="less", method=u_method(m, n))
    return float(res.pvalue)


@lru_cache(maxsize=1024)
def exact_u(m: int, n: int, alpha: float = ALPHA) -> int | None:
    """Largest number of contrary pairs the exact one-sided test tolerates at ``alpha``.

    Returns None when no such count exists (the design can never reach ``alpha``).
    """
    if null_cdf(m, n, 0) > alpha + _P_EPS:
        return None
    lo, hi = 0, m * n  # invariant: cdf(lo) <= alpha
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if null_cdf(m, n, mid) <= alpha + _P_EPS:
            lo = mid
        else:
            hi = mid - 1
    return lo


def best_confidence(m: int, n: int) -> float:
    """The highest one-sided confidence any outcome of an ``m`` vs ``n`` design can give:
    ``1 - 1 / C(m + n, m)`` (all pairs on one side)."""
    return 1.0 - null_cdf(m, n, 0)


def pairwise_ratios(control: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """All ``t_j / c_i``, sorted ascending.  Values must be finite and positive."""
    for v in (*control, *candidate):
        if not (math.isfinite(v) and v > 0):
            raise ValueError(f"session medians must be finite and positive seconds, got {v!r}")
    return sorted(t / c for c in control for t in candidate)


def hodges_lehmann(ratios: Sequence[float]) -> float:
    """Median of sorted pairwise ratios (geometric mean of the middle two when even)."""
    k = len(ratios)
    if k == 0:
        raise ValueError("no pairwise ratios")
    if k % 2:
        return ratios[k // 2]
    return math.sqrt(ratios[k // 2 - 1] * ratios[k // 2])


def count_at_or_above(ratios: Sequence[float], theta: float) -> int:
    """Pairs with ratio >= theta (ties within :data:`TIE_RTOL` count)."""
    return sum(1 for r in ratios if r >= theta * (1 - TIE_RTOL))


def count_at_or_below(ratios: Sequence[float], theta: float) -> int:
    """Pairs with ratio <= theta (ties within :data:`TIE_RTOL` count)."""
    return sum(1 for r in ratios if r <= theta * (1 + TIE_RTOL))


def pairs_needed(
    m: int, n: int, contrary_fraction: float, alpha: float = ALPHA, limit: int = 40
) -> int | None:
    """Smallest number ``k >= 0`` of further balanced pairs (one control and one candidate
    session each) after which the rule could decide, if the observed fraction of contrary
    pairs held: ``u(m + k, n + k) >= contrary_fraction * (m + k) * (n + k)``.

    A projection, not a promise.  None when no ``k <= limit`` would do (a fraction near 1/2
    never decides).
    """
    for k in range(limit + 1):
        mm, nn = m + k, n + k
        u = exact_u(mm, nn, alpha)
        if u is not None and contrary_fraction * mm * nn <= u + 1e-9:
            return k
    return None


def p95_upper_bound_index(n: int, q: float = 0.95, conf: float = 0.95) -> int | None:
    """0-based index of the smallest order statistic that bounds the ``q`` quantile from above
    with confidence ``conf`` (distribution-free, binomial); None when even the maximum does
    not (``n < 59`` for q = conf = 0.95, since ``1 - 0.95**58 < 0.95 <= 1 - 0.95**59``)."""
    if n < 1:
        return None
    # P(X_(k) >= x_q) = P(Binomial(n, q) <= k - 1), for k = 1..n
    cdf = stats.binom.cdf(np.arange(n), n, q)
    hits = np.nonzero(cdf >= conf)[0]
    return int(hits[0]) if hits.size else None
