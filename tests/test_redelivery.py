"""Recovering missed webhook deliveries: the recovery job against the GitHub double's App
webhook log (``GET /app/hook/deliveries``, ``POST .../attempts``, App JWT auth), and end to end:
deliveries sent while ``campaign-bot serve`` is down are recorded by the double as failed; once
the bot is back its job asks for each one again and each is processed exactly once."""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from webhook_helpers import (
    DB_KINDS,
    ROOT,
    SECRET,
    database_url,
    free_port,
    metric_values,
    wait_for,
)

from bot import database
from bot.github.app_webhook import AppWebhookLog
from bot.inbox import store
from bot.inbox.recovery import (
    MAX_TRIES,
    list_redeliveries,
    recover_missed,
    redelivery_counts,
    scan_position,
)

APP_ID = 4242


@pytest.fixture(scope="module")
def pem() -> str:
    """An RSA key for App JWTs, made for this test run (no key is committed)."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


@pytest.fixture(params=DB_KINDS)
def engine(request: Any, tmp_path: Path) -> Any:
    """A migrated inbox database: SQLite, and PostgreSQL (the replicas' database)."""
    with database_url(request.param, tmp_path) as url:
        eng = database.make_engine(url)
        database.migrate(eng)
        yield eng
        eng.dispose()


def _down(double: Any) -> None:
    """Point the double's webhook at a port where nothing listens (the bot is down)."""
    double.webhook_url = f"http://127.0.0.1:{free_port()}/webhook"
    double.webhook_secret = SECRET.encode()


def _payload(n: int, installation: int) -> dict[str, Any]:
    return {"n": n, "installation": {"id": installation}}


def _hooks(double: Any, pem: str) -> AppWebhookLog:
    return AppWebhookLog(base_url=double.base_url, app_id=APP_ID, private_key=pem,
                         throttle=False)


def _redelivery_posts(double: Any) -> list[str]:
    return [c.path for c in double.calls
            if c.method == "POST" and c.path.startswith("/app/hook/deliveries/")]


def test_the_log_pages_with_a_cursor_under_an_app_jwt(github_double: Any, pem: str) -> None:
    _down(github_double)
    sent = [github_double.send_webhook("crash_test", _payload(i, 1)) for i in range(5)]
    assert {d["status_code"] for d in sent} == {0}
    assert {d["status"] for d in sent} == {"failed to connect"}
    pages = list(_hooks(github_double, pem).pages(per_page=2))
    assert [len(p.items) for p in pages] == [2, 2, 1]
    assert [d["guid"] for p in pages for d in p.items] == [d["guid"] for d in reversed(sent)]
    lists = [c for c in github_double.calls if c.path == "/app/hook/deliveries"]
    assert [c.query.get("cursor") for c in lists] == [
        None, f"v1_{sent[2]['id']}", f"v1_{sent[0]['id']}"]
    assert all(c.status == 200 for c in lists)


def test_the_job_asks_once_for_each_failed_delivery_the_inbox_lacks(
    github_double: Any, pem: str, engine: Any
) -> None:
    _down(github_double)
    now = dt.datetime.now(dt.UTC)
    lost = [github_double.send_webhook("crash_test", _payload(i, 1 + i % 2)) for i in range(4)]
    # failed, then delivered by a later redelivery: settled
    healed = github_double.send_webhook("crash_test", _payload(9, 1))
    # (ids grow with time, as GitHub's do: the scan relies on it)
    github_double.hook_deliveries.append({**healed, "id": next(github_double._hook_ids),
                                          "redelivery": True, "status": "OK",
                                          "status_code": 200})
    # failed, but the inbox has it (GitHub timed out after the bot stored it)
    stored = github_double.send_webhook("crash_test", _payload(10, 1))
    with engine.begin() as conn:
        store.insert_deliveries(conn, [store.NewDelivery(
            stored["guid"], "crash_test", None, None, "installation:1", {}, b"{}", now)])
    # outside the window: not read
    github_double.send_webhook("crash_test", _payload(11, 1),
                               delivered_at=now - dt.timedelta(days=4))
    # redeliveries arrive at a port where nothing listens: they fail again
    rep = recover_missed(engine, _hooks(github_double, pem), max_requests=10)
    assert (rep.failed, rep.missing, rep.outcomes, rep.stopped) == (5, 4, {"requested": 4}, None)
    assert sorted(_redelivery_posts(github_double)) == sorted(
        f"/app/hook/deliveries/{d['id']}/attempts" for d in lost)
    rows = list_redeliveries(engine)
    assert {r["guid"] for r in rows} == {d["guid"] for d in lost}
    assert {(r["outcome"], r["http_status"], r["failed_status_code"], r["inbox_status"])
            for r in rows} == {("requested", 202, 0, None)}
    wait_for(lambda: all(len(github_double.hook_attempts(d["guid"])) == 2 for d in lost), 10,
             "the double's redeliveries")
    assert len(_redelivery_posts(github_double)) == 4
    # the log now shows that each redelivery failed too: each GUID is asked for again
    # (bounded: test_a_redelivery_that_fails_too_is_asked_for_again_a_bounded_number_of_times)
    rep2 = recover_missed(engine, _hooks(github_double, pem), max_requests=10)
    assert (rep2.missing, rep2.outcomes) == (4, {"requested": 4})
    assert len(_redelivery_posts(github_double)) == 8
    assert redelivery_counts(engine) == {"requested": 4, "arrived": 0}


def test_the_job_is_bounded_and_rate_limit_aware(
    github_double: Any, pem: str, engine: Any
) -> None:
    _down(github_double)
    lost = [github_double.send_webhook("crash_test", _payload(i, 1)) for i in range(5)]
    rep = recover_missed(engine, _hooks(github_double, pem), max_requests=2)
    assert rep.outcomes == {"requested": 2}
    assert rep.stopped == "asked for 2 redeliveries (the per-run bound)"
    # oldest first: per-installation arrival order is kept as far as GitHub keeps it
    assert [r["guid"] for r in reversed(list_redeliveries(engine))] == [
        lost[0]["guid"], lost[1]["guid"]]
    github_double.rate_remaining = 60
    rep = recover_missed(engine, _hooks(github_double, pem), min_rate_remaining=100)
    assert rep.outcomes == {} and rep.stopped is not None and "rate limit" in rep.stopped
    assert len(_redelivery_posts(github_double)) == 2
    # a secondary rate limit on the POST: recorded as an error, the run stops at once
    github_double.rate_remaining = 5000
    github_double.inject("POST", "/app/hook/deliveries/*/attempts", 403, retry_after=60)
    rep = recover_missed(engine, _hooks(github_double, pem))
    assert rep.outcomes == {"error": 1} and "rate limit" in (rep.stopped or "")


def test_refused_is_final_and_errors_are_retried_a_bounded_number_of_times(
    github_double: Any, pem: str, engine: Any
) -> None:
    _down(github_double)
    a = github_double.send_webhook("crash_test", _payload(1, 1))
    github_double.inject("POST", f"/app/hook/deliveries/{a['id']}/attempts", 422)
    rep = recover_missed(engine, _hooks(github_double, pem))
    assert rep.outcomes == {"refused": 1}
    assert recover_missed(engine, _hooks(github_double, pem)).outcomes == {}
    [row] = list_redeliveries(engine)
    assert (row["outcome"], row["http_status"], row["tries"]) == ("refused", 422, 1)
    assert "422" in row["error"]

    b = github_double.send_webhook("crash_test", _payload(2, 1))
    github_double.inject("POST", f"/app/hook/deliveries/{b['id']}/attempts", 502,
                         times=MAX_TRIES + 1)
    for _ in range(MAX_TRIES + 2):
        recover_missed(engine, _hooks(github_double, pem))
    row = next(r for r in list_redeliveries(engine) if r["guid"] == b["guid"])
    assert (row["outcome"], row["http_status"], row["tries"]) == ("error", 502, MAX_TRIES)
    posts = _redelivery_posts(github_double)
    assert posts.count(f"/app/hook/deliveries/{b['id']}/attempts") == MAX_TRIES


def test_a_redelivery_that_fails_too_is_asked_for_again_a_bounded_number_of_times(
    github_double: Any, pem: str, engine: Any
) -> None:
    """GitHub accepted the redelivery (202) but no replica answered it either (the one the
    load balancer chose was just killed): while the inbox lacks the GUID it is asked for
    again once the log shows that failed attempt, MAX_TRIES times in all."""
    _down(github_double)
    a = github_double.send_webhook("crash_test", _payload(1, 1))
    for k in range(1, MAX_TRIES + 1):
        assert recover_missed(engine, _hooks(github_double, pem)).outcomes == {"requested": 1}
        # before GitHub sent the redelivery nothing is asked again
        wait_for(lambda k=k: len(github_double.hook_attempts(a["guid"])) == k + 1, 10,
                 "the redelivery attempt in the log")
        [row] = list_redeliveries(engine)
        assert (row["outcome"], row["tries"]) == ("requested", k)
    assert recover_missed(engine, _hooks(github_double, pem)).outcomes == {}
    assert [(x["redelivery"], x["status_code"]) for x in github_double.hook_attempts(
        a["guid"])] == [(False, 0)] + [(True, 0)] * MAX_TRIES


@contextlib.contextmanager
def _inbox_receiver(engine: Any) -> Iterator[tuple[str, Counter[str]]]:
    """The bot is back: an HTTP server that stores each delivery in the inbox (by its
    ``X-GitHub-Delivery``) and answers 202, as the webhook endpoint does; yields its URL and
    how many times each GUID arrived."""
    got: Counter[str] = Counter()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            guid = self.headers["X-GitHub-Delivery"]
            with lock:
                got[guid] += 1
                with engine.begin() as conn:
                    store.insert_deliveries(conn, [store.NewDelivery(
                        guid, self.headers["X-GitHub-Event"], None, None, "installation:1",
                        {}, body, dt.datetime.now(dt.UTC))])
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}/webhook", got
    finally:
        srv.shutdown()
        srv.server_close()


