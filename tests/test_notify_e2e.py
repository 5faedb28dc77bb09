"""Notifications end to end: ``campaign-bot serve`` (SQLite) as a subprocess, the GitHub
double, the runner double of ``tests/test_screen_service_e2e.py`` running a real screen, and
a real local receiver per protocol (``tests/notify_receivers.py``): the chat services behind
the intercepting HTTPS double (Slack, Feishu, DingTalk, Teams workflows), an SMTP server, and
the signed webhook whose HMAC the receiver verifies.

* A screen of a private repository finishes while the sending job cannot run yet;
  ``serve`` is killed (SIGKILL), the ``workflow_run`` completion is delivered again, and a
  new ``serve`` on the same database
  sends exactly one notification per named target, linking to the result comment; the
  target the repository does not name (configured on the bot all the same) gets nothing.
* ``/screen`` on a fork's PR without an approval notifies ``fork_awaiting_approval`` once,
  however often the comment is delivered.
* The rate limit (``max_per_hour = 1``): a second fork PR's notice waits for the hour to
  pass; quiet hours around now: the notice waits for their end (deferred, not dropped).
"""

from __future__ import annotations

import hashlib
import hmac
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest
from notify_receivers import MailReceiver, ServiceDouble, SignedHookReceiver
from test_screen_service_e2e import (
    CLI,
    PR,
    REPO,
    Env,
    comment_payload,
    keys,  # noqa: F401 - the module-scoped fixture, used by name
    run_payload,
    start_service,
)
from webhook_helpers import free_port, wait_for

pytestmark = pytest.mark.slow

HOOK_SECRET = "e2e-hook-secret"
NOTIFY_TOML = """
[notify]
targets = ["chat", "feishu", "ding", "teams", "mail", "hook"]
events = ["screen_finished", "screen_failed", "verdict_changed", "fork_awaiting_approval"]
max_per_hour = 20
"""


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceDouble]:
    d = ServiceDouble(tmp_path_factory.mktemp("ca"))
    yield d
    d.close()


class Receivers:
    def __init__(self, chat: ServiceDouble) -> None:
        self.chat = chat
        self.smtp = MailReceiver()
        self.signed = SignedHookReceiver(HOOK_SECRET)

    def targets(self) -> str:
        import json

        return json.dumps({
            "chat": "slack://T0E2E/B0E2E/e2etoken",
            "feishu": "feishu://e2efeishu",
            "ding": "dingtalk://SECe2e@e2edingtoken/",
            "teams": "workflow://prod-01.westus.logic.azure.com:443/e2eflow/e2esig",
            "mail": f"mailto://127.0.0.1:{self.smtp.port}?from=bot@example.com"
                    "&to=campaign@example.com",
            "hook": {"url": self.signed.url, "signing_secret": HOOK_SECRET},
            "elsewhere": "slack://T0ELSE/B0ELSE/elsewheretoken",
        })

    def count(self) -> int:
        return len(self.chat.received) + len(self.smtp.mails) + len(self.signed.received)

    def close(self) -> None:
        self.smtp.close()
        self.signed.close()


@pytest.fixture
def receivers(services: ServiceDouble, monkeypatch: pytest.MonkeyPatch) -> Iterator[Receivers]:
    services.received.clear()
    r = Receivers(services)
    for k, v in services.env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("CAMPAIGN_BOT_NOTIFY_TARGETS", r.targets())
    yield r
    r.close()


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def restart(e: Env, tmp: Path, double: Any, **env_over: str) -> subprocess.Popen[bytes]:
    """A new ``serve`` on ``e``'s database and the double (what start_service runs)."""
    port = free_port()
    env = dict(os.environ)
    env.update({
        "CAMPAIGN_BOT_WEBHOOK_SECRET": "e2e-secret", "CAMPAIGN_BOT_TOKEN": "test-token",
        "CAMPAIGN_BOT_GITHUB_API_URL": double.base_url, "CAMPAIGN_BOT_PORT": str(port),
        "CAMPAIGN_BOT_DATABASE_URL": f"sqlite:///{e.db}", "CAMPAIGN_BOT_GITHUB_THROTTLE": "false",
        "CAMPAIGN_BOT_SCREEN_DEBOUNCE_S": "0", "CAMPAIGN_BOT_RETRY_DELAYS": "1",
        "CAMPAIGN_BOT_SCREEN_WATCHDOG_INTERVAL_S": "3600",
        "CAMPAIGN_BOT_BOT_LOGIN": "campaign-bot[bot]",
        "CAMPAIGN_BOT_GIT_CACHE_DIR": str(tmp / "git-mirrors"), **env_over,
    })
    log = open(tmp / "serve-2.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([*CLI, "serve"], cwd=tmp, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail("serve exited:\n" + (tmp / "serve-2.log").read_text()[-3000:])
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "the restarted serve")
    e.url = e.runner.bot_url = url
    e.proc = proc
    return proc


