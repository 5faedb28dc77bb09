"""``campaign-bot replay`` without GitHub access, secrets masked in every message and log line,
and ``--help`` texts shown whole: all through the console script in a subprocess.

The deliveries are built from GitHub's own example payloads (tests/fixtures/github/webhooks).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import typer

from bot.app import configure_logging
from bot.inbox.delivery import sign
from bot.redaction import Redactor, mask_url
from bot.settings import Settings
from tests.webhook_helpers import database_url

ROOT = Path(__file__).resolve().parents[1]
WEBHOOKS = ROOT / "tests" / "fixtures" / "github" / "webhooks"
SCRIPT = Path(sys.executable).parent / "campaign-bot"
SECRET = "replay-secret-9f2c41"
TOKEN = "ghs_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
DB_PASSWORD = "secretpw-7c1e"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env.update(CAMPAIGN_BOT_WEBHOOK_SECRET=SECRET, NO_COLOR="1", TERM="dumb", COLUMNS="120",
               CAMPAIGN_BOT_DATABASE_URL=f"sqlite:///{tmp_path / 'bot.sqlite3'}")
    env.update(extra)
    return env


def _run(args: list[str], env: dict[str, str], cwd: Path,
         timeout: float = 120) -> subprocess.CompletedProcess[str]:
    if not SCRIPT.exists():
        pytest.fail(f"no campaign-bot console script beside {sys.executable}")
    return subprocess.run([str(SCRIPT), *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


def help_delivery(path: Path, text: str = "/campaign help") -> Path:
    """A signed ``issue_comment.created`` delivery (GitHub's example payload) whose comment
    is ``text``, saved as ``deliveries --export`` prints it."""
    payload = json.loads((WEBHOOKS / "issue_comment" / "created.payload.json").read_text())
    payload["comment"]["body"] = text
    body = json.dumps(payload, separators=(",", ":"))
    path.write_text(json.dumps({"headers": {
        "X-GitHub-Event": "issue_comment", "X-GitHub-Delivery": "0f1e2d3c-help",
        "Content-Type": "application/json",
        "X-Hub-Signature-256": sign(SECRET, body.encode())}, "body": body}))
    return path


def _no_traceback(r: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in r.stdout + r.stderr, r.stdout + r.stderr


# ------------------------------------------------------------------------ offline replay


def test_offline_replay_of_campaign_help_prints_the_comment(tmp_path: Path) -> None:
    f = help_delivery(tmp_path / "d.json")
    t0 = time.monotonic()
    r = _run(["replay", str(f)], _env(tmp_path), tmp_path)
    took = time.monotonic() - t0
    _no_traceback(r)
    assert r.returncode == 0, r.stdout + r.stderr
    out = r.stdout
    assert "no GitHub credentials configured" in out
    assert "1 GitHub write(s) the handlers would make:" in out
    assert "1. create_issue_comment number=1" in out
    # the whole comment, every command with its usage (including the budget's campaign=ID)
    body = out.split("--- body of write 1 ---", 1)[1].split("--- end of write 1 ---", 1)[0]
    assert "<!-- campaign-bot:reply comment=492700400" in body
    for usage in ("### `/campaign help`", "/campaign budget extend [directions=N] "
                  "[wall-hours=H] [device-hours=H] [campaign=ID] [reason=TEXT]",
                  "### `/campaign refresh`", "### `/campaign verify`"):
        assert usage in body
    assert not (tmp_path / "bot.sqlite3").exists(), "a dry run touched the configured database"
    assert took < 60, f"offline replay took {took:.0f} s"


def test_offline_flag_makes_no_request_even_with_credentials(tmp_path: Path) -> None:
    import socket

    # a port that accepts nothing: any GitHub request would fail (and print a warning)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = _env(tmp_path, CAMPAIGN_BOT_TOKEN=TOKEN,
               CAMPAIGN_BOT_GITHUB_API_URL=f"http://127.0.0.1:{port}")
    r = _run(["replay", "--offline", str(help_delivery(tmp_path / "d.json"))], env, tmp_path)
    _no_traceback(r)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "note: --offline" in r.stdout and "warning" not in r.stdout
    assert "create_issue_comment number=1" in r.stdout
    # --apply makes writes: it cannot be offline
    r = _run(["replay", "--offline", "--apply", str(tmp_path / "d.json")], env, tmp_path)
    _no_traceback(r)
    assert r.returncode == 2 and "cannot be combined with --offline" in r.stderr


def test_unreachable_github_with_a_token_falls_back_clearly_and_hides_the_token(
        tmp_path: Path) -> None:
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    env = _env(tmp_path, CAMPAIGN_BOT_TOKEN=TOKEN, CAMPAIGN_BOT_LOG_LEVEL="DEBUG",
               CAMPAIGN_BOT_GITHUB_API_URL=f"http://127.0.0.1:{port}")
    r = _run(["replay", str(help_delivery(tmp_path / "d.json"))], env, tmp_path)
    both = r.stdout + r.stderr
    assert r.returncode == 0, both
    assert "warning: no GitHub access (" in r.stdout
    assert "reads answer from the delivery's payload, as with --offline" in r.stdout
    assert "create_issue_comment number=1" in r.stdout
    assert TOKEN not in both and TOKEN[4:] not in both
    # --apply cannot fall back: a clear message, exit 2
    r = _run(["replay", "--apply", str(tmp_path / "d.json")], env, tmp_path)
    both = r.stdout + r.stderr
    _no_traceback(r)
    assert r.returncode == 2 and "error: --apply needs GitHub access:" in r.stderr, both
    assert TOKEN not in both and TOKEN[4:] not in both


@pytest.mark.parametrize("content,expect", [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"body": "{}"}', "no 'headers' object"),
    ('{"headers": {"X-GitHub-Event": "ping"}, "body": "{}"}', "headers lack 'x-github-delivery'"),
    ('{"headers": {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "1"}}', "no 'body' string"),
    ('{"headers": {"X-GitHub-Event": "ping", "X-GitHub-Delivery": "1"}, "body": "[1]"}',
     "body is JSON list, not an object"),
], ids=["not-json", "not-object", "no-headers", "no-delivery-id", "no-body", "body-array"])
def test_a_malformed_delivery_file_names_file_and_field(tmp_path: Path, content: str,
                                                         expect: str) -> None:
    f = tmp_path / "bad-delivery.json"
    f.write_text(content)
    r = _run(["replay", "--resign", str(f)], _env(tmp_path), tmp_path)
    _no_traceback(r)
    assert r.returncode == 2, r.stdout + r.stderr
    assert str(f) in r.stderr and expect in r.stderr, r.stderr


# ------------------------------------------------------------------------------- secrets


def test_mask_url_and_the_redactor() -> None:
    assert mask_url(f"postgresql+psycopg://postgres:{DB_PASSWORD}@db:5432/bot") == \
        "postgresql+psycopg://postgres:***@db:5432/bot"
    assert mask_url("sqlite:///campaign-bot.sqlite3") == "sqlite:///campaign-bot.sqlite3"
    r = Redactor([SECRET, "ab"])
    assert r(f"x {SECRET} y") == "x *** y"
    assert r("ab stays: too short to be a secret") == "ab stays: too short to be a secret"
    assert r(f"Authorization: token {TOKEN}") == "Authorization: token ***"
    assert r("Authorization: Bearer eyJhbGciOi.x.y") == "Authorization: Bearer ***"
    assert r("github_pat_11ABCDEFG0123456789_abcdefghijklmnop") == "***"
    assert r("a token refreshed at noon") == "a token refreshed at noon"
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow" + "A" * 40 + "\n-----END RSA PRIVATE KEY-----"
    assert "MIIEow" not in r(f"bad key: {pem}")


def test_a_bad_database_url_never_shows_its_password(tmp_path: Path) -> None:
    env = _env(tmp_path, CAMPAIGN_BOT_DATABASE_URL=f"postgresql://postgres:{DB_PASSWORD}"
                                                   "@127.0.0.1:1/none")
    for args in (["deliveries"], ["serve", "--port", "1"]):
        r = _run(args, env, tmp_path)
        both = r.stdout + r.stderr
        _no_traceback(r)
        assert r.returncode == 2, both
        assert "CAMPAIGN_BOT_DATABASE_URL: cannot open 'postgresql://postgres:***@127.0.0.1:1" \
            in r.stderr, both
        assert DB_PASSWORD not in both


@pytest.mark.postgres
def test_serve_on_an_unmigrated_postgresql_database_hides_the_password(
        tmp_path: Path) -> None:
    """Replicas share a PostgreSQL database, so serve takes no lock there but refuses a
    schema `campaign-bot migrate` has not brought up to date; that refusal names the database
    URL with its password masked."""
    with database_url("postgres", tmp_path) as url:
        url = url.replace("postgres@", f"postgres:{DB_PASSWORD}@", 1)  # trust auth ignores it
        r = _run(["serve", "--port", "1"], _env(tmp_path, CAMPAIGN_BOT_DATABASE_URL=url),
                 tmp_path)
    both = r.stdout + r.stderr
    assert r.returncode == 2, both
    assert "run `campaign-bot migrate`" in r.stderr, both
    assert "postgres:***@127.0.0.1" in r.stderr and DB_PASSWORD not in both


def test_every_log_line_is_masked(tmp_path: Path) -> None:
    """The composition root's logging filter masks configured secrets and token shapes in
    messages, arguments and tracebacks (a child process: logging is process-wide)."""
    key = "-----BEGIN RSA PRIVATE KEY-----\nMIIEpAIBAAKCAQEA" + "x" * 48 + \
        "\n-----END RSA PRIVATE KEY-----\n"
    code = f"""
import logging
from bot.app import configure_logging
from bot.settings import Settings
s = Settings(webhook_secret={SECRET!r}, token={TOKEN!r}, private_key={key!r},
             database_url='postgresql://u:{DB_PASSWORD}@h/db', log_level='INFO')
configure_logging(s, '%(levelname)s %(name)s: %(message)s')
log = logging.getLogger('github')
log.warning('secret %s token %s', {SECRET!r}, {TOKEN!r})
log.warning('headers %s', {{'Authorization': 'Bearer some-opaque-credential-1234567890'}})
log.warning('pem %s', {key!r})
log.warning('opening postgresql://u:{DB_PASSWORD}@h/db')
log.warning('another token ghp_abcdefghijklmnopqrstuvwxyz0123 and %s', 'fine')
try:
    raise RuntimeError('bad credentials ' + {TOKEN!r})
except RuntimeError:
    log.exception('call failed')
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT, env={k: v for k, v in os.environ.items()
                                      if not k.startswith("CAMPAIGN_BOT_")}, timeout=60)
    err = r.stderr
    assert r.returncode == 0, err
    for secret in (SECRET, TOKEN, DB_PASSWORD, "MIIEpAIBAAKCAQEA", "some-opaque-credential",
                   "ghp_abcdefghij"):
        assert secret not in err, f"{secret!r} in:\n{err}"
    assert "call failed" in err and "RuntimeError: bad credentials ***" in err
    assert err.count("***") >= 7
    assert "and fine" in err


