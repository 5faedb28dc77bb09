"""Storage and worker behaviour on both SQLite and PostgreSQL (issue 5: storage tests run
against both databases, through the same Alembic migrations)."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import inspect, select, update
from sqlalchemy.engine import Engine
from webhook_helpers import DB_KINDS, database_url

from bot import database
from bot.inbox import store
from bot.inbox.router import Event, Router
from bot.inbox.worker import Worker
from bot.metrics import Metrics


@pytest.fixture(params=DB_KINDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Engine]:
    with database_url(request.param, tmp_path) as url:
        eng = database.make_engine(url)
        database.migrate(eng)
        yield eng
        eng.dispose()


def row(did: str, key: str = "installation:1", event: str = "issues", body: bytes = b"{}"
        ) -> store.NewDelivery:
    return store.NewDelivery(
        delivery_id=did, event=event, action=None, repo="o/r", key=key,
        headers={"x-github-event": event, "x-github-delivery": did,
                 "content-type": "application/json"},
        body=body, received_at=store.utcnow(),
    )


def insert(engine: Engine, *rows: store.NewDelivery) -> list[bool]:
    with engine.begin() as conn:
        return store.insert_deliveries(conn, list(rows))


def test_migrations_create_the_tables_and_are_idempotent(engine: Engine) -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    cfg = Config()
    cfg.set_main_option("script_location", str(database.MIGRATIONS_DIR))
    # the newest revision (other issues add theirs after 0001_inbox)
    assert database.migrate(engine) == ScriptDirectory.from_config(cfg).get_current_head()
    tables = set(inspect(engine).get_table_names())
    assert {"deliveries", "handler_runs", "alembic_version"} <= tables
    cols = {c["name"] for c in inspect(engine).get_columns("deliveries")}
    assert {"delivery_id", "event", "headers", "body", "received_at", "status",
            "attempts"} <= cols


def test_duplicate_delivery_ids_are_not_stored_twice(engine: Engine) -> None:
    assert insert(engine, row("a"), row("b"), row("a")) == [True, True, False]
    assert insert(engine, row("b")) == [False]
    assert store.status_counts(engine) == {"queued": 2}


def test_headers_and_body_round_trip_byte_exact(engine: Engine) -> None:
    body = '{"x": "caf\u00e9 \u2713", "n": 1}'.encode()
    insert(engine, row("u", body=body))
    d = store.get_delivery(engine, "u")
    assert d is not None and d.body == body
    assert d.headers["x-github-delivery"] == "u"
    exported = store.export_delivery(d)
    assert exported["body"].encode() == body


def test_queue_heads_give_the_oldest_delivery_of_each_key(engine: Engine) -> None:
    insert(engine, row("a1", "k:a"), row("b1", "k:b"), row("a2", "k:a"), row("c1", "k:c"))
    heads = store.queue_heads(engine)
    assert [h.delivery_id for h in heads] == ["a1", "b1", "c1"]
    first = store.claim(engine, heads[0].seq)
    assert first is not None and first.status == "processing" and first.attempts == 1
    assert store.claim(engine, heads[0].seq) is None  # already claimed
    # a1 is processing: k:a has no head until it ends, and a2 cannot be claimed before that
    # (by this or any other replica)
    assert [h.delivery_id for h in store.queue_heads(engine)] == ["b1", "c1"]
    a2 = store.get_delivery(engine, "a2")
    assert a2 is not None and store.claim(engine, a2.seq) is None
    store.finish(engine, first.seq, "done")
    assert [h.delivery_id for h in store.queue_heads(engine)] == ["b1", "a2", "c1"]
    assert store.claim(engine, a2.seq) is not None


def test_recover_requeues_processing_rows(engine: Engine) -> None:
    insert(engine, row("a"), row("b"))
    heads = store.queue_heads(engine)
    store.claim(engine, heads[0].seq)
    assert store.status_counts(engine) == {"processing": 1, "queued": 1}
    assert store.recover(engine) == 1
    assert store.status_counts(engine) == {"queued": 2}


def run_worker(engine: Engine, router: Router, **kw: object) -> Metrics:
    m = Metrics()

    def ctx(event: Event) -> tuple[object, object]:
        return "GH", {"cfg": 1}

    w = Worker(engine, ctx, router=router, metrics=m, retry_delays=[0.0], **kw)  # type: ignore[arg-type]
    asyncio.run(w.run_until_idle())
    return m


def test_worker_processes_in_order_and_marks_done(engine: Engine) -> None:
    seen: list[tuple[str, object, object]] = []
    r = Router()

    @r.on("issues")
    def h(event: Event, gh: object, config: object) -> None:
        seen.append((event.delivery_id, gh, config))

    insert(engine, *(row(f"d{i}") for i in range(5)), row("x", event="unknown_event"))
    m = run_worker(engine, r)
    assert [s[0] for s in seen] == ["d0", "d1", "d2", "d3", "d4"]
    assert seen[0][1:] == ("GH", {"cfg": 1})
    assert store.status_counts(engine) == {"done": 6}  # the unknown event too: no handler
    assert m.processed == 6


def test_one_failing_handler_does_not_stop_others_and_only_it_is_retried(engine: Engine) -> None:
    calls: list[str] = []
    r = Router()

    @r.on("issues")
    def good(event: Event, gh: object, config: object) -> None:
        calls.append("good")

    @r.on("issues")
    def flaky(event: Event, gh: object, config: object) -> None:
        calls.append("flaky")
        if calls.count("flaky") < 2:
            raise RuntimeError("GitHub answered 500")

    insert(engine, row("d"))
    m = run_worker(engine, r, max_attempts=3)
    assert calls == ["good", "flaky", "flaky"]  # good ran once, flaky retried once
    d = store.get_delivery(engine, "d")
    assert d is not None and d.status == "done" and d.attempts == 2
    [listed] = store.list_deliveries(engine)
    assert [f["error"] for f in listed["failures"]] == ["RuntimeError: GitHub answered 500"]
    assert m.retries_scheduled == 1 and m.processed == 1


def test_delivery_failing_every_attempt_is_kept_as_failed(engine: Engine) -> None:
    r = Router()

    @r.on("issues")
    def broken(event: Event, gh: object, config: object) -> None:
        raise ValueError(f"bad payload in {event.delivery_id}")

    insert(engine, row("f"), row("ok", event="push"))
    m = run_worker(engine, r, max_attempts=2)
    failed = store.list_deliveries(engine, failed_only=True)
    assert [d["delivery_id"] for d in failed] == ["f"]
    assert failed[0]["attempts"] == 2
    assert [f["attempt"] for f in failed[0]["failures"]] == [1, 2]
    assert "ValueError: bad payload in f" in failed[0]["last_error"]
    assert m.failed == 1 and m.handler_failures == 2


def test_retry_waits_for_not_before_and_lets_its_key_run_meanwhile(engine: Engine) -> None:
    order: list[str] = []
    r = Router()

    @r.on("issues")
    def h(event: Event, gh: object, config: object) -> None:
        order.append(event.delivery_id)
        if event.delivery_id == "a1" and order.count("a1") == 1:
            raise RuntimeError("transient")

    insert(engine, row("a1", "k:a"), row("a2", "k:a"), row("b1", "k:b"))
    m = Metrics()

    def ctx(event: Event) -> tuple[object, object]:
        return None, None

    w = Worker(engine, ctx, router=r, metrics=m, retry_delays=[3600.0])
    asyncio.run(w.run_until_idle())
    # a1 waits an hour for its retry; meanwhile a2 (same key) runs: a waiting retry holds
    # no place in its key's order (no head-of-line blocking); b1 is independent
    assert sorted(order) == ["a1", "a2", "b1"]
    assert order.index("a1") < order.index("a2")
    assert store.status_counts(engine) == {"queued": 1, "done": 2}
    with engine.begin() as c:  # make the retry due now
        c.execute(update(store.Delivery).where(store.Delivery.status == "queued")
                  .values(not_before=dt.datetime.now(dt.UTC)))
    asyncio.run(w.run_until_idle())
    assert order[3:] == ["a1"]
    assert store.status_counts(engine) == {"done": 3}


def test_same_key_is_serialised_different_keys_run_concurrently(engine: Engine) -> None:
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    overall = {"now": 0, "peak": 0}
    order: dict[str, list[str]] = {}
    r = Router()

    lock = threading.Lock()  # handlers run on the worker's thread pool

    @r.on("issues")
    def h(event: Event, gh: object, config: object) -> None:
        k = event.payload["k"]
        with lock:
            running[k] = running.get(k, 0) + 1
            overall["now"] += 1
            peak[k] = max(peak.get(k, 0), running[k])
            overall["peak"] = max(overall["peak"], overall["now"])
            order.setdefault(k, []).append(event.delivery_id)
        time.sleep(0.02)
        with lock:
            running[k] -= 1
            overall["now"] -= 1

    rows = []
    for i in range(6):
        for k in ("a", "b", "c"):
            rows.append(row(f"{k}{i}", f"installation:{k}", body=f'{{"k":"{k}"}}'.encode()))
    insert(engine, *rows)
    run_worker(engine, r, concurrency=3)
    assert peak == {"a": 1, "b": 1, "c": 1}
    assert overall["peak"] > 1
    for k in ("a", "b", "c"):
        assert order[k] == [f"{k}{i}" for i in range(6)]


def test_handler_runs_ok_are_not_repeated_after_recovery(engine: Engine) -> None:
    """A crash between two handlers: the finished one is not run again."""
    calls: list[str] = []
    r = Router()

    @r.on("issues")
    def first(event: Event, gh: object, config: object) -> None:
        calls.append("first")

    @r.on("issues")
    def second(event: Event, gh: object, config: object) -> None:
        calls.append("second")

    insert(engine, row("d"))
    d = store.claim(engine, store.queue_heads(engine)[0].seq)
    assert d is not None
    name = f"{first.__module__}.{first.__qualname__}"
    store.record_handler(engine, d.seq, 1, name, True, None)  # ... then the process died
    run_worker(engine, r)
    assert calls == ["second"]
    with engine.connect() as c:
        st = c.execute(select(store.Delivery.status, store.Delivery.attempts)).one()
    assert tuple(st) == ("done", 2)


def test_unhandled_runs_are_completed_in_bulk_without_overtaking(engine: Engine) -> None:
    seen: list[str] = []
    r = Router()

    @r.on("issues")
    def h(event: Event, gh: object, config: object) -> None:
        # every unhandled delivery before this one is already done: order is kept
        with engine.connect() as c:
            before = c.execute(
                select(store.Delivery.delivery_id, store.Delivery.status)
                .where(store.Delivery.delivery_id.in_(["u1", "u2"]))
            ).all()
        assert {s for _, s in before} == {"done"}
        seen.append(event.delivery_id)

    insert(engine, row("u1", event="push"), row("u2", event="push"), row("h3"),
           row("u4", event="push"), *(row(f"bulk{i}", event="push") for i in range(600)))
    m = run_worker(engine, r)
    assert seen == ["h3"]
    assert store.status_counts(engine) == {"done": 604}
    assert m.processed == 604


def test_internal_deliveries_go_through_the_router_in_order(engine: Engine) -> None:
    seen: list[tuple[str, object]] = []
    r = Router()

    @r.on("campaign_bot.refresh")
    def refresh(event: Event, gh: object, config: object) -> None:
        seen.append((event.delivery_id, event.payload["repository"]["full_name"]))

    insert(engine, row("gh-1", key="repo:o/r"))
    payload = {"repository": {"full_name": "o/r"}}
    assert store.enqueue_internal(engine, "campaign_bot.refresh", payload, delivery_id="job-1")
    assert not store.enqueue_internal(engine, "campaign_bot.refresh", payload,
                                      delivery_id="job-1")  # deduplicated
    run_worker(engine, r)
    assert seen == [("job-1", "o/r")]
    d = store.get_delivery(engine, "job-1")
    assert d is not None and d.key == "repo:o/r" and d.status == "done"


def test_raw_sqlite_insert_reads_back_like_the_orm(tmp_path: Path) -> None:
    """The acknowledgement path's raw sqlite3 insert stores what SQLAlchemy would."""
    eng = database.make_engine(f"sqlite:///{tmp_path / 'raw.sqlite3'}")
    database.migrate(eng)
    new = row("raw-1", body=b'{"a": "\\u00e9"}')
    raw = eng.raw_connection()
    try:
        assert store.insert_deliveries_sqlite(raw, [new, new]) == [True, False]
        raw.commit()
    finally:
        raw.close()
    with eng.begin() as c:
        store.insert_deliveries(c, [row("orm-1")])
    a, b = store.get_delivery(eng, "raw-1"), store.get_delivery(eng, "orm-1")
    assert a is not None and b is not None
    assert a.headers == new.headers and a.body == new.body and a.status == "queued"
    assert a.received_at.replace(tzinfo=dt.UTC) == new.received_at
    assert type(a.received_at) is type(b.received_at)
    assert [h.delivery_id for h in store.queue_heads(eng)] == ["raw-1"]


