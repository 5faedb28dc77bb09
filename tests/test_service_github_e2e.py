"""End to end: signed deliveries into ``campaign-bot serve``'s app (uvicorn on 127.0.0.1,
SQLite), the worker, ``bot.app.github_context`` (token auth) and the real handlers, against
the GitHub double; and ``replay`` as a dry run."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from github_helpers import BOT, REPO, example_files, fixture
from webhook_helpers import SECRET, headers_for, post, threaded_server, wait_for

from bot import app as bot_app
from bot import database
from bot.app import create_app, github_context
from bot.inbox import replay, store
from bot.metrics import Metrics
from bot.settings import load_settings

STATUS = "campaigns/h3/results/status.json"


@pytest.fixture
def settings(github_double, tmp_path: Path):
    return load_settings(webhook_secret=SECRET, database_url=f"sqlite:///{tmp_path/'b.db'}",
                         token="test-token", github_api_url=github_double.base_url,
                         bot_login=BOT, retry_delays="0.2", worker_mode="thread")


def _comment_body(text: str, comment_id: int = 777) -> bytes:
    p = copy.deepcopy(fixture("webhooks-derived/issue_comment/created.on-pull-request.json"))
    p["comment"].update(body=text, id=comment_id)
    p["comment"]["user"].update(login="wendy", type="User")
    p["sender"].update(login="wendy", type="User")
    return json.dumps(p).encode()


def _pr_body(head_sha: str) -> bytes:
    p = copy.deepcopy(fixture("webhooks/pull_request/opened.payload.json"))
    p["number"] = p["pull_request"]["number"] = 2
    p["pull_request"]["head"]["sha"] = head_sha
    return json.dumps(p).encode()


def test_webhooks_to_github_writes_through_the_service(github_double, settings) -> None:
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {STATUS: (Path(__file__).resolve().parents[1] /
                                                     "examples/h3-ref2va-4x910b1/results/"
                                                     "status.json").read_text()
                                            .replace('"queued"', '"runing"')})
    # the GitHub factory as the worker builds it, minus PyGithub's pacing (0.25 s per read)
    app = create_app(settings, metrics=Metrics(), poll_interval=0.05,
                     context_factory=github_context(settings, throttle=False))
    with threaded_server(app) as base:
        body = _comment_body("/campaign help")
        assert post(base, body, headers_for(body, "issue_comment", "e2e-1")).status_code == 202
        body = _pr_body(pull.head_sha)
        assert post(base, body, headers_for(body, "pull_request", "e2e-2")).status_code == 202
        wait_for(lambda: any(r["status"] == "completed"
                             for r in github_double.repo(REPO).check_runs.values()),
                 timeout=60, what="the evidence check run to complete")
    ops = [w[0] for w in github_double.write_summary()]
    assert ops == ["issues/create-comment", "checks/create", "pulls/create-review",
                   "issues/create-comment", "checks/update"]
    bodies = [c["body"] for c in github_double.repo(REPO).comments.values()]
    assert "### `/campaign verify`" in bodies[0] and "Checked" in bodies[1]
    engine = database.make_engine(settings.database_url)
    assert store.status_counts(engine) == {"done": 2}
    engine.dispose()


def test_replay_dry_run_prints_writes_and_makes_none(github_double, settings,
                                                          tmp_path: Path) -> None:
    github_double.add_repo(REPO, {"README.md": "hi\n"})
    github_double.add_pull(REPO, 2, {"README.md": "hi\nthere\n"})
    body = _comment_body("/campaign help")
    saved = tmp_path / "delivery.json"
    saved.write_text(json.dumps({"headers": headers_for(body, "issue_comment", "r-1"),
                                 "body": body.decode()}))
    report = bot_app.replay(replay.load_delivery_file(saved), settings)
    assert report.ok and [w.op for w in report.writes] == ["create_issue_comment"]
    assert "campaign help" in report.writes[0].args["body"]
    assert github_double.writes() == []
    applied = bot_app.replay(replay.load_delivery_file(saved), settings, apply=True)
    assert applied.ok and github_double.write_summary() == [
        ("issues/create-comment", f"/repos/{REPO}/issues/2/comments")]
