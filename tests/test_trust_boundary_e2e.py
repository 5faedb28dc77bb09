"""The trust boundary of ``/screen``, end to end: ``campaign-bot serve`` (SQLite) as a
subprocess, the GitHub double, and the runner double of ``tests/test_screen_service_e2e.py``
(which runs the real screen runner, or uploads a given artifact as a hostile runner would).

Each test is an attack or a failure that once got through:

- forged receipts under ``node_modules/`` of a genuinely signed bundle were read and judged
  (a "verified" ratio of 0.05): now the bundle is refused;
- hostile artifacts (a file clashing with a directory, overlong names, JSON nested 100,000
  levels, also in the signature envelope) raised out of the result handler and held the pool:
  now each is a reported REFUSED result, its check run completed, the pool freed;
- a fork approval by a 7-digit prefix; any workflow run titled with a request id ending a
  screen; GitHub answering an error after doing the write (a second run, a second comment, a
  screen failed while its run ran); one comment delivered twice queuing two screens; a screen
  dispatched after its PR closed or with a stale head; commands inside HTML code and quotes.
"""

from __future__ import annotations

import copy
import json
import sqlite3
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from hostile.artifacts import CASES, zip_entries
from hostile.comments import HIDDEN
from test_screen_service_e2e import (
    PR,
    REPO,
    SECRET,
    WEBHOOKS,
    Env,
    comment_payload,
    job_payload,
    run_payload,
)
from test_screen_service_e2e import keys as keys  # noqa: F401 - a fixture
from test_screen_service_e2e import service as service  # noqa: F401 - a fixture
from webhook_helpers import headers_for, wait_for

pytestmark = pytest.mark.slow

LARGE_BUDGET = {"wall_hours": 100.0, "device_hours": 100.0}
NOT_A_ZIP = zip_entries([("data", b"x"), ("data/x", b"y")])


def post(e: Env, event: str, payload: dict[str, Any], delivery: str | None = None) -> str:
    """Deliver ``payload`` signed, as GitHub would; returns the delivery id."""
    delivery = delivery or str(uuid.uuid4())
    body = json.dumps(payload).encode()
    r = httpx.post(f"{e.url}/webhook", content=body,
                   headers=headers_for(body, event, delivery, secret=SECRET), timeout=30)
    assert r.status_code == 202, r.text
    return delivery


def processed(e: Env, *deliveries: str) -> bool:
    """True when every delivery in ``deliveries`` was handled by the worker."""
    with sqlite3.connect(e.db) as c:
        rows = dict(c.execute("SELECT delivery_id, status FROM deliveries").fetchall())
    return all(rows.get(d) in ("done", "failed") for d in deliveries)


def bodies(e: Env, mark: str) -> list[str]:
    return [b for b in e.comments() if mark in b]


def comment_on(number: int, login: str, body: str, cid: int) -> dict[str, Any]:
    p = comment_payload(REPO, login, body, cid)
    p["issue"]["number"] = number
    return p


def pr_payload(action: str, number: int, head: str, **extra: Any) -> dict[str, Any]:
    name = "closed" if action == "closed" else "synchronize"
    p = json.loads((WEBHOOKS / "pull_request" / f"{name}.payload.json").read_text())
    p.update({"repository": {"id": 1, "name": REPO.split("/")[1], "full_name": REPO,
                             "private": False, "owner": {"login": REPO.split("/")[0]},
                             "default_branch": "main"},
              "installation": {"id": 1}, "action": action, "number": number})
    p["pull_request"]["number"] = number
    p["pull_request"]["head"]["sha"] = head
    p["pull_request"].update(extra)
    return p


def finished(e: Env, n: int) -> bool:
    return len(e.screens()) >= n and all(
        s.state in ("finished", "failed", "cancelled") for s in e.screens()[:n])


# ------------------------------------------------------------------------- the bundle


