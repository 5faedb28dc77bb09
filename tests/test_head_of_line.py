"""Permanent failures and head-of-line blocking, through the real service: a signed
``/campaign help`` comment delivered over HTTP to ``campaign-bot serve`` (worker process,
SQLite) that answers on the GitHub double.

* GitHub's 422 and a 404 repository are not retried: the delivery ends ``failed`` after one
  attempt with ``permanent: not retried: ...`` as its last error (``campaign-bot
  deliveries`` shows it), and the next delivery of the same installation runs at once.
* A payload of the wrong shape fails at once with an error naming the field, without a
  traceback in the log.
* A transient failure is retried, but while it waits out its retry delay the later
  deliveries of its installation run.
"""

from __future__ import annotations

import copy
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from github_helpers import BOT, REPO, comment_event
from webhook_helpers import SECRET, free_port, headers_for, wait_for

from bot import database
from bot.inbox import store

RETRY_DELAY_S = 30  # far longer than any wait below: only a skipped wait lets d2 through


class Service:
    """One ``campaign-bot serve`` on the double, its database, and a signed sender."""

    def __init__(self, double: Any, tmp: Path) -> None:
        self.double, self.tmp, self.port = double, tmp, free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
        env.update(CAMPAIGN_BOT_WEBHOOK_SECRET=SECRET, CAMPAIGN_BOT_TOKEN="test-token",
                   CAMPAIGN_BOT_GITHUB_API_URL=double.base_url,
                   CAMPAIGN_BOT_PORT=str(self.port), CAMPAIGN_BOT_BOT_LOGIN=BOT,
                   CAMPAIGN_BOT_RETRY_DELAYS=str(RETRY_DELAY_S), CAMPAIGN_BOT_MAX_ATTEMPTS="3")
        self.env = env
        self.log = tmp / "serve.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
            cwd=tmp, env=env, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)
        self.base = f"http://127.0.0.1:{self.port}"

        def up() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            try:
                return httpx.get(f"{self.base}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(up, 30, "serve")
        self.engine = database.make_engine(f"sqlite:///{tmp / 'campaign-bot.sqlite3'}")

    def send(self, delivery: str, payload: dict[str, Any], event: str = "issue_comment") -> None:
        body = json.dumps(payload).encode()
        r = httpx.post(f"{self.base}/webhook", content=body,
                       headers=headers_for(body, event, delivery))
        assert r.status_code == 202, r.text

    def row(self, delivery: str) -> dict[str, Any]:
        rows = {r["delivery_id"]: r for r in store.list_deliveries(self.engine, limit=100)}
        return rows.get(delivery, {})

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.engine.dispose()


@pytest.fixture
def service(github_double: Any, tmp_path: Path) -> Iterator[Service]:
    github_double.add_repo(REPO, {"README.md": "hi\n"})
    github_double.add_pull(REPO, 2, {"README.md": "hi\nthere\n"}, user="dave")
    s = Service(github_double, tmp_path)
    yield s
    s.stop()


def _help(comment_id: int, repo: str = REPO) -> dict[str, Any]:
    p = comment_event("/campaign help", comment_id=comment_id).payload
    p["repository"]["full_name"] = repo
    return p


def _replies(double: Any) -> list[str]:
    return [c["body"] for c in double.repo(REPO).comments.values() if c["user"] == BOT]


def _failed_at_once_and_next_one_ran(service: Service, bad: str) -> dict[str, Any]:
    service.send("d-2", _help(602))
    wait_for(lambda: service.row("d-2").get("status") == "done"
             and service.row(bad).get("status") in ("failed", "done"), 60,
             "the next delivery of the installation, and the failing one's end")
    row = service.row(bad)
    assert (row["status"], row["attempts"]) == ("failed", 1), row
    assert row["last_error"].startswith("permanent: not retried: "), row
    assert len(_replies(service.double)) == 1  # d-2's reply
    return row


def test_a_422_from_github_is_not_retried_and_does_not_hold_the_installation(
        service: Service) -> None:
    service.double.inject("POST", f"/repos/{REPO}/issues/2/comments", 422,
                          message="Validation Failed")
    service.send("d-1", _help(601))
    row = _failed_at_once_and_next_one_ran(service, "d-1")
    assert "422" in row["last_error"]
    # the operator's view: the reason is on the delivery row
    out = subprocess.run(
        [sys.executable, "-c", "from evidence.cli import main; main()", "deliveries",
         "--failed", "--json"], cwd=service.tmp, env=service.env, capture_output=True,
        text=True, timeout=60)
    assert out.returncode == 1, out.stderr
    [shown] = json.loads(out.stdout)
    assert shown["delivery_id"] == "d-1" and "422" in shown["last_error"]
    assert shown["last_error"].startswith("permanent: not retried: ")


def test_a_404_repository_is_not_retried_and_does_not_hold_the_installation(
        service: Service) -> None:
    service.send("d-1", _help(601, repo="acme/deleted-repository"))
    row = _failed_at_once_and_next_one_ran(service, "d-1")
    assert "404" in row["last_error"]


@pytest.mark.parametrize(("event", "mangle", "field"), [
    ("issue_comment", lambda p: p.update(comment="oops"), "comment"),
    ("issue_comment", lambda p: p["issue"].update(number="two"), "issue.number"),
    ("issue_comment", lambda p: p.update(repository=["acme/x"]), "repository"),
    # ids past a signed 64-bit BIGINT, and a repository without its full_name, were an
    # OverflowError / KeyError retried three times
    ("issue_comment", lambda p: p["comment"].update(id=2**63), "comment.id"),
    ("issue_comment", lambda p: p["repository"].pop("full_name"), "repository.full_name"),
])
def test_a_wrong_shape_payload_fails_at_once_naming_the_field(
        service: Service, event: str, mangle: Any, field: str) -> None:
    p = copy.deepcopy(_help(601))
    mangle(p)
    service.send("d-1", p, event)
    row = _failed_at_once_and_next_one_ran(service, "d-1")
    assert f"{event} payload: {field}: " in row["last_error"], row["last_error"]
    log = service.log.read_text()
    assert "Traceback" not in log and "AttributeError" not in log, log[-3000:]


def test_a_retried_delivery_lets_the_later_ones_of_its_installation_run_while_it_waits(
        service: Service) -> None:
    service.double.inject("POST", f"/repos/{REPO}/issues/2/comments", 502)
    service.send("d-1", _help(601))
    wait_for(lambda: service.row("d-1").get("attempts") == 1
             and service.row("d-1").get("status") == "queued", 30, "the first attempt failing")
    service.send("d-2", _help(602))
    service.send("d-3", _help(603))
    wait_for(lambda: service.row("d-3").get("status") == "done", 20,
             "the later deliveries, while d-1 waits for its retry")
    waiting = service.row("d-1")
    assert (waiting["status"], waiting["attempts"]) == ("queued", 1)  # still waiting
    assert "502" in waiting["last_error"] and "permanent" not in waiting["last_error"]
    assert len(_replies(service.double)) == 2
