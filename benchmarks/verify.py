"""Benchmark: ``campaign-bot check`` against ``sha256sum -c manifest-sha256.txt`` on the same
bag, in the same run, several rounds each; two parallel ``openssl dgst -sha256`` processes
(one per core) give the physical limit of the machine.

The bag holds ``--json-files`` small JSON files (default 500) plus ``--media-gib`` GiB of
media-sized files (default 2 GiB, files of 32 to 256 MiB), sealed with ``write_bag``.  The
files are read once before timing, so every tool hashes from the page cache (the comparison is
of hashing, not of the disk).  Peak RSS is each child's ``VmHWM`` (high-water RSS of its own
address space) polled from ``/proc/PID/status`` every 2 ms; ``ru_maxrss`` is not used because
Linux carries the forking parent's peak into it across ``exec``.

Targets: our wall time at most 0.75x sha256sum's, and peak RSS under 150 MB.

Usage::

    .venv/bin/python benchmarks/verify.py [--dir /tmp/cb-bench] [--rounds 5] [--media-gib 2]
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
    plan, acc = [], 0
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


def _hwm_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def _wait_polling(pids: list[int]) -> tuple[float, int]:
    """Wait for every pid, polling VmHWM; return (peak MiB of the largest, first bad exit)."""
    peak = {p: 0.0 for p in pids}
    code = 0
    live = set(pids)
    while live:
        for p in list(live):
            peak[p] = max(peak[p], _hwm_mib(p))
            done, status = os.waitpid(p, os.WNOHANG)
            if done:
                live.discard(p)
                code = code or os.waitstatus_to_exitcode(status)
        time.sleep(0.002)
    return max(peak.values()), code


def run(cmd: list[str], cwd: Path) -> tuple[float, float, int]:
    """(wall seconds, peak RSS MiB, exit status) of one child process."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peak, code = _wait_polling([p.pid])
    return time.perf_counter() - t0, peak, code


def run_openssl_pair(root: Path) -> tuple[float, float, int]:
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
    peak, code = _wait_polling([p.pid for p in procs])
    return time.perf_counter() - t0, peak, code


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/campaign-bot-bench"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json-files", type=int, default=500)
    ap.add_argument("--media-gib", type=float, default=2.0)
    ap.add_argument("--keep", action="store_true", help="keep the bag for the next run")
    a = ap.parse_args()
    console = Console(width=max(Console().width, 130))
    root = a.dir / "bag"
    build(root, a.json_files, a.media_gib, console)
    payload = sum(p.stat().st_size for p in (root / "data").rglob("*") if p.is_file())
    n_files = sum(1 for p in (root / "data").rglob("*") if p.is_file())
    script = Path(sys.executable).with_name("campaign-bot")
    ours = [str(script)] if script.exists() else [
        sys.executable, "-c", "from evidence.cli import main; main()"]
    ours += ["check", str(root), "--json"]
    tools = {
        "campaign-bot check": lambda: run(ours, root),
        "sha256sum -c manifest-sha256.txt": lambda: run(
            ["sha256sum", "-c", "--quiet", "manifest-sha256.txt"], root),
        "openssl dgst -sha256 x2 (limit)": lambda: run_openssl_pair(root),
    }
    for p in (root / "data").rglob("*"):  # page cache warm for every tool alike
        if p.is_file():
            with open(p, "rb") as f:
                while f.read(8 * MIB):
                    pass
    results: dict[str, list[tuple[float, float, int]]] = {k: [] for k in tools}
    with Progress(console=console, transient=True) as prog:
        task = prog.add_task("rounds", total=a.rounds * len(tools))
        for _ in range(a.rounds):
            for name, fn in tools.items():  # interleaved: same machine state for each
                results[name].append(fn())
                prog.advance(task)
    base = statistics.median(w for w, _, _ in results["sha256sum -c manifest-sha256.txt"])
    t = Table(title=f"{n_files} files, {payload / 2**30:.2f} GiB payload, {a.rounds} rounds, "
                    f"{os.cpu_count()} cores")
    for c in ("tool", "median wall s", "min s", "max s", "x sha256sum", "GiB/s",
              "peak RSS MiB", "exit"):
        t.add_column(c, justify="left" if c == "tool" else "right")
    for name, rs in results.items():
        walls = [w for w, _, _ in rs]
        med = statistics.median(walls)
        t.add_row(name, f"{med:.3f}", f"{min(walls):.3f}", f"{max(walls):.3f}",
                  f"{med / base:.3f}", f"{payload / 2**30 / med:.2f}",
                  f"{max(r for _, r, _ in rs):.1f}", ",".join(sorted({str(c) for *_, c in rs})))
    console.print(t)
    ours_rs = results["campaign-bot check"]
    ratio = statistics.median(w for w, _, _ in ours_rs) / base
    rss = max(r for _, r, _ in ours_rs)
    ok_exit = all(c == 0 for *_, c in ours_rs)
    console.print(f"target wall <= 0.75x sha256sum: {ratio:.3f}x "
                  f"{'[green]PASS[/]' if ratio <= 0.75 else '[red]FAIL[/]'}; "
                  f"target peak RSS < 150 MB: {rss:.1f} MiB "
                  f"{'[green]PASS[/]' if rss * 1.048576 < 150 else '[red]FAIL[/]'}; "
                  f"check exit 0 every round: {ok_exit}")
    if not a.keep:
        shutil.rmtree(a.dir, ignore_errors=True)
    return 0 if ratio <= 0.75 and rss * 1.048576 < 150 and ok_exit else 1


if __name__ == "__main__":
    sys.exit(main())