def test_forged_receipts_beside_a_signed_bundle_are_refused(service: Env) -> None:
    """The runner's genuinely signed bundle plus 12 forged receipts (candidate 20x faster)
    under node_modules/: nothing of it is read, the screen is REFUSED."""
    e = service
    e.runner.mode["*"] = "forge"
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: finished(e, 1), 120, "the screen reported")
    s1 = e.screen(1)
    assert (s1.state, s1.verdict, s1.conclusion) == ("failed", "REFUSED", "success")
    reasons = s1.summary["reasons"]
    assert reasons[:2] == [
        "the bundle did not verify",
        "manifest check failed: 0 mismatched, 0 missing, 12 extra, 0 unsafe, 0 malformed"]
    for i in range(12):
        assert (f"signature: node_modules/forged-{i:02d}.json: not covered by the signed "
                "manifests (added after signing); the bundle is refused and nothing in it is "
                "read") in reasons
    # the artifact really was the signed bundle plus the forgeries
    art = next(iter(e.double.repo(REPO).artifacts.values()))
    import io
    import zipfile

    names = zipfile.ZipFile(io.BytesIO(art["zip"])).namelist()
    assert "attestation.dsse.json" in names
    assert sum(n.startswith("node_modules/forged-") for n in names) == 12
    (body,) = bodies(e, "campaign-bot:screen-result screen=S1")
    assert "REFUSED" in body and "Sessions in run order" not in body and "ratio" not in body
    assert [(c["name"], c["status"], c["conclusion"]) for c in e.checks()] == [
        ("campaign-bot/screen: noop", "completed", "failure")]


@pytest.mark.parametrize("service", [LARGE_BUDGET], indirect=True)
def test_hostile_artifacts_are_refused_reported_and_free_the_pool(
        service: Env, keys: tuple[Path, Path], tmp_path: Path) -> None:
    """One screen per hostile artifact, all queued on one pool: each ends REFUSED with its
    reason, its check run completed, and the next screen is dispatched."""
    e = service
    e.runner.zips = [c.build(tmp_path / c.id, keys[0]) for c in CASES]
    for _ in CASES:
        e.say("maint", "/screen candidate noop")
    wait_for(lambda: finished(e, len(CASES)), 240, "every hostile screen reported")
    got = e.screens()
    assert len(e.runner.runs) == len(CASES)  # the pool was freed after each
    for s, case in zip(got, CASES, strict=True):
        assert (s.state, s.verdict) == ("failed", "REFUSED"), (case.id, s.summary)
        text = "; ".join(s.summary["reasons"])
        assert case.words in text, (case.id, text)
        assert len(bodies(e, f"campaign-bot:screen-result screen={s.label} ")) == 1
    checks = e.checks()
    assert len(checks) == len(CASES)
    assert {(c["status"], c["conclusion"]) for c in checks} == {("completed", "failure")}


# --------------------------------------------------------------------- fork approval


def test_fork_approval_names_the_full_head(service: Env) -> None:
    e = service
    e.runner.hold = True
    pull = e.double.add_pull(REPO, 8, {"campaigns/standin/NOTES.md": "fork\n"},
                             fork="mallory/standin-campaign", head_ref="fork-topic")
    full = f"/screen candidate noop sha={pull.head_sha}"
    post(e, "issue_comment", comment_on(8, "maint", f"/screen candidate noop "
                                        f"sha={pull.head_sha[:7]}", 7001))
    wait_for(lambda: bodies(e, "reply comment=7001 "), 30, "the refusal")
    (reply,) = bodies(e, "reply comment=7001 ")
    assert (f"sha={pull.head_sha[:7]} is 7 hex digits; an approval names the full 40-digit "
            f"head commit (now {pull.head_sha}), never a prefix.") in reply
    assert f"comment:\n\n```\n{full}\n```\n" in reply
    assert e.screens() == [] and e.runner.runs == []
    post(e, "issue_comment", comment_on(8, "maint", full, 7002))
    wait_for(lambda: len(e.runner.runs) == 1, 30, "the dispatch of the approved head")
    assert e.runner.runs[0]["inputs"]["head_sha"] == pull.head_sha
    assert not bodies(e, "reply comment=7002 ")


# ------------------------------------------------------------------------ forged runs


