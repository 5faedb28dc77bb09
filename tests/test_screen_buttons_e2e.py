"""The check run's buttons end to end: ``campaign-bot serve`` (SQLite) as a subprocess and the
GitHub double, with signed ``check_run`` deliveries as GitHub sends them when someone clicks.

A screen is dispatched (no runner takes it: the run stays queued) and its check run carries
Cancel.  An unauthorised click is refused in the check run; the requester's click cancels the
workflow run; the same delivery sent again (GitHub's redelivery keeps its id) and the same
click in a new delivery change nothing.  The run then reports cancelled: the check run carries
Re-run, and a Re-run clicked after the PR's head moved is refused, naming the new head.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from test_screen_service_e2e import (
    PR,
    REPO,
    SECRET,
    Env,
    keys,  # noqa: F401 - the module-scoped fixture, used by name
    run_payload,
    start_service,
)
from webhook_helpers import headers_for, wait_for

pytestmark = pytest.mark.slow
FIXTURE = Path(__file__).parent / "fixtures" / "github" / "webhooks" / "check_run"


def click_payload(run: dict[str, Any], identifier: str, login: str) -> dict[str, Any]:
    """``check_run.requested_action`` for a click on ``run``'s button, from octokit's example."""
    p = copy.deepcopy(json.loads((FIXTURE / "requested_action.payload.json").read_text()))
    p["requested_action"] = {"identifier": identifier}
    out = run.get("output") or {}
    p["check_run"].update(id=run["id"], name=run["name"], head_sha=run["head_sha"],
                          external_id=run.get("external_id") or "", status=run["status"],
                          conclusion=run["conclusion"], pull_requests=[],
                          output={**p["check_run"]["output"], "title": out.get("title"),
                                  "summary": out.get("summary"), "text": out.get("text")})
    p["repository"] = {"id": 1, "name": REPO.split("/")[1], "full_name": REPO,
                       "private": False, "owner": {"login": REPO.split("/")[0]}}
    p["installation"] = {"id": 1}
    p["sender"].update(login=login, type="User")
    return p


def send(e: Env, payload: dict[str, Any], delivery: str) -> int:
    body = json.dumps(payload).encode()
    r = httpx.post(f"{e.url}/webhook", content=body, timeout=30,
                   headers=headers_for(body, "check_run", delivery, secret=SECRET))
    return r.status_code


def settled(e: Env, seconds: float = 2.0) -> int:
    """The number of writes once the double has seen none for ``seconds``."""
    last, since = len(e.double.writes()), time.monotonic()
    while time.monotonic() - since < seconds:
        time.sleep(0.2)
        now = len(e.double.writes())
        if now != last:
            last, since = now, time.monotonic()
    return last


def test_buttons_through_serve(github_double: Any, tmp_path: Path,
                               keys: tuple[Path, Path]) -> None:  # noqa: F811
    d = github_double
    e = start_service(d, tmp_path, keys, {"wall_hours": 4.0, "device_hours": 8.0})
    d.dispatch_hooks.clear()  # no runner: the dispatched run stays queued
    try:
        e.say("maint", "/screen candidate noop")
        wait_for(lambda: len(d.repo(REPO).check_runs) == 1, 60, "the screen's check run")
        (run,) = d.repo(REPO).check_runs.values()
        assert [a["label"] for a in run["actions"]] == ["Cancel"]
        (wf,) = d.repo(REPO).runs.values()

        assert send(e, click_payload(run, "cancel", "eve"), "click-eve") == 202
        wait_for(lambda: "@eve was refused" in (run["output"].get("text") or ""), 30,
                 "the refusal in the check run")
        assert e.screen(1).state == "dispatched"

        n = settled(e)
        assert send(e, click_payload(run, "cancel", "maint"), "click-maint") == 202
        wait_for(lambda: e.screen(1).state == "cancelling", 30, "the cancel")
        wait_for(lambda: (run["output"].get("text") or "").startswith("**Cancel** by @maint"),
                 30, "the answer in the check run")
        assert any(c.path == f"/repos/{REPO}/actions/runs/{wf['id']}/cancel"
                   for c in d.calls[n:])
        assert run["actions"] == []
        n = settled(e)
        # GitHub's redelivery (same id), then the same click in a new delivery: nothing
        send(e, click_payload(run, "cancel", "maint"), "click-maint")
        send(e, click_payload(run, "cancel", "maint"), str(uuid.uuid4()))
        assert settled(e, 3.0) == n

        # the run reports cancelled: the check run offers Re-run
        wf.update(status="completed", conclusion="cancelled")
        e.runner.deliver("workflow_run", run_payload(REPO, wf))
        wait_for(lambda: run["status"] == "completed", 60, "the completed check run")
        assert [a["label"] for a in run["actions"]] == ["Re-run"]
        assert run["conclusion"] == "cancelled"
        # the PR moved on: a Re-run of the old head is refused, naming the new one
        new = d.push(REPO, PR, {"campaigns/standin/NOTES.md": "more notes\n"})
        send(e, click_payload(run, "rerun", "maint"), "click-rerun")
        wait_for(lambda: "**Re-run** by @maint was refused" in (run["output"].get("text")
                                                                or ""), 30, "the refusal")
        assert f"which is now {new}" in run["output"]["text"]
        assert len(e.screens()) == 1
    finally:
        e.proc.terminate()
        try:
            e.proc.wait(20)
        except Exception:  # noqa: BLE001 - killed below
            e.proc.kill()
        d.dispatch_hooks.clear()
        d.cancel_hooks.clear()
        d.push_hooks.clear()
