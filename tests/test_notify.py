"""Notifications: the ``[notify]`` section, the targets' settings, quiet hours, and the
outbox on SQLite and PostgreSQL sending to a real local receiver per protocol (Slack,
Feishu, Lark, DingTalk, Microsoft Teams workflows through the intercepting HTTPS double;
e-mail through an SMTP server; the signed webhook, whose HMAC the receiver verifies).

The whole loop through ``campaign-bot serve`` and the GitHub double is in
``tests/test_notify_e2e.py``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import pytest
from notify_receivers import MailReceiver, ServiceDouble, SignedHookReceiver
from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session
from webhook_helpers import DB_KINDS, database_url

from bot import events
from bot.database import make_engine, migrate
from bot.events import Notice, Notices
from bot.features.notify import store
from bot.features.notify.outbox import STALE_SENDING_S, Notifier, quiet_until, record
from bot.features.notify.send import SIGNATURE_HEADER
from bot.features.notify.settings import NotifySettings
from bot.repo_config import NotifySection, parse

REPO = "octo/private-campaign"
HOOK_SECRET = "hook-signing-secret"
DING_SECRET = "SECdingsecret"

# ------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(("text", "problem"), [
    ('targets = ["ops"]\nevents = ["screen_done"]', "notify.events: 'screen_done' is not an "
     "event; known: verdict_changed, screen_finished, screen_failed, queue_stuck, "
     "budget_80, budget_exhausted, fork_awaiting_approval"),
    ('targets = ["ops"]\ntimezone = "Mars/Olympus"', "notify.timezone: 'Mars/Olympus' is not "
     "an IANA time zone (e.g. Europe/Berlin)"),
    ('targets = ["ops"]\nquiet_hours = "22-7"', "notify.quiet_hours: String should match "
     "pattern"),
    ('targets = ["https://hooks.slack.com/services/T/B/C"]', "notify.targets: "
     "'https://hooks.slack.com/services/T/B/C' is not a target alias"),
    ('targets = ["ops"]\n[notify.only]\nchat = ["queue_stuck"]', "notify: [notify.only] names "
     "chat, which targets does not list"),
    ('targets = ["ops"]\nwebhook = "https://x"', "notify.webhook: unknown key; allowed here: "
     "targets, events, only, quiet_hours, timezone, max_per_hour"),
    ('targets = ["ops"]\nmax_per_hour = 0', "notify.max_per_hour: Input should be greater "
     "than or equal to 1"),
], ids=["unknown-event", "bad-timezone", "bad-quiet-hours", "url-instead-of-alias",
        "only-names-unlisted-target", "unknown-key", "zero-rate"])
def test_broken_notify_section_says_what_to_fix(text: str, problem: str) -> None:
    cfg, problems = parse(f"[notify]\n{text}\n")
    assert cfg is None
    assert len(problems) == 1
    assert f"{problems[0].key}: {problems[0].message}".startswith(problem), problems[0]
    assert problems[0].line == 1 or problems[0].line is None or problems[0].line >= 2


def test_notify_section_defaults_and_routing() -> None:
    cfg, problems = parse('[notify]\ntargets = ["chat", "ops-mail"]\n'
                          'events = ["screen_failed", "queue_stuck", "budget_exhausted"]\n'
                          '[notify.only]\nops-mail = ["budget_exhausted"]\n')
    assert problems == [] and cfg is not None
    n = cfg.notify
    assert (n.quiet_hours, n.timezone, n.max_per_hour) == ("", "UTC", 12)
    assert [k for k in events.KINDS if n.hears("chat", k)] == [
        "screen_failed", "queue_stuck", "budget_exhausted"]
    assert [k for k in events.KINDS if n.hears("ops-mail", k)] == ["budget_exhausted"]
    assert not n.hears("other", "screen_failed")  # a target the config does not name
    default, _ = parse("")
    assert default is not None and default.notify.targets == []


def test_target_settings_keep_urls_secret() -> None:
    s = NotifySettings.model_validate({"targets": {
        "chat": "slack://T1/B1/secrettoken",
        "hook": {"url": "https://hooks.example/x", "signing_secret": "k", "repos": ["octo/*"]}}})
    assert "secrettoken" not in repr(s) and "'k'" not in repr(s)
    assert s.targets["hook"].signed and not s.targets["chat"].signed
    assert s.targets["hook"].allows("Octo/anything") and not s.targets["hook"].allows("evil/x")
    with pytest.raises(ValidationError, match="signing_secret needs an http"):
        NotifySettings.model_validate({"targets": {"h": {"url": "slack://a/b/c",
                                                         "signing_secret": "k"}}})
    with pytest.raises(ValidationError, match="not a target alias"):
        NotifySettings.model_validate({"targets": {"bad alias": "slack://a/b/c"}})
    with pytest.raises(ValidationError, match="must be a URL"):
        NotifySettings.model_validate({"targets": {"chat": "hooks.slack.com"}})


def _utc(s: str) -> datetime:
    return datetime.fromisoformat(s).replace(tzinfo=UTC)


@pytest.mark.parametrize(("now", "window", "tz", "until"), [
    ("2026-12-02T23:30", "22:00-07:00", "UTC", "2026-12-03T07:00"),
    ("2026-12-03T03:00", "22:00-07:00", "UTC", "2026-12-03T07:00"),
    ("2026-12-03T07:00", "22:00-07:00", "UTC", None),
    ("2026-12-03T12:00", "22:00-07:00", "UTC", None),
    ("2026-12-03T12:30", "12:00-13:00", "UTC", "2026-12-03T13:00"),
    # 15:00 UTC is 23:00 in Shanghai (UTC+8): quiet until 07:00 local = 23:00 UTC
    ("2026-12-02T15:00", "22:00-07:00", "Asia/Shanghai", "2026-12-02T23:00"),
    ("2026-12-02T15:00", "09:00-09:00", "UTC", None),
], ids=["evening", "small-hours", "end-is-open", "day", "lunch", "time-zone", "empty"])
def test_quiet_hours(now: str, window: str, tz: str, until: str | None) -> None:
    got = quiet_until(_utc(now), window, tz)
    assert got == (_utc(until) if until else None)


# ---------------------------------------------------------------------------- the outbox


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceDouble]:
    d = ServiceDouble(tmp_path_factory.mktemp("ca"))
    yield d
    d.close()


@pytest.fixture
def receivers(services: ServiceDouble, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    for k, v in services.env.items():
        monkeypatch.setenv(k, v)
    services.received.clear()
    services.set_failing(None)
    mail, hook = MailReceiver(), SignedHookReceiver(HOOK_SECRET)

    class R:
        chat = services
        smtp = mail
        signed = hook

    yield R
    mail.close()
    hook.close()


def targets(r: Any) -> dict[str, Any]:
    """Every protocol, plus ``elsewhere``: a target no repository config names."""
    return {
        "slack": "slack://T0CAMP/B0CAMP/slacktoken1",
        "feishu": "feishu://feishutoken1",
        "lark": "lark://larktoken1",
        "dingtalk": f"dingtalk://{DING_SECRET}@dingtoken1/",
        "teams": "workflow://prod-00.westus.logic.azure.com:443/flow1/teamssig1",
        "mail": f"mailto://127.0.0.1:{r.smtp.port}?from=bot@example.com&to=ops@example.com",
        "hook": {"url": r.signed.url, "signing_secret": HOOK_SECRET},
        "elsewhere": "slack://T0ELSE/B0ELSE/othertoken",
        "other-org": {"url": "slack://T0ORG/B0ORG/orgtoken", "repos": ["other-org/*"]},
    }


NAMED = ["slack", "feishu", "lark", "dingtalk", "teams", "mail", "hook"]


class Clock:
    def __init__(self, t: datetime) -> None:
        self.t = t

    def __call__(self) -> datetime:
        return self.t


@pytest.fixture(params=DB_KINDS)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    with database_url(request.param, tmp_path) as url:
        eng = make_engine(url)
        migrate(eng)
        yield eng
        eng.dispose()


def notifier(engine: Any, r: Any, section: NotifySection, clock: Clock,
             **kw: Any) -> Notifier:
    settings = NotifySettings.model_validate({"targets": targets(r), "timeout_s": 5, **kw})
    return Notifier(engine, settings, lambda repo: section if repo == REPO else None,
                    now=clock)


def notice(n: int = 1, kind: str = events.SCREEN_FINISHED) -> Notice:
    return Notice(kind, REPO, f"screen-finished/{REPO}/req{n}",
                  f"Screen S{n} finished: SUPPORTED", "cache-dit on 5s-lossless, campaign "
                  "minimax-ref2va (private detail).",
                  f"https://github.com/{REPO}/pull/7#issuecomment-{100 + n}", "minimax-ref2va")


def emit(engine: Any, *notices: Notice) -> None:
    bus = Notices()
    bus.subscribe(lambda db, n: record(db, n))
    with Session(engine) as db:
        for n in notices:
            bus.emit(db, n)
        db.commit()


def section(**kw: Any) -> NotifySection:
    return NotifySection(targets=[*NAMED, "other-org"], **kw)


def chat_hosts(r: Any) -> list[str]:
    return sorted(x.host for x in r.chat.received)


def test_one_notification_per_target_and_protocol(engine: Any, receivers: Any) -> None:
    r = receivers
    clock = Clock(_utc("2026-12-02T12:00"))
    nt = notifier(engine, r, section(), clock)
    emit(engine, notice(1))
    emit(engine, notice(1))  # the same happening reported again (a redelivery): one notice
    assert nt.run_pass() == 7
    assert nt.run_pass() == 0  # nothing twice
    # chat services: each got one message, at its own endpoint, linking to the result
    link = f"https://github.com/{REPO}/pull/7#issuecomment-101"
    assert chat_hosts(r) == ["hooks.slack.com", "oapi.dingtalk.com", "open.feishu.cn",
                             "open.larksuite.com", "prod-00.westus.logic.azure.com"]
    by_host = {x.host: x for x in r.chat.received}
    slack = by_host["hooks.slack.com"]
    assert slack.path == "/services/T0CAMP/B0CAMP/slacktoken1"
    assert f"[{REPO}] Screen S1 finished: SUPPORTED" in slack.body.decode()
    for x in r.chat.received:
        # Teams' adaptive card is Markdown: Apprise escapes '#' and '-' there
        text = json.dumps(x.json(), ensure_ascii=False).replace("\\\\", "")
        assert link in text, (x.host, text)
    assert by_host["open.feishu.cn"].path == "/open-apis/bot/v2/hook/feishutoken1/"
    ding = by_host["oapi.dingtalk.com"]
    assert ding.query["access_token"] == ["dingtoken1"]
    # DingTalk's signing (its "custom robot" docs): base64 HMAC-SHA256 of "timestamp\nsecret"
    ts = ding.query["timestamp"][0]
    want = base64.b64encode(hmac.new(DING_SECRET.encode(), f"{ts}\n{DING_SECRET}".encode(),
                                     hashlib.sha256).digest()).decode()
    assert unquote(ding.query["sign"][0]) == want
    assert ding.json()["text"]["content"].startswith(f"[{REPO}] Screen S1 finished")
    teams = by_host["prod-00.westus.logic.azure.com"]
    assert teams.path.startswith("/workflows/flow1/triggers/manual/paths/invoke?")
    assert teams.query["sig"] == ["teamssig1"]
    assert teams.json()["attachments"][0]["contentType"] == \
        "application/vnd.microsoft.card.adaptive"
    # e-mail
    assert len(r.smtp.mails) == 1
    m = r.smtp.mails[0]
    assert m.recipients == ["ops@example.com"]
    assert m.subject == f"[{REPO}] Screen S1 finished: SUPPORTED"
    assert link in m.text
    # the signed webhook: the receiver verified the HMAC itself
    assert r.signed.rejected == [] and len(r.signed.received) == 1
    hook = r.signed.received[0]
    doc = hook.json()
    assert doc == {"schema": "campaign-bot/notification@1",
                   "delivery": f"screen-finished/{REPO}/req1#hook", "event": "screen_finished",
                   "repository": REPO, "campaign": "minimax-ref2va",
                   "title": f"[{REPO}] Screen S1 finished: SUPPORTED",
                   "text": "cache-dit on 5s-lossless, campaign minimax-ref2va (private "
                   "detail).", "url": link, "sent_at": "2026-12-02T12:00:00+00:00"}
    assert hook.headers[SIGNATURE_HEADER] == "sha256=" + hmac.new(
        HOOK_SECRET.encode(), hook.body, hashlib.sha256).hexdigest()
    # nothing reached a target the config does not name, nor one this repository may not use
    bodies = b"".join(x.body + x.path.encode() for x in r.chat.received)
    assert b"othertoken" not in bodies and b"orgtoken" not in bodies
    assert store_states(engine) == {"sent": 7, "failed": 1}
    with Session(engine) as db:
        refused = db.scalar(select(store.SendRow).where(store.SendRow.target == "other-org"))
        assert refused is not None and refused.detail == (
            f"CAMPAIGN_BOT_NOTIFY_TARGETS does not allow {REPO} to use 'other-org'")


def store_states(engine: Any) -> dict[str, int]:
    from bot.features.notify.outbox import counts

    return counts(engine)


def test_rolled_back_change_leaves_no_notice(engine: Any, receivers: Any) -> None:
    bus = Notices()
    bus.subscribe(lambda db, n: record(db, n))
    with Session(engine) as db:
        bus.emit(db, notice(1))
        db.rollback()  # the change it reported did not commit (a crash before the commit)
    nt = notifier(engine, receivers, section(), Clock(_utc("2026-12-02T12:00")))
    assert nt.run_pass() == 0 and receivers.chat.received == []


def test_quiet_hours_defer_and_rate_limit_holds(engine: Any, receivers: Any) -> None:
    r = receivers
    clock = Clock(_utc("2026-12-02T23:00"))
    sec = NotifySection(targets=["hook"], quiet_hours="22:00-07:00", max_per_hour=2)
    nt = notifier(engine, r, sec, clock)
    emit(engine, notice(1), notice(2), notice(3))
    assert nt.run_pass() == 0  # quiet hours: deferred, not dropped
    clock.t = _utc("2026-12-03T06:59")
    assert nt.run_pass() == 0 and r.signed.received == []
    clock.t = _utc("2026-12-03T07:00")
    assert nt.run_pass() == 2  # the rate limit: 2 per hour
    clock.t = _utc("2026-12-03T07:59")
    assert nt.run_pass() == 0
    clock.t = _utc("2026-12-03T08:00")
    assert nt.run_pass() == 1
    got = [x.json()["delivery"] for x in r.signed.received]
    assert got == [f"screen-finished/{REPO}/req{n}#hook" for n in (1, 2, 3)]
    assert [x.json()["sent_at"] for x in r.signed.received] == [
        "2026-12-03T07:00:00+00:00", "2026-12-03T07:00:00+00:00", "2026-12-03T08:00:00+00:00"]


def test_failed_send_is_retried_and_a_crash_mid_send_is_never_repeated(
        engine: Any, receivers: Any) -> None:
    r = receivers
    clock = Clock(_utc("2026-12-02T12:00"))
    nt = notifier(engine, r, NotifySection(targets=["slack"]), clock)
    emit(engine, notice(1))
    r.chat.set_failing(503)
    assert nt.run_pass() == 0
    assert len(r.chat.received) == 1  # tried once, refused
    r.chat.set_failing(None)
    assert nt.run_pass() == 0  # waits 1 minute before the next try
    clock.t += timedelta(minutes=1)
    assert nt.run_pass() == 1
    assert len(r.chat.received) == 2
    # a process that died during the call leaves the row "sending": never sent again
    emit(engine, notice(2))
    nt.route()
    with Session(engine) as db:
        row = db.scalar(select(store.SendRow).where(store.SendRow.state == store.PENDING))
        assert row is not None
        row.state, row.claimed_at = store.SENDING, clock.t
        db.commit()
    clock.t += timedelta(seconds=STALE_SENDING_S + 1)
    assert nt.run_pass() == 0
    assert len(r.chat.received) == 2
    assert store_states(engine) == {"sent": 1, "unknown": 1}


def test_broken_or_silent_config_sends_nothing(engine: Any, receivers: Any) -> None:
    clock = Clock(_utc("2026-12-02T12:00"))
    settings = NotifySettings.model_validate({"targets": targets(receivers)})
    broken = Notifier(engine, settings, lambda repo: None, now=clock)
    emit(engine, notice(1))
    assert broken.run_pass() == 0
    silent = Notifier(engine, settings, lambda repo: NotifySection(), now=clock)
    emit(engine, notice(2))
    assert silent.run_pass() == 0
    assert receivers.chat.received == [] and receivers.smtp.mails == []
    with Session(engine) as db:
        states = {n.key: (n.state, n.detail) for n in db.scalars(select(store.NoticeRow))}
    assert states == {f"screen-finished/{REPO}/req1": ("skipped",
                                                      "the repository config is broken"),
                      f"screen-finished/{REPO}/req2": ("routed", None)}


def test_notice_needs_a_link_and_a_known_kind() -> None:
    with pytest.raises(ValueError, match="links to its result"):
        Notice(events.QUEUE_STUCK, REPO, "k", "t", "x", "")
    with pytest.raises(ValueError, match="unknown notice kind 'screen_done'"):
        Notice("screen_done", REPO, "k", "t", "x", "https://github.com/")
    json.dumps(events.KINDS)


# ------------------------------------------------------------ the screen flow's notices


def test_screen_flow_notices_are_keyed_once_per_happening(engine: Any) -> None:
    """What the /screen flow emits (:mod:`bot.features.screen.notices`), recorded in the
    caller's transaction: finished, a changed verdict, budget at 80 % then exhausted (both
    resources, once per ceiling), a failed screen, a stuck queue; the same calls again (a
    redelivery, the watchdog) record nothing new."""
    from screen_scope import make_scope

    from bot.features.screen import budget
    from bot.features.screen import notices as screen_notices
    from bot.features.screen import queue as screens
    from bot.features.screen.queue import Screen
    from bot.features.screen.runtime import Runtime, ScreenOptions

    bus = Notices()
    bus.subscribe(lambda db, n: record(db, n))
    rt = Runtime(engine, ScreenOptions(web_url="https://ghe.example.com/"), emit=bus.emit)
    scope = make_scope()  # 16 wall-hours, 64 device-hours
    t0 = _utc("2026-12-02T10:00")

    def screen(db: Session, n: int, verdict: str | None, state: str) -> Screen:
        s = Screen(request_id=f"req{n}", repo="o/r", pr_number=5, campaign=scope.id,
                   campaign_path="campaigns/h3", kind="candidate", candidate="cache-dit",
                   track="5s-lossless", session_order="AB", pool="p", workflow="screen.yml",
                   device_count=4, head_sha="a" * 40, requested_by="amy",
                   authorised_as="write", requested_at=t0, state=state, verdict=verdict,
                   estimate_wall_s=60.0, estimate_device_s=240.0, result_comment_id=100 + n)
        db.add(s)
        db.flush()
        return s

    def keys() -> list[tuple[str, str, str]]:
        with Session(engine) as db:
            return [(n.kind, n.title, n.url) for n in
                    db.scalars(select(store.NoticeRow).order_by(store.NoticeRow.id))]

    with rt.db() as db:
        a = screen(db, 1, "SUPPORTED", screens.FINISHED)
        budget.charge_screen(db, a, 3600.0, "success")  # 4 of 64 device-hours
        screen_notices.screen_done(rt, db, a, scope)
    assert keys() == [("screen_finished", "Screen S1 finished: SUPPORTED",
                       "https://ghe.example.com/o/r/pull/5#issuecomment-101")]
    for _ in range(2):  # the second time: a redelivery of the same completion
        with rt.db() as db:
            b = db.get(Screen, 2) or screen(db, 2, "FAILED", screens.FINISHED)
            if b.charged_device_s is None:
                budget.charge_screen(db, b, 11.96 * 3600, "success")  # 12.96 h of 16 in all
            screen_notices.screen_done(rt, db, b, scope)
    pr = "https://ghe.example.com/o/r/pull/5"
    assert keys()[1:] == [
        ("screen_finished", "Screen S2 finished: FAILED", f"{pr}#issuecomment-102"),
        ("verdict_changed", "Verdict changed: cache-dit on 5s-lossless: SUPPORTED -> FAILED",
         f"{pr}#issuecomment-102"),
        ("budget_80", f"Campaign {scope.id}: 81% of device-hours used", pr),
        ("budget_80", f"Campaign {scope.id}: 81% of wall-hours used", pr),
    ]
    with rt.db() as db:
        c = screen(db, 3, None, screens.FAILED)
        c.detail = "Watchdog: the run did not report within 2.1 h (estimate 0.0 h)"
        budget.charge_screen(db, c, 4 * 3600, "watchdog")  # over both ceilings
        screen_notices.screen_done(rt, db, c, scope)
        d = screen(db, 4, None, screens.FAILED)
        screen_notices.queue_stuck(rt, db, d, "no runner started the job within 30 min")
        screen_notices.queue_stuck(rt, db, d, "no runner started the job within 30 min")
    assert keys()[5:] == [
        ("screen_failed", "Screen S3 failed: cache-dit on 5s-lossless",
         f"{pr}#issuecomment-103"),
        ("budget_exhausted", f"Campaign {scope.id}: 106% of device-hours used", pr),
        ("budget_exhausted", f"Campaign {scope.id}: 106% of wall-hours used", pr),
        ("queue_stuck", "Pool p stuck: screen S4 never started", f"{pr}#issuecomment-104"),
    ]
    with Session(engine) as db:
        texts = {n.kind: n.text for n in db.scalars(select(store.NoticeRow))}
    assert texts["screen_failed"] == c.detail
    assert texts["queue_stuck"] == "no runner started the job within 30 min."


def test_old_notices_are_forgotten_and_no_targets_means_no_outbox(engine: Any,
                                                                   receivers: Any) -> None:
    from bot.app import compose
    from bot.features.notify.outbox import RETENTION_S
    from bot.settings import Settings

    clock = Clock(_utc("2026-12-02T12:00"))
    nt = notifier(engine, receivers, NotifySection(targets=["hook"]), clock)
    bus = Notices()
    bus.subscribe(lambda db, n: record(db, n, clock.t))
    with Session(engine) as db:
        bus.emit(db, notice(1))
        db.commit()
    assert nt.run_pass() == 1
    clock.t += timedelta(seconds=RETENTION_S + 1)
    assert nt.run_pass() == 0
    assert store_states(engine) == {}
    # a bot without targets records nothing and runs no sending job
    app = compose(Settings(webhook_secret="s", token="t"), engine,
                  context=lambda event: (None, None))
    assert "notify-outbox" not in [j.id for j in app.jobs]
    assert app.notices.subscribers == []


def test_a_failing_notice_never_fails_the_screen(engine: Any,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    from bot.features.screen import notices as screen_notices
    from bot.features.screen import queue as screens
    from bot.features.screen.queue import Screen
    from bot.features.screen.runtime import Runtime

    def broken(db: Session, n: Notice) -> None:
        raise RuntimeError("outbox down")

    bus = Notices()
    bus.subscribe(broken)
    bus.subscribe(lambda db, n: record(db, n))  # a later subscriber still gets it
    rt = Runtime(engine, emit=bus.emit)
    with rt.db() as db:
        s = Screen(request_id="r1", repo="o/r", pr_number=5, campaign="c", campaign_path="c",
                   kind="control", candidate="control", track="t", session_order="AB",
                   pool="p", workflow="screen.yml", device_count=1, head_sha="a" * 40,
                   requested_by="amy", authorised_as="write", requested_at=_utc(
                       "2026-12-02T10:00"), state=screens.FINISHED, verdict="REPEATABLE",
                   estimate_wall_s=1.0, estimate_device_s=1.0)
        db.add(s)
        db.flush()
        # a scope that is not a campaign's: the budget part fails, and is only logged
        screen_notices.screen_done(rt, db, s, scope="not a scope")
    with Session(engine) as db:
        assert [n.kind for n in db.scalars(select(store.NoticeRow))] == ["screen_finished"]
        assert db.get(Screen, s.id) is not None  # the screen's transaction committed
    assert "not recorded by" in caplog.text and "screen notice budget_notices not emitted" in \
        caplog.text


def test_config_read_again_at_send_time(engine: Any, receivers: Any) -> None:
    """A target the config stopped naming after routing is not sent to; a retry that falls
    into quiet hours waits for their end."""
    r = receivers
    clock = Clock(_utc("2026-12-02T12:00"))
    current = {"sec": NotifySection(targets=["hook", "slack"], quiet_hours="12:01-13:00")}
    settings = NotifySettings.model_validate({"targets": targets(r), "timeout_s": 5})
    nt = Notifier(engine, settings, lambda repo: current["sec"], now=clock)
    emit(engine, notice(1))
    nt.route()
    current["sec"] = NotifySection(targets=["slack"], quiet_hours="12:01-13:00")
    r.chat.set_failing(503)
    assert nt.deliver() == 0
    assert r.signed.received == [] and len(r.chat.received) == 1  # slack tried, refused
    r.chat.set_failing(None)
    clock.t = _utc("2026-12-02T12:01")  # the retry is due, but the quiet hours began
    assert nt.deliver() == 0 and len(r.chat.received) == 1
    clock.t = _utc("2026-12-02T13:00")
    assert nt.deliver() == 1 and len(r.chat.received) == 2
    with Session(engine) as db:
        rows = {x.target: (x.state, x.detail) for x in db.scalars(select(store.SendRow))}
    assert rows == {"hook": ("failed", "the repository config no longer names this target "
                                       "for this event"),
                    "slack": ("sent", None)}


def test_migration_matches_the_tables(engine: Any) -> None:
    """Revision 0013_notify creates exactly what :mod:`bot.features.notify.store` declares
    (Alembic's autogenerate comparison finds nothing for the notify tables)."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    from bot.database import Base

    with engine.connect() as conn:
        mc = MigrationContext.configure(conn, opts={"compare_type": True})
        diff = [d for d in compare_metadata(mc, Base.metadata) if "notify_" in repr(d)]
    assert diff == []


def test_doctor_names_each_target_and_never_its_url() -> None:
    from bot.doctor import check_notify
    from bot.settings import Settings

    def settings(t: dict[str, Any]) -> Settings:
        return Settings(notify=NotifySettings.model_validate({"targets": t}))

    assert check_notify(settings({})) is None
    ok = check_notify(settings({"chat": "slack://T1/B1/secrettoken",
                                "ding": "dingtalk://dingtoken1/",
                                "hook": {"url": "https://h.example/x", "signing_secret": "k"}}))
    assert ok is not None and (ok.name, ok.status) == ("notification targets", "ok")
    assert ok.detail == "chat (Slack), ding (DingTalk), hook (signed webhook)"
    bad = check_notify(settings({"chat": "slack://T1/B1/secrettoken",
                                 "typo": "slakc://T1/B1/othersecret"}))
    assert bad is not None and (bad.status, bad.detail) == ("fail", "not an Apprise URL: typo")
    assert "secret" not in bad.detail + str(bad.fix) + ok.detail