def test_a_long_outage_is_recovered_across_runs_with_a_page_budget(
    github_double: Any, pem: str, engine: Any
) -> None:
    """2,500 deliveries fail while the bot is down (25 pages of the log, after 150 that are
    older than the redelivery window).  With 10 pages read per run, the scan resumes where
    the last run stopped: every lost delivery is asked for exactly once and arrives once,
    none older than the window is asked for, and later runs read only what is new."""
    _down(github_double)
    now = dt.datetime.now(dt.UTC)
    old = [github_double.send_webhook("crash_test", _payload(i, 1),
                                      delivered_at=now - dt.timedelta(days=3, hours=1))
           for i in range(150)]
    lost = [github_double.send_webhook("crash_test", _payload(i, 1 + i % 10))
            for i in range(2500)]
    assert {d["status_code"] for d in old + lost} == {0}
    hooks = _hooks(github_double, pem)
    reports = []
    with _inbox_receiver(engine) as (url, got):
        github_double.webhook_url = url
        for _ in range(7):
            reports.append(recover_missed(engine, hooks, max_pages=10, max_requests=1000))
            asked = len(_redelivery_posts(github_double))
            wait_for(lambda asked=asked: len(github_double.hook_deliveries)
                     == len(old) + len(lost) + asked, 60, "the double's redeliveries")
            if len(reports) == 1:
                first_pos = scan_position(engine)
    assert Counter(_redelivery_posts(github_double)) == Counter(
        f"/app/hook/deliveries/{d['id']}/attempts" for d in lost)
    assert got == Counter(d["guid"] for d in lost)
    assert [(r.pages, r.outcomes, r.scan_complete) for r in reports] == [
        (10, {"requested": 1000}, False), (10, {"requested": 1000}, False),
        (6, {"requested": 500}, True),  # the 26th page reaches the window's edge
        # a new scan: the 2,500 redeliveries (202) down to where the last scan started
        (10, {}, False), (10, {}, False), (6, {}, True),
        (1, {}, True)]  # nothing new
    for d in lost:
        assert [(a["redelivery"], a["status_code"]) for a in github_double.hook_attempts(
            d["guid"])] == [(False, 0), (True, 202)]
    assert first_pos is not None and first_pos["cursor"] and first_pos["pages"] == 10
    assert first_pos["top_id"] == lost[-1]["id"] and first_pos["floor_id"] is None
    assert redelivery_counts(engine) == {"requested": 2500, "arrived": 2500}
    newest = max(x["id"] for x in github_double.hook_deliveries)
    assert scan_position(engine) == {"cursor": None, "top_id": None, "pages": 0,
                                     "started_at": None, "floor_id": newest}


