"""Several ``campaign-bot serve`` replicas on one PostgreSQL database: concurrent claiming
with leases (no delivery processed twice unless its replica was killed mid-handler), the
per-installation order kept across replicas, ``kill -9`` of a replica and lease expiry; the
scheduler's leader lock with failover; ``serve`` refusing an unmigrated schema."""

from __future__ import annotations

import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import select
from webhook_helpers import ROOT, SECRET, database_url, free_port, headers_for, wait_for

from bot import database
from bot.inbox import store
from bot.scheduler import Job, start_scheduler

pytestmark = pytest.mark.postgres

N = 240
INSTALLATIONS = 6
LEASE_S = 3


def _env(url: str, port: int, log: Path, *, lease_s: int = LEASE_S,
         block_from: int | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        CAMPAIGN_BOT_WEBHOOK_SECRET=SECRET, CAMPAIGN_BOT_PORT=str(port),
        CAMPAIGN_BOT_DATABASE_URL=url, CAMPAIGN_BOT_EXTRA_HANDLERS="crash_handler",
        CAMPAIGN_BOT_WORKER_CONCURRENCY="4", CAMPAIGN_BOT_LEASE_S=str(lease_s),
        PYTHONPATH=str(ROOT / "tests" / "support"), CRASH_LOG=str(log), CRASH_SLEEP_S="0.02",
    )
    env.pop("CRASH_BLOCK_FROM", None)
    if block_from is not None:
        env["CRASH_BLOCK_FROM"] = str(block_from)
    return env


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _start(url: str, tmp: Path, log: Path, **kw: Any) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    out = (tmp / f"serve-{port}.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
        cwd=tmp, env=_env(url, port, log, **kw), stdout=out, stderr=subprocess.STDOUT)

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}: "
                        f"{(tmp / f'serve-{port}.log').read_text()[-3000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 40, f"replica on port {port}")
    return proc, port


