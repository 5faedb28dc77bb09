"""Webhook acknowledgement latency under a fixed delivery rate.

Sends signed deliveries at a fixed rate (open loop: request i is due at ``t0 + i/rate``
whether or not earlier ones were answered) for ``--duration`` seconds, first against a bare
FastAPI endpoint that only reads the body and returns 202 (the floor), then against
``campaign-bot serve`` with its default SQLite database, both under uvicorn on 127.0.0.1 in
their own process.  Latency is measured from the moment a request was *due* to the last byte
of its response, so a client or server that falls behind is charged for it (no coordinated
omission).  Both servers stay up for the whole run and the load alternates between them in
``--slices`` blocks, so background load on a shared machine falls on both alike.

Reported per target: requests sent, acknowledged (2xx), errors/timeouts (GitHub's limit is
10 s), p50/p90/p99/max acknowledgement latency, and for ``serve`` the deliveries *lost*
(acknowledged 202 but not in the database) and how long the worker took to finish them.

Targets: zero lost at 200 deliveries/s, p99 < 25 ms, p99 within 2x the bare p99.

    python benchmarks/webhook_load.py [--rate 200] [--duration 60] [--json-out FILE]

Exit status: 0 all targets met, 1 a target missed, 2 bad usage or a server did not start.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = ROOT / "tests" / "fixtures" / "github" / "webhooks" / "issue_comment"
SECRET = "benchmark-secret"
EVENT = "benchmark_load"  # no handler is registered for it: the worker marks it done
TIMEOUT_S = 10.0  # GitHub counts a delivery failed after 10 s (GITHUB.md §2.3)
P99_TARGET_MS = 25.0
BARE_FACTOR = 2.0


# -- the bare floor server ---------------------------------------------------------------------
def bare_app() -> FastAPI:
    """A FastAPI app whose POST /webhook reads the body and answers 202."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)

    @app.post("/webhook")
    async def webhook(request: Request) -> JSONResponse:
        await request.body()
        return JSONResponse({"status": "queued"}, status_code=202)

    @app.get("/healthz")
    async def healthz() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    return app


def run_bare(port: int) -> None:
    import uvicorn

    uvicorn.run(bare_app(), host="127.0.0.1", port=port, access_log=False, log_level="warning")


# -- a minimal HTTP/1.1 keep-alive client ----------------------------------------------------
class Conn:
    def __init__(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        self.r, self.w = r, w

    async def request(self, head: bytes, body: bytes) -> int:
        self.w.write(head + body)
        await self.w.drain()
        status_line = await self.r.readline()
        if not status_line:
            raise ConnectionError("closed")
        status = int(status_line.split()[1])
        length, close = 0, False
        while True:
            line = await self.r.readline()
            if line in (b"\r\n", b""):
                break
            k, _, v = line.decode("latin-1").partition(":")
            k = k.strip().lower()
            if k == "content-length":
                length = int(v)
            elif k == "connection" and v.strip().lower() == "close":
                close = True
        if length:
            await self.r.readexactly(length)
        if close:
            raise _Closed(status)
        return status


class _Closed(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


@dataclass
class Result:
    name: str
    sent: int = 0
    ok: int = 0
    errors: int = 0
    latencies_ms: list[float] = field(default_factory=list)
    acked_ids: list[str] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    lost: int | None = None
    processed: int | None = None
    drain_s: float | None = None
    wall_s: float = 0.0

    def add(self, o: Result) -> None:
        self.sent += o.sent
        self.ok += o.ok
        self.errors += o.errors
        self.latencies_ms += o.latencies_ms
        self.acked_ids += o.acked_ids
        for k, v in o.statuses.items():
            self.statuses[k] = self.statuses.get(k, 0) + v
        self.wall_s += o.wall_s

    def pct(self, q: float) -> float:
        xs = sorted(self.latencies_ms)
        if not xs:
            return float("nan")
        return xs[min(len(xs) - 1, int(q * len(xs)))]


async def load(name: str, port: int, rate: float, duration: float, body: bytes,
               run_id: str) -> Result:
    import hashlib
    import hmac

    res = Result(name)
    n = int(rate * duration)
    pool: list[Conn] = []
    sig_key = SECRET.encode()

    async def one(i: int, due: float) -> None:
        did = f"{run_id}-{i:06d}"
        sig = "sha256=" + hmac.new(sig_key, body, hashlib.sha256).hexdigest()
        head = (
            f"POST /webhook HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"User-Agent: GitHub-Hookshot/benchmark\r\nX-GitHub-Event: {EVENT}\r\n"
            f"X-GitHub-Delivery: {did}\r\nX-Hub-Signature-256: {sig}\r\n\r\n"
        ).encode()
        conn = pool.pop() if pool else None
        status = None
        try:
            async with asyncio.timeout(TIMEOUT_S):
                for fresh in (False, True):
                    if conn is None:
                        r, w = await asyncio.open_connection("127.0.0.1", port)
                        conn, fresh = Conn(r, w), True
                    try:
                        status = await conn.request(head, body)
                        break
                    except _Closed as c:
                        status, conn = c.status, None
                        break
                    except (ConnectionError, asyncio.IncompleteReadError, OSError):
                        # an idle keep-alive connection the server had closed: like any
                        # HTTP client, retry once on a new connection
                        conn.w.close()
                        conn = None
                        if fresh:
                            raise
        except (TimeoutError, OSError, ConnectionError, ValueError, IndexError,
                asyncio.IncompleteReadError):
            res.errors += 1
            if conn is not None:
                conn.w.close()
            return
        assert status is not None
        lat = (time.perf_counter() - due) * 1000
        res.statuses[status] = res.statuses.get(status, 0) + 1
        if 200 <= status < 300:
            res.ok += 1
            res.latencies_ms.append(lat)
            res.acked_ids.append(did)
        else:
            res.errors += 1
        if conn is not None:
            pool.append(conn)

    tasks = []
    t0 = time.perf_counter() + 0.05
    for i in range(n):
        due = t0 + i / rate
        delay = due - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, due)))
        res.sent += 1
    await asyncio.gather(*tasks)
    res.wall_s = time.perf_counter() - t0
    for c in pool:
        c.w.close()
    return res


