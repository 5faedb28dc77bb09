"""Follow-up screens under a group-sequential design: false SUPPORTED over up to three
looks, power, and the sessions (device hours) they use against a fixed design of the same
power, by simulation through the shipped code (:func:`evidence.sequential.plan_looks` for
each look's alpha share and exact boundary, :func:`evidence.verdicts.decide` for the
decision, spread guard included).  Prints Markdown tables (docs/verdict-statistics.md,
"Follow-up screens") and writes them as JSON; run with

    .venv/bin/python benchmarks/sequential_error_rates.py [--screens 4000] [--json OUT]

Model (as ``benchmarks/verdict_error_rates.py``): log session medians normal, standard
deviation ``sigma`` (0.03) on both arms, the candidate centred on ``log(true_ratio)``;
target a 30 % reduction (theta0 = 0.70).  A series starts with a first look of
``first`` sessions per arm and, while the look is INCONCLUSIVE and the design allows
another, adds ``step`` sessions per arm (a follow-up screen of ``2 * step`` sessions).
Designs:

- **O'Brien-Fleming** and **Pocock** spending (the shipped rule): looks 3, 6, 9 sessions
  per arm, ``max_sessions_per_arm = 9``;
- **naive**: the same looks, each at the full alpha 0.05 (what "run more sessions and look
  again" does without spending): the inflation the design prevents;
- **fixed**: one screen of ``n`` sessions per arm at alpha 0.05, for n = 3 .. 12; "the fixed
  design of the same power" is the smallest ``n`` whose power at a true 35 % reduction is at
  least the sequential design's.

Device hours: sessions times 10 minutes on 4 devices (a 15 s track on a 4-device pool, the
order of the bot's ``sessions=`` bound's reasoning); the ratio to the fixed design does not
depend on that figure.  Rates carry Wilson 95 % intervals
(``scipy.stats.binomtest(...).proportion_ci``).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
from pathlib import Path
from typing import Any, Literal

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scipy.stats import binomtest  # noqa: E402

from evidence.models import SequentialDesign  # noqa: E402
from evidence.sequential import plan_looks  # noqa: E402
from evidence.verdicts import decide  # noqa: E402

THETA0 = 0.70
SESSION_DEVICE_HOURS = 10 / 60 * 4
"""One session: 10 minutes on 4 devices."""
LOOKS = (3, 6, 9)


def rate(k: int, n: int) -> dict[str, float]:
    """``k`` of ``n`` with its Wilson 95 % interval, in percent."""
    ci = binomtest(k, n).proportion_ci(0.95, method="wilson")
    return {"k": k, "n": n, "pct": 100 * k / n, "lo": 100 * ci.low, "hi": 100 * ci.high}


def fmt(r: dict[str, float]) -> str:
    return f"{r['pct']:.1f} [{r['lo']:.1f}, {r['hi']:.1f}]"


def draw(rng: random.Random, k: int, sigma: float, true: float) -> tuple[list[float],
                                                                         list[float]]:
    """``k`` control and ``k`` candidate session medians (control centred on 100 s)."""
    c = [100 * math.exp(rng.gauss(0, sigma)) for _ in range(k)]
    t = [100 * math.exp(math.log(true) + rng.gauss(0, sigma)) for _ in range(k)]
    return c, t


def levels(spending: Literal["obrien-fleming", "pocock"] | None) -> list[float]:
    """Each look's alpha (``None``: the naive design, 0.05 at every look).  Balanced looks
    make the shares independent of the data."""
    if spending is None:
        return [0.05] * len(LOOKS)
    d = SequentialDesign(looks=len(LOOKS), max_sessions_per_arm=LOOKS[-1], spending=spending)
    return [lk.level for lk in plan_looks(d, [(n, n) for n in LOOKS])]


def series(rng: random.Random, alphas: list[float], sigma: float, true: float
           ) -> tuple[str, int]:
    """One series: (verdict of its last look, sessions per arm it used)."""
    c: list[float] = []
    t: list[float] = []
    verdict = "INCONCLUSIVE"
    for n, a in zip(LOOKS, alphas, strict=True):
        nc, nt = draw(rng, n - len(c), sigma, true)
        c += nc
        t += nt
        verdict = decide(c, t, THETA0, a).verdict if a > 0 else "INCONCLUSIVE"
        if verdict != "INCONCLUSIVE":
            break
    return verdict, len(c)


def fixed(rng: random.Random, n: int, sigma: float, true: float) -> str:
    c, t = draw(rng, n, sigma, true)
    return decide(c, t, THETA0).verdict


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--screens", type=int, default=4000, help="simulated series per scenario")
    ap.add_argument("--sigma", type=float, default=0.03)
    ap.add_argument("--seed", type=int, default=34)
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args(argv)
    rng = random.Random(a.seed)
    out: dict[str, object] = {"screens": a.screens, "sigma": a.sigma, "looks": LOOKS,
                              "session_device_hours": SESSION_DEVICE_HOURS}
    designs: dict[str, Literal["obrien-fleming", "pocock"] | None] = {
        "O'Brien-Fleming": "obrien-fleming", "Pocock": "pocock", "naive": None}
    print(f"## Follow-up screens: looks at {', '.join(map(str, LOOKS))} sessions per arm, "
          f"sigma {a.sigma}, {a.screens} series per scenario\n")
    print("| design | alpha per look | false SUPPORTED at the boundary | power at 0.65 | "
          "sessions per arm at 0.65 (mean) | at 0.70 | at 1.00 |")
    print("|---|---|---|---|---|---|---|")
    seq: dict[str, dict[str, Any]] = {}
    for name, spending in designs.items():
        al = levels(spending)
        row: dict[str, Any] = {"alphas": al}
        for label, true in (("boundary", THETA0), ("power", 0.65), ("null", 1.0)):
            runs = [series(rng, al, a.sigma, true) for _ in range(a.screens)]
            hits = sum(v == "SUPPORTED" for v, _ in runs)
            row[label] = rate(hits, a.screens)
            row[f"{label}_sessions"] = sum(n for _, n in runs) / a.screens
        seq[name] = row
        print(f"| {name} | {' / '.join(f'{x:.4f}' for x in al)} | {fmt(row['boundary'])} | "
              f"{row['power']['pct']:.1f} | {row['power_sessions']:.2f} | "
              f"{row['boundary_sessions']:.2f} | {row['null_sessions']:.2f} |")
    out["sequential"] = seq
    print("\n| fixed sessions per arm | false SUPPORTED at the boundary | power at 0.65 |")
    print("|---|---|---|")
    fx: dict[int, dict[str, Any]] = {}
    for n in range(3, 13):
        b = sum(fixed(rng, n, a.sigma, THETA0) == "SUPPORTED" for _ in range(a.screens))
        p = sum(fixed(rng, n, a.sigma, 0.65) == "SUPPORTED" for _ in range(a.screens))
        fx[n] = {"boundary": rate(b, a.screens), "power": rate(p, a.screens)}
        print(f"| {n} | {fmt(fx[n]['boundary'])} | {fx[n]['power']['pct']:.1f} |")
    out["fixed"] = fx
    print("\n| design | power at 0.65 | fixed design of that power | device hours at 0.65: "
          "sequential / fixed | saved |")
    print("|---|---|---|---|---|")
    saved: dict[str, object] = {}
    for name in ("O'Brien-Fleming", "Pocock"):
        row = seq[name]
        pw = row["power"]["pct"]
        n_fix = next((n for n in fx if fx[n]["power"]["pct"] >= pw), None)
        s_h = 2 * row["power_sessions"] * SESSION_DEVICE_HOURS
        if n_fix is None:
            print(f"| {name} | {pw:.1f} | none up to 12 per arm | {s_h:.1f} / - | - |")
            continue
        f_h = 2 * n_fix * SESSION_DEVICE_HOURS
        saved[name] = {"fixed_sessions_per_arm": n_fix, "sequential_device_hours": s_h,
                       "fixed_device_hours": f_h, "saved_pct": 100 * (1 - s_h / f_h)}
        print(f"| {name} | {pw:.1f} | {n_fix} per arm ({fx[n_fix]['power']['pct']:.1f}) | "
              f"{s_h:.1f} / {f_h:.1f} | {100 * (1 - s_h / f_h):.0f} % |")
    out["saved"] = saved
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
