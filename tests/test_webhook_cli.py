"""Settings, ``campaign-bot serve`` refusal, ``deliveries`` and ``replay`` (issue 5)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner
from webhook_helpers import SECRET, fixture_bytes, headers_for

from bot import database
from bot.inbox import store
from bot.inbox.delivery import sign
from bot.inbox.router import Event, Router
from bot.inbox.worker import Worker
from bot.metrics import Metrics
from bot.settings import SettingsError, load_settings
from evidence.cli import _load_plugins, app

_load_plugins()
runner = CliRunner()


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean CAMPAIGN_BOT_* environment, cwd in tmp_path."""
    for k in list(os.environ):
        if k.startswith("CAMPAIGN_BOT_"):
            monkeypatch.delenv(k)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_missing_secret_names_the_variable(env: Path) -> None:
    with pytest.raises(SettingsError, match="CAMPAIGN_BOT_WEBHOOK_SECRET is not set"):
        load_settings()
    with pytest.raises(SettingsError, match="CAMPAIGN_BOT_WEBHOOK_SECRET: .*must not be empty"):
        load_settings(webhook_secret="  ")


def test_serve_refuses_to_start_without_secret(env: Path) -> None:
    e = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    p = subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
                       cwd=env, env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert "CAMPAIGN_BOT_WEBHOOK_SECRET is not set" in p.stderr
    assert "Traceback" not in p.stderr


