"""The whole service end to end: a signed ``/campaign help`` comment delivered over HTTP to a
real ``campaign-bot serve`` (worker process, SQLite) that answers on the GitHub double; and
``campaign-bot replay`` of the same delivery, dry and with ``--apply``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from github_helpers import BOT, REPO, comment_event
from typer.testing import CliRunner
from webhook_helpers import SECRET, free_port, headers_for, metric_values, wait_for

from evidence.cli import _load_plugins, app

COMMENTS = f"/repos/{REPO}/issues/2/comments"


@pytest.fixture
def repo(github_double):  # type: ignore[no-untyped-def]
    github_double.add_repo(REPO, {"README.md": "hi\n"})
    github_double.add_pull(REPO, 2, {"README.md": "hi\nthere\n"}, user="dave")
    return github_double


def bot_comments(double) -> list[str]:  # type: ignore[no-untyped-def]
    return [c["body"] for c in double.repo(REPO).comments.values() if c["user"] == BOT]


def env_for(double, port: int) -> dict[str, str]:  # type: ignore[no-untyped-def]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env.update(CAMPAIGN_BOT_WEBHOOK_SECRET=SECRET, CAMPAIGN_BOT_TOKEN="test-token",
               CAMPAIGN_BOT_GITHUB_API_URL=double.base_url, CAMPAIGN_BOT_PORT=str(port),
               CAMPAIGN_BOT_BOT_LOGIN=BOT)
    return env


def test_signed_comment_over_http_is_answered_on_github_once(repo, tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
        cwd=tmp_path, env=env_for(repo, port), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        def up() -> bool:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, "serve")
        body = json.dumps(comment_event("/campaign help").payload).encode()
        h = headers_for(body, "issue_comment", "e2e-1")
        assert httpx.post(f"{base}/webhook", content=body, headers=h).status_code == 202
        wait_for(lambda: len(bot_comments(repo)) == 1, 30, "the bot's reply on the double")
        assert repo.write_summary() == [("issues/create-comment", COMMENTS)]
        assert "/campaign help" in bot_comments(repo)[0]
        # GitHub redelivers it: acknowledged, not processed again
        r = httpx.post(f"{base}/webhook", content=body, headers=h)
        assert r.status_code == 200 and r.json()["status"] == "duplicate"
        wait_for(lambda: any(
            ln.startswith('campaign_bot_github_api_calls_total{method="POST"}')
            for ln in httpx.get(f"{base}/metrics").text.splitlines()), 10, "github metrics")
        # counted by the worker process, merged by prometheus-client's multiprocess mode
        metrics = metric_values(httpx.get(f"{base}/metrics").text)
        assert metrics["campaign_bot_deliveries_processed_total"] == 1
        assert metrics['campaign_bot_github_api_calls_total{method="POST"}'] == 1
        assert len(repo.writes()) == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_replay_dry_run_prints_writes_and_apply_makes_them(
    repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _load_plugins()
    runner = CliRunner()
    for k, v in env_for(repo, 1).items():
        if k.startswith("CAMPAIGN_BOT_"):
            monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)
    body = json.dumps(comment_event("/campaign help").payload).encode()
    f = tmp_path / "delivery.json"
    f.write_text(json.dumps({"headers": headers_for(body, "issue_comment", "r-1"),
                             "body": body.decode()}))
    r = runner.invoke(app, ["replay", str(f)])
    assert r.exit_code == 0, r.output
    assert "1 GitHub write(s) the handlers would make" in r.output
    assert "create_issue_comment number=2" in r.output
    assert repo.writes() == []  # the dry run wrote nothing
    r = runner.invoke(app, ["replay", "--apply", str(f)])
    assert r.exit_code == 0, r.output
    assert repo.write_summary() == [("issues/create-comment", COMMENTS)]