def test_runs_that_are_not_the_screens_cannot_end_it(service: Env) -> None:
    e = service
    e.runner.hold = True
    e.runner.zips = [NOT_A_ZIP]
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: len(e.runner.runs) == 1 and e.screens()
             and e.screen(1).check_run_id is not None, 30, "the dispatch")
    s1 = e.screen(1)
    rid, head = s1.request_id, s1.head_sha
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    e.double.add_workflow(REPO, "ci.yml", name="ci")
    forged = []
    # a pull request's CI run, titled with the request id (a PR title is its author's)
    forged.append(e.double.add_run(REPO, "ci.yml", head, conclusion="failure",
                                   display_title=f"fix (request {rid})", event="pull_request"))
    # the screen workflow itself, run again by hand with the same title: not the recorded run
    forged.append(e.double.add_run(REPO, "screen.yml", head, conclusion="success",
                                   display_title=f"screen noop (PR #{PR}, request {rid})"))
    sent = []
    for run in forged:
        run.update(updated_at=now, created_at=now, run_started_at=now)
        sent.append(post(e, "workflow_run", run_payload(REPO, run)))
        sent.append(post(e, "workflow_job", job_payload(
            REPO, run, "in_progress", datetime.now(UTC))))
    wait_for(lambda: processed(e, *sent), 30, "the forged runs handled")
    s1 = e.screen(1)
    assert (s1.state, s1.run_id, s1.runner_name) == ("dispatched", e.runner.runs[0]["id"], None)
    assert not bodies(e, "campaign-bot:screen-result")
    assert e.checks()[0]["status"] == "in_progress"
    # the screen's own run still ends it
    e.runner.release[rid].set()
    wait_for(lambda: finished(e, 1), 60, "the screen reported")
    assert e.screen(1).verdict == "REFUSED"
    assert e.screen(1).runner_name == "standin-runner-1"


# ------------------------------------------------------------ errors after the write


def test_github_errors_after_writes_are_looked_up_not_repeated(service: Env) -> None:
    e = service
    d = e.double
    e.runner.hold = True
    e.runner.zips = [NOT_A_ZIP]
    comments = f"/repos/{REPO}/issues/{PR}/comments"
    d.inject("POST", f"/repos/{REPO}/actions/workflows/screen.yml/dispatches", 502,
             after_write=True)  # the run is created, then GitHub answers 502
    d.inject("POST", f"/repos/{REPO}/check-runs", 403, retry_after=1)  # secondary rate limit
    d.inject("POST", comments, 502, after_write=True)  # the status comment is stored, then 502
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: e.screens() and e.screen(1).check_run_id is not None, 60,
             "the screen dispatched with its check run")
    s1 = e.screen(1)
    assert len(d.repo(REPO).runs) == 1 and s1.run_id == e.runner.runs[0]["id"]
    assert s1.state == "dispatched"
    assert len(bodies(e, "campaign-bot:screen-status screen=S1 ")) == 1
    assert len(e.checks()) == 1
    posts = [c for c in d.calls if c.method == "POST" and c.path.endswith("/check-runs")]
    assert [c.status for c in posts] == [403, 201]
    assert posts[1].at - posts[0].at >= 1.0  # Retry-After: 1 was honoured
    dispatches = [c for c in d.calls if c.path.endswith("/dispatches")]
    assert [c.status for c in dispatches] == [502]  # looked up, never sent again
    # the result comment: stored, then 502
    d.inject("POST", comments, 502, after_write=True)
    e.runner.release[s1.request_id].set()
    wait_for(lambda: finished(e, 1), 60, "the screen reported")
    assert len(bodies(e, "campaign-bot:screen-result screen=S1 ")) == 1
    assert e.checks()[0]["status"] == "completed"
    assert sum(c.injected for c in d.calls) == 4


# ------------------------------------------------------------------- one comment, once


