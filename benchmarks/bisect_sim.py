"""Simulated ``/bisect`` runs: error rate and device-hours of the probabilistic bisection
(:mod:`evidence.bisection`) against plain bisection, on a 32-commit range.

Each simulated step screens GOOD against one commit with ``n`` sessions per arm: a session's
median latency is ``exp(N(log(ratio), sigma))`` times GOOD's, with ``ratio`` 1 before the
culprit and ``1 + move`` from it on; the step's ratio is the Hodges-Lehmann estimate (median
of all pairwise differences of log session medians), answered "slow" above
``sqrt(1 + margin)``, exactly as the bot reads a step (:func:`evidence.bisection.answer`).

* **probabilistic**: sessions per step from :func:`evidence.bisection.plan`, posterior median
  queries, stop at ``1 - error_rate`` posterior mass or at the cap;
* **plain**: classic bisection (``ceil(log2 N)`` steps, each answer taken as true) with one
  session per arm, and with the sessions per arm that make all its steps right with
  probability ``1 - error_rate`` (:func:`plain_n`).

Usage: ``python benchmarks/bisect_sim.py [--runs 2000] [--seed 1]``; prints one row per design
and noise level: wrong culprit rate, mean and 95th-percentile device-hours, runs stopped at
the cap.  Figures are in docs/bisect.md.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics

from evidence.bisection import Posterior, answer, plan, step_error

SESSION_DEVICE_H = 0.26
"""Device-hours of one session: a 15 s MiniMax-H3 session on 4 devices (~600 s start, two
requests of ~165 s, shutdown: ~0.26 h x 4 devices / 4; campaign #297's protocol estimate)."""


def hl_log_ratio(a: list[float], b: list[float]) -> float:
    """Hodges-Lehmann shift of log session medians (B minus A)."""
    return statistics.median([y - x for x in a for y in b])


def screen(rng: random.Random, slow: bool, move: float, sigma: float, n: int) -> float:
    """One simulated step: the HL ratio of ``n`` sessions per arm."""
    a = [rng.gauss(0.0, sigma) for _ in range(n)]
    b = [rng.gauss(math.log1p(move) if slow else 0.0, sigma) for _ in range(n)]
    return math.exp(hl_log_ratio(a, b))


def probabilistic(rng: random.Random, culprit: int, n_commits: int, *, sigma: float,
                  margin: float, move: float, error_rate: float, cap_h: float
                  ) -> tuple[int, float, bool]:
    """One bisection: ``(culprit reported, device-hours, stopped at the cap)``."""
    p = plan(n_commits, sigma=sigma, margin=margin, error_rate=error_rate,
             session_device_h=SESSION_DEVICE_H)
    post = Posterior.uniform(n_commits)
    used = 0.0
    while post.best()[1] < 1 - error_rate:
        if used + p.step_device_h > cap_h:
            return post.best()[0], used, True
        m = post.query(rng.random())
        if m is None:
            break
        ans = answer(screen(rng, m >= culprit, move, sigma, p.n_per_arm), margin)
        used += p.step_device_h
        if ans is not None:
            post.update(m, ans, p.q)
    return post.best()[0], used, False


def plain(rng: random.Random, culprit: int, n_commits: int, *, sigma: float, margin: float,
          move: float, n: int) -> tuple[int, float]:
    """Classic bisection with ``n`` sessions per arm per step."""
    lo, hi = 0, n_commits  # c_lo good, c_hi slow
    used = 0.0
    while hi - lo > 1:
        m = (lo + hi) // 2
        ans = answer(screen(rng, m >= culprit, move, sigma, n), margin)
        used += 2 * n * SESSION_DEVICE_H
        if ans:
            hi = m
        else:
            lo = m
    return hi, used


def plain_n(n_commits: int, sigma: float, margin: float, error_rate: float) -> int:
    """Sessions per arm that plain bisection needs for ``error_rate`` over its
    ``ceil(log2 N)`` steps (every answer must be right), by :func:`step_error`."""
    steps = math.ceil(math.log2(n_commits))
    for n in range(1, 200):
        if 1 - (1 - step_error(sigma, margin, n)) ** steps <= error_rate:
            return n
    return 200


def main() -> None:
    """Print the table (see the module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--commits", type=int, default=32)
    ap.add_argument("--margin", type=float, default=0.05)
    ap.add_argument("--error-rate", type=float, default=0.05)
    ap.add_argument("--cap", type=float, default=40.0, help="device-hours")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    n_c, margin = args.commits, args.margin
    move = margin  # the hardest slow commit: exactly at the margin
    print(f"{n_c} commits, margin {margin:.0%}, slow commit moves latency by {move:.0%}, "
          f"error rate {args.error_rate:.0%}, cap {args.cap:g} device-hours, "
          f"{args.runs} runs, {SESSION_DEVICE_H} device-h per session")
    print(f"{'sigma':>6} {'design':<28} {'n/arm':>5} {'wrong':>7} {'mean dev-h':>10} "
          f"{'p95 dev-h':>9} {'at cap':>7}")
    for sigma in (0.01, 0.02, 0.03):
        p = plan(n_c, sigma=sigma, margin=margin, error_rate=args.error_rate,
                 session_device_h=SESSION_DEVICE_H)
        rows = []
        wrong, hours, capped = 0, [], 0
        for _ in range(args.runs):
            k = rng.randint(1, n_c)
            got, h, cap = probabilistic(rng, k, n_c, sigma=sigma, margin=margin, move=move,
                                        error_rate=args.error_rate, cap_h=args.cap)
            wrong += got != k and not cap
            capped += cap
            hours.append(h)
        rows.append(("probabilistic (planned n)", p.n_per_arm, wrong, hours, capped))
        for n in sorted({1, p.n_per_arm, plain_n(n_c, sigma, margin, args.error_rate)}):
            wrong, hours = 0, []
            for _ in range(args.runs):
                k = rng.randint(1, n_c)
                got, h = plain(rng, k, n_c, sigma=sigma, margin=margin, move=move, n=n)
                wrong += got != k
                hours.append(h)
            rows.append((f"plain bisection (n={n})", n, wrong, hours, 0))
        for name, n, w, hs, c in rows:
            hs.sort()
            print(f"{sigma:>6.2f} {name:<28} {n:>5} {w / args.runs:>7.1%} "
                  f"{statistics.fmean(hs):>10.2f} {hs[int(0.95 * len(hs)) - 1]:>9.2f} "
                  f"{c / args.runs:>7.1%}")


if __name__ == "__main__":
    main()