def test_only_one_service_lock_per_database(engine: Engine) -> None:
    first, second = database.ServiceLock(engine), database.ServiceLock(engine)
    assert first.acquire()
    try:
        assert not second.acquire()
        assert "lock" in second.where
    finally:
        first.release()
    assert second.acquire()
    second.release()


def test_a_delivery_waiting_for_its_retry_gives_up_its_place_until_it_is_due(
        tmp_path: Path) -> None:
    """queue_heads and claim: while the key's first delivery waits out a retry delay the
    next one is a head and may be claimed; once due, the waiting one runs before the later
    ones still queued."""
    import time

    engine = database.make_engine(f"sqlite:///{tmp_path / 'q.sqlite3'}")
    database.migrate(engine)
    now = store.utcnow()
    with engine.begin() as conn:
        store.insert_deliveries(conn, [store.NewDelivery(
            f"w{i}", "crash_test", None, None, "installation:1", {}, b"{}", now)
            for i in range(3)])
    first, second, third = (h.seq for h in store.queued_of_key(engine, "installation:1"))
    assert store.claim(engine, first) is not None
    assert store.finish(engine, first, "queued", error="x",
                        not_before=now + dt.timedelta(seconds=0.6))
    assert [h.seq for h in store.queue_heads(engine)] == [first, second]
    assert store.claim(engine, second) is not None  # the waiting one does not hold the key
    assert store.claim(engine, third) is None  # the running one does
    assert store.finish(engine, second, "done")
    time.sleep(0.7)
    assert [h.seq for h in store.queue_heads(engine)] == [first]  # due again: first in line
    assert store.claim(engine, third) is None
    assert store.claim(engine, first) is not None
    engine.dispose()