def test_one_comment_delivered_twice_is_one_screen(service: Env) -> None:
    e = service
    e.runner.hold = True
    payload = comment_payload(REPO, "maint", "/screen candidate noop", 8001)
    first = post(e, "issue_comment", payload)
    again = post(e, "issue_comment", payload)  # GitHub's redelivery: a new delivery id
    edited = copy.deepcopy(payload)
    edited["action"] = "edited"
    edited["changes"] = {"body": {"from": ""}}  # the diff alone would run the command again
    third = post(e, "issue_comment", edited)
    wait_for(lambda: processed(e, first, again, third), 60, "the three deliveries")
    assert len(e.screens()) == 1 and len(e.runner.runs) == 1
    assert len(bodies(e, "campaign-bot:screen-status ")) == 1
    assert not bodies(e, "campaign-bot:reply ")
    # a changed command in the same comment is a new request
    changed = copy.deepcopy(payload)
    changed["action"] = "edited"
    changed["comment"]["body"] = "/screen control"
    changed["changes"] = {"body": {"from": "/screen candidate noop"}}
    edit = post(e, "issue_comment", changed)
    wait_for(lambda: processed(e, edit), 60, "the edit")
    assert [s.kind for s in e.screens()] == ["candidate", "control"]


# ------------------------------------------------------------- pushes and closed PRs


@pytest.mark.parametrize("service", [LARGE_BUDGET], indirect=True)
def test_push_repins_and_close_cancels_queued_screens(service: Env) -> None:
    e = service
    e.runner.hold = True
    e.runner.zips = [NOT_A_ZIP, NOT_A_ZIP]
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: len(e.runner.runs) == 1, 30, "S1 dispatched")
    e.say("maint", "/screen control")
    e.say("maint", "/screen candidate noop sessions=4")
    wait_for(lambda: len(e.screens()) == 3 and len(e.comments()) == 3, 30, "two queued")
    old = e.screen(2).head_sha
    new = e.double.push(REPO, PR, {"campaigns/standin/NOTES.md": "pushed while queued\n"})
    pushed = post(e, "pull_request", pr_payload("synchronize", PR, new))
    wait_for(lambda: processed(e, pushed), 30, "the push")
    assert [s.head_sha for s in e.screens()] == [old, new, new]
    assert f"Re-pinned to the new head {new[:12]} pushed while queued (was {old[:12]})." in (
        bodies(e, "campaign-bot:screen-status screen=S2 ")[0])
    e.runner.release[e.runner.runs[0]["inputs"]["request_id"]].set()
    wait_for(lambda: len(e.runner.runs) == 2, 60, "S2 dispatched")
    assert e.runner.runs[1]["inputs"]["head_sha"] == new
    # the PR is closed while S3 waits: S3 is cancelled, with the reason in its comment
    e.double.repo(REPO).pulls[PR].state = "closed"
    e.double.repo(REPO).issues[PR]["state"] = "closed"
    closed = post(e, "pull_request", pr_payload("closed", PR, new, merged=False))
    wait_for(lambda: processed(e, closed), 30, "the close")
    s3 = e.screen(3)
    assert (s3.state, s3.cancelled_by, s3.run_id) == ("cancelled", "campaign-bot", None)
    status3 = bodies(e, "campaign-bot:screen-status screen=S3 ")[0]
    assert "Cancelled: the PR was closed before the screen started." in status3
    assert "### 🚫 Screen S3: `noop` on `1s-lossless`: cancelled" in status3
    e.runner.release[e.runner.runs[1]["inputs"]["request_id"]].set()
    wait_for(lambda: finished(e, 3), 60, "S2 reported")
    assert len(e.runner.runs) == 2  # S3 never ran


# ------------------------------------------------------------- commands in code, quotes


def test_commands_in_html_code_and_quotes_run_nothing(service: Env) -> None:
    e = service
    for i, name in enumerate(sorted(HIDDEN)):
        post(e, "issue_comment", comment_payload(REPO, "maint", HIDDEN[name], 9000 + i))
    last = e.say("maint", "/screen status")  # processed after the others (one queue per
    wait_for(lambda: bodies(e, f"reply comment={last} "), 60, "the status reply")  # install)
    assert e.screens() == [] and e.runner.runs == []
    assert len(e.comments()) == 1