# -- process management -------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_up(port: int, proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited with {proc.returncode}")
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise SystemExit("server did not answer /healthz")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def count_stored(db: Path, ids: list[str]) -> tuple[int, int]:
    """(acknowledged ids present in the database, of those how many are done)."""
    con = sqlite3.connect(db, timeout=30)
    try:
        got = dict(con.execute("SELECT delivery_id, status FROM deliveries").fetchall())
    finally:
        con.close()
    present = [i for i in ids if i in got]
    return len(present), sum(1 for i in present if got[i] == "done")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="deliveries per second")
    ap.add_argument("--duration", type=float, default=60.0, help="seconds per target")
    ap.add_argument("--slices", type=int, default=6,
                    help="alternate the targets this many times (each gets duration/slices s)")
    ap.add_argument("--json-out", type=Path, help="write the figures as JSON here")
    ap.add_argument("--serve-env", action="append", default=[], metavar="NAME=VALUE",
                    help="extra environment for campaign-bot serve (repeatable), e.g. "
                         "CAMPAIGN_BOT_SQLITE_SYNCHRONOUS=NORMAL")
    ap.add_argument("--variant-env", action="append", default=[], metavar="NAME=VALUE",
                    help="also load a second campaign-bot serve with this extra environment "
                         "(repeatable), alternating with the others")
    ap.add_argument("--bare-server", type=int, metavar="PORT", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.bare_server:
        run_bare(a.bare_server)
        return 0
    if a.rate <= 0 or a.duration <= 0 or a.slices < 1:
        print("--rate, --duration and --slices must be positive", file=sys.stderr)
        return 2

    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    # SIGTERM ends the run through the finally below, so the servers are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    console = Console() if sys.stdout.isatty() else Console(width=150)
    body = sorted(FIXTURE.glob("*.json"))[0].read_bytes()
    names = ["bare FastAPI 202", "campaign-bot serve"]
    if a.variant_env:
        names.append("serve " + " ".join(a.variant_env))
    results = {n: Result(n) for n in names}
    slice_s = a.duration / a.slices
    with tempfile.TemporaryDirectory(prefix="webhook-load-") as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
        cmds = {
            names[0]: ([sys.executable, str(Path(__file__).resolve()), "--bare-server",
                        "{port}"], {}),
            names[1]: ([sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
                       {"CAMPAIGN_BOT_WEBHOOK_SECRET": SECRET, "CAMPAIGN_BOT_LOG_LEVEL": "WARNING",
                        **dict(kv.split("=", 1) for kv in a.serve_env)}),
        }
        if a.variant_env:
            variant = dict(kv.split("=", 1) for kv in a.variant_env)
            cmds[names[2]] = (cmds[names[1]][0], {**cmds[names[1]][1], **variant})
        procs: dict[str, tuple[subprocess.Popen[bytes], int]] = {}
        try:
            for name, (cmd, extra) in cmds.items():
                port = free_port()
                cmd = [c.replace("{port}", str(port)) for c in cmd]
                cwd = work / str(len(procs))
                cwd.mkdir()
                proc = subprocess.Popen(cmd, cwd=cwd,
                                        env={**env, **extra, "CAMPAIGN_BOT_PORT": str(port)},
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                procs[name] = (proc, port)
                wait_up(port, proc)
            # Both servers stay up; the load alternates between them in slices so that
            # background load on the machine falls on both alike.
            with Progress(TextColumn("{task.description}"), BarColumn(),
                          TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                          console=console) as progress:
                tasks = {n: progress.add_task(n, total=int(a.rate * slice_s) * a.slices)
                         for n in names}
                for k in range(a.slices):
                    for name in names:
                        _proc, port = procs[name]
                        run_id = f"bench-{uuid.uuid4().hex[:8]}-{k}"
                        r = asyncio.run(load(name, port, a.rate, slice_s, body, run_id))
                        results[name].add(r)
                        progress.update(tasks[name], completed=results[name].sent)
            for i, name in enumerate(names[1:], start=1):
                serve = results[name]
                db = work / str(i) / "campaign-bot.sqlite3"
                t0 = time.monotonic()
                present, done = count_stored(db, serve.acked_ids)
                while done < present and time.monotonic() - t0 < 120:
                    time.sleep(0.2)
                    present, done = count_stored(db, serve.acked_ids)
                serve.drain_s = time.monotonic() - t0
                serve.lost = len(serve.acked_ids) - present
                serve.processed = done
        finally:
            for proc, _port in procs.values():
                stop(proc)

    bare, serve = results[names[0]], results[names[1]]
    console.print(f"machine load average (1 min) at the end: {os.getloadavg()[0]:.2f} on "
                  f"{os.cpu_count()} CPUs")
    t = Table(title=f"webhook ack latency, {a.rate:g} deliveries/s for {a.duration:g} s "
                    f"({len(body)} B body), latency from due time to response")
    for col in ("target", "sent", "2xx", "errors", "lost", "processed", "p50 ms", "p90 ms",
                "p99 ms", "max ms", "drain s"):
        t.add_column(col, justify="right" if col != "target" else "left")
    for r in results.values():
        t.add_row(r.name, str(r.sent), str(r.ok), str(r.errors),
                  "-" if r.lost is None else str(r.lost),
                  "-" if r.processed is None else str(r.processed), f"{r.pct(0.5):.2f}",
                  f"{r.pct(0.9):.2f}", f"{r.pct(0.99):.2f}",
                  f"{max(r.latencies_ms, default=float('nan')):.2f}",
                  "-" if r.drain_s is None else f"{r.drain_s:.1f}")
    console.print(t)
    checks = [
        ("zero lost (acked but not stored) and zero errors",
         serve.lost == 0 and serve.errors == 0 and serve.ok == serve.sent,
         f"lost {serve.lost}, errors {serve.errors}"),
        (f"p99 < {P99_TARGET_MS:g} ms", serve.pct(0.99) < P99_TARGET_MS,
         f"{serve.pct(0.99):.2f} ms"),
        (f"p99 within {BARE_FACTOR:g}x bare p99", serve.pct(0.99) <= BARE_FACTOR * bare.pct(0.99),
         f"{serve.pct(0.99):.2f} vs {BARE_FACTOR:g} x {bare.pct(0.99):.2f} ms"),
    ]
    ct = Table(title="targets")
    ct.add_column("target")
    ct.add_column("met")
    ct.add_column("figure")
    for label, ok, fig in checks:
        ct.add_row(label, "[green]yes[/]" if ok else "[red]NO[/]", fig)
    console.print(ct)
    if a.json_out:
        a.json_out.parent.mkdir(parents=True, exist_ok=True)
        a.json_out.write_text(json.dumps({
            "rate": a.rate, "duration_s": a.duration, "body_bytes": len(body),
            "targets": [{
                "name": r.name, "sent": r.sent, "ok": r.ok, "errors": r.errors,
                "statuses": r.statuses, "lost": r.lost, "processed": r.processed,
                "drain_s": r.drain_s,
                "p50_ms": r.pct(0.5), "p90_ms": r.pct(0.9), "p99_ms": r.pct(0.99),
                "max_ms": max(r.latencies_ms, default=None),
            } for r in results.values()],
            "checks": [{"target": lbl, "met": ok, "figure": fig} for lbl, ok, fig in checks],
        }, indent=2))
    return 0 if all(ok for _, ok, _ in checks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
