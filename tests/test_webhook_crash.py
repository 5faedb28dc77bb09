"""Kill -9 of a real ``campaign-bot serve`` while 100 deliveries are queued: after a restart
every delivery is processed exactly once (issue 5, reliability tests)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import httpx
import pytest
from webhook_helpers import (
    DB_KINDS,
    ROOT,
    SECRET,
    database_url,
    free_port,
    headers_for,
    metric_values,
    wait_for,
)

from bot import database
from bot.inbox import store

N = 100
BLOCK_FROM = 10
INSTALLATIONS = 4


def start_serve(cwd: Path, port: int, log: Path, block: bool,
                db_url: str | None = None) -> subprocess.Popen[bytes]:
    """``campaign-bot serve`` in ``cwd``; its output goes to ``cwd/serve.log``."""
    env = dict(os.environ)
    env.update(
        CAMPAIGN_BOT_WEBHOOK_SECRET=SECRET,
        CAMPAIGN_BOT_PORT=str(port),
        CAMPAIGN_BOT_EXTRA_HANDLERS="crash_handler",
        CAMPAIGN_BOT_WORKER_CONCURRENCY=str(INSTALLATIONS),
        PYTHONPATH=str(ROOT / "tests" / "support"),
        CRASH_LOG=str(log),
        CAMPAIGN_BOT_LEASE_S="5",  # PostgreSQL: a killed serve's claims expire after 5 s
    )
    env.pop("CAMPAIGN_BOT_DATABASE_URL", None)  # the default: an SQLite file in cwd
    if db_url:
        env["CAMPAIGN_BOT_DATABASE_URL"] = db_url
    if block:
        env["CRASH_BLOCK_FROM"] = str(BLOCK_FROM)
    else:
        env.pop("CRASH_BLOCK_FROM", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
        cwd=cwd, env=env, stdout=(cwd / "serve.log").open("ab"), stderr=subprocess.STDOUT,
    )

    def up() -> bool:
        if proc.poll() is not None:
            out = (cwd / "serve.log").read_text()
            pytest.fail(f"serve exited with {proc.returncode}:\n{out}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "campaign-bot serve to answer /healthz")
    return proc


@pytest.mark.parametrize("kind", DB_KINDS)
def test_sigkill_with_100_queued_then_restart_processes_each_exactly_once(
    tmp_path: Path, kind: str
) -> None:
    with database_url(kind, tmp_path) as url:
        _crash_and_restart(tmp_path, url if kind == "postgres" else None)


def _crash_and_restart(tmp_path: Path, db_url: str | None) -> None:
    log = tmp_path / "processed.log"
    port = free_port()
    engine = database.make_engine(db_url or f"sqlite:///{tmp_path / 'campaign-bot.sqlite3'}")
    if db_url:
        database.migrate(engine)  # `campaign-bot migrate`: serve refuses an older schema
    proc = start_serve(tmp_path, port, log, block=True, db_url=db_url)
    ids = [f"crash-{i:03d}" for i in range(N)]
    bodies = {
        did: json.dumps({"n": i, "installation": {"id": i % INSTALLATIONS}}).encode()
        for i, did in enumerate(ids)
    }
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            for did in ids:
                r = c.post("/webhook", content=bodies[did],
                           headers=headers_for(bodies[did], "crash_test", did))
                assert r.status_code == 202, r.text
        # deliveries n < 10 finish; the first n >= 10 of each installation blocks in its
        # handler, and everything behind it stays queued.  A claim ("processing") is
        # committed before its handler starts, so the blocked state is reached only when
        # each blocked handler has also logged its start: killing between the two would
        # leave a claimed delivery that never started (it then runs once after the
        # restart, which is right, but not the state this test means to crash in).
        blocked = [ids[i] for i in range(BLOCK_FROM, BLOCK_FROM + INSTALLATIONS)]

        def started() -> set[str]:
            return {x.split()[1] for x in log.read_text().splitlines()
                    if x.startswith("start")} if log.exists() else set()

        wait_for(lambda: store.status_counts(engine) == {
            "done": BLOCK_FROM, "processing": INSTALLATIONS,
            "queued": N - BLOCK_FROM - INSTALLATIONS} and set(blocked) <= started(), 30,
            "the blocked state")
        # PostgreSQL: a second serve is one more replica (tests/test_replicas.py)
        only_one_serve = db_url is None
        # SQLite: a second serve on the same database would requeue live work: it refuses
        env = {**os.environ, "CAMPAIGN_BOT_WEBHOOK_SECRET": SECRET,
               "CAMPAIGN_BOT_PORT": str(free_port())}
        env.pop("CAMPAIGN_BOT_DATABASE_URL", None)
        if db_url:
            env["CAMPAIGN_BOT_DATABASE_URL"] = db_url
        if only_one_serve:
            second = subprocess.run(
                [sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
                cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
            assert second.returncode == 2
            assert "another campaign-bot serve uses this database" in second.stderr
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    assert proc.returncode == -signal.SIGKILL
    before = log.read_text().split("\n")
    assert sorted(x.split()[1] for x in before if x.startswith("start")) == sorted(
        ids[:BLOCK_FROM] + blocked)

    proc = start_serve(tmp_path, port, log, block=False, db_url=db_url)
    try:
        wait_for(lambda: store.status_counts(engine) == {"done": N}, 60, "all 100 done")
        # the worker process's counters are in the server's /metrics (multiprocess mode)
        wait_for(lambda: metric_values(httpx.get(f"http://127.0.0.1:{port}/metrics").text)
                 .get("campaign_bot_deliveries_processed_total") == N - BLOCK_FROM, 10,
                 "worker counters in /metrics")
        # redeliveries after the restart are acknowledged and not processed again
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as c:
            for did in ids[:20]:
                r = c.post("/webhook", content=bodies[did],
                           headers=headers_for(bodies[did], "crash_test", did))
                assert r.status_code == 200 and r.json()["status"] == "duplicate"
        proc.send_signal(signal.SIGTERM)
        proc.wait(20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    lines = [x.split() for x in log.read_text().splitlines()]
    ends = Counter(d for kind, d in lines if kind == "end")
    starts = Counter(d for kind, d in lines if kind == "start")
    assert set(ends) == set(ids)
    assert set(ends.values()) == {1}, "a delivery finished twice"
    assert {d for d, n in starts.items() if n == 2} == set(blocked)  # killed mid-handler
    assert all(starts[d] == 1 for d in ids if d not in blocked)
    # SIGTERM is a graceful stop (uvicorn re-raises the signal after shutting down)
    out = (tmp_path / "serve.log").read_text()
    assert "Application shutdown complete" in out, out[-2000:]
    engine.dispose()


def test_a_killed_worker_process_is_restarted_and_its_delivery_redone(tmp_path: Path) -> None:
    import psutil

    log = tmp_path / "processed.log"
    port = free_port()
    engine = database.make_engine(f"sqlite:///{tmp_path / 'campaign-bot.sqlite3'}")
    proc = start_serve(tmp_path, port, log, block=True)

    def workers() -> list[psutil.Process]:
        out = []
        for c in psutil.Process(proc.pid).children():
            try:
                if c.status() != psutil.STATUS_ZOMBIE and "bot.worker_process" in " ".join(
                        c.cmdline()):
                    out.append(c)
            except psutil.Error:
                pass
        return out

    try:
        wait_for(lambda: len(workers()) == 1, 10, "the worker process")
        [child] = workers()
        body = json.dumps({"n": BLOCK_FROM, "installation": {"id": 1}}).encode()
        r = httpx.post(f"http://127.0.0.1:{port}/webhook", content=body,
                       headers=headers_for(body, "crash_test", "w-1"), timeout=10)
        assert r.status_code == 202
        wait_for(lambda: store.status_counts(engine) == {"processing": 1}, 30, "blocked")
        # "processing" is committed before the handler starts: wait until it has logged its
        # start, or a loaded machine kills it before the first start line (then only one)
        wait_for(lambda: log.exists() and "start w-1" in log.read_text(), 30, "handler start")
        child.kill()  # the handler dies mid-way with its process
        child.wait(10)
        # the supervisor starts a new worker, which requeues and runs it again (it blocks
        # again: n >= CRASH_BLOCK_FROM), so the log shows two starts
        wait_for(lambda: log.exists() and log.read_text().count("start w-1") == 2, 30,
                 "restarted worker")
        [new_child] = workers()
        assert new_child.pid != child.pid
        assert httpx.get(f"http://127.0.0.1:{port}/healthz").status_code == 200
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    engine.dispose()