def test_a_saved_position_github_refuses_starts_a_new_scan(
    github_double: Any, pem: str, engine: Any
) -> None:
    _down(github_double)
    lost = [github_double.send_webhook("crash_test", _payload(i, 1)) for i in range(250)]
    hooks = _hooks(github_double, pem)
    with _inbox_receiver(engine) as (url, got):
        github_double.webhook_url = url
        rep = recover_missed(engine, hooks, max_pages=1, max_requests=1000)
        assert (rep.pages, rep.outcomes) == (1, {"requested": 100})
        github_double.inject("GET", "/app/hook/deliveries", 400, message="Bad cursor")
        rep = recover_missed(engine, hooks, max_pages=1, max_requests=1000)
        assert rep.outcomes == {} and "starts from the newest" in (rep.stopped or "")
        pos = scan_position(engine)
        assert pos is not None and pos["cursor"] is None
        # the next runs scan again from the newest entry: each delivery is still asked once
        for _ in range(8):
            recover_missed(engine, hooks, max_pages=1, max_requests=1000)
            wait_for(lambda: len(github_double.hook_deliveries)
                     == len(lost) + len(_redelivery_posts(github_double)), 30,
                     "the double's redeliveries")
    assert Counter(_redelivery_posts(github_double)) == Counter(
        f"/app/hook/deliveries/{d['id']}/attempts" for d in lost)
    assert got == Counter(d["guid"] for d in lost)