def test_rate_limited_writes_wait_for_github_without_spending_attempts(
        engine: Engine, github_double) -> None:
    """Secondary-rate-limit 403s with ``Retry-After: 1`` on every try of a reply, more of
    them than the delivery has attempts: the delivery waits for GitHub's reset each time
    without spending an attempt, and the reply is posted once in the end (it was lost when
    each 403 used up an attempt)."""
    from github_helpers import REPO, port

    github_double.add_repo(REPO, {"README.md": "hello\n"})
    github_double.add_pull(REPO, 2, {"README.md": "hello\nworld\n"})
    comments = f"/repos/{REPO}/issues/2/comments"
    github_double.inject("POST", comments, 403, times=3, retry_after=1)
    r = Router()

    @r.on("issues")
    def reply(event: Event, gh: object, config: object) -> None:
        port(github_double).create_issue_comment(2, f"reply to {event.delivery_id}")

    insert(engine, row("rl"))
    m = Metrics()

    def ctx(event: Event) -> tuple[object, object]:
        return None, None

    w = Worker(engine, ctx, router=r, metrics=m, retry_delays=[0.0], max_attempts=2)
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=20)
    while store.status_counts(engine) != {"done": 1}:
        assert dt.datetime.now(dt.UTC) < deadline, store.list_deliveries(engine)
        asyncio.run(w.run_until_idle())
        d = store.get_delivery(engine, "rl")
        assert d is not None and d.status != "failed", d.last_error
        if d.status == "queued":
            assert d.attempts == 0  # the 403s spent nothing
            nb = d.not_before.replace(tzinfo=dt.UTC) if d.not_before.tzinfo is None \
                else d.not_before
            assert nb > dt.datetime.now(dt.UTC) - dt.timedelta(seconds=1)
            asyncio.run(asyncio.sleep(0.3))
    posts = [c for c in github_double.calls if c.method == "POST" and c.path == comments]
    assert [c.status for c in posts] == [403, 403, 403, 201]
    assert [c["body"] for c in github_double.repo(REPO).comments.values()] == ["reply to rl"]
    d = store.get_delivery(engine, "rl")
    assert d is not None and d.attempts == 1
