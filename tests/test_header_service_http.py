"""End to end: a signed ``push`` delivery to the running service (uvicorn on a thread, real
SQLite) goes through the inbox and the worker to the status header handler, which writes the
header into the campaign issue held by the GitHub double.  The 30-minute job is installed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from github import Auth
from webhook_helpers import SECRET, headers_for, post, threaded_server, wait_for

from bot import database
from bot.app import create_app
from bot.features.header.block import START, current_block
from bot.github.client import make_client
from bot.github.pygithub import PyGithubPort
from bot.inbox import store
from bot.inbox.router import Event
from bot.settings import load_settings
from tests.campaign_status.builders import campaign_files, receipt

REPO = "org/campaigns"
ROOT = "campaigns/h3-ref2va-4x910b1"


def test_push_delivery_updates_header_through_the_service(
    github_double: Any, tmp_path: Path
) -> None:
    rs = [receipt("5s-lossless", "control", 814.064, session="orig-5s", clean=False)]
    github_double.add_repo(REPO, campaign_files(ROOT, rs))
    github_double.add_issue(REPO, 7, body="Goal and scope, by a human.")
    url = f"sqlite:///{tmp_path / 'svc.sqlite3'}"
    settings = load_settings(webhook_secret=SECRET, database_url=url, retry_delays="0",
                             worker_mode="thread")
    engine = database.make_engine(url)
    auth = Auth.Token("test-token")

    def ctx(event: Event) -> tuple[Any, Any]:
        port = PyGithubPort(make_client(github_double.base_url, auth, throttle=False),
                            event.repo_full_name or REPO, "campaign-bot[bot]", auth=auth,
                            base_url=github_double.base_url)
        return port, None

    app = create_app(settings, engine=engine, context_factory=ctx, poll_interval=0.05)
    try:
        with threaded_server(app) as base:
            job = app.state.bot["scheduler"].get_job("campaign-header-refresh")
            assert job is not None and job.trigger.interval.total_seconds() == 1800
            body = json.dumps({
                "ref": "refs/heads/main", "after": "c" * 40,
                "repository": {"full_name": REPO, "default_branch": "main"},
                "sender": {"login": "amy", "type": "User"},
                "commits": [{"id": "c" * 40, "timestamp": "2026-11-21T09:00:00Z",
                             "added": [f"{ROOT}/campaign.toml"], "modified": [],
                             "removed": []}],
            }).encode()
            r = post(base, body, headers_for(body, "push", "push-1"))
            assert r.status_code == 202, r.text
            wait_for(lambda: store.status_counts(engine) == {"done": 1}, what="processed")
            issue_body = github_double.repo(REPO).issues[7]["body"]
            assert issue_body.startswith(START)
            assert issue_body.endswith("Goal and scope, by a human.")
            block = current_block(issue_body) or ""
            assert "failed its lifecycle" in block or "failed their lifecycles" in block
            assert "Updated from evidence at [`cccccccc`]" in block
            assert github_double.write_summary() == [("issues/update", f"/repos/{REPO}/issues/7")]
    finally:
        engine.dispose()
