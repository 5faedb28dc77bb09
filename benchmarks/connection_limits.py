"""Benchmark: what connection exhaustion costs ``campaign-bot serve`` (docs/security.md,
limits) -- memory for concurrent unsigned large bodies, ``/healthz`` latency and log growth
under a flood of stalled connections.

``serve`` runs as in ``tests/test_serve_connection_limits.py``: RLIMIT_NOFILE 256, receiving
only (no worker), default limits unless the options below change them.

* ``bodies``: N clients at once each POST a 25 MB body with a wrong signature, sending it as
  fast as they can; the figure is the server's peak RSS (``VmHWM`` from ``/proc/PID/status``)
  above its RSS before, and the answers they got.
* ``stalled``: :class:`Attack` keeps 400 stalled connections open from 127.0.0.2, reopened as
  soon as the server closes them; meanwhile ``/healthz`` is probed every 0.3 s for
  ``--seconds``; the figures are its latency (p50, max), failures and the log bytes written.

Usage::

    .venv/bin/python benchmarks/connection_limits.py [--clients 12] [--seconds 20]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from test_serve_connection_limits import Attack, start_serve  # noqa: E402
from webhook_helpers import free_port  # noqa: E402

MB = 1_000_000


def _status(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def upload(port: int, size: int, out: list[str]) -> None:
    """POST ``size`` bytes to /webhook with a wrong signature; append the status line."""
    head = (f"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256=00\r\n"
            f"X-GitHub-Event: issues\r\nX-GitHub-Delivery: d\r\n"
            f"Content-Length: {size}\r\n\r\n").encode()
    chunk = b"x" * (1 << 20)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
            s.sendall(head)
            sent = 0
            try:
                while sent < size:
                    sent += s.send(chunk[: size - sent])
            except OSError:
                pass
            answer = s.recv(200)
            out.append(answer.split(b"\r\n", 1)[0].decode() or "closed")
    except OSError as exc:
        out.append(type(exc).__name__)


def bodies(clients: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        proc = start_serve(Path(d), port)
        try:
            time.sleep(1)
            before = _status(proc.pid, "VmRSS")
            answers: list[str] = []
            threads = [threading.Thread(target=upload, args=(port, 25 * MB, answers))
                       for _ in range(clients)]
            t0 = time.monotonic()
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)
            peak = _status(proc.pid, "VmHWM")
            print(f"bodies: {clients} x 25 MB unsigned at once: peak RSS +"
                  f"{(peak - before) / (1 << 20):.0f} MiB over {before / (1 << 20):.0f} MiB, "
                  f"{time.monotonic() - t0:.1f} s; answers "
                  f"{ {a: answers.count(a) for a in sorted(set(answers))} }")
        finally:
            proc.terminate()
            proc.wait(20)


def stalled(seconds: float) -> None:
    with tempfile.TemporaryDirectory() as d:
        port = free_port()
        proc = start_serve(Path(d), port)
        log = Path(d) / "serve.log"
        try:
            size0 = log.stat().st_size
            lat: list[float] = []
            failed = 0
            with Attack(port, 400) as attack:
                time.sleep(2)
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    t0 = time.monotonic()
                    try:
                        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=10,
                                  headers={"Connection": "close"}).raise_for_status()
                        lat.append(time.monotonic() - t0)
                    except httpx.HTTPError:
                        failed += 1
                    time.sleep(0.3)
                closed = attack.closed_by_server
            grown = log.stat().st_size - size0
            p50 = statistics.median(lat) if lat else float("nan")
            print(f"stalled: 400 connections, RLIMIT_NOFILE 256, {seconds:g} s: /healthz "
                  f"{len(lat)} answered, {failed} failed (10 s timeout), p50 {p50 * 1000:.0f} ms, "
                  f"max {max(lat, default=float('nan')) * 1000:.0f} ms; attack connections "
                  f"closed by the server {closed}; log +{grown} bytes")
        finally:
            proc.terminate()
            proc.wait(20)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", type=int, default=12)
    ap.add_argument("--seconds", type=float, default=20)
    a = ap.parse_args()
    print(f"load average {os.getloadavg()[0]:.1f}")
    bodies(a.clients)
    stalled(a.seconds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
