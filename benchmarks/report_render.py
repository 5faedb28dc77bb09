"""Timing of ``campaign-bot report``: a synthetic campaign of 200 screens x 6 sessions (1200
receipts, ABBAAB order, failures mixed in) rendered as the static site.  Run with

    .venv/bin/python benchmarks/report_render.py [--screens 200] [--repeat 3]

Target (not asserted): the whole static site in under 3 s.  Rows: the evidence (load,
manifest check, verdicts, screening, findings: the same pipeline as ``campaign-bot check``),
the pages (one chart and page per screen, pools, budget, findings, copies of the receipts)
with one process and with the default workers, and the whole command as a user runs it
(a subprocess, imports included).  Wall and CPU seconds are both shown: on a shared machine
the wall time includes waiting for a core.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from _report_campaign import write_campaign  # noqa: E402

from bot.features.dashboard.model import build_site  # noqa: E402
from bot.features.dashboard.pages import write_site  # noqa: E402

TARGET_S = 3.0


def _timed(fn: Callable[[], Any], repeat: int) -> tuple[list[float], list[float], Any]:
    walls, cpus, out = [], [], None
    for _ in range(repeat):
        c0, t0 = time.process_time(), time.perf_counter()
        out = fn()
        walls.append(time.perf_counter() - t0)
        cpus.append(time.process_time() - c0)
    return walls, cpus, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--screens", type=int, default=200)
    ap.add_argument("--sessions", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    console = Console()
    tmp = Path(tempfile.mkdtemp(prefix="report-bench-"))
    plan = write_campaign(tmp / "campaign", a.screens, a.sessions)
    console.print(f"synthetic campaign: {len(plan.screens)} screens, {plan.receipts} receipts "
                  f"in {plan.root}; {os.cpu_count()} CPU(s), load {os.getloadavg()[0]:.1f}")
    t = Table(title=f"campaign-bot report: {a.screens} screens x {a.sessions} sessions "
                    f"(median of {a.repeat}; target {TARGET_S:g} s for the site)",
              title_justify="left")
    for c in ("step", "wall s", "min wall s", "CPU s", "detail"):
        t.add_column(c, justify="left" if c in ("step", "detail") else "right")

    w, c, site = _timed(lambda: build_site(plan.root), a.repeat)
    ev = statistics.median(w)
    t.add_row("evidence (load, verify, verdicts, findings)", f"{ev:.2f}", f"{min(w):.2f}",
              f"{statistics.median(c):.2f}", f"{len(site.findings)} findings")
    rows = []
    for label, jobs in (("pages, 1 process", 1), ("pages, default workers", None)):
        w, c, written = _timed(lambda j=jobs: write_site(site, tmp / "site", plan.root, jobs=j),
                               a.repeat)
        rows.append(statistics.median(w))
        t.add_row(label, f"{statistics.median(w):.2f}", f"{min(w):.2f}",
                  f"{statistics.median(c):.2f}" + (" (parent)" if jobs is None else ""),
                  f"{len(written.pages)} pages, {written.bytes / 1e6:.1f} MB")
    exe = Path(sys.executable).parent / "campaign-bot"
    if exe.exists():  # installed (pip install -e .): time the command as a user runs it
        w, c, res = _timed(lambda: subprocess.run(
            [str(exe), "report", str(plan.root), "--out", str(tmp / "cli-site")],
            capture_output=True, text=True, check=False), a.repeat)
        t.add_row("whole command (subprocess, imports included)",
                  f"{statistics.median(w):.2f}", f"{min(w):.2f}", "—", f"exit {res.returncode}")
    total = ev + min(rows)
    t.add_row("[bold]site: evidence + pages[/]", f"[bold]{total:.2f}[/]", "", "",
              "within target" if total < TARGET_S else "[red]over target[/]")
    console.print(t)


if __name__ == "__main__":
    main()
