"""Several ``campaign-bot serve`` replicas on one PostgreSQL database: under load with
``kill -9`` of a replica every 10 s, a rolling restart and a downtime (every delivery written
to GitHub once, in order per installation, missed ones redelivered; the scheduled job on one
replica at a time); lease expiry and takeover; the scheduler's leader lock with failover;
SIGTERM handing claims back; ``serve`` refusing an unmigrated schema."""

from __future__ import annotations

import functools
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from webhook_helpers import ROOT, SECRET, database_url, free_port, headers_for, wait_for

from bot import database
from bot.inbox import store
from bot.scheduler import Job, start_scheduler

pytestmark = pytest.mark.postgres

LEASE_S = 3
INSTALLS = 10
RATE = 50.0  # deliveries per second, all installations together
N_KILL = 1000
KILL_AT_S = (5.0, 15.0)
N_ROLLING_MAX = 1000  # deliveries during the rolling restart at most
N_DOWN = 250
TICK_S = 1.0


def _env(url: str, port: int, log: Path, *, lease_s: int = LEASE_S,
         block_from: int | None = None, extra: dict[str, str] | None = None) -> dict[str, str]:
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
    env.update(extra or {})
    return env


def _cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()", *args],
                          cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def _start(url: str, tmp: Path, log: Path, **kw: Any) -> tuple[subprocess.Popen[bytes], int]:
    proc, port = _spawn(url, tmp, log, **kw)
    _wait_up(proc, port, tmp)
    return proc, port


def _spawn(url: str, tmp: Path, log: Path, **kw: Any) -> tuple[subprocess.Popen[bytes], int]:
    port = free_port()
    out = (tmp / f"serve-{port}.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
        cwd=tmp, env=_env(url, port, log, **kw), stdout=out, stderr=subprocess.STDOUT)
    return proc, port


def _wait_up(proc: subprocess.Popen[bytes], port: int, tmp: Path) -> None:
    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}: "
                        f"{(tmp / f'serve-{port}.log').read_text()[-3000:]}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 40, f"replica on port {port}")


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


class Fleet:
    """Replicas of ``campaign-bot serve`` on one database and the load balancer in front of
    them (:meth:`route`, the GitHub double's ``webhook_router``: round robin over the
    replicas put in rotation).  Records when each replica's serve was killed or stopped."""

    def __init__(self, url: str, tmp: Path, env: dict[str, str]) -> None:
        self.url, self.tmp, self.env = url, tmp, env
        self.live: list[tuple[subprocess.Popen[bytes], int]] = []
        self.all: list[subprocess.Popen[bytes]] = []
        self.gone_at: dict[int, float] = {}  # serve pid -> time.time() of kill -9 / SIGTERM
        self.kills = 0
        self._lock = threading.Lock()
        self._rr = itertools.count()

    def route(self) -> str | None:
        with self._lock:
            if not self.live:
                return None
            _, port = self.live[next(self._rr) % len(self.live)]
        return f"http://127.0.0.1:{port}/webhook"

    def start(self, n: int = 1) -> None:
        """Start ``n`` replicas at once; each goes into rotation when it answers /healthz."""
        started = [_spawn(self.url, self.tmp, Path(self.env["LOAD_JOB_LOG"]), extra=self.env)
                   for _ in range(n)]
        for proc, port in started:
            self.all.append(proc)
            _wait_up(proc, port, self.tmp)
            with self._lock:
                self.live.append((proc, port))

    def kill9(self, lb_lag_s: float) -> None:
        """``kill -9`` of a random replica; the load balancer notices ``lb_lag_s`` later
        (deliveries routed to it meanwhile fail at GitHub); then a new one starts."""
        with self._lock:
            proc, port = random.choice(self.live)
        proc.send_signal(signal.SIGKILL)
        self.gone_at[proc.pid] = time.time()
        self.kills += 1
        time.sleep(lb_lag_s)
        with self._lock:
            self.live.remove((proc, port))
        proc.wait(10)
        self.start()

    def stop(self, *entries: tuple[subprocess.Popen[bytes], int]) -> None:
        """Take replicas out of rotation, then SIGTERM them and wait for their exit."""
        with self._lock:
            for e in entries:
                self.live.remove(e)
        for proc, _ in entries:
            self.gone_at[proc.pid] = time.time()
            proc.send_signal(signal.SIGTERM)
        for proc, _ in entries:
            proc.wait(40)

    def close(self) -> None:
        for p in self.all:
            if p.poll() is None:
                self.gone_at.setdefault(p.pid, time.time())
                p.send_signal(signal.SIGTERM)
        for p in self.all:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()