def test_settings_from_env_file_and_defaults(env: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (env / ".env").write_text("CAMPAIGN_BOT_WEBHOOK_SECRET=from-dotenv\nCAMPAIGN_BOT_PORT=9001\n")
    s = load_settings()
    assert s.webhook_secret.get_secret_value() == "from-dotenv" and s.port == 9001
    assert s.database_url == "sqlite:///campaign-bot.sqlite3"
    assert s.max_body_bytes == 25 * 1024 * 1024
    monkeypatch.setenv("CAMPAIGN_BOT_PORT", "9002")  # environment wins over .env
    monkeypatch.setenv("CAMPAIGN_BOT_RETRY_DELAYS", "1,2")
    s = load_settings()
    assert s.port == 9002 and s.retry_delay_seconds == [1.0, 2.0]
    monkeypatch.setenv("CAMPAIGN_BOT_PORT", "http")
    with pytest.raises(SettingsError, match="CAMPAIGN_BOT_PORT"):
        load_settings()


def test_private_key_file_unreadable_names_the_variable(env: Path) -> None:
    s = load_settings(webhook_secret="x", private_key_file=env / "missing.pem")
    with pytest.raises(SettingsError, match="CAMPAIGN_BOT_PRIVATE_KEY_FILE"):
        s.private_key_pem()


@pytest.mark.parametrize("kind", ["readme", "ed25519"])
def test_serve_refuses_a_key_that_is_not_an_app_key(env: Path, kind: str) -> None:
    """``serve`` with README.md (or a runner's ed25519 key) as the App private key stops at
    start with one line naming the variable, before it listens (it started "ready" and
    every GitHub call failed later)."""
    root = Path(__file__).resolve().parents[1]
    key = root / "README.md"
    if kind == "ed25519":
        key = env / "runner.key"
        assert runner.invoke(app, ["keygen", str(key)]).exit_code == 0
    e = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    e.update(CAMPAIGN_BOT_WEBHOOK_SECRET="x", CAMPAIGN_BOT_APP_ID="1",
             CAMPAIGN_BOT_PRIVATE_KEY_FILE=str(key), CAMPAIGN_BOT_PORT="1",
             CAMPAIGN_BOT_DATABASE_URL=f"sqlite:///{env / 'bot.sqlite3'}")
    p = subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
                       cwd=env, env=e, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, p.stdout + p.stderr
    first = f"error: CAMPAIGN_BOT_PRIVATE_KEY_FILE ({key}): "
    assert p.stderr.startswith(first) and p.stderr.count("\n") == 1, p.stderr
    assert ("the key type is ed25519" if kind == "ed25519" else "no PEM private key") \
        in p.stderr
    assert "Uvicorn running" not in p.stdout + p.stderr


def test_unreachable_database_exits_2_naming_the_variable(env: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CAMPAIGN_BOT_DATABASE_URL", "postgresql://nobody@127.0.0.1:1/none")
    r = runner.invoke(app, ["deliveries"])
    assert r.exit_code == 2
    assert "CAMPAIGN_BOT_DATABASE_URL" in r.output


def _fill(env: Path) -> Any:
    """A database with one done, one failed delivery (processed by a real worker)."""
    engine = database.make_engine(f"sqlite:///{env / 'campaign-bot.sqlite3'}")
    database.migrate(engine)
    body_ok = fixture_bytes("issue_comment")
    body_bad = b'{"action": "opened", "repository": {"full_name": "o/r"}}'
    rows = [
        store.NewDelivery("good-1", "issue_comment", "created", "o/r", "repo:o/r",
                          headers_for(body_ok, "issue_comment", "good-1"), body_ok,
                          store.utcnow()),
        store.NewDelivery("bad-1", "issues", "opened", "o/r", "repo:o/r",
                          headers_for(body_bad, "issues", "bad-1"), body_bad, store.utcnow()),
    ]
    rows = [store.NewDelivery(**{**r.__dict__, "headers": {k.lower(): v for k, v in
                                                             r.headers.items()}}) for r in rows]
    with engine.begin() as c:
        store.insert_deliveries(c, rows)
    r = Router()

    @r.on("issues")
    def explode(event: Event, gh: Any, config: Any) -> None:
        raise RuntimeError("GitHub answered 422: line must be part of the diff")

    def ctx(event: Event) -> tuple[Any, Any]:
        return None, None

    asyncio.run(Worker(engine, ctx, router=r, max_attempts=2, retry_delays=[0],
                       metrics=Metrics()).run_until_idle())
    return engine


def test_deliveries_of_an_empty_database_say_so(env: Path) -> None:
    """No delivery stored: one sentence, not an empty table's frame."""
    database.migrate(database.make_engine(f"sqlite:///{env / 'campaign-bot.sqlite3'}"))
    r = runner.invoke(app, ["deliveries"])
    assert r.exit_code == 0 and r.output.startswith("no deliveries stored yet"), r.output
    assert "┏" not in r.output and "+--" not in r.output
    r = runner.invoke(app, ["deliveries", "--failed"])
    assert r.exit_code == 0 and r.output == "no failed deliveries stored\n", r.output


def test_deliveries_lists_and_failed_exits_1(env: Path) -> None:
    _fill(env)
    r = runner.invoke(app, ["deliveries", "--json"])
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(d["delivery_id"], d["status"]) for d in rows] == [("bad-1", "failed"),
                                                               ("good-1", "done")]
    r = runner.invoke(app, ["deliveries", "--failed"])
    assert r.exit_code == 1
    assert "bad-1" in r.output and "good-1" not in r.output
    assert "line must be part of the diff" in r.output
    r = runner.invoke(app, ["deliveries", "--failed", "--json"])
    assert r.exit_code == 1
    [failed] = json.loads(r.output)
    assert failed["attempts"] == 2 and len(failed["failures"]) == 2


def test_export_then_replay_checks_the_signature(env: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    _fill(env)
    r = runner.invoke(app, ["deliveries", "--export", "no-such-id"])
    assert r.exit_code == 2 and "no stored delivery 'no-such-id'" in r.output
    r = runner.invoke(app, ["deliveries", "--export", "good-1"])
    assert r.exit_code == 0
    saved = json.loads(r.output)
    assert saved["body"].encode() == fixture_bytes("issue_comment")
    # an event nobody handles: replay verifies and reports that nothing would be written
    saved["headers"]["x-github-event"] = "unhandled_event"
    f = env / "d.json"
    f.write_text(json.dumps(saved))
    monkeypatch.setenv("CAMPAIGN_BOT_WEBHOOK_SECRET", SECRET)
    r = runner.invoke(app, ["replay", str(f)])
    assert r.exit_code == 0, r.output
    assert "signature ok" in r.output and "no handler" in r.output
    monkeypatch.setenv("CAMPAIGN_BOT_WEBHOOK_SECRET", "another secret")
    r = runner.invoke(app, ["replay", str(f)])
    assert r.exit_code == 1 and "does not match" in r.output
    r = runner.invoke(app, ["replay", "--resign", str(f)])
    assert r.exit_code == 0 and "signature ok" in r.output
    saved["body"] = saved["body"].replace("Codertocat", "Mallory")
    f.write_text(json.dumps(saved))
    monkeypatch.setenv("CAMPAIGN_BOT_WEBHOOK_SECRET", SECRET)
    r = runner.invoke(app, ["replay", str(f)])
    assert r.exit_code == 1


def test_replay_github_recent_deliveries_format(env: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """``GET /app/hook/deliveries/{id}`` gives parsed payload; GitHub signed compact JSON."""
    payload = json.loads(fixture_bytes("issues"))
    signed = json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()
    doc = {"id": 1, "guid": "g-1", "event": "issues", "request": {
        "headers": {"X-GitHub-Event": "unhandled_event", "X-GitHub-Delivery": "g-1",
                    "X-Hub-Signature-256": sign(SECRET, signed),
                    "Content-Type": "application/json"},
        "payload": payload}, "response": {"headers": {}, "payload": None}}
    f = env / "recent.json"
    f.write_text(json.dumps(doc, indent=2))
    monkeypatch.setenv("CAMPAIGN_BOT_WEBHOOK_SECRET", SECRET)
    r = runner.invoke(app, ["replay", str(f)])
    assert r.exit_code == 0, r.output
    assert "g-1" in r.output


@pytest.mark.parametrize("content,msg", [
    (None, "cannot read"),
    ("{nope", "not JSON"),
    ('{"headers": {"x-github-event": "x"}}', "no 'body'"),
    ('{"body": "{}"}', "no 'headers'"),
    ('{"headers": {"x-github-event": "x"}, "body": "{}"}', "x-github-delivery"),
], ids=["missing", "not-json", "no-body", "no-headers", "no-delivery-header"])
def test_replay_unreadable_input_exits_2(env: Path, monkeypatch: pytest.MonkeyPatch,
                                         content: str | None, msg: str) -> None:
    monkeypatch.setenv("CAMPAIGN_BOT_WEBHOOK_SECRET", SECRET)
    f = env / "d.json"
    if content is not None:
        f.write_text(content)
    r = runner.invoke(app, ["replay", str(f)])
    assert r.exit_code == 2, r.output
    assert msg in r.output and "d.json" in r.output


def test_replay_names_a_missing_file_before_the_settings(env: Path) -> None:
    """``replay nosuch.json`` with no settings at all names the file (it complained about the
    webhook secret first)."""
    r = runner.invoke(app, ["replay", str(env / "nosuch.json")])
    assert r.exit_code == 2, r.output
    assert "nosuch.json" in r.output and "WEBHOOK_SECRET" not in r.output, r.output


def test_every_setting_is_documented() -> None:
    from bot.settings import Settings

    doc = (Path(__file__).resolve().parents[1] / "docs" / "reference" / "environment.md")
    text = doc.read_text()
    missing = [f"CAMPAIGN_BOT_{f.upper()}" for f in Settings.model_fields
               if f"CAMPAIGN_BOT_{f.upper()}" not in text]
    assert missing == []


def test_serve_without_credentials_warns_and_fails_each_delivery_once(env: Path) -> None:
    """Only a webhook secret: a warning at start naming the variables; a delivery is stored,
    fails once with one log line (no traceback) and is not retried."""
    import signal

    import httpx
    from webhook_helpers import free_port, wait_for

    port = free_port()
    e = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    e.update(CAMPAIGN_BOT_WEBHOOK_SECRET=SECRET, CAMPAIGN_BOT_PORT=str(port))
    log = env / "serve.log"
    with log.open("wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", "from evidence.cli import main; main()",
                                 "serve"], cwd=env, env=e, stdout=out, stderr=subprocess.STDOUT)
        base = f"http://127.0.0.1:{port}"
        try:
            def up() -> bool:
                assert proc.poll() is None, log.read_text()
                try:
                    return httpx.get(f"{base}/healthz", timeout=1).status_code == 200
                except httpx.HTTPError:
                    return False

            wait_for(up, 30, "serve")
            body = fixture_bytes("issues")
            r = httpx.post(f"{base}/webhook", content=body,
                           headers=headers_for(body, "issues", "nocred-1"))
            assert r.status_code == 202
            wait_for(lambda: "failed permanently" in log.read_text(), 30, "the failure line")
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(20)
    text = log.read_text()
    assert "deliveries are stored but not handled" in text
    assert "CAMPAIGN_BOT_APP_ID" in text and "CAMPAIGN_BOT_TOKEN" in text
    assert text.index("deliveries are stored but not handled") < text.index("ready")
    assert "Traceback" not in text and "retry in" not in text, text
    fails = [ln for ln in text.splitlines() if "nocred-1" in ln]
    assert len(fails) == 1 and "no GitHub credentials" in fails[0], fails
    r2 = runner.invoke(app, ["deliveries", "--failed", "--json"])
    [failed] = json.loads(r2.output)
    assert failed["attempts"] == 1 and failed["status"] == "failed"


def test_deliveries_never_creates_a_missing_sqlite_database(env: Path) -> None:
    """A read-only command in a folder without the database: exit 2 naming the path and the
    variable, and no empty database file left behind."""
    for args in (["deliveries"], ["deliveries", "--failed"], ["deliveries", "--missing"],
                 ["deliveries", "--export", "x"]):
        r = runner.invoke(app, args)
        assert r.exit_code == 2, r.output
        out = " ".join(r.output.split())
        assert f"{env / 'campaign-bot.sqlite3'}: no such database file" in out, out
        assert "CAMPAIGN_BOT_DATABASE_URL" in out
        assert not (env / "campaign-bot.sqlite3").exists()
    r = runner.invoke(app, ["deliveries"], env={"CAMPAIGN_BOT_DATABASE_URL":
                                                f"sqlite:///{env}/sub/bot.db"})
    assert r.exit_code == 2 and not (env / "sub").exists()
