"""Error rates and power of the verdict rule, by simulation of whole screens through the real
decision code (:func:`evidence.verdicts.decide`).  Prints Markdown tables (the figures in
docs/verdict-statistics.md) and writes them as JSON; run with

    .venv/bin/python benchmarks/verdict_error_rates.py [--screens 4000] [--json OUT]

Model: each session contributes one median; log session medians are normal, control with
standard deviation ``sigma`` (0.03 by default: about 3 %, the order of campaign #320's control
medians 166.572, 168.956 and 173.211 s), the candidate ``noise`` times that, centred on
``log(true_ratio)`` relative to control.  The target is a 30 % reduction (theta0 = 0.70).
Every rate comes with its Wilson 95 % interval (``scipy.stats.binomtest(...).proportion_ci``).

Sections:

1. **Unequal noise** (false SUPPORTED at the boundary, true ratio = theta0): the rank rule
   alone (at most ``u`` contrary pairs) against the shipped rule (ranks plus the spread
   guard of :func:`evidence.verdicts.unequal_spread`), candidate noise 1x and 3x, 3-6
   sessions per arm; and power at a true 35 % reduction with equal noise (sigma 0.02, 0.03,
   0.05).
2. **Campaign-level error control**: 12 candidates at the boundary, each screened once; the
   family-wise false SUPPORTED rate (at least one) with no correction, with Holm over the
   exact p-values of the 12 screens, and with a confirmation screen (a second, independent
   screen of the same candidate against the original control, declared before it runs; a
   SUPPORTED stands only when both say so); and the power left at a true 35 % reduction.
3. **Paired order**: control drifting linearly over the screen (the ABBAAB slots), the rank
   rule on all sessions against an exact Wilcoxon signed-rank test on the adjacent A/B pairs
   (``scipy.stats.wilcoxon(method="exact")``) of the frozen order.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import binomtest, wilcoxon  # noqa: E402

from evidence import stats  # noqa: E402
from evidence.verdicts import decide  # noqa: E402

THETA0 = 0.70
ARMS = (3, 4, 5, 6)


def rate(k: int, n: int) -> dict[str, float]:
    """``k`` of ``n`` with its Wilson 95 % interval, in percent."""
    ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
    return {"k": k, "n": n, "pct": 100 * k / n, "lo": 100 * ci.low, "hi": 100 * ci.high}


def fmt(r: dict[str, float]) -> str:
    return f"{r['pct']:.1f} [{r['lo']:.1f}, {r['hi']:.1f}]"


def arms(rng: random.Random, n: int, sigma: float, noise: float, true: float,
         drift: float = 0.0) -> tuple[list[float], list[float]]:
    """Control and candidate session medians (seconds, control centred on 100 s) of one
    screen in the ABBAAB... order; ``drift``: log change of control per slot."""
    order = ("ABBAAB" * n)[: 2 * n]
    c, t = [], []
    for slot, arm in enumerate(order):
        base = drift * slot
        if arm == "A":
            c.append(100 * math.exp(base + rng.gauss(0, sigma)))
        else:
            t.append(100 * math.exp(base + math.log(true) + rng.gauss(0, sigma * noise)))
    return c, t


def rank_only(c: list[float], t: list[float]) -> bool:
    """SUPPORTED by the exact rank rule alone (no spread guard)."""
    d = decide(c, t, THETA0)
    return d.u is not None and d.above <= d.u


def shipped(c: list[float], t: list[float]) -> bool:
    """SUPPORTED by the shipped decision."""
    return decide(c, t, THETA0).verdict == "SUPPORTED"


def exact_p(c: list[float], t: list[float]) -> float:
    """Exact one-sided p of 'candidate/control < theta0': P(U <= contrary pairs)."""
    d = decide(c, t, THETA0)
    return stats.null_cdf(len(c), len(t), d.above)


def count(screens: int, seed: int, one: Callable[[random.Random], bool]) -> dict[str, float]:
    rng = random.Random(seed)
    return rate(sum(one(rng) for _ in range(screens)), screens)


def unequal_noise(screens: int) -> list[dict]:
    rows = []
    for n in ARMS:
        row: dict = {"arm": n}
        for noise in (1.0, 3.0):
            for name, rule in (("rank", rank_only), ("shipped", shipped)):
                row[f"false_{name}_{noise:g}x"] = count(
                    screens, 1000 * n + int(noise),
                    lambda r, n=n, noise=noise, rule=rule: rule(*arms(r, n, 0.03, noise, THETA0)))
        for sigma in (0.02, 0.03, 0.05):
            for name, rule in (("rank", rank_only), ("shipped", shipped)):
                row[f"power_{name}_{sigma:g}"] = count(
                    screens, 2000 * n + int(sigma * 100),
                    lambda r, n=n, sigma=sigma, rule=rule: rule(*arms(r, n, sigma, 1.0, 0.65)))
        rows.append(row)
    return rows


def holm(ps: list[float], alpha: float = stats.ALPHA) -> list[bool]:
    """Holm's step-down rejections (Holm, Scand. J. Statist. 6 (1979) 65-70)."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out = [False] * len(ps)
    for rank, i in enumerate(order):
        if ps[i] > alpha / (len(ps) - rank):
            break
        out[i] = True
    return out


