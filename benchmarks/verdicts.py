"""Timing of the verdict engine: exact u from scipy per design, the whole review
of a synthetic campaign, and claim tracing.  Prints a table; run with

    .venv/bin/python benchmarks/verdicts.py [--screens 200]

Targets (not asserted): u for a 50 vs 50 design well under a second; a review of a few
thousand receipts in seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from _evidence_factory import as_items, lossless_report, scope, screen  # noqa: E402

from evidence import stats  # noqa: E402
from evidence.claims import check_claims  # noqa: E402
from evidence.findings import review_findings  # noqa: E402
from evidence.screening import screen_decisions  # noqa: E402
from evidence.verdicts import Evidence, ReportIn, judge  # noqa: E402


def _t(fn):  # noqa: ANN001, ANN202
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--screens", type=int, default=200, help="screens of 6 sessions each")
    a = ap.parse_args()
    table = Table(title="verdict engine timings", title_justify="left")
    for c in ("what", "size", "seconds"):
        table.add_column(c, justify="left" if c == "what" else "right")
    for m in (3, 10, 20, 50, 100, 300):
        stats.exact_u.cache_clear()
        stats.null_cdf.cache_clear()
        dt, u = _t(lambda m=m: stats.exact_u(m, m))
        table.add_row(f"u = {u} ({stats.u_method(m, m)}, scipy, cold cache)", f"{m} v {m}",
                      f"{dt:.4f}")
    receipts, reports = [], []
    cands = ["rank-local", "resident-24"]
    for i in range(a.screens):
        rs = screen([100.0 + i % 7, 101.0, 102.0], [60.0 + i % 5, 61.0, 62.0 + i % 3],
                    order="ABBAAB", screen=f"s{i}", cand_kw={"candidate": cands[i % 2]},
                    cand_outputs=[f"c{i}-{k}" for k in range(3)])
        receipts += rs
        reports += [lossless_report("out-5s-lossless", f"c{i}-{k}", True) for k in range(3)]
    ev = Evidence(scope(), as_items(receipts), [ReportIn(r) for r in reports])
    dt, vs = _t(lambda: judge(ev))
    table.add_row(f"judge: {len(vs)} verdicts", f"{len(receipts)} receipts, "
                  f"{len(reports)} reports", f"{dt:.3f}")
    dt, sd = _t(lambda: screen_decisions(ev))
    table.add_row(f"screening: {len(sd)} decisions", f"{a.screens} screens", f"{dt:.3f}")
    dt, fs = _t(lambda: review_findings(ev, vs, sd))
    table.add_row(f"findings: {len(fs)}", f"{len(receipts)} receipts", f"{dt:.3f}")
    prose = "\n".join(f"screen {i}: 100.0 s control versus 60.0 s candidate (40.00% lower)."
                      for i in range(500))
    dt, (claims, cf) = _t(lambda: check_claims("body.md", prose, ev, vs))
    table.add_row(f"claims: {len(claims)} traced, {len(cf)} findings", "500 lines",
                  f"{dt:.3f}")
    Console().print(table)


if __name__ == "__main__":
    main()