def test_a_garbled_log_page_ends_the_run_without_a_traceback(
    github_double: Any, pem: str, engine: Any
) -> None:
    github_double.inject("GET", "/app/hook/deliveries", 500)
    rep = recover_missed(engine, _hooks(github_double, pem))
    assert rep.outcomes == {} and "500" in (rep.stopped or "")


def _serve(cwd: Path, port: int, double: Any, pem_file: Path, log: Path) -> subprocess.Popen[bytes]:
    env = dict(os.environ)
    env.pop("CAMPAIGN_BOT_DATABASE_URL", None)
    env.update(
        CAMPAIGN_BOT_WEBHOOK_SECRET=SECRET, CAMPAIGN_BOT_PORT=str(port),
        CAMPAIGN_BOT_APP_ID=str(APP_ID), CAMPAIGN_BOT_PRIVATE_KEY_FILE=str(pem_file),
        CAMPAIGN_BOT_GITHUB_API_URL=double.base_url, CAMPAIGN_BOT_GITHUB_THROTTLE="false",
        CAMPAIGN_BOT_REDELIVER_INTERVAL_S="1", CAMPAIGN_BOT_EXTRA_HANDLERS="crash_handler",
        PYTHONPATH=str(ROOT / "tests" / "support"), CRASH_LOG=str(log),
    )
    env.pop("CRASH_BLOCK_FROM", None)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
        cwd=cwd, env=env, stdout=(cwd / "serve.log").open("ab"), stderr=subprocess.STDOUT)

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"serve exited {proc.returncode}:\n{(cwd / 'serve.log').read_text()}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "campaign-bot serve to answer /healthz")
    return proc


def test_deliveries_sent_while_the_bot_is_down_are_redelivered_and_processed_once(
    github_double: Any, pem: str, tmp_path: Path
) -> None:
    port = free_port()
    github_double.webhook_url = f"http://127.0.0.1:{port}/webhook"  # nothing listens yet
    github_double.webhook_secret = SECRET.encode()
    lost = [github_double.send_webhook("crash_test", _payload(i, 1 + i % 3)) for i in range(12)]
    assert {d["status_code"] for d in lost} == {0}
    pem_file = tmp_path / "app.pem"
    pem_file.write_text(pem)
    log = tmp_path / "processed.log"
    proc = _serve(tmp_path, port, github_double, pem_file, log)
    try:
        # delivered while the bot is up: a 2xx in the log, never asked for again
        live = github_double.send_webhook("crash_test", _payload(100, 1))
        assert live["status_code"] == 202
        guids = [d["guid"] for d in lost] + [live["guid"]]

        def all_done() -> bool:
            ends = [x.split()[1] for x in log.read_text().splitlines()
                    if x.startswith("end")] if log.exists() else []
            return sorted(ends) == sorted(guids)

        wait_for(all_done, 60, "every lost delivery to be redelivered and processed")
        # a few more job runs: nothing is asked twice, nothing processed twice
        runs = len([c for c in github_double.calls if c.path == "/app/hook/deliveries"])
        wait_for(lambda: len([c for c in github_double.calls
                              if c.path == "/app/hook/deliveries"]) >= runs + 2, 15,
                 "two more runs of the recovery job")
        metrics = metric_values(httpx.get(f"http://127.0.0.1:{port}/metrics").text)
        missing = subprocess.run(
            [sys.executable, "-c", "from evidence.cli import main; main()", "deliveries",
             "--missing", "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if k != "CAMPAIGN_BOT_DATABASE_URL"})
        table = subprocess.run(
            [sys.executable, "-c", "from evidence.cli import main; main()", "deliveries",
             "--missing"], cwd=tmp_path, capture_output=True, text=True, timeout=60,
            env={k: v for k, v in os.environ.items() if k != "CAMPAIGN_BOT_DATABASE_URL"})
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
    starts = Counter(x.split()[1] for x in log.read_text().splitlines() if x.startswith("start"))
    assert starts == Counter(guids)  # each processed exactly once
    for d in lost:
        attempts = github_double.hook_attempts(d["guid"])
        assert [(a["redelivery"], a["status_code"]) for a in attempts] == [
            (False, 0), (True, 202)]
    assert len(github_double.hook_attempts(live["guid"])) == 1
    assert metrics['campaign_bot_redeliveries{outcome="requested"}'] == 12
    assert metrics["campaign_bot_redeliveries_arrived"] == 12
    assert missing.returncode == 0, missing.stderr
    assert table.returncode == 0, table.stderr
    assert "webhook log scan: the last scan is complete" in table.stdout
    rows = json.loads(missing.stdout)
    assert sorted(r["guid"] for r in rows) == sorted(d["guid"] for d in lost)
    assert {r["inbox_status"] for r in rows} == {"done"}
