"""Benchmark: the screen runner's own overhead against the stand-in server.

Two figures, with the issue's targets:

1. **Timing overhead** for a 50 MB MP4 response: the runner's client wall seconds (first
   upload byte to last MP4 byte, measured by ``runners.client.send_request``, the code path
   ``campaign-bot screen`` uses) minus the server's own handling time (the stand-in logs the
   seconds from reading the request line to writing the last response byte).  Target: under
   1 % of the request time.
2. **Extra RSS** of the runner while it streams that response to disk: peak resident set
   size during the requests minus the resident size before them (sampled every 5 ms), and
   the peak RSS of a whole ``campaign-bot screen`` process.  Target: under 200 MB.

Usage: ``python benchmarks/runner_overhead.py [--response-mb 50] [--gen-seconds 5]
[--requests 5]``.  Writes ``benchmarks/out/runner_overhead.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import psutil
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from runners.client import FilePart, send_request  # noqa: E402

CAMPAIGN = ROOT / "tests" / "data" / "screen-campaign"
HANDLED = re.compile(r"request (\S+) handled in ([0-9.]+) s")


class PeakRss:
    """Samples a process's RSS every ``interval_s`` in a thread; ``peak`` in bytes."""

    def __init__(self, pid: int, interval_s: float = 0.005) -> None:
        self.proc = psutil.Process(pid)
        self.peak = 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, args=(interval_s,), daemon=True)

    def _run(self, interval_s: float) -> None:
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, self.proc.memory_info().rss)
            except psutil.NoSuchProcess:
                return
            time.sleep(interval_s)

    def __enter__(self) -> PeakRss:
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def measure_requests(tmp: Path, response_mb: float, gen_s: float, n: int,
                     console: Console) -> dict[str, object]:
    """Start one stand-in, send ``n`` requests with the runner's client; per-request
    client wall, server handling and overhead, plus the extra RSS of this process."""
    port = _port()
    log = tmp / "standin.log"
    with open(log, "wb") as fh:
        srv = subprocess.Popen(
            [sys.executable, "-m", "runners.standin", "bench", "--omni", "--port", str(port),
             "--num-gpus", "1", "--response-mb", str(response_mb), "--gen-seconds", str(gen_s),
             "--max-frames", "24", "--ladder-s", "1,1,1"], stdout=fh, stderr=subprocess.STDOUT,
            cwd=ROOT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        fields = [("prompt", "benchmark"), ("width", "64"), ("height", "64"), ("fps", "24"),
                  ("num_inference_steps", "2"), ("seed", "0"), ("flow_shift", "12"),
                  ("extra_params", '{"task":"ref2va","duration":1.0}')]
        files = [FilePart("input_references", CAMPAIGN / "ref.mp4", "video/mp4"),
                 FilePart("input_references", CAMPAIGN / "ref.wav", "audio/wav")]
        me = psutil.Process()
        rows = []
        with httpx.Client() as client, Progress(console=console, transient=True) as prog:
            task = prog.add_task("requests", total=n)
            for i in range(n):
                out = tmp / f"out-{i}.mp4"
                base = me.memory_info().rss
                with PeakRss(os.getpid()) as peak:
                    rec = send_request(client, f"http://127.0.0.1:{port}/v1/videos/sync",
                                       index=i, kind="measured", fields=fields, files=files,
                                       out_path=out, rel_path=out.name, timeout_s=600)
                assert rec.ok, rec.error
                time.sleep(0.2)
                handled = {m.group(1): float(m.group(2))
                           for m in HANDLED.finditer(log.read_text())}
                server_s = handled[str(rec.request_id)]
                wall = float(rec.client_wall_s or 0)
                rows.append({"client_wall_s": wall, "server_handling_s": server_s,
                             "overhead_s": wall - server_s,
                             "overhead_pct": 100 * (wall - server_s) / wall,
                             "bytes": rec.output_bytes,
                             "extra_rss_mb": (peak.peak - base) / 2**20})
                out.unlink()
                prog.advance(task)
    finally:
        srv.terminate()
        srv.wait(30)
    return {"requests": rows}


def measure_screen_rss(tmp: Path, response_mb: float) -> float:
    """Peak RSS (MiB) of a whole ``campaign-bot screen`` process (control-only, one session,
    ``response_mb`` MP4s) against the stand-in."""
    from runners.signer import generate_key

    key = tmp / "bench.key"
    generate_key(key)
    env = dict(os.environ)
    env["CAMPAIGN_BOT_SERVER_CMD"] = (f"{sys.executable} -m runners.standin "
                                      f"--response-mb {response_mb}")
    cmd = [sys.executable, "-c", "from evidence.cli import main; main()", "screen",
           "--campaign", str(CAMPAIGN), "--control-only", "--sessions", "1", "--track",
           "1s-lossless", "--out", str(tmp / "bundle"), "--signing-key", str(key),
           "--device-tool", "none", "--health-poll-s", "0.05"]
    proc = subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)
    with PeakRss(proc.pid) as peak:
        proc.wait(300)
    if proc.returncode != 0:
        raise SystemExit(f"screen exited {proc.returncode}")
    return peak.peak / 2**20


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--response-mb", type=float, default=50.0)
    ap.add_argument("--gen-seconds", type=float, default=5.0,
                    help="stand-in generation seconds per request (the request time)")
    ap.add_argument("--requests", type=int, default=5)
    a = ap.parse_args()
    console = Console()
    tmp = Path(tempfile.mkdtemp(prefix="runner-overhead-"))
    try:
        res = measure_requests(tmp, a.response_mb, a.gen_seconds, a.requests, console)
        screen_peak = measure_screen_rss(tmp, a.response_mb)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    rows = res["requests"]
    assert isinstance(rows, list)
    t = Table(title=f"runner overhead, {a.response_mb:g} MB response, stand-in generation "
                    f"{a.gen_seconds:g} s", title_justify="left")
    for c in ("request", "client wall s", "server handling s", "overhead s", "overhead %",
              "extra RSS MiB"):
        t.add_column(c, justify="right")
    for i, r in enumerate(rows):
        t.add_row(str(i), f"{r['client_wall_s']:.4f}", f"{r['server_handling_s']:.4f}",
                  f"{r['overhead_s']:.4f}", f"{r['overhead_pct']:.3f}",
                  f"{r['extra_rss_mb']:.1f}")
    console.print(t)
    med_over = statistics.median(r["overhead_s"] for r in rows)
    med_pct = statistics.median(r["overhead_pct"] for r in rows)
    max_rss = max(r["extra_rss_mb"] for r in rows)
    console.print(f"median overhead {med_over * 1000:.1f} ms = {med_pct:.3f} % of the request "
                  f"time (target < 1 %); {100 * med_over / 166.572:.4f} % of campaign #320's "
                  f"166.572 s control request")
    console.print(f"extra RSS while streaming: max {max_rss:.1f} MiB; peak RSS of a whole "
                  f"`campaign-bot screen` process: {screen_peak:.1f} MiB (target < 200 MB)")
    ok = med_pct < 1.0 and max_rss < 200 and screen_peak < 200
    out = ROOT / "benchmarks" / "out"
    out.mkdir(parents=True, exist_ok=True)
    (out / "runner_overhead.json").write_text(json.dumps({
        "response_mb": a.response_mb, "gen_seconds": a.gen_seconds, "requests": rows,
        "median_overhead_s": med_over, "median_overhead_pct": med_pct,
        "max_extra_rss_mb": max_rss, "screen_peak_rss_mb": screen_peak,
        "targets_met": ok}, indent=2) + "\n")
    console.print("targets met" if ok else "[red]targets NOT met[/]")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
