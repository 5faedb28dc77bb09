"""The GitHub App manifest flow served by the bot, in real headless Chromium from the click to
the stored credentials: ``campaign-bot serve`` without credentials prints a one-time setup
URL; its page posts the manifest to the GitHub double's github.com page; the double creates
the App and redirects back with a code; the bot exchanges it, stores the credentials (mode
0600, never logged) and works as that App without a restart."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import httpx
import pytest
from app_setup_helpers import chromium_available, create_app_in_browser, serve_unconfigured
from github_helpers import REPO, comment_event
from webhook_helpers import wait_for

from bot.setup import SetupFlow, StoredApp, load_credentials, save_credentials

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not chromium_available(),
                                 reason="Playwright or /usr/bin/chromium not installed")]


def test_from_click_to_stored_credentials_and_working_as_the_app(
        github_double: Any, tmp_path: Path) -> None:
    d = github_double
    svc = serve_unconfigured(d, tmp_path)
    try:
        # before the setup: webhooks are refused, the setup page needs the token
        r = httpx.post(f"{svc.url}/webhook", content=b"{}",
                       headers={"X-Hub-Signature-256": "sha256=00", "X-GitHub-Event": "ping",
                                "X-GitHub-Delivery": "x"})
        assert r.status_code == 503 and "finish the GitHub App setup" in r.text
        assert httpx.get(f"{svc.url}/setup").status_code == 403
        assert httpx.get(f"{svc.url}/setup?token=wrong").status_code == 403
        forged = httpx.get(f"{svc.url}/setup/callback?code=abc&state=forged")
        assert forged.status_code == 403 and "state" in forged.text
        page = httpx.get(svc.setup_url)
        assert page.status_code == 200 and "Create GitHub App" in page.text
        # no App yet: no sign-in for the live pages
        assert httpx.get(f"{svc.url}/login?next=/c/o/r/c/").status_code == 404
        assert page.headers["cache-control"] == "no-store"

        done = create_app_in_browser(svc.setup_url, "My Campaign Bot", shots=tmp_path)

        assert done["title"] == "GitHub App created", done
        (app,) = d.apps.values()
        assert app["slug"] == "my-campaign-bot" and app["owner"] == "octocat"
        assert "works as the App my-campaign-bot" in done["body"]
        assert done["install_href"] == "https://github.com/apps/my-campaign-bot/installations/new"
        # the manifest GitHub received is the bot's own
        m = app["manifest"]
        assert m["hook_attributes"]["url"] == f"{svc.url}/webhook"
        assert m["redirect_url"] == f"{svc.url}/setup/callback"
        assert m["default_permissions"]["actions"] == "write"
        assert "issue_comment" in m["default_events"]
        # the credentials: stored with mode 0600, as GitHub gave them; never in the log
        assert stat.S_IMODE(svc.credentials.stat().st_mode) == 0o600
        stored = json.loads(svc.credentials.read_text())
        assert (stored["app_id"], stored["slug"]) == (app["id"], "my-campaign-bot")
        assert stored["private_key"] == app["pem"]
        assert stored["webhook_secret"] == app["webhook_secret"]
        assert m["callback_urls"] == [f"{svc.url}/login/callback"]
        assert (stored["client_id"], stored["client_secret"]) == (app["client_id"],
                                                                  app["client_secret"])
        assert app["client_secret"] not in log_text(svc)
        # ... and the live pages' sign-in works as that App at once, no restart
        login = httpx.get(f"{svc.url}/login?next=/c/o/r/c/")
        assert login.status_code == 302
        assert login.headers["location"].startswith(f"{d.base_url}/login/oauth/authorize?")
        assert f"client_id={app['client_id']}" in login.headers["location"]
        log = svc.log.read_text()
        assert app["webhook_secret"] not in log and "PRIVATE KEY" not in log
        assert app["pem"].splitlines()[1] not in log
        # the setup is over: the page and the callback are gone
        assert httpx.get(svc.setup_url).status_code == 410
        # the bot works as that App, no restart: a signed delivery is accepted and handled,
        # the reply is written with an installation token minted by a JWT of the stored key
        d.add_repo(REPO, {"README.md": "x\n"})
        d.add_pull(REPO, 2, {"README.md": "y\n"})
        ev = comment_event("/campaign help", login="alice")
        assert d.deliver(app["id"], "issue_comment", ev.payload) == 202
        wait_for(lambda: any(c["user"] == "my-campaign-bot[bot]"
                             for c in d.repo(REPO).comments.values()), 30, "the help reply")
        assert any(c.operation == "apps/create-installation-access-token" and c.status == 201
                   for c in d.calls)
        assert svc.proc.poll() is None
    finally:
        svc.stop()
    # a restart reads the stored App: no setup URL, straight to work
    restarted = load_credentials(svc.credentials)
    assert restarted is not None and restarted.bot_login == "my-campaign-bot[bot]"


def test_the_app_can_belong_to_an_organisation(github_double: Any, tmp_path: Path) -> None:
    svc = serve_unconfigured(github_double, tmp_path)
    try:
        done = create_app_in_browser(svc.setup_url, "octo-org bot", org="octo-org")
        assert done["title"] == "GitHub App created"
        (app,) = github_double.apps.values()
        assert (app["owner"], app["org"]) == ("octo-org", True)
        assert any(c.path == "/organizations/octo-org/settings/apps/new" for c in
                   github_double.calls)
    finally:
        svc.stop()


def test_a_used_or_unknown_code_is_refused_without_storing(github_double: Any,
                                                           tmp_path: Path) -> None:
    """The callback with the right state but a code GitHub does not know: nothing stored,
    the page says what happened, the setup can be done again."""
    svc = serve_unconfigured(github_double, tmp_path)
    try:
        from app_setup_helpers import CHROMIUM, CHROMIUM_ARGS
        from playwright.sync_api import sync_playwright

        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page()
            page.goto(svc.setup_url)
            action = page.get_attribute("form[method=post]", "action") or ""
            state = action.split("state=")[1]
            page.goto(f"{svc.url}/setup/callback?code=not-a-code&state={state}")
            text = page.inner_text("#error")
            browser.close()
        assert "GitHub answered 404 to the code exchange" in text
        assert not svc.credentials.exists()
        assert httpx.get(svc.setup_url).status_code == 200  # still in setup mode
    finally:
        svc.stop()


def test_credentials_file_is_private_and_atomic(tmp_path: Path) -> None:
    p = tmp_path / "state" / "app.json"
    app = StoredApp(7, "bot", "-----BEGIN RSA PRIVATE KEY-----\nx\n", "s3cret", owner="o",
                    html_url="https://github.com/apps/bot")
    save_credentials(p, app)
    assert stat.S_IMODE(p.stat().st_mode) == 0o600
    assert load_credentials(p) == app
    assert "s3cret" not in repr(app) and "PRIVATE" not in str(app)
    assert [x.name for x in p.parent.iterdir()] == ["app.json"]  # no temporary left over
    p.write_text("{not json")
    with pytest.raises(Exception, match="cannot read the stored App credentials"):
        load_credentials(p)
    flow = SetupFlow("t" * 10, {}, "https://github.com", "https://api.github.com", p,
                     on_configured=lambda a: None)  # type: ignore[arg-type,return-value]
    assert flow.token_ok("t" * 10) and not flow.token_ok("t" * 9) and not flow.token_ok(None)
    assert len(SetupFlow.new_token()) >= 40
    a, b = flow.new_state(), flow.new_state()
    assert a != b and not flow.take_state(a, None) and not flow.take_state(a, b)
    assert flow.take_state(a, a) and not flow.take_state(a, a)  # one use


def log_text(svc: Any) -> str:
    """What ``serve`` wrote so far."""
    return str(svc.log.read_text())