def test_one_notification_per_target_across_a_crash_and_a_redelivery(
        github_double: Any, tmp_path: Path, keys: tuple[Path, Path],  # noqa: F811
        receivers: Receivers, monkeypatch: pytest.MonkeyPatch) -> None:
    r = receivers
    # the first serve records notices but its sending job would run only in an hour
    monkeypatch.setenv("CAMPAIGN_BOT_NOTIFY_INTERVAL_S", "3600")
    e = start_service(github_double, tmp_path, keys, {"wall_hours": 4.0, "device_hours": 8.0},
                      screen_toml=NOTIFY_TOML)
    github_double.repo(REPO).private = True  # a private campaign: only named targets hear
    try:
        e.say("maint", "/screen candidate noop")
        wait_for(lambda: bool(e.screens()) and e.screen(1).state in ("finished", "failed"),
                 120, "the screen's result")
        s1 = e.screen(1)
        assert s1.result_comment_id is not None
        assert r.count() == 0
        stop(e.proc, signal.SIGKILL)  # a crash: nothing was sent, the notice is stored
        run = github_double.repo(REPO).runs[e.runner.runs[0]["id"]]
        proc = restart(e, tmp_path, github_double, CAMPAIGN_BOT_NOTIFY_INTERVAL_S="0.5")
        e.runner.deliver("workflow_run", run_payload(REPO, run))  # GitHub delivers it again
        wait_for(lambda: r.count() >= 6, 60, "one notification per named target")
        time.sleep(3)  # a few more passes of the sending job: nothing more arrives
        kind = "screen_finished" if s1.state == "finished" else "screen_failed"
        title = (f"[{REPO}] Screen S1 finished: {s1.verdict}" if kind == "screen_finished"
                 else f"[{REPO}] Screen S1 failed: noop on 1s-lossless")
        link = f"https://github.com/{REPO}/pull/{PR}#issuecomment-{s1.result_comment_id}"
        assert sorted(x.host for x in r.chat.received) == [
            "hooks.slack.com", "oapi.dingtalk.com", "open.feishu.cn",
            "prod-01.westus.logic.azure.com"]
        for x in r.chat.received:
            text = x.body.decode().replace("\\\\", "")
            assert title in text and link in text, (x.host, text)
            assert b"elsewheretoken" not in x.path.encode() + x.body
        assert [(m.subject, m.recipients) for m in r.smtp.mails] == [
            (title, ["campaign@example.com"])]
        assert link in r.smtp.mails[0].text
        assert r.signed.rejected == [] and len(r.signed.received) == 1
        hook = r.signed.received[0]
        assert hook.headers["X-Campaign-Bot-Signature-256"] == "sha256=" + hmac.new(
            HOOK_SECRET.encode(), hook.body, hashlib.sha256).hexdigest()
        doc = hook.json()
        assert (doc["event"], doc["repository"], doc["title"], doc["url"]) == (
            kind, REPO, title, link)
        assert doc["delivery"] == f"{kind.replace('_', '-')}/{REPO}/{s1.request_id}#hook"
        assert r.count() == 6
    finally:
        stop(e.proc)
        github_double.dispatch_hooks.clear()
        github_double.cancel_hooks.clear()
        github_double.push_hooks.clear()
    assert proc.returncode is not None


def test_fork_awaiting_approval_is_notified_once(
        github_double: Any, tmp_path: Path, keys: tuple[Path, Path],  # noqa: F811
        receivers: Receivers, monkeypatch: pytest.MonkeyPatch) -> None:
    r = receivers
    monkeypatch.setenv("CAMPAIGN_BOT_NOTIFY_INTERVAL_S", "0.5")
    e = start_service(github_double, tmp_path, keys, {"wall_hours": 4.0, "device_hours": 8.0},
                      screen_toml=NOTIFY_TOML, fork="forker/standin-campaign")
    try:
        cid = e.say("maint", "/screen candidate noop")
        wait_for(lambda: any(f"reply comment={cid} " in b for b in e.comments()), 30,
                 "the refusal naming the head to approve")
        head = github_double.repo(REPO).pulls[PR].head_sha
        assert f"sha={head}" in e.reply_to(cid)
        # the same comment delivered again (a new delivery id): still one notice
        e.runner.deliver("issue_comment", comment_payload(REPO, "maint",
                                                          "/screen candidate noop", cid))
        wait_for(lambda: r.count() >= 6, 60, "the notifications")
        time.sleep(3)
        assert r.count() == 6
        doc = r.signed.received[0].json()
        assert doc["event"] == "fork_awaiting_approval"
        assert doc["title"] == f"[{REPO}] Fork PR #{PR} awaits approval of head {head[:12]}"
        assert doc["url"] == f"https://github.com/{REPO}/pull/{PR}"
        assert e.screens() == []  # nothing queued, nothing ran
    finally:
        stop(e.proc)
        github_double.dispatch_hooks.clear()
        github_double.cancel_hooks.clear()
        github_double.push_hooks.clear()