def test_serve_refuses_an_unmigrated_postgresql_schema(tmp_path: Path) -> None:
    with database_url("postgres", tmp_path) as url:
        env = _env(url, free_port(), tmp_path / "log")
        r = _cli("serve", env=env, cwd=tmp_path)
        assert r.returncode == 2
        assert "run `campaign-bot migrate`" in r.stderr
        assert "(none: empty database)" in r.stderr
        r = _cli("migrate", env=env, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert f"database at {database.head_revision()}" in r.stdout


def test_three_replicas_with_one_killed_process_each_delivery_once_in_order(
    tmp_path: Path
) -> None:
    log = tmp_path / "processed.log"
    with database_url("postgres", tmp_path) as url:
        assert _cli("migrate", env=_env(url, 1, log), cwd=tmp_path).returncode == 0
        engine = database.make_engine(url)
        replicas = [_start(url, tmp_path, log) for _ in range(3)]
        ids = [f"r-{i:04d}" for i in range(N)]
        bodies = {d: json.dumps({"n": i, "installation": {"id": i % INSTALLATIONS}}).encode()
                  for i, d in enumerate(ids)}
        try:
            # every replica receives a share, concurrently
            def post(k: int) -> None:
                port = replicas[k][1]
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
                    for d in ids[k::3]:
                        r = c.post("/webhook", content=bodies[d],
                                   headers=headers_for(bodies[d], "crash_test", d))
                        assert r.status_code == 202, r.text

            threads = [threading.Thread(target=post, args=(k,)) for k in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            # kill -9 one replica while it is working (its claims must expire, not be lost)
            wait_for(lambda: store.status_counts(engine).get("done", 0) >= N // 4, 60,
                     "a quarter processed")
            victim = replicas[0][0]
            victim.send_signal(signal.SIGKILL)
            victim.wait(10)
            wait_for(lambda: store.status_counts(engine) == {"done": N}, 120, "all done")
        finally:
            for p, _ in replicas:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p, _ in replicas:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
        with engine.connect() as conn:
            attempts = dict(conn.execute(select(store.Delivery.delivery_id,
                                                store.Delivery.attempts)).all())
        engine.dispose()
    lines = [x.split() for x in log.read_text().splitlines()]
    ends = Counter(d for kind, d in lines if kind == "end")
    assert set(ends) == set(ids)
    twice = {d for d, n in ends.items() if n > 1}
    # only a delivery whose replica was killed after its handler ended (before the outcome
    # was committed) may have run twice; it was then claimed again (a second attempt)
    assert all(attempts[d] >= 2 for d in twice)
    assert len(twice) <= 4, twice  # at most the killed replica's in-flight deliveries
    reclaimed = {d for d, a in attempts.items() if a >= 2}
    assert reclaimed, "the killed replica held no claim: the lease path was not exercised"
    # per installation: the first end of each delivery comes in arrival order, and no
    # delivery of an installation starts before the previous one ended
    by_inst: dict[int, list[int]] = defaultdict(list)
    seen: set[str] = set()
    for kind, d in lines:
        if kind == "end" and d not in seen:
            seen.add(d)
            n = int(d.split("-")[1])
            by_inst[n % INSTALLATIONS].append(n)
    for inst, ns in by_inst.items():
        assert ns == sorted(ns), f"installation {inst} out of order"
    running: dict[int, str] = {}
    for kind, d in lines:
        inst = int(d.split("-")[1]) % INSTALLATIONS
        if kind == "start":
            other = running.get(inst)
            assert other is None or other == d or other in reclaimed, (
                f"{d} started while {other} of installation {inst} ran")
            running[inst] = d
        elif running.get(inst) == d:
            running.pop(inst)


def test_jobs_run_on_one_leader_and_fail_over_when_it_is_killed(tmp_path: Path) -> None:
    with database_url("postgres", tmp_path) as url:
        engines = [database.make_engine(url) for _ in range(2)]
        leaders = [database.JobLeader(e) for e in engines]
        runs: list[int] = []
        jobs = [[Job("count", 0.2, functools.partial(runs.append, k), "count runs")]
                for k in range(2)]
        schedulers = [start_scheduler(jobs[k], leaders[k]) for k in range(2)]
        try:
            wait_for(lambda: len(runs) >= 6, 10, "job runs")
            assert len(set(runs)) == 1, "both replicas ran the job"
            first = runs[0]
            leaders[first].close()  # the leader goes away (as on SIGTERM)
            schedulers[first].shutdown(wait=False)
            n = len(runs)
            wait_for(lambda: len(runs) >= n + 3 and runs[-1] == 1 - first, 10, "failover")
        finally:
            for s in schedulers:
                if s.running:
                    s.shutdown(wait=False)
            for ld in leaders:
                ld.close()
        # kill -9 of the leading process: its session ends and the lock with it
        holder = subprocess.Popen([sys.executable, "-c", (
            "import sys, time; sys.path.insert(0, sys.argv[2])\n"
            "from bot import database\n"
            "ld = database.JobLeader(database.make_engine(sys.argv[1]))\n"
            "assert ld(); print('leading', flush=True); time.sleep(600)\n"), url, str(ROOT)],
            stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout is not None and holder.stdout.readline().strip() == "leading"
            mine = database.JobLeader(engines[0])
            assert not mine()
            holder.send_signal(signal.SIGKILL)
            holder.wait(10)
            wait_for(mine, 15, "the lock after kill -9 of its holder")
            mine.close()
        finally:
            if holder.poll() is None:
                holder.kill()
            for e in engines:
                e.dispose()


def test_an_expired_lease_is_taken_over_and_the_late_replica_cannot_overwrite(
    tmp_path: Path
) -> None:
    with database_url("postgres", tmp_path) as url:
        engine = database.make_engine(url)
        database.migrate(engine)
        now = store.utcnow()
        with engine.begin() as conn:
            store.insert_deliveries(conn, [store.NewDelivery(
                f"d{i}", "crash_test", None, None, "installation:1", {}, b"{}", now)
                for i in range(2)])
        [head] = store.queue_heads(engine)
        a = store.claim(engine, head.seq, replica="host:1", lease_s=0.5)
        assert a is not None and a.claimed_by == "host:1"
        assert store.claim(engine, head.seq + 1, replica="host:2") is None  # order
        assert store.reclaim_expired(engine) == 0
        time.sleep(0.7)
        assert store.heartbeat(engine, "host:2", [head.seq], 30) == 0  # not its claim
        assert store.reclaim_expired(engine) == 1
        b = store.claim(engine, head.seq, replica="host:2", lease_s=30)
        assert b is not None and b.attempts == 2
        # the first replica wakes up late: its outcome is refused, the new claim stands
        assert store.finish(engine, head.seq, "done", replica="host:1") is False
        assert store.heartbeat(engine, "host:2", [head.seq], 30) == 1
        assert store.finish(engine, head.seq, "done", replica="host:2") is True
        assert store.release(engine, "host:2") == 0
        engine.dispose()


def test_sigterm_hands_unfinished_claims_back_at_once_and_exits_in_bounded_time(
    tmp_path: Path
) -> None:
    log = tmp_path / "processed.log"
    lease = 120  # far longer than the test: only a release, not an expiry, frees the claims
    with database_url("postgres", tmp_path) as url:
        assert _cli("migrate", env=_env(url, 1, log), cwd=tmp_path).returncode == 0
        engine = database.make_engine(url)
        old, port = _start(url, tmp_path, log, lease_s=lease, block_from=0)  # handlers hang
        new = None
        try:
            with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
                for i in range(3):
                    b = json.dumps({"n": i, "installation": {"id": i}}).encode()
                    assert c.post("/webhook", content=b, headers=headers_for(
                        b, "crash_test", f"t-{i}")).status_code == 202
            wait_for(lambda: store.status_counts(engine) == {"processing": 3}, 30, "claimed")
            new, _ = _start(url, tmp_path, log, lease_s=lease)  # the next release
            t0 = time.monotonic()
            old.send_signal(signal.SIGTERM)
            old.wait(40)  # bounded: uvicorn's 10 s, the worker's 10 s grace, cancel, release
            wait_for(lambda: store.status_counts(engine) == {"done": 3}, 30,
                     "the new replica to finish the handed-back deliveries")
            taken_over = time.monotonic() - t0
        finally:
            for p in (old, new):
                if p is not None and p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(40)
        engine.dispose()
    assert taken_over < lease
    out = "".join(f.read_text() for f in tmp_path.glob("serve-*.log"))
    assert "handed 3 unfinished deliveries back to the queue" in out
    assert "Application shutdown complete" in out
    ends = Counter(x.split()[1] for x in log.read_text().splitlines() if x.startswith("end"))
    assert ends == Counter({"t-0": 1, "t-1": 1, "t-2": 1})
