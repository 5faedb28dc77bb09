"""Acknowledgement latency and processing throughput of one ``campaign-bot serve`` against
several replicas on one PostgreSQL database, in one run.

For each configuration (``--replicas 1,3``) a fresh PostgreSQL schema is migrated, the
replicas are started (``serve``, worker process, ``CAMPAIGN_BOT_WORKER_CONCURRENCY=4``), and
signed deliveries of ``--installations`` installations are sent at a fixed rate (open loop:
delivery i is due at ``t0 + i/rate``; latency counts from its due time, so a server that falls
behind is charged for it), spread round-robin over the replicas as a load balancer would.
Every delivery runs a handler that takes ``--work-ms`` (tests/support/crash_handler.py with
``CRASH_SLEEP_S``), standing in for the GitHub calls a real handler makes.

Reported per configuration: deliveries sent and acknowledged, p50/p99/max acknowledgement
latency, the time from the first send until every delivery is ``done``, and the throughput
(deliveries per second over that time).  Per-installation order limits the throughput to
``installations / work`` at best, whatever the replica count.

    python benchmarks/replicas.py [--rate 50] [--count 1000] [--replicas 1,3] [--json-out F]

Needs PostgreSQL (``--pg postgresql://postgres@127.0.0.1:5432/test``).  Exit 0 when every
configuration acknowledged and finished every delivery, 1 otherwise, 2 when a replica did
not start.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import httpx
from rich.console import Console
from rich.progress import Progress
from rich.table import Table
from sqlalchemy import text

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bot import database  # noqa: E402
from bot.inbox import store  # noqa: E402

SECRET = "benchmark-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start(url: str, work_s: float, tmp: Path, log: Path) -> tuple[subprocess.Popen[bytes], int]:
    """One ``serve`` replica; returns it and its port once ``/healthz`` answers 200."""
    port = free_port()
    env = dict(os.environ)
    env.update(CAMPAIGN_BOT_WEBHOOK_SECRET=SECRET, CAMPAIGN_BOT_PORT=str(port),
               CAMPAIGN_BOT_DATABASE_URL=url, CAMPAIGN_BOT_EXTRA_HANDLERS="crash_handler",
               CAMPAIGN_BOT_WORKER_CONCURRENCY="4", CAMPAIGN_BOT_LOG_LEVEL="WARNING",
               PYTHONPATH=str(ROOT / "tests" / "support"), CRASH_LOG=str(log),
               CRASH_SLEEP_S=str(work_s))
    env.pop("CRASH_BLOCK_FROM", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evidence.cli import main; main()", "serve"], cwd=tmp,
        env=env, stdout=(tmp / f"serve-{port}.log").open("ab"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 40
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError((tmp / f"serve-{port}.log").read_text()[-2000:])
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return proc, port
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError(f"replica on port {port} did not answer /healthz in 40 s")


async def send(ports: list[int], rate: float, count: int, installations: int,
               progress: Progress) -> tuple[list[float], int]:
    """Send ``count`` deliveries at ``rate``/s; returns (latencies in seconds, acknowledged)."""
    lat: list[float] = []
    acked = 0
    task = progress.add_task("sending", total=count)
    clients = [httpx.AsyncClient(base_url=f"http://127.0.0.1:{p}", timeout=10) for p in ports]
    t0 = time.monotonic() + 0.2

    async def one(i: int) -> None:
        nonlocal acked
        due = t0 + i / rate
        await asyncio.sleep(max(0.0, due - time.monotonic()))
        body = json.dumps({"n": i, "installation": {"id": i % installations}}).encode()
        sig = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        headers = {"X-GitHub-Event": "crash_test", "X-GitHub-Delivery": str(uuid.uuid4()),
                   "X-Hub-Signature-256": f"sha256={sig}", "Content-Type": "application/json"}
        try:
            r = await clients[i % len(clients)].post("/webhook", content=body, headers=headers)
            if 200 <= r.status_code < 300:
                acked += 1
        except httpx.HTTPError:
            pass
        lat.append(time.monotonic() - due)
        progress.advance(task)

    await asyncio.gather(*(one(i) for i in range(count)))
    for c in clients:
        await c.aclose()
    return lat, acked


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000 if s else float("nan")


def run_config(pg: str, n_replicas: int, a: argparse.Namespace, progress: Progress) -> dict:
    """One configuration on a fresh schema; returns its figures."""
    schema = "bench_" + uuid.uuid4().hex[:10]
    admin = database.make_engine(pg)
    with admin.begin() as c:
        c.execute(text(f'CREATE SCHEMA "{schema}"'))
    url = f"{pg}?options=-csearch_path%3D{schema}"
    engine = database.make_engine(url)
    database.migrate(engine)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        with tempfile.TemporaryDirectory(prefix="campaign-bot-bench-") as d:
            tmp = Path(d)
            ports = []
            for _ in range(n_replicas):
                p, port = start(url, a.work_ms / 1000, tmp, tmp / "processed.log")
                procs.append(p)
                ports.append(port)
            t0 = time.monotonic()
            lat, acked = asyncio.run(send(ports, a.rate, a.count, a.installations, progress))
            task = progress.add_task("processing", total=a.count)
            deadline = time.monotonic() + 300
            done = 0
            while time.monotonic() < deadline:
                done = store.status_counts(engine).get("done", 0)
                progress.update(task, completed=done)
                if done >= acked:
                    break
                time.sleep(0.2)
            elapsed = time.monotonic() - t0
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(40)
            except subprocess.TimeoutExpired:
                p.kill()
        engine.dispose()
        with admin.begin() as c:
            c.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
        admin.dispose()
    return {"replicas": n_replicas, "sent": a.count, "acknowledged": acked, "done": done,
            "p50_ms": round(pct(lat, 0.50), 2), "p99_ms": round(pct(lat, 0.99), 2),
            "max_ms": round(max(lat) * 1000, 2), "all_done_s": round(elapsed, 2),
            "throughput_per_s": round(done / elapsed, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--rate", type=float, default=50.0, help="deliveries per second")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--installations", type=int, default=12)
    ap.add_argument("--work-ms", type=float, default=50.0, help="handler time per delivery")
    ap.add_argument("--replicas", default="1,3")
    ap.add_argument("--json-out", type=Path)
    a = ap.parse_args()
    try:
        configs = [int(x) for x in a.replicas.split(",") if x.strip()]
    except ValueError:
        print(f"error: --replicas: not a comma-separated list of counts: {a.replicas!r}",
              file=sys.stderr)
        return 2
    rows = []
    with Progress(transient=True) as progress:
        for n in configs:
            try:
                rows.append(run_config(a.pg, n, a, progress))
            except RuntimeError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
    t = Table(title=f"{a.count} deliveries at {a.rate:g}/s, {a.installations} installations, "
                    f"{a.work_ms:g} ms handler")
    for col in ("replicas", "acknowledged", "p50 ms", "p99 ms", "max ms", "all done s",
                "throughput /s"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(str(r["replicas"]), f"{r['acknowledged']}/{r['sent']}", str(r["p50_ms"]),
                  str(r["p99_ms"]), str(r["max_ms"]), str(r["all_done_s"]),
                  str(r["throughput_per_s"]))
    Console().print(t)
    if a.json_out:
        a.json_out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()},
                                          "rows": rows}, indent=2) + "\n")
    return 0 if all(r["acknowledged"] == r["sent"] == r["done"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
