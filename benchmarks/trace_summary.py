"""Benchmark: ``campaign-bot trace summarize`` throughput (MB/s) and peak RSS on a large
Chrome trace (2 GB by default), and on a smaller one against ``json.load`` of that file (what
a non-streaming reader needs; on 2 GB it passed 6.7 GiB before it was stopped).

The trace is synthetic but shaped like torch.profiler's export of a denoise loop on one
rank: a ``main-denoise`` annotation, host ``cpu_op`` events, and device ``kernel`` events on
two streams (compute kernels such as ``LaserAttention`` and ``MatMulV3``, communication
kernels such as ``All-to-All`` and ``AllGather``) with realistic ``args``; about 40 % of its
events are device kernels.  It is written once to ``--dir`` and reused.

Peak RSS is the child's ``VmHWM`` polled from ``/proc/PID/status`` every 2 ms (as
``benchmarks/verify.py`` does; ``ru_maxrss`` carries the parent's peak across ``exec``).
The file is read once before timing, so the figures are of parsing, not of the disk.

Usage::

    .venv/bin/python benchmarks/trace_summary.py [--mb 2048] [--json-load-mb 200]
        [--dir /tmp/cb-trace-bench]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TransferSpeedColumn
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.child_measure import wait_polling  # noqa: E402

KERNELS = ["LaserAttention", "MatMulV3", "All-to-All", "AllGather", "RmsNorm", "Add",
           "FlashAttentionScore", "Cast"]


def build(path: Path, mb: int, console: Console) -> None:
    """Write a trace of about ``mb`` MB to ``path`` (skipped when it exists at that size)."""
    want = mb * 1_000_000
    if path.exists() and abs(path.stat().st_size - want) < want * 0.02:
        console.print(f"reusing {path}")
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f, Progress("writing trace", BarColumn(), DownloadColumn(),
                                        TransferSpeedColumn(), console=console,
                                        transient=True) as bar:
        task = bar.add_task("w", total=want)
        f.write('{"schemaVersion": 1, "distributedInfo": {"backend": "hccl", "rank": 0, '
                '"world_size": 4}, "traceEvents": [\n')
        f.write(json.dumps({"ph": "X", "cat": "user_annotation", "name": "main-denoise",
                            "pid": 100, "tid": 1, "ts": 1000.0, "dur": 9.0e9}))
        written = 0
        ts = 1000.0
        i = 0
        while written < want:
            chunk = []
            for _ in range(2000):
                k = KERNELS[i % len(KERNELS)]
                dur = 5.0 + (i % 97) * 0.731
                chunk.append(json.dumps(
                    {"ph": "X", "cat": "cpu_op", "name": f"aten::{k.lower()}", "pid": 100,
                     "tid": 1, "ts": round(ts, 3), "dur": round(dur * 0.3, 3),
                     "args": {"External id": i, "Record function id": 0, "Sequence number":
                              i, "Fwd thread id": 0, "Ev Idx": i}}))
                chunk.append(json.dumps(
                    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100,
                     "tid": 1, "ts": round(ts + 1, 3), "dur": 2.5,
                     "args": {"External id": i, "correlation": i, "cbid": 211}}))
                chunk.append(json.dumps(
                    {"ph": "X", "cat": "kernel", "name": k, "pid": 0, "tid": 7 + (i % 2),
                     "ts": round(ts + 3, 3), "dur": round(dur, 3),
                     "args": {"External id": i, "queued": 0, "device": 0, "context": 1,
                              "stream": 7 + (i % 2), "correlation": i, "registers per thread":
                              128, "shared memory": 49152, "blocks per SM": 4.5,
                              "warps per SM": 18.0, "grid": [264, 1, 1],
                              "block": [128, 1, 1], "est. achieved occupancy %": 25}}))
                ts += dur * 0.8
                i += 1
            text = ",\n" + ",\n".join(chunk)
            f.write(text)
            written += len(text)
            bar.update(task, completed=written)
        f.write('\n], "displayTimeUnit": "ms"}\n')


def run(cmd: list[str]) -> tuple[float, float, float, int]:
    """(wall seconds, CPU seconds (user + system), peak RSS MiB, exit code) of ``cmd``.  The
    CPU seconds come from ``wait4``'s rusage of the child alone: on a shared machine they
    say more than the wall time."""
    t0 = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err)
        peak, code, cpu = wait_polling([p.pid])
        wall = time.perf_counter() - t0
        p.returncode = code
        if code:
            err.seek(0)
            sys.stderr.write(err.read().decode(errors="replace")[-2000:])
    return wall, cpu, peak, code


def main() -> None:
    """Build the traces, time the summary (and json.load on the smaller one), print a table
    and one JSON line."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=int, default=2048, help="trace size in MB (default 2048)")
    ap.add_argument("--json-load-mb", type=int, default=200,
                    help="size of the trace that json.load reads for comparison (default 200; "
                    "json.load needs about 3.5 GB of memory per GB of trace); 0 skips it")
    ap.add_argument("--dir", type=Path, default=Path("/tmp/cb-trace-bench"))
    a = ap.parse_args()
    con = Console()
    py = sys.executable
    rows = []
    sizes = [a.mb] + ([a.json_load_mb] if 0 < a.json_load_mb != a.mb else [])
    for mb in sizes:
        trace = a.dir / f"trace-{mb}mb.json"
        build(trace, mb, con)
        size = trace.stat().st_size
        with open(trace, "rb") as f:  # warm the page cache
            while f.read(1 << 24):
                pass
        out = a.dir / f"summary-{mb}mb.json"
        cmd = [py, "-c", "from evidence.cli import main; main()", "trace", "summarize",
               str(trace), "--out", str(out), "--region", "main-denoise"]
        rows.append(("trace summarize (ijson, streaming)", size, *run(cmd)))
        if mb == min(a.json_load_mb, a.mb) and a.json_load_mb:
            rows.append(("json.load (reference)", size,
                         *run([py, "-c", f"import json; json.load(open({str(trace)!r}))"])))
        doc = json.loads(out.read_text())
        r = doc["ranks"][0]
        con.print(f"{trace.name}: {r['events']} events, {r['device_kernels']} device kernels")
    t = Table(title=f"{os.cpu_count()} CPU(s); CPU s = the child's user + system time",
              title_justify="left")
    for c in ("reader", "MB", "wall s", "CPU s", "MB/s wall", "MB/s CPU", "peak RSS MiB",
              "exit"):
        t.add_column(c, justify="left" if c == "reader" else "right")
    for name, size, w, cpu, pk, code in rows:
        t.add_row(name, f"{size / 1e6:.0f}", f"{w:.1f}", f"{cpu:.1f}", f"{size / 1e6 / w:.1f}",
                  f"{size / 1e6 / cpu:.1f}", f"{pk:.0f}", str(code))
    con.print(t)
    print(json.dumps({"results": [
        {"reader": n, "bytes": size, "wall_s": round(w, 2), "cpu_s": round(cpu, 2),
         "mb_per_s_wall": round(size / 1e6 / w, 1), "mb_per_s_cpu": round(size / 1e6 / cpu, 1),
         "peak_rss_mib": round(pk), "exit": c} for n, size, w, cpu, pk, c in rows]}))


if __name__ == "__main__":
    main()
