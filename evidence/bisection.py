"""Noisy bisection: the first commit of a range that moves a track's latency.

A range ``GOOD..BAD`` holds commits ``c_1 .. c_N`` (oldest first; ``c_0 = GOOD`` is known not
to move the latency, ``c_N = BAD`` is known to).  The culprit ``k`` is the first commit whose
latency is more than the margin above GOOD's; every commit from it on is "slow".  A step
screens GOOD (arm A) against one commit ``c_m`` (arm B) and reads the answer "slow" when the
Hodges-Lehmann ratio B/A is above ``sqrt(1 + margin)`` (the geometric midpoint between "no
move" and "moved by the margin"); a screen's answer is wrong with probability ``q``.

**Method: the probabilistic bisection algorithm** (Horstein, "Sequential transmission using
noiseless feedback", IEEE Trans. Inf. Theory 9(3), 1963; analysed for search by Waeber,
Frazier and Henderson, "Bisection search with noisy responses", SIAM J. Control Optim. 51(3),
2013).  A posterior over the culprit starts uniform; each step queries the posterior median
(the commit splitting the mass in halves), and the answer multiplies the mass on its side by
``1 - q`` and the rest by ``q`` (Bayes' rule for a binary symmetric channel).  Unlike plain
bisection, one wrong answer is not fatal: later answers move the mass back.  The search
stops when one commit holds at least ``1 - error_rate`` of the mass (found), or when the next
step would pass the device-hour cap (stopped: the narrowest run of consecutive commits that
holds ``1 - error_rate`` is reported).

**Sessions per step.**  ``q`` falls with the sessions per arm ``n``: with ``sigma`` the
standard deviation of a session median's logarithm (the noise, e.g. from control-vs-control
screens), the log ratio's estimate has standard deviation about ``sigma * sqrt(2/n *
pi/3)`` (the Hodges-Lehmann estimator's efficiency of 3/pi relative to the mean under normal
noise: Hodges and Lehmann, Ann. Math. Statist. 34, 1963), so ``q(n) = Phi(-log(1 + margin) /
2 / that)``.  A step of ``n`` sessions per arm costs ``2 n`` sessions, and the number of steps
to gather ``log2(N / error_rate)`` bits through a channel of capacity ``1 - H(q)`` is about
their ratio; :func:`plan` picks the ``n`` that minimises the product, the expected device
hours (the simulation in ``benchmarks/bisect_sim.py`` checks the error rate it gets).

Pure: no I/O; probabilities are floats, costs device-hours.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist

HL_EFFICIENCY = 3 / math.pi
"""Asymptotic efficiency of the Hodges-Lehmann shift estimator relative to the mean under
normal noise (Hodges and Lehmann 1963)."""
MIN_Q = 1e-4
"""Least per-step error probability the update uses: a screen's answer is never taken as
certain (a certain answer would zero the mass on one side for ever)."""


def step_error(sigma: float, margin: float, n_per_arm: int) -> float:
    """Probability ``q`` that a step of ``n_per_arm`` sessions per arm answers wrongly, for a
    commit at the margin (ratio ``1 + margin``) or at no move (ratio 1), with noise ``sigma``
    (standard deviation of a session median's natural log) and the threshold at the geometric
    midpoint.  Raises ValueError for a non-positive ``margin`` or ``n_per_arm``."""
    if margin <= 0 or n_per_arm < 1:
        raise ValueError("margin and sessions per arm must be positive")
    if sigma <= 0:
        return MIN_Q
    sd = sigma * math.sqrt(2 / n_per_arm / HL_EFFICIENCY)
    return max(MIN_Q, NormalDist().cdf(-math.log1p(margin) / 2 / sd))


def capacity(q: float) -> float:
    """Bits per answer of a binary symmetric channel that errs with probability ``q``:
    ``1 - H2(q)`` (Shannon)."""
    if q <= 0 or q >= 1:
        return 1.0 if q <= 0 else 0.0
    return 1 + q * math.log2(q) + (1 - q) * math.log2(1 - q)


@dataclass(frozen=True)
class Plan:
    """The design of a bisection: ``n_per_arm`` sessions per arm per step, the step error
    ``q``, the expected number of steps and device-hours (``step_device_h`` per step), and
    the fewest steps any bisection of the range needs (``min_steps``: ``ceil(log2 N)``)."""

    n_per_arm: int
    q: float
    expected_steps: float
    step_device_h: float
    min_steps: int

    @property
    def expected_device_h(self) -> float:
        """Expected device-hours of the whole bisection."""
        return self.expected_steps * self.step_device_h

    @property
    def min_device_h(self) -> float:
        """Device-hours of the fewest steps possible (``min_steps`` error-free answers)."""
        return self.min_steps * self.step_device_h


def plan(n_commits: int, *, sigma: float, margin: float, error_rate: float,
         session_device_h: float, step_overhead_device_h: float = 0.0,
         min_per_arm: int = 1, max_per_arm: int = 12) -> Plan:
    """The sessions per arm (``min_per_arm`` .. ``max_per_arm``) minimising the expected
    device-hours of bisecting ``n_commits`` commits to ``error_rate``: steps
    ``log2(n_commits / error_rate) / capacity(q(n))`` times ``2 n`` sessions of
    ``session_device_h`` plus ``step_overhead_device_h``.  Raises ValueError for an empty
    range or an error rate outside (0, 1)."""
    if n_commits < 1:
        raise ValueError("the range holds no commit")
    if not 0 < error_rate < 1:
        raise ValueError("error_rate must be between 0 and 1")
    bits = math.log2(max(n_commits, 2) / error_rate)
    min_steps = math.ceil(math.log2(n_commits)) if n_commits > 1 else 0
    best: Plan | None = None
    for n in range(max(1, min_per_arm), max(min_per_arm, max_per_arm) + 1):
        q = step_error(sigma, margin, n)
        c = capacity(q)
        if c <= 0:
            continue
        cost = 2 * n * session_device_h + step_overhead_device_h
        steps = max(float(min_steps), bits / c) if n_commits > 1 else 0.0
        p = Plan(n, q, steps, cost, min_steps)
        if best is None or p.expected_device_h < best.expected_device_h:
            best = p
    if best is None:
        raise ValueError("no number of sessions gives a step better than chance")
    return best


@dataclass
class Posterior:
    """The posterior over the culprit: ``mass[i]`` is the probability that commit ``i + 1``
    of the range (1-based ``c_1 .. c_N``) is the first slow one."""

    mass: list[float] = field(default_factory=list)

    @classmethod
    def uniform(cls, n_commits: int) -> Posterior:
        """Every commit equally likely."""
        return cls([1.0 / n_commits] * n_commits)

    def query(self, u: float = 0.5) -> int | None:
        """The commit to screen next (1-based index in the range), or None when the range
        holds one commit.

        The posterior's median splits the mass at the commit ``h`` whose cumulative mass
        first reaches 1/2; the query is ``h`` ("is the culprit at or before ``h``?") or
        ``h - 1``, chosen with ``u`` (uniform in [0, 1)) so that the expected cumulative
        mass at the query is exactly 1/2: a randomised median.  Always asking ``h`` would
        never separate ``h`` from ``h - 1`` once ``h`` holds more than half the mass.
        ``c_0`` (GOOD) and ``c_N`` (BAD) are never queried: their answers are known."""
        n = len(self.mass)
        if n <= 1:
            return None
        acc = 0.0
        h = n
        for i, w in enumerate(self.mass, start=1):
            if acc + w >= 0.5:
                h = i
                break
            acc += w
        lo_ok, hi_ok = h - 1 >= 1, h <= n - 1
        if not hi_ok:
            return n - 1
        if not lo_ok:
            return h
        # cum(h-1) = acc < 1/2 <= cum(h) = acc + mass(h): pick h-1 with probability t
        t = (acc + self.mass[h - 1] - 0.5) / self.mass[h - 1] if self.mass[h - 1] > 0 else 0
        return h - 1 if u < t else h

    def update(self, m: int, slow: bool, q: float) -> None:
        """Bayes' rule after screening ``c_m``: answer ``slow`` (``c_m`` is at or after the
        culprit) wrong with probability ``q``.  Raises ValueError for ``m`` outside the range."""
        if not 1 <= m <= len(self.mass):
            raise ValueError(f"commit index {m} outside 1..{len(self.mass)}")
        q = min(max(q, MIN_Q), 0.5)
        # culprit k <= m  <=> c_m is slow
        for i in range(len(self.mass)):
            k = i + 1
            agrees = (k <= m) == slow
            self.mass[i] *= (1 - q) if agrees else q
        total = sum(self.mass)
        self.mass = [w / total for w in self.mass]

    def best(self) -> tuple[int, float]:
        """``(index, mass)`` of the most likely culprit (1-based)."""
        i = max(range(len(self.mass)), key=lambda j: self.mass[j])
        return i + 1, self.mass[i]

    def interval(self, level: float) -> tuple[int, int]:
        """The narrowest run of consecutive commits ``(first, last)`` (1-based) holding at
        least ``level`` of the mass."""
        n = len(self.mass)
        best = (1, n)
        lo = 0
        acc = 0.0
        for hi in range(n):
            acc += self.mass[hi]
            while lo < hi and acc - self.mass[lo] >= level:
                acc -= self.mass[lo]
                lo += 1
            if acc >= level and hi - lo < best[1] - best[0]:
                best = (lo + 1, hi + 1)
        return best


def answer(ratio: float | None, margin: float) -> bool | None:
    """A step's answer from its candidate/control ratio: True (slow) above
    ``sqrt(1 + margin)``, False at or below; None without a ratio (a step that did not
    qualify gives no answer and moves nothing)."""
    if ratio is None or not math.isfinite(ratio) or ratio <= 0:
        return None
    return ratio > math.sqrt(1 + margin)