def _stream(double: Any, first: int, until: Callable[[int], bool],
            sent: dict[str, dict[str, Any]]) -> None:
    """Send ``load_test`` deliveries ``first``, ``first + 1``, ... through the double at
    RATE per second in all, one sender per installation (each sends its own in order, as
    GitHub does per installation), until ``until(n)``; records each first attempt."""
    t0 = time.monotonic()

    def one(k: int) -> None:
        n = first + k
        while not until(n):
            delay = t0 + (n - first) / RATE - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            guid = f"L-{n:05d}"
            sent[guid] = double.send_webhook("load_test", _load_payload(n), guid=guid)
            n += INSTALLS

    threads = [threading.Thread(target=one, args=(k,)) for k in range(INSTALLS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)


def _load_payload(n: int) -> dict[str, Any]:
    k = n % INSTALLS
    return {"n": n, "installation": {"id": 100 + k},
            "repository": {"full_name": f"acme/load-{k}", "id": 500 + k},
            "issue": {"number": n}}


def test_three_replicas_under_load_kill_9_rolling_restart_and_downtime(
    github_double: Any, tmp_path: Path
) -> None:
    """Three replicas on PostgreSQL behind a round-robin load balancer (the GitHub double
    sends every delivery and redelivery through it), signed deliveries of 10 installations
    at 50 per second, each making one idempotent GitHub write (tests/support/load_handler.py).

    1. Kill: 1,000 deliveries (20 s); ``kill -9`` of a random replica every 10 s (at 5 s and
       15 s), taken out of rotation 0.5 s later (a load balancer's health check), then a new
       one started.  Deliveries routed to the dead one fail at GitHub and are recovered by
       the redelivery job; those it had stored or claimed are taken by the others.
    2. Rolling restart under load: each replica in turn replaced (start new, take the old
       out of rotation, SIGTERM it) while deliveries keep coming at 50/s (250 at least, 1,000
       at most): none of them fails.
    3. Downtime: every replica stopped while 250 deliveries are sent (5 s at 50/s; scaled
       down from 60 s to keep the test near 2 minutes on 2 shared cores, and the issue's
       3,000 would be more than one run of the job reads back from GitHub's log: 10 pages
       of 100, docs/deploy.md); all fail, and once replicas are back each is redelivered
       exactly once.

    Then: every delivery wrote exactly once (0 lost, 0 duplicate writes, counted by the
    double); per installation the writes of deliveries acknowledged on their first attempt
    come in arrival order (a redelivered one comes when GitHub sends it again); the
    scheduled job ran on one replica at a time (another only after the previous one was
    killed or stopped) and about once per interval."""
    pem = rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()).decode()
    (tmp_path / "app.pem").write_text(pem)
    github_double.rate_remaining = 10**9  # one installation's hourly limit is not the subject
    github_double.webhook_secret = SECRET.encode()
    for k in range(INSTALLS):
        github_double.add_repo(f"acme/load-{k}", installation_id=100 + k)
    for n in range(N_KILL + N_ROLLING_MAX + N_DOWN + 2 * INSTALLS):
        github_double.add_issue(f"acme/load-{n % INSTALLS}", n)
    jobs = tmp_path / "jobs.log"
    env = {"CAMPAIGN_BOT_APP_ID": "4242", "CAMPAIGN_BOT_PRIVATE_KEY_FILE": str(tmp_path /
                                                                             "app.pem"),
           "CAMPAIGN_BOT_GITHUB_API_URL": github_double.base_url,
           "CAMPAIGN_BOT_GITHUB_THROTTLE": "false", "CAMPAIGN_BOT_EXTRA_HANDLERS": "load_handler",
           "CAMPAIGN_BOT_REDELIVER_INTERVAL_S": "1", "CAMPAIGN_BOT_REDELIVER_MAX_PER_RUN": "1000",
           "CAMPAIGN_BOT_WORKER_CONCURRENCY": str(INSTALLS), "LOAD_JOB_LOG": str(jobs),
           "LOAD_TICK_S": str(TICK_S)}
    sent: dict[str, dict[str, Any]] = {}
    with database_url("postgres", tmp_path) as url:
        assert _cli("migrate", env=_env(url, 1, jobs), cwd=tmp_path).returncode == 0
        engine = database.make_engine(url)
        fleet = Fleet(url, tmp_path, env)
        github_double.webhook_router = fleet.route
        t_start = time.time()
        try:
            fleet.start(3)
            # 1. kill -9 every 10 s under load
            stream = threading.Thread(target=_stream, args=(
                github_double, 0, lambda n: n >= N_KILL, sent))
            t0 = time.monotonic()
            stream.start()
            for at in KILL_AT_S:
                time.sleep(max(0.0, t0 + at - time.monotonic()))
                fleet.kill9(lb_lag_s=0.5)
            stream.join(120)
            print(f"kill phase sent in {time.monotonic() - t0:.1f} s")
            # 2. rolling restart under load
            rolling_done = threading.Event()
            b_sent: dict[str, dict[str, Any]] = {}
            stream = threading.Thread(target=_stream, args=(
                github_double, N_KILL, lambda n: n >= N_KILL + N_ROLLING_MAX or (
                    rolling_done.is_set() and n >= N_KILL + 250),
                b_sent))
            stream.start()
            for old in list(fleet.live):
                fleet.start()
                fleet.stop(old)
                print(f"replaced one at {time.monotonic() - t0:.1f} s")
            rolling_done.set()
            stream.join(120)
            sent.update(b_sent)
            wait_for(lambda: set(_written(github_double)) >= set(sent), 120,
                     "every delivery of the kill and rolling phases written")
            print(f"kill+rolling written at {time.monotonic() - t0:.1f} s, "
                  f"{len(b_sent)} during rolling")
            # 3. every replica down while GitHub keeps sending
            fleet.stop(*fleet.live)
            t_down = time.time()
            first_c = max(int(g[2:]) for g in b_sent) + 1
            c_sent: dict[str, dict[str, Any]] = {}
            _stream(github_double, first_c, lambda n: n >= first_c + N_DOWN, c_sent)
            print(f"downtime sent at {time.monotonic() - t0:.1f} s")
            up_at = time.time()
            fleet.start(3)
            print(f"back up at {time.monotonic() - t0:.1f} s")
            sent.update(c_sent)
            wait_for(lambda: set(_written(github_double)) >= set(sent), 120,
                     "every delivery sent while the bot was down written")
            print(f"downtime recovered at {time.monotonic() - t0:.1f} s")
            time.sleep(2 * TICK_S)  # a few more job runs: nothing redelivered twice
            t_end = time.time()
        finally:
            github_double.webhook_router = None
            fleet.close()
        counts = store.status_counts(engine)
        engine.dispose()
    calls = list(github_double.calls)
    # 0 lost, 0 duplicate GitHub writes
    written = _written(github_double)
    assert set(written) == set(sent)
    assert {g: c for g, c in written.items() if c != 1} == {}
    creates = [c for c in calls if c.method == "POST" and c.path.endswith("/comments")
               and c.status == 201]
    assert len(creates) == len(sent)
    assert counts == {"done": len(sent)}
    # the kill phase really lost deliveries at GitHub, and the rolling restart none
    a_failed = [g for g, d in sent.items() if int(g[2:]) < N_KILL and d["status_code"] != 202]
    assert a_failed, "no delivery reached a killed replica: the recovery path was not exercised"
    assert fleet.kills == len(KILL_AT_S)
    assert {d["status_code"] for d in b_sent.values()} == {202}, "rolling restart lost some"
    # downtime: each one redelivered exactly once
    for g in c_sent:
        assert [(a["redelivery"], a["status_code"]) for a in github_double.hook_attempts(g)] == [
            (False, 0), (True, 202)], g
    # order per installation, for the deliveries acknowledged on their first attempt
    firsts = {g for g, d in sent.items() if d["status_code"] == 202}
    for k in range(INSTALLS):
        ns = [int(c["body"].split("n=")[1]) for _, c in sorted(
            github_double.repo(f"acme/load-{k}").comments.items())
            if "<!-- load:" in c["body"]]
        acked = [n for n in ns if f"L-{n:05d}" in firsts]
        assert acked == sorted(acked), f"installation {100 + k}: writes out of order"
    # the scheduled job: one replica at a time, about once per interval while any was up
    ticks = sorted((float(t), int(pid)) for _, pid, t in
                   (x.split() for x in jobs.read_text().splitlines()))
    for (t1, p1), (t2, p2) in itertools.pairwise(ticks):
        if p1 != p2:
            assert fleet.gone_at.get(p1, t2 + 1) <= t2, (
                f"replica {p2} ran the job at {t2:.2f} while {p1} (leader at {t1:.2f}) lived")
    # each leader's own runs: once per interval of its scheduler (runs come late under
    # load, never more often: APScheduler keeps the grid, coalesces missed runs)
    for pid, stint in itertools.groupby(ticks, key=lambda x: x[1]):
        ts = [t for t, _ in stint]
        assert len(ts) <= (ts[-1] - ts[0]) / TICK_S + 2, f"replica {pid} ran the job too often"
    up_s = (t_down - t_start) + (t_end - up_at)
    n_up = len([t for t, _ in ticks if t <= t_end])
    assert n_up <= up_s / TICK_S + 1 + fleet.kills
    assert n_up >= 0.6 * up_s / TICK_S, (n_up, up_s)


def _written(double: Any) -> Counter[str]:
    """Delivery id -> comments carrying its marker, over the load test's repositories."""
    out: Counter[str] = Counter()
    with double._lock:
        repos = [r for name, r in double.repos.items() if name.startswith("acme/load-")]
        bodies = [c["body"] for r in repos for c in r.comments.values()]
    for b in bodies:
        if b.startswith("<!-- load:"):
            out[b[len("<!-- load:"):b.index(" -->")]] += 1
    return out


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