def campaign(screens: int, candidates: int = 12) -> list[dict]:
    rows = []
    for n in ARMS:
        row: dict = {"arm": n}
        for label, true in (("boundary", THETA0), ("power", 0.65)):
            rng = random.Random(3000 * n + int(true * 100))
            plain = holm_hits = confirmed = 0
            for _ in range(screens):
                firsts = [arms(rng, n, 0.03, 1.0, true) for _ in range(candidates)]
                sup = [shipped(c, t) for c, t in firsts]
                ps = [exact_p(c, t) for c, t in firsts]
                # a confirmation screen for each provisional SUPPORTED: fresh sessions of the
                # candidate and of the original control, the same rule
                conf = [s and shipped(*arms(rng, n, 0.03, 1.0, true)) for s in sup]
                if label == "boundary":  # family-wise: at least one false SUPPORTED
                    plain += any(sup)
                    holm_hits += any(holm(ps))
                    confirmed += any(conf)
                else:  # power: per candidate
                    plain += sum(sup)
                    holm_hits += sum(holm(ps))
                    confirmed += sum(conf)
            total = screens if label == "boundary" else screens * candidates
            row[f"{label}_none"] = rate(plain, total)
            row[f"{label}_holm"] = rate(holm_hits, total)
            row[f"{label}_confirm"] = rate(confirmed, total)
        rows.append(row)
    return rows


def paired(screens: int) -> list[dict]:
    rows = []
    for n in ARMS:
        row: dict = {"arm": n}
        for label, true, drift in (("false_no_drift", THETA0, 0.0),
                                   ("false_drift", THETA0, 0.01),
                                   ("power_no_drift", 0.65, 0.0),
                                   ("power_drift", 0.65, 0.01)):
            rng = random.Random(4000 * n + int(drift * 1000) + int(true * 100))
            ranked = pair_hits = 0
            for _ in range(screens):
                c, t = arms(rng, n, 0.03, 1.0, true, drift)
                ranked += shipped(c, t)
                # slots (0, 1), (3, 2), (4, 5): the adjacent A/B pairs of ABBAAB
                diffs = [math.log(b) - math.log(a) - math.log(THETA0)
                         for a, b in zip(c, t, strict=True)]
                p = float(wilcoxon(diffs, alternative="less", method="exact").pvalue)
                pair_hits += p <= stats.ALPHA
            row[f"{label}_rank"] = rate(ranked, screens)
            row[f"{label}_paired"] = rate(pair_hits, screens)
        rows.append(row)
    return rows


def table(title: str, header: list[str], rows: list[list[str]]) -> None:
    """Print one Markdown table under a ``###`` title."""
    print(f"\n### {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for row in rows:
        print("| " + " | ".join(row) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--screens", type=int, default=4000, help="screens per scenario (>= 2000)")
    ap.add_argument("--campaigns", type=int, default=2000,
                    help="simulated campaigns of 12 candidates per scenario")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = ap.parse_args()
    out = {"screens": a.screens, "campaigns": a.campaigns, "sigma": 0.03, "theta0": THETA0}

    out["unequal_noise"] = un = unequal_noise(a.screens)
    table("False SUPPORTED at the boundary and power (percent, Wilson 95 % interval)",
          ["sessions per arm", "rank rule, 3x noisier", "shipped rule, 3x noisier",
           "shipped, equal noise", "power sigma 0.02 rank / shipped", "power 0.03",
           "power 0.05"],
          [[str(r["arm"]), fmt(r["false_rank_3x"]), fmt(r["false_shipped_3x"]),
            fmt(r["false_shipped_1x"])]
           + [f"{r[f'power_rank_{s:g}']['pct']:.1f} / {r[f'power_shipped_{s:g}']['pct']:.1f}"
              for s in (0.02, 0.03, 0.05)] for r in un])
    out["campaign"] = cp = campaign(a.campaigns)
    table("12 candidates per track: family-wise false SUPPORTED and power per candidate",
          ["sessions per arm", "no correction", "Holm", "confirmation screen",
           "power: none / Holm / confirmation"],
          [[str(r["arm"]), fmt(r["boundary_none"]), fmt(r["boundary_holm"]),
            fmt(r["boundary_confirm"]),
            " / ".join(f"{r[f'power_{k}']['pct']:.1f}" for k in ("none", "holm", "confirm"))]
           for r in cp])
    out["paired"] = pr = paired(a.screens)
    table("Paired order (ABBA... adjacent pairs, exact Wilcoxon) against the rank rule",
          ["sessions per arm", "false SUPPORTED, no drift: rank / paired", "with drift",
           "power, no drift: rank / paired", "with drift"],
          [[str(r["arm"])] + [f"{fmt(r[f'{k}_rank'])} / {fmt(r[f'{k}_paired'])}" for k in (
              "false_no_drift", "false_drift", "power_no_drift", "power_drift")] for r in pr])
    if a.json:
        a.json.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
