"""Benchmark: start-up of ``campaign-bot`` commands against ``python -c pass`` in the same run.

Times, interleaved round by round so that every command sees the same machine load:

* ``python -c pass`` (the anchor: the interpreter alone);
* ``campaign-bot --help`` (typer, rich and every plug-in module: the cost of registration);
* ``campaign-bot check EXAMPLE --json`` (a whole check of the example campaign, verdicts
  included);
* ``campaign-bot header EXAMPLE`` (the status header of the example campaign);

each a fresh child process started by a small launcher (``python -S``: it times the child
with ``perf_counter`` around ``posix_spawn`` and ``wait4``).  Reported per command:
min/median/max wall seconds, the median CPU seconds (user + system of the child alone, from
``wait4``), the median wall over the anchor's (``x pass``) and the peak RSS (the child's
``ru_maxrss``).  Linux carries the spawning process's peak RSS into the child's across
``exec``; the launcher is smaller than any Python child, so the figure is the child's own.
On a loaded machine the wall figures grow with the load: the ratios and CPU seconds are the
comparable ones.

Targets: ``--help`` median at most 0.25 s and ``check`` on the example at most 0.5 s, warm,
on an otherwise idle 2-core machine.

With ``--baseline PATH`` (the ``campaign-bot`` script of another install, e.g. of an
earlier revision) the same three commands of that install run in the same rounds, rows
marked "(baseline)".

Usage::

    .venv/bin/python benchmarks/startup.py [--rounds 15] [--json results.json]
        [--baseline /path/to/other/.venv/bin/campaign-bot]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"
TARGETS_S = {"campaign-bot --help": 0.25, "campaign-bot check EXAMPLE --json": 0.5}
"""Median wall-clock targets, seconds, warm, on an idle 2-core machine."""


def cli() -> list[str]:
    """The ``campaign-bot`` console script beside this interpreter (else ``python -c``)."""
    script = Path(sys.executable).with_name("campaign-bot")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "from evidence.cli import main; main()"]


_LAUNCHER = """
import os, sys, time
null = [(os.POSIX_SPAWN_OPEN, fd, os.devnull, os.O_WRONLY, 0) for fd in (1, 2)]
t0 = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ, file_actions=null)
_, status, ru = os.wait4(pid, 0)
wall = time.perf_counter() - t0
print(wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss, os.waitstatus_to_exitcode(status))
"""


def run_once(cmd: list[str]) -> tuple[float, float, float, int]:
    """(wall s, CPU s of the child, peak RSS MiB of the child, exit status) of one run of
    ``cmd`` (``cmd[0]`` an absolute path) through the launcher."""
    res = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, *cmd], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    wall, cpu, rss_kib, code = res.stdout.split()
    return float(wall), float(cpu), int(rss_kib) / 1024, int(code)


def main() -> int:
    # "Warm" includes the bytecode cache: pip writes the .pyc files of an installed package,
    # but an editable install compiles on first import and PYTHONDONTWRITEBYTECODE (set in
    # some CI images) would make every timed child compile the project's modules again.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--json", type=Path, help="also write the figures here")
    ap.add_argument("--baseline", type=Path, help="another install's campaign-bot script")
    a = ap.parse_args()
    console = Console(width=max(Console().width, 120))
    ours = cli()
    commands = {
        "python -c pass": [sys.executable, "-c", "pass"],
        "campaign-bot --help": [*ours, "--help"],
        "campaign-bot check EXAMPLE --json": [*ours, "check", str(EXAMPLE), "--json"],
        "campaign-bot header EXAMPLE": [*ours, "header", str(EXAMPLE)],
    }
    if a.baseline is not None:
        base = [str(a.baseline.resolve())]
        commands |= {
            "(baseline) --help": [*base, "--help"],
            "(baseline) check EXAMPLE --json": [*base, "check", str(EXAMPLE), "--json"],
            "(baseline) header EXAMPLE": [*base, "header", str(EXAMPLE)],
        }
    for cmd in commands.values():  # warm: page cache, .pyc files
        run_once(cmd)
    runs: dict[str, list[tuple[float, float, float, int]]] = {k: [] for k in commands}
    with Progress(console=console, transient=True) as prog:
        task = prog.add_task("rounds", total=a.rounds * len(commands))
        for _ in range(a.rounds):
            for name, cmd in commands.items():
                runs[name].append(run_once(cmd))
                prog.advance(task)
    anchor = statistics.median(w for w, *_ in runs["python -c pass"])
    load = os.getloadavg()
    t = Table(title=f"start-up, {a.rounds} rounds, {os.cpu_count()} cores, load average "
                    f"{load[0]:.1f} (EXAMPLE = {EXAMPLE.relative_to(ROOT)})")
    for c in ("command", "min s", "median s", "max s", "median CPU s", "x pass",
              "peak RSS MiB", "exit", "target"):
        t.add_column(c, justify="left" if c in ("command", "target") else "right")
    verdicts: dict[str, bool] = {}
    out: dict[str, dict[str, float | list[int] | None]] = {}
    for name, rs in runs.items():
        walls = [w for w, *_ in rs]
        med = statistics.median(walls)
        cpu = statistics.median(c for _, c, _, _ in rs)
        rss = max(r for _, _, r, _ in rs)
        codes = sorted({c for *_, c in rs})
        goal = TARGETS_S.get(name)
        mark = ""
        if goal is not None:
            verdicts[name] = med <= goal
            mark = f"<= {goal} s: " + ("[green]PASS[/]" if med <= goal else "[red]FAIL[/]")
        t.add_row(name, f"{min(walls):.3f}", f"{med:.3f}", f"{max(walls):.3f}", f"{cpu:.3f}",
                  f"{med / anchor:.1f}", f"{rss:.1f}", ",".join(map(str, codes)), mark)
        out[name] = {"min_s": min(walls), "median_s": med, "max_s": max(walls),
                     "median_cpu_s": cpu, "x_pass": med / anchor, "peak_rss_mib": rss,
                     "exit": codes, "target_s": goal}
    console.print(t)
    if load[0] > (os.cpu_count() or 1):
        console.print(f"[yellow]the machine is loaded (load average {load[0]:.1f} on "
                      f"{os.cpu_count()} cores): compare the 'x pass' and CPU columns, the "
                      "wall seconds grow with the load[/]")
    if a.json:
        a.json.write_text(json.dumps({"rounds": a.rounds, "load_average": load,
                                      "results": out}, indent=2) + "\n")
    return 0 if all(verdicts.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