def sends(e: Env) -> list[tuple[str, str, str, datetime, str | None]]:
    """``(target, state, notice key, not_before, detail)`` of every send, oldest first."""
    from sqlalchemy import create_engine, select
    from sqlalchemy.orm import Session

    from bot.features.notify.store import NoticeRow, SendRow

    eng = create_engine(f"sqlite:///{e.db}")
    try:
        with Session(eng) as db:
            rows = db.execute(select(SendRow, NoticeRow.key).join(
                NoticeRow, NoticeRow.id == SendRow.notice_id).order_by(SendRow.id)).all()
            return [(r.target, r.state, key, r.not_before.replace(tzinfo=UTC), r.detail)
                    for r, key in rows]
    finally:
        eng.dispose()


def hook_only(extra: str) -> str:
    return ('\n[notify]\ntargets = ["hook"]\nevents = ["fork_awaiting_approval"]\n'
            + extra + "\n")


def test_rate_limit_defers_through_serve(
        github_double: Any, tmp_path: Path, keys: tuple[Path, Path],  # noqa: F811
        receivers: Receivers, monkeypatch: pytest.MonkeyPatch) -> None:
    r = receivers
    monkeypatch.setenv("CAMPAIGN_BOT_NOTIFY_INTERVAL_S", "0.5")
    e = start_service(github_double, tmp_path, keys, {"wall_hours": 4.0, "device_hours": 8.0},
                      screen_toml=hook_only("max_per_hour = 1"),
                      fork="forker/standin-campaign")
    try:
        github_double.add_pull(REPO, 8, {"campaigns/standin/NOTES.md": "second\n"},
                               fork="forker2/standin-campaign", head_ref="second")
        e.say("maint", "/screen candidate noop")
        wait_for(lambda: len(r.signed.received) == 1, 60, "the first notification")
        e.cid += 1  # a comment on the second PR (e.say's payload for another number is an
        # issue's, not a pull request's)
        pr8 = comment_payload(REPO, "maint", "/screen candidate noop", e.cid)
        pr8["issue"]["number"] = 8
        e.runner.deliver("issue_comment", pr8)
        wait_for(lambda: len(sends(e)) == 2 and sends(e)[1][4] is not None, 60,
                 "the second notification held by the rate limit")
        time.sleep(2)
        assert len(r.signed.received) == 1 and r.count() == 1
        first, second = sends(e)
        assert first[:2] == ("hook", "sent") and f"/{PR}/" in first[2]
        sent_at = datetime.fromisoformat(r.signed.received[0].json()["sent_at"])
        assert second[:2] == ("hook", "pending") and "/8/" in second[2]
        assert second[3] - sent_at == timedelta(hours=1)  # when the window has room again
        assert second[4] == "rate limit: 1 per hour"
    finally:
        stop(e.proc)
        github_double.dispatch_hooks.clear()
        github_double.cancel_hooks.clear()
        github_double.push_hooks.clear()


def test_quiet_hours_defer_through_serve(
        github_double: Any, tmp_path: Path, keys: tuple[Path, Path],  # noqa: F811
        receivers: Receivers, monkeypatch: pytest.MonkeyPatch) -> None:
    r = receivers
    monkeypatch.setenv("CAMPAIGN_BOT_NOTIFY_INTERVAL_S", "0.5")
    zone = ZoneInfo("Asia/Shanghai")
    now = datetime.now(UTC)
    start = (now - timedelta(hours=1)).astimezone(zone)
    end = (now + timedelta(hours=2)).astimezone(zone)
    window = f"{start:%H:%M}-{end:%H:%M}"
    e = start_service(github_double, tmp_path, keys, {"wall_hours": 4.0, "device_hours": 8.0},
                      screen_toml=hook_only(f'quiet_hours = "{window}"\n'
                                            'timezone = "Asia/Shanghai"'),
                      fork="forker/standin-campaign")
    try:
        e.say("maint", "/screen candidate noop")
        wait_for(lambda: len(sends(e)) == 1, 60, "the notice routed")
        time.sleep(2)
        assert r.count() == 0  # held, not sent
        ((target, state, key, not_before, _detail),) = sends(e)
        assert (target, state) == ("hook", "pending") and key.startswith("fork-approval/")
        assert not_before == end.replace(second=0, microsecond=0).astimezone(UTC), window
    finally:
        stop(e.proc)
        github_double.dispatch_hooks.clear()
        github_double.cancel_hooks.clear()
        github_double.push_hooks.clear()