def test_configure_logging_returns_a_redactor_of_the_settings_secrets() -> None:
    s = Settings(webhook_secret=SECRET, token=TOKEN,
                 database_url=f"postgresql://u:{DB_PASSWORD}@h/db")
    redact = configure_logging(s, "%(message)s")
    assert redact(f"{SECRET} {DB_PASSWORD}") == "*** ***"


# ---------------------------------------------------------------------- --help texts


def _walk(cmd: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    out = [(path, cmd)]
    for name, sub in (getattr(cmd, "commands", None) or {}).items():
        out += _walk(sub, (*path, name))
    return out


def _squash(text: str) -> str:
    return "".join(c for c in text if not c.isspace() and c not in "│╭╮╰╯─")


def test_help_shows_every_bracketed_text_of_every_command(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Rich markup must not eat ``[...]`` in help texts (``serve --help`` once lost
    ``[default: CAMPAIGN_BOT_HOST or 127.0.0.1]``)."""
    import re

    from evidence import cli

    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.setenv("NO_COLOR", "1")

    shown = cli.command()
    cli._load_plugins()
    source = typer.main.get_command(cli.app)  # the same commands, help texts untouched
    src_by_path = dict(_walk(source))
    checked, missing = 0, []
    for path, _cmd in _walk(shown):
        src = src_by_path[path]
        texts = [src.help or ""] + [getattr(p, "help", None) or "" for p in src.params]
        wanted = [m for t in texts for m in re.findall(r"\[[^\[\]\n]+\]", t)]
        if not wanted:
            continue
        capsys.readouterr()
        try:
            shown.main([*path, "--help"], prog_name="campaign-bot", standalone_mode=False)
        except SystemExit as exc:
            assert exc.code in (0, None), path
        out = _squash(capsys.readouterr().out)
        for w in wanted:
            checked += 1
            if _squash(w) not in out:
                missing.append(f"campaign-bot {' '.join(path)} --help lacks {w!r}")
    assert missing == []
    assert checked >= 2  # serve's --host and --port at least


def test_serve_help_through_the_console_script(tmp_path: Path) -> None:
    r = _run(["serve", "--help"], _env(tmp_path, COLUMNS="200"), tmp_path)
    assert r.returncode == 0
    assert "[default: CAMPAIGN_BOT_HOST or 127.0.0.1]" in r.stdout
    assert "[default: CAMPAIGN_BOT_PORT or 8080]" in r.stdout
