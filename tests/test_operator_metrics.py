"""The operator metrics of ``GET /metrics`` through the real service (``campaign-bot serve``
with its worker process, SQLite, the GitHub double): every series whose labels are known is
there at start, at 0, and moves with traffic: a ``/campaign help`` delivery (lag histogram,
event counter, GitHub answers by route and status, rate limit of the installation), a queued
screen (its pool's queue depth and oldest wait), a refused request; ``promtool check metrics``
finds nothing to say about the text (when promtool is installed).  Workflow dispatch outcomes
are counted by the GitHub port, checked on the double."""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
from pathlib import Path
from typing import Any

import httpx
from github_helpers import REPO, comment_event, port
from test_head_of_line import Service
from webhook_helpers import metric_values, wait_for

from bot.features.screen.queue import Screen
from bot.github import GitHubValidationError
from bot.metrics import (
    DISPATCH_OUTCOMES,
    REJECT_REASONS,
    ROUTE_CLASSES,
    STATUS_CLASSES,
    Metrics,
    build_version,
)


def scrape(service: Service) -> tuple[str, dict[str, float]]:
    text = httpx.get(f"{service.base}/metrics", timeout=10).text
    return text, metric_values(text)


def promtool_lint(text: str) -> None:
    if shutil.which("promtool") is None:
        return
    res = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


def queue_a_screen(service: Service, pool: str, waited_s: float) -> None:
    from sqlalchemy.orm import Session

    with Session(service.engine) as db:
        db.add(Screen(request_id="metrics-1", repo=REPO, pr_number=2, campaign="h3",
                      campaign_path="campaigns/h3", kind="candidate", candidate="c1",
                      track="5s-lossless", session_order="ABBA", pool=pool,
                      head_sha="a" * 40, requested_by="alice",
                      requested_at=dt.datetime.now(dt.UTC) - dt.timedelta(seconds=waited_s),
                      estimate_device_s=60.0, estimate_wall_s=60.0))
        db.commit()


def test_series_are_there_from_the_start_and_move_with_traffic(github_double: Any,
                                                               tmp_path: Path) -> None:
    github_double.add_repo(REPO, {"README.md": "hi\n"})
    github_double.add_pull(REPO, 2, {"README.md": "hi\nthere\n"}, user="dave")
    service = Service(github_double, tmp_path)
    try:
        # the worker process composes the features (and so names the subscribed events)
        wait_for(lambda: 'campaign_bot_deliveries_received_by_event_total{event='
                 '"issue_comment"}' in scrape(service)[0], 30, "the worker's series")
        text, v = scrape(service)
        promtool_lint(text)
        for reason in REJECT_REASONS:
            assert v[f'campaign_bot_deliveries_rejected_total{{reason="{reason}"}}'] == 0
        for route in ROUTE_CLASSES:
            for status in STATUS_CLASSES:
                assert v[f'campaign_bot_github_responses_total{{route="{route}",'
                         f'status="{status}"}}'] == 0
        for outcome in DISPATCH_OUTCOMES:
            assert v[f'campaign_bot_workflow_dispatches_total{{outcome="{outcome}"}}'] == 0
        for event in ("issue_comment", "pull_request"):
            assert v[f'campaign_bot_deliveries_received_by_event_total{{event="{event}"}}'] == 0
        assert v["campaign_bot_delivery_lag_seconds_count"] == 0
        assert v['campaign_bot_inbox_depth{status="queued"}'] == 0
        build = [k for k in v if k.startswith("campaign_bot_build_info{")]
        assert len(build) == 1 and f'version="{build_version()}"' in build[0]
        assert v[build[0]] == 1
        assert "campaign_bot_deliveries_received_total " not in text  # the old duplicate

        # traffic: a refused request, a /campaign help delivery, a queued screen
        assert httpx.post(f"{service.base}/webhook", content=b"{}", headers={
            "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "x",
            "Content-Type": "application/json"}).status_code == 401
        service.send("m-1", comment_event("/campaign help", comment_id=901).payload)
        queue_a_screen(service, "x4-910b", waited_s=3600)
        wait_for(lambda: service.row("m-1").get("status") == "done", 60, "the delivery")
        wait_for(lambda: scrape(service)[1].get(
            'campaign_bot_github_rate_limit_remaining{installation="token"}') is not None,
            20, "the worker's GitHub counts in the merged scrape")
        text, v = scrape(service)
        promtool_lint(text)
        assert v['campaign_bot_deliveries_received_by_event_total{event="issue_comment"}'] == 1
        assert v['campaign_bot_deliveries_rejected_total{reason="signature"}'] == 1
        assert v["campaign_bot_delivery_lag_seconds_count"] == 1
        assert 0 <= v["campaign_bot_delivery_lag_seconds_sum"] < 60
        assert v['campaign_bot_delivery_lag_seconds_bucket{le="+Inf"}'] == 1
        assert v["campaign_bot_deliveries_processed_total"] == 1
        assert v['campaign_bot_github_responses_total{route="issues",status="2xx"}'] >= 1
        assert v['campaign_bot_github_rate_limit_remaining{installation="token"}'] == \
            github_double.rate_remaining
        assert v['campaign_bot_screen_queue_depth{pool="x4-910b"}'] == 1
        assert 3600 <= v['campaign_bot_screen_queue_oldest_wait_seconds{pool="x4-910b"}'] < 3700
    finally:
        service.stop()


def test_workflow_dispatches_are_counted_by_outcome(github_double: Any) -> None:
    github_double.add_repo(REPO, {"README.md": "hi\n"})
    github_double.add_workflow(REPO, "screen.yml")
    m = Metrics()
    p = port(github_double, metrics=m)
    p.dispatch_workflow("screen.yml", "main", {"request_id": "r-1"})
    github_double.inject("POST", f"/repos/{REPO}/actions/workflows/screen.yml/dispatches", 422)
    try:
        p.dispatch_workflow("screen.yml", "main", {"request_id": "r-2"})
    except GitHubValidationError:
        pass
    else:
        raise AssertionError("the injected 422 was not raised")
    v = metric_values(m.exposition({}).decode())
    assert v['campaign_bot_workflow_dispatches_total{outcome="dispatched"}'] == 1
    assert v['campaign_bot_workflow_dispatches_total{outcome="unprocessable"}'] == 1
    assert v['campaign_bot_github_responses_total{route="actions",status="4xx"}'] == 1
