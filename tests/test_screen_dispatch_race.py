"""Concurrent dispatchers (threads: two worker processes, a webhook and the watchdog) on one
queue, on SQLite and PostgreSQL, through the GitHub double: each screen is dispatched once,
and a pool never holds two screens."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from github import Auth
from screen_scope import scope_dict, toml_dumps
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from webhook_helpers import DB_KINDS, database_url

from bot.database import make_engine, migrate
from bot.features.screen import queue as screens
from bot.features.screen.dispatch import dispatch_pool
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import Runtime, ScreenOptions
from bot.github.client import make_client
from bot.github.pygithub import PyGithubPort

REPO = "octo/campaign"
T0 = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
POOLS = ("pool-a", "pool-b")
CALLERS = 8


def _port(d: Any) -> PyGithubPort:
    auth = Auth.Token("test-token")
    return PyGithubPort(make_client(d.base_url, auth, throttle=False), REPO,
                        "campaign-bot[bot]", auth=auth, base_url=d.base_url)


def _queue(rt: Runtime, head: str, per_pool: int) -> dict[str, list[int]]:
    ids: dict[str, list[int]] = {}
    with rt.db() as db:
        for pool in POOLS:
            for _ in range(per_pool):
                s = Screen(
                    request_id=screens.new_request_id(), repo=REPO, pr_number=5,
                    campaign="h3-ref2va", campaign_path="campaigns/h3", kind="control",
                    candidate="control", track="5s-lossless", session_order="AB", pool=pool,
                    workflow="screen.yml", device_count=4, head_sha=head, requested_by="maint",
                    authorised_as="write", requested_at=T0, state=screens.QUEUED,
                    estimate_wall_s=600.0, estimate_device_s=2400.0)
                db.add(s)
                db.flush()
                ids.setdefault(pool, []).append(s.id)
    return ids


@pytest.mark.parametrize("kind", DB_KINDS)
def test_concurrent_dispatchers_dispatch_each_screen_once(kind: str, github_double: Any,
                                                           tmp_path: Path) -> None:
    d = github_double
    d.add_repo(REPO, {"campaigns/h3/campaign.toml": toml_dumps(scope_dict()),
                      ".github/workflows/screen.yml": "on: workflow_dispatch\n"})
    d.add_workflow(REPO, "screen.yml")
    head = d.add_pull(REPO, 5, {"campaigns/h3/notes.md": "x\n"}).head_sha
    d.set_permission(REPO, "maint", "write")
    with database_url(kind, tmp_path) as url:
        eng = make_engine(url)
        migrate(eng)
        rt = Runtime(eng, ScreenOptions(campaign_paths=("campaigns/h3",), debounce_s=0),
                     gh_for=lambda s: _port(d), now=lambda: T0)
        ids = _queue(rt, head, per_pool=3)
        barrier = threading.Barrier(CALLERS)
        got: list[int | None] = []
        errors: list[BaseException] = []

        def caller(pool: str) -> None:
            try:
                barrier.wait(10)
                s = dispatch_pool(rt, pool)
                got.append(s.id if s is not None else None)
            except BaseException as exc:  # noqa: BLE001 - surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=caller, args=(POOLS[i % 2],))
                   for i in range(CALLERS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert errors == []
        # one dispatch per pool: the head of each queue, once
        runs = d.repo(REPO).runs.values()
        assert len(runs) == 2
        with rt.db() as db:
            by_state = {s.id: (s.state, s.run_id) for s in db.scalars(select(Screen))}
            want = {ids[p][0] for p in POOLS}
            assert sorted(i for i in got if i is not None) == sorted(want)
            for pool in POOLS:
                first, *rest = ids[pool]
                assert by_state[first][0] == "dispatched" and by_state[first][1] is not None
                assert all(by_state[i] == ("queued", None) for i in rest)
            rids = {db.get(Screen, i).request_id for i in want}  # type: ignore[union-attr]
        assert {r["inputs"]["request_id"] for r in runs} == rids
        # the database itself refuses a second active screen on a pool
        with pytest.raises(IntegrityError), rt.db() as db:
            extra = db.get(Screen, ids[POOLS[0]][1])
            assert extra is not None
            extra.state = screens.RUNNING
            db.flush()
        eng.dispose()
