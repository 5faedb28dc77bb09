"""Benchmark: ``campaign-bot check`` against ``sha256sum -c manifest-sha256.txt`` on the same
bag, in the same run, several rounds each; two parallel ``openssl dgst -sha256`` processes
(one per core) give the hashing limit of the machine (the floor).

The bag holds ``--json-files`` small JSON files (default 500) plus ``--media-gib`` GiB of
media-sized files (default 2 GiB, files of 32 to 256 MiB), sealed with ``write_bag``.  The
files are read once before timing, so every tool hashes from the page cache (the comparison is
of hashing, not of the disk).  Peak RSS is each child's ``VmHWM`` (high-water RSS of its own
address space) polled from ``/proc/PID/status`` every 2 ms; ``ru_maxrss`` is not used because
Linux carries the forking parent's peak into it across ``exec``.

*CPU s* is a run's user + system seconds (``wait4``), summed over both OpenSSL processes;
*CPU s / cores* is the wall time that much work would take with every core busy from the first
instant to the last: the limit of that tool as it is.  ``check`` cannot beat its own limit, so
the gap between its wall and its limit is time a core idled (interpreter start before hashing,
the last file), and the gap between its limit and OpenSSL's is the CPU its interpreter, typer,
pydantic and the document checks spend beside hashing.

``check``'s wall time is reported whole and apart: *in-process* is the ``seconds`` its JSON
report gives (tree walk, parsing and validation overlapped with hashing, verdicts), and
*start-up* is the rest (interpreter, imports, printing the report).  Two more rows time
``campaign-bot --help`` and ``campaign-bot check`` of an empty bag (start-up alone).

Targets: ``check``'s median wall at most 1.2x the two-OpenSSL floor's in the same run, and
its peak RSS under 64 MiB.  On a loaded machine compare the ratios: the absolute seconds
grow with the load.

With ``--baseline PATH`` (the ``campaign-bot`` script of another install, e.g. of an earlier
revision) that install's ``check`` runs in the same rounds, as "(baseline) check".

Usage::

    .venv/bin/python benchmarks/verify.py [--dir /tmp/cb-bench] [--rounds 5] [--media-gib 2]
        [--baseline /path/to/other/.venv/bin/campaign-bot]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.child_measure import wait_polling  # noqa: E402
from evidence.manifest import write_bag  # noqa: E402

MIB = 1 << 20


def build(root: Path, n_json: int, media_gib: float, console: Console) -> None:
    """Write the payload under root/data and seal the bag (skipped when already built)."""
    stamp = root.parent / ".built"  # outside the bag: check reports unknown root files
    want = f"{n_json} {media_gib}"
    if stamp.exists() and stamp.read_text() == want:
        console.print(f"reusing the bag in {root}")
        return
    if root.exists():
        shutil.rmtree(root)
    (root / "data" / "receipts").mkdir(parents=True)
    (root / "data" / "media").mkdir(parents=True)
    for i in range(n_json):
        doc = {"schema": "bench/1", "index": i, "client_wall_s": 100.0 + i / 7,
               "pad": "x" * (200 + 37 * (i % 50))}
        (root / "data" / "receipts" / f"r{i:04d}.json").write_text(json.dumps(doc) + "\n")
    sizes = [32, 256, 64, 128, 96, 160, 48, 224, 80, 192, 112, 144, 32, 208, 64, 208]
    total = int(media_gib * 1024)
    plan: list[int] = []
    acc = 0
    while acc < total:
        s = min(sizes[len(plan) % len(sizes)], total - acc)
        plan.append(s)
        acc += s
    block = os.urandom(8 * MIB)
    with Progress(console=console, transient=True) as prog:
        task = prog.add_task("writing media", total=total)
        for i, s in enumerate(plan):
            with open(root / "data" / "media" / f"out-{i:02d}.mp4", "wb") as f:
                for j in range(s // 8):
                    f.write(i.to_bytes(4, "little") + j.to_bytes(4, "little") + block[8:])
                f.write(b"\0" * ((s % 8) * MIB))
            prog.advance(task, s)
    write_bag(root)
    stamp.write_text(want)


Run = tuple[float, float, int, float]
"""One timed run: (wall seconds, peak RSS MiB, exit status, CPU seconds user + system)."""


def run(cmd: list[str], cwd: Path, stdout: Path | None = None) -> Run:
    """One child process (:data:`Run`); its standard output goes to ``stdout`` when given."""
    with open(stdout or os.devnull, "wb") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=subprocess.DEVNULL)
        peak, code, cpu = wait_polling([p.pid])
        return time.perf_counter() - t0, peak, code, cpu


def in_process_s(report: Path) -> float:
    """The ``seconds`` of a ``campaign-bot check --json`` report (0.0 when unreadable)."""
    try:
        return float(json.loads(report.read_text())["seconds"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0.0


def run_openssl_pair(root: Path) -> Run:
    """Two ``openssl dgst -sha256`` processes over halves of the payload (balanced by size)."""
    files = sorted((p for p in (root / "data").rglob("*") if p.is_file()),
                   key=lambda p: -p.stat().st_size)
    halves: list[list[str]] = [[], []]
    load = [0, 0]
    for p in files:
        k = 0 if load[0] <= load[1] else 1
        halves[k].append(str(p))
        load[k] += p.stat().st_size
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["openssl", "dgst", "-sha256", *h], stdout=subprocess.DEVNULL)
             for h in halves if h]
    peak, code, cpu = wait_polling([p.pid for p in procs])
    return time.perf_counter() - t0, peak, code, cpu


def main() -> int:
    # "Warm" includes the bytecode cache: pip writes the .pyc files of an installed package,
    # but an editable install compiles on first import and PYTHONDONTWRITEBYTECODE (set in
    # some CI images) would make every timed child compile the project's modules again.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/campaign-bot-bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json-files", type=int, default=500)
    ap.add_argument("--media-gib", type=float, default=2.0)
    ap.add_argument("--keep", action="store_true", help="keep the bag for the next run")
    ap.add_argument("--baseline", type=Path, help="another install's campaign-bot script")
    a = ap.parse_args()
    console = Console(width=max(Console().width, 170))
    root = a.dir / "bag"
    build(root, a.json_files, a.media_gib, console)
    payload = sum(p.stat().st_size for p in (root / "data").rglob("*") if p.is_file())
    n_files = sum(1 for p in (root / "data").rglob("*") if p.is_file())
    script = Path(sys.executable).with_name("campaign-bot")
    ours = [str(script)] if script.exists() else [
        sys.executable, "-c", "from evidence.cli import main; main()"]
    empty = a.dir / "empty-bag"
    if not empty.exists():
        (empty / "data").mkdir(parents=True)
        (empty / "data" / "empty.txt").write_text("")
        write_bag(empty)
    report = a.dir / "report.json"
    checks: list[float] = []

    def check() -> Run:
        r = run([*ours, "check", str(root), "--json"], root, stdout=report)
        checks.append(in_process_s(report))
        return r

    tools = {
        "campaign-bot check": check,
        "sha256sum -c manifest-sha256.txt": lambda: run(
            ["sha256sum", "-c", "--quiet", "manifest-sha256.txt"], root),
        "openssl dgst -sha256 x2 (limit)": lambda: run_openssl_pair(root),
        "campaign-bot --help (start-up)": lambda: run([*ours, "--help"], root),
        "campaign-bot check, empty bag (start-up)": lambda: run(
            [*ours, "check", str(empty), "--json"], root),
    }
    if a.baseline is not None:
        tools["(baseline) check"] = lambda: run(
            [str(a.baseline.resolve()), "check", str(root), "--json"], root)
    for p in (root / "data").rglob("*"):  # page cache warm for every tool alike
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(8 * MIB):
                    pass
    results: dict[str, list[Run]] = {k: [] for k in tools}
    with Progress(console=console, transient=True) as prog:
        task = prog.add_task("rounds", total=a.rounds * len(tools))
        for _ in range(a.rounds):
            for name, fn in tools.items():  # interleaved: same machine state for each
                results[name].append(fn())
                prog.advance(task)
    base = statistics.median(r[0] for r in results["sha256sum -c manifest-sha256.txt"])
    floor = statistics.median(r[0] for r in results["openssl dgst -sha256 x2 (limit)"])
    cores = os.cpu_count() or 1
    load = os.getloadavg()
    t = Table(title=f"{n_files} files, {payload / 2**30:.2f} GiB payload, {a.rounds} rounds, "
                    f"{os.cpu_count()} cores, load average {load[0]:.1f}")
    for c in ("tool", "median wall s", "min s", "max s", "x openssl x2", "x sha256sum",
              "GiB/s", "CPU s", "CPU s / cores", "peak RSS MiB", "exit"):
        t.add_column(c, justify="left" if c == "tool" else "right")
    for name, rs in results.items():
        walls = [r[0] for r in rs]
        cpu = statistics.median(r[3] for r in rs)
        med = statistics.median(walls)
        hashing = "start-up" not in name  # rows that hash the 2 GiB
        t.add_row(name, f"{med:.3f}", f"{min(walls):.3f}", f"{max(walls):.3f}",
                  f"{med / floor:.3f}" if hashing else "", f"{med / base:.3f}" if hashing else "",
                  f"{payload / 2**30 / med:.2f}" if hashing else "", f"{cpu:.3f}",
                  f"{cpu / cores:.3f}" if hashing else "",
                  f"{max(r[1] for r in rs):.1f}", ",".join(sorted({str(r[2]) for r in rs})))
        if name == "campaign-bot check":
            ins = statistics.median(checks)
            t.add_row("  in-process (report 'seconds')", f"{ins:.3f}", f"{min(checks):.3f}",
                      f"{max(checks):.3f}", f"{ins / floor:.3f}", f"{ins / base:.3f}",
                      f"{payload / 2**30 / ins:.2f}" if ins else "", "", "", "", "")
            t.add_row("  start-up and output (the rest)", f"{med - ins:.3f}", "", "", "", "",
                      "", "", "", "", "")
    console.print(t)
    ours_rs = results["campaign-bot check"]
    ours_cpu = statistics.median(r[3] for r in ours_rs)
    ssl_cpu = statistics.median(r[3] for r in results["openssl dgst -sha256 x2 (limit)"])
    ours_wall = statistics.median(r[0] for r in ours_rs)
    console.print(f"check: {ours_cpu:.3f} CPU s ({ours_cpu / ssl_cpu:.3f}x OpenSSL's "
                  f"{ssl_cpu:.3f}) = {ours_cpu / cores:.3f} s on {cores} cores at best; its "
                  f"wall {ours_wall:.3f} s is {ours_wall / (ours_cpu / cores):.3f}x that limit")
    ratio = statistics.median(r[0] for r in ours_rs) / floor
    rss = max(r[1] for r in ours_rs)
    ok_exit = all(r[2] == 0 for r in ours_rs)
    console.print(f"target wall <= 1.2x two OpenSSL processes: {ratio:.3f}x "
                  f"{'[green]PASS[/]' if ratio <= 1.2 else '[red]FAIL[/]'}; "
                  f"target peak RSS < 64 MiB: {rss:.1f} MiB "
                  f"{'[green]PASS[/]' if rss < 64 else '[red]FAIL[/]'}; "
                  f"check exit 0 every round: {ok_exit}")
    if load[0] > (os.cpu_count() or 1):
        console.print(f"[yellow]the machine is loaded (load average {load[0]:.1f}): the "
                      "ratios are the comparable figures[/]")
    if not a.keep:
        shutil.rmtree(a.dir, ignore_errors=True)
    return 0 if ratio <= 1.2 and rss < 64 and ok_exit else 1


if __name__ == "__main__":
    sys.exit(main())
