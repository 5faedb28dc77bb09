"""GitHub sign-in for the live pages of private repositories, through the real service
(``create_app`` under uvicorn, real SQLite) and the GitHub double over HTTP: the App is
registered from the bot's own manifest (its ``callback_urls``), the person authorizes it on
the double's ``/login/oauth/authorize`` page, the bot exchanges the code at
``/login/oauth/access_token`` and asks ``GET /repos/{owner}/{repo}`` with the user token.

Checked: a private page sends a visitor without a session to sign in, and after the flow
shows the page with a sign-out button, uncacheable; the access answer is reused (no GitHub
call per page view); a person who cannot read the repository gets the same 404 as an
unknown repository, and an anonymous visitor gets the same redirect for both; sign-ins
started in two tabs both complete; a tampered, replayed, expired or foreign state, a state
without its cookie, a tampered or foreign
session cookie and an open redirect are refused; a revoked token sends the person to sign in
again; sign-out ends the session; the cookies are HttpOnly, SameSite=Lax, Secure on https and
never hold the token in plain text; the setup page's App feeds the settings; incomplete
settings name the variable.  Headless Chromium does the whole flow as a person would.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from _report_campaign import write_campaign
from sqlalchemy.orm import Session
from webhook_helpers import SECRET, free_port, threaded_server

from bot import database
from bot.app import app_manifest, create_app
from bot.features.dashboard import live, signin
from bot.features.header.store import CampaignHeader
from bot.settings import Settings, SettingsError, load_settings

PUBLIC_REPO = "org/campaigns"
PRIVATE = "org/secret-campaigns"
PRIVATE2 = "org/secret-two"
ROOT = "campaigns/h3-ref2va-4x910b1"
CAMPAIGN = "h3-ref2va-4x910b1"
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@dataclass
class Served:
    base: str
    double: Any
    app: dict[str, Any]

    def page(self, repo: str = PRIVATE, name: str = "index.html") -> str:
        return f"{self.base}{live.PREFIX}/{repo}/{CAMPAIGN}/{name}"


@pytest.fixture
def served(github_double: Any, tmp_path: Path) -> Iterator[Served]:
    plan = write_campaign(tmp_path / "c", screens=3)
    with serve_campaign(github_double, tmp_path, plan.root) as s:
        yield s


@contextlib.contextmanager
def serve_campaign(github_double: Any, tmp_path: Path, campaign: Path) -> Iterator[Served]:
    """The service with sign-in configured, serving the campaign directory ``campaign`` from
    a public repository and two private ones (amy reads both, mallory neither)."""
    files = {f"{ROOT}/{p.relative_to(campaign).as_posix()}": p.read_bytes()
             for p in campaign.rglob("*") if p.is_file()}
    github_double.add_repo(PUBLIC_REPO, files)
    for repo in (PRIVATE, PRIVATE2):
        github_double.add_repo(repo, files).private = True
        github_double.set_permission(repo, "amy", "read")
    github_double.set_permission(PRIVATE, "mallory", "none")
    port = free_port()
    public = f"http://127.0.0.1:{port}"
    # the App as the setup page registers it: from the bot's own manifest
    app_rec = github_double.register_app(app_manifest(Settings(), public))
    url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
    engine = database.make_engine(url)
    database.migrate(engine)
    with Session(engine) as db:
        for repo in (PUBLIC_REPO, PRIVATE, PRIVATE2):
            db.add(CampaignHeader(repo=repo, path=ROOT, campaign_id=CAMPAIGN, issue=320,
                                  default_branch="main", evidence_paths=[], inserted=False))
        db.commit()
    settings = load_settings(
        webhook_secret=SECRET, database_url=url, token="test-token",
        github_api_url=github_double.base_url, github_url=github_double.base_url,
        github_client_id=app_rec["client_id"], github_client_secret=app_rec["client_secret"],
        public_url=public, github_throttle=False, run_worker=False)
    app = create_app(settings, engine=engine, run_worker=False)
    try:
        with threaded_server(app, port) as base:
            yield Served(base, github_double, app_rec)
    finally:
        engine.dispose()


def _authorize(c: httpx.Client, authorize_url: str, login: str,
               decision: str = "authorize") -> str:
    """Play the person on the double's authorization page; returns the callback URL."""
    page = c.get(authorize_url)
    assert page.status_code == 200 and "Authorize" in page.text
    q = {k: v[-1] for k, v in parse_qs(urlsplit(authorize_url).query).items()}
    r = c.post(authorize_url.split("?")[0], data={
        "client_id": q["client_id"], "redirect_uri": q["redirect_uri"], "state": q["state"],
        "login": login, "decision": decision})
    assert r.status_code == 302
    return r.headers["location"]


def _sign_in(s: Served, c: httpx.Client, login: str, page: str | None = None) -> httpx.Response:
    """Open ``page`` (a private one) and go through the whole flow; returns the callback's
    answer (a redirect back to the page)."""
    r = c.get(page or s.page())
    assert r.status_code == 303, r.text
    login_url = r.headers["location"]
    assert login_url.startswith("/login?next=")
    r = c.get(s.base + login_url)
    assert r.status_code == 302
    callback = _authorize(c, r.headers["location"], login)
    assert callback.startswith(s.base + "/login/callback?")
    return c.get(callback)


def test_private_page_signs_in_through_github_and_shows_the_page(served: Served) -> None:
    with httpx.Client(timeout=30) as c:
        r = c.get(served.page(name="queue.html"))
        assert r.status_code == 303 and "private" in r.headers["cache-control"]
        assert r.headers["location"] == (
            f"/login?next=%2Fc%2F{PRIVATE.replace('/', '%2F')}%2F{CAMPAIGN}%2Fqueue.html")
        r = c.get(served.base + r.headers["location"])
        assert r.status_code == 302
        auth = urlsplit(r.headers["location"])
        q = parse_qs(auth.query)
        assert f"{auth.scheme}://{auth.netloc}{auth.path}" == (
            served.double.base_url + "/login/oauth/authorize")
        assert q["client_id"] == [served.app["client_id"]]
        assert q["redirect_uri"] == [served.base + "/login/callback"]
        state_cookie = r.headers["set-cookie"].lower()
        assert "httponly" in state_cookie and "samesite=lax" in state_cookie
        assert "path=/login" in state_cookie and "secure" not in state_cookie  # http
        (nonce,) = [v for k, v in c.cookies.items() if k.startswith(signin.STATE_COOKIE)]
        assert nonce not in q["state"][0]  # encrypted in the state
        r = c.get(_authorize(c, r.headers["location"], "amy"))
        assert r.status_code == 303
        assert r.headers["location"] == f"{live.PREFIX}/{PRIVATE}/{CAMPAIGN}/queue.html"
        session = r.headers.get_list("set-cookie")
        sc = next(h for h in session if h.startswith(signin.SESSION_COOKIE + "="))
        assert "httponly" in sc.lower() and "samesite=lax" in sc.lower() and "path=/;" in sc.lower()
        (token,) = served.double.user_tokens
        assert token.startswith("ghu_") and token not in sc
        assert "ghu_" not in c.cookies[signin.SESSION_COOKIE]
        assert any(h.startswith(signin.state_cookie_name(nonce) + '=""')
                   for h in session)  # one use

        page = c.get(served.base + r.headers["location"])
        assert page.status_code == 200
        assert "private" in page.headers["cache-control"]
        assert "no-store" in page.headers["cache-control"]
        assert f'action="{signin.LOGOUT_PATH}"' in page.text and "Sign out" in page.text
        assert "Signed in as <strong>amy</strong>" in page.text  # GET /user at sign-in
        assert "STUCK" not in page.text and "<h1" in page.text
        user_calls = [x for x in served.double.calls if x.path == "/user"]
        assert len(user_calls) == 1 and user_calls[0].status == 200

        def repo_calls() -> int:
            return sum(1 for x in served.double.calls if x.path == f"/repos/{PRIVATE}")

        before = repo_calls()
        for name in ("index.html", "budget.html", "findings.html", "queue.html"):
            assert c.get(served.page(name=name)).status_code == 200, name
        assert repo_calls() == before  # access and visibility answers are reused

        # a public repository's pages stay open, without the account controls
        pub = httpx.get(served.page(PUBLIC_REPO), timeout=30)
        assert pub.status_code == 200 and "Sign out" not in pub.text
        assert "private" not in pub.headers.get("cache-control", "")

        out = c.post(served.base + signin.LOGOUT_PATH)
        assert out.status_code == 200 and signin.SESSION_COOKIE not in c.cookies
        r = c.get(served.page())
        assert r.status_code == 303 and r.headers["location"].startswith("/login?")


def test_a_user_who_cannot_read_the_repository_gets_404(served: Served) -> None:
    with httpx.Client(timeout=30) as c:
        back = _sign_in(served, c, "mallory")
        assert back.status_code == 303
        denied = c.get(served.page())
        assert denied.status_code == 404 and denied.text == live.NOT_FOUND
        unknown = c.get(f"{served.base}{live.PREFIX}/org/no-such-repo/{CAMPAIGN}/")
        assert unknown.status_code == 404 and unknown.text == live.NOT_FOUND
        # nothing of the repository was read for mallory
        assert not [x for x in served.double.calls
                    if x.path.startswith(f"/repos/{PRIVATE}/contents")]
    # anonymous: a private repository and an unknown one get the same redirect
    a = httpx.get(served.page(), timeout=30)
    b = httpx.get(f"{served.base}{live.PREFIX}/org/no-such-repo/{CAMPAIGN}/index.html",
                  timeout=30)
    assert a.status_code == b.status_code == 303
    assert a.text == b.text and a.headers["location"].startswith("/login?next=")


def _start(s: Served, c: httpx.Client) -> tuple[str, str]:
    """``/login`` for the private overview: (state, the authorize URL)."""
    r = c.get(f"{s.base}/login", params={"next": f"{live.PREFIX}/{PRIVATE}/{CAMPAIGN}/"})
    assert r.status_code == 302
    url = r.headers["location"]
    return parse_qs(urlsplit(url).query)["state"][0], url


def _callback(s: Served, c: httpx.Client, code: str, state: str) -> httpx.Response:
    return c.get(f"{s.base}/login/callback", params={"code": code, "state": state})


def _code(s: Served, c: httpx.Client, authorize_url: str, login: str = "amy") -> str:
    return parse_qs(urlsplit(_authorize(c, authorize_url, login)).query)["code"][0]


def test_tampered_replayed_expired_and_foreign_states_are_refused(served: Served) -> None:
    with httpx.Client(timeout=30) as c:
        state, url = _start(served, c)
        code = _code(served, c, url)
        flipped = state[:-6] + ("A" if state[-6] != "A" else "B") + state[-5:]
        r = _callback(served, c, code, flipped)
        assert r.status_code == 403 and signin.SESSION_COOKIE not in c.cookies
        # the state of another browser's sign-in (its own cookie is elsewhere)
        with httpx.Client(timeout=30) as other:
            other_state, other_url = _start(served, other)
        r = _callback(served, c, code, other_state)
        assert r.status_code == 403 and "not started in this browser" in r.text
        # a state without its cookie
        with httpx.Client(timeout=30) as bare:
            assert _callback(served, bare, code, state).status_code == 403
        # the genuine pair works once; replaying it fails (the cookie is spent)
        state, url = _start(served, c)
        code = _code(served, c, url)
        assert _callback(served, c, code, state).status_code == 303
        assert signin.SESSION_COOKIE in c.cookies
        assert _callback(served, c, code, state).status_code == 403
        # a state written with another key, and one older than ten minutes
        secret = served.app["client_secret"].encode()
        nonce = "a-nonce-of-this-browser"
        c.cookies.set(signin.state_cookie_name(nonce), nonce, path="/login")
        body = json.dumps({"n": nonce, "next": f"{live.PREFIX}/{PRIVATE}/{CAMPAIGN}/"}).encode()
        foreign = signin._fernet(b"another secret", b"state").encrypt(body).decode()
        assert _callback(served, c, code, foreign).status_code == 403
        old = signin._fernet(secret, b"state").encrypt_at_time(
            body, int(time.time()) - signin.STATE_TTL_S - 5).decode()
        assert _callback(served, c, code, old).status_code == 403
        # GitHub's "Cancel": refused, nothing signed in
        with httpx.Client(timeout=30) as d:
            state, url = _start(served, d)
            back = _authorize(d, url, "amy", decision="cancel")
            assert "error=access_denied" in back
            r = d.get(back)
            assert r.status_code == 403 and signin.SESSION_COOKIE not in d.cookies


def test_two_sign_ins_started_in_two_tabs_both_complete(served: Served) -> None:
    with httpx.Client(timeout=30) as c:
        state1, url1 = _start(served, c)
        state2, url2 = _start(served, c)
        code1, code2 = _code(served, c, url1), _code(served, c, url2)
        assert _callback(served, c, code2, state2).status_code == 303
        assert _callback(served, c, code1, state1).status_code == 303
        assert c.get(served.page()).status_code == 200


def test_a_used_or_wrong_code_is_refused(served: Served) -> None:
    with httpx.Client(timeout=30) as c:
        state, url = _start(served, c)
        r = _callback(served, c, "double_code_0_bad", state)
        assert r.status_code == 502 and "bad_verification_code" in r.text
        assert signin.SESSION_COOKIE not in c.cookies


def test_tampered_or_foreign_session_cookies_are_refused(served: Served) -> None:
    with httpx.Client(timeout=30) as c:
        _sign_in(served, c, "amy")
        good = c.cookies[signin.SESSION_COOKIE]
        assert c.get(served.page()).status_code == 200
        for bad in (good[:-8] + ("x" if good[-8] != "x" else "y") + good[-7:],
                    signin._fernet(b"another secret", b"session").encrypt(json.dumps(
                        {"t": "ghu_forged", "exp": time.time() + 3600}).encode()).decode(),
                    "not-a-cookie"):
            c.cookies.set(signin.SESSION_COOKIE, bad)
            r = c.get(served.page())
            assert r.status_code == 303 and r.headers["location"].startswith("/login?"), bad
        # an expired session (written with the right key) is refused too
        expired = signin._fernet(served.app["client_secret"].encode(), b"session").encrypt(
            json.dumps({"t": next(iter(served.double.user_tokens)),
                        "exp": time.time() - 1}).encode()).decode()
        c.cookies.set(signin.SESSION_COOKIE, expired)
        assert c.get(served.page()).status_code == 303


def test_each_person_sees_their_own_name_on_a_cached_page(served: Served) -> None:
    """Pages are kept once for everyone; the account part is filled per request, so one
    person's name never reaches another's page."""
    served.double.set_permission(PRIVATE, "bob", "read")
    with httpx.Client(timeout=30) as amy, httpx.Client(timeout=30) as bob:
        _sign_in(served, amy, "amy")
        _sign_in(served, bob, "bob")
        for _ in range(2):  # the second round is served from the page cache
            a, b = amy.get(served.page()), bob.get(served.page())
            assert a.status_code == b.status_code == 200
            assert "Signed in as <strong>amy</strong>" in a.text and "bob" not in a.text
            assert "Signed in as <strong>bob</strong>" in b.text and "amy" not in b.text


def test_sign_in_without_a_name_when_github_does_not_say_who(served: Served) -> None:
    """GET /user failing at sign-in does not stop the sign-in: the page works and shows the
    sign-out button without a name.  A login that is not a GitHub login never reaches the
    page, even in a session cookie written with the service's own key."""
    served.double.inject("GET", "/user", 502, message="Server Error")
    with httpx.Client(timeout=30) as c:
        _sign_in(served, c, "amy")
        page = c.get(served.page())
        assert page.status_code == 200 and "Sign out" in page.text
        assert "Signed in as" not in page.text
        token = next(iter(served.double.user_tokens))
        key = signin._fernet(served.app["client_secret"].encode(), b"session")
        for login in ("<script>alert(1)</script>", "-amy", "a" * 40, 7, "amy\n"):
            cookie = key.encrypt(json.dumps({"t": token, "exp": time.time() + 600,
                                             "l": login}).encode()).decode()
            c.cookies.set(signin.SESSION_COOKIE, cookie)
            page = c.get(served.page())
            assert page.status_code == 200 and "Sign out" in page.text, login
            assert "Signed in as" not in page.text and "<script>alert" not in page.text


def test_a_revoked_token_sends_the_person_to_sign_in_again(served: Served) -> None:
    with httpx.Client(timeout=30) as c:
        _sign_in(served, c, "amy")
        assert c.get(served.page()).status_code == 200
        served.double.user_tokens.clear()  # revoked (or expired) on GitHub's side
        r = c.get(served.page(PRIVATE2))  # not cached for this repository: GitHub asked
        assert r.status_code == 303 and r.headers["location"].startswith("/login?next=")
        assert signin.SESSION_COOKIE not in c.cookies


def test_no_open_redirect(served: Served) -> None:
    for target in ("https://evil.example/", "//evil.example/c/", "/c\\@evil", "/setup",
                   "/c/../setup", ""):
        r = httpx.get(f"{served.base}/login", params={"next": target}, timeout=30)
        assert r.status_code == 400, target
        assert signin.STATE_COOKIE not in r.headers.get("set-cookie", "")
    assert signin.safe_next("/c/o/r/c/index.html") == "/c/o/r/c/index.html"
    assert signin.safe_next("/c/o/r/c/\r\nSet-Cookie:x") is None


def test_secure_cookies_on_https_and_routes_absent_without_sign_in() -> None:
    from fastapi import FastAPI
    from fastapi.testclient import TestClient

    cfg = signin.make_config(client_id="Iv1.x", client_secret="hush-7", github_url="https://gh",
                             api_url="https://api.gh", public_url="https://bot.example.org",
                             session_secret=None)
    assert cfg is not None and cfg.secure and "hush-7" not in repr(cfg)
    app = FastAPI()
    app.include_router(signin.signin_router(lambda: signin.SignIn(cfg)))
    r = TestClient(app).get("/login", params={"next": "/c/o/r/c/"}, follow_redirects=False)
    assert r.status_code == 302 and "secure" in r.headers["set-cookie"].lower()
    assert parse_qs(urlsplit(r.headers["location"]).query)["redirect_uri"] == [
        "https://bot.example.org/login/callback"]
    off = FastAPI()
    off.include_router(signin.signin_router(lambda: None))
    t = TestClient(off)
    assert t.get("/login", params={"next": "/c/o/r/c/"}).status_code == 404
    assert t.get("/login/callback").status_code == 404
    assert t.post("/logout").status_code == 404


def test_incomplete_sign_in_settings_name_the_variable(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'bot.sqlite3'}"
    base: dict[str, Any] = dict(webhook_secret=SECRET, database_url=url, run_worker=False)
    with pytest.raises(SettingsError, match="CAMPAIGN_BOT_GITHUB_CLIENT_SECRET"):
        create_app(load_settings(**base, github_client_id="Iv1.x",
                                 public_url="https://bot.example.org"), run_worker=False)
    with pytest.raises(SettingsError, match="CAMPAIGN_BOT_PUBLIC_URL"):
        create_app(load_settings(**base, github_client_id="Iv1.x",
                                 github_client_secret="s"), run_worker=False)


def test_the_setup_pages_app_feeds_the_sign_in_settings(github_double: Any, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from bot.setup import exchange_code, load_credentials, save_credentials

    manifest = app_manifest(Settings(), "https://bot.example.org")
    assert manifest["callback_urls"] == ["https://bot.example.org/login/callback"]
    rec = github_double.register_app(manifest)
    code = "setupcode1"
    github_double.manifest_codes[code] = (rec["id"], time.time())
    stored = exchange_code(github_double.base_url, code)
    assert (stored.client_id, stored.client_secret) == (rec["client_id"], rec["client_secret"])
    assert rec["client_secret"] not in repr(stored)
    path = tmp_path / "app.json"
    save_credentials(path, stored)
    assert load_credentials(path) == stored
    for k in [k for k in os.environ if k.startswith("CAMPAIGN_BOT_")]:
        monkeypatch.delenv(k)  # the settings come from the stored App alone
    s = load_settings(credentials_file=path, need_secret=False)
    assert s.github_client_id == rec["client_id"]
    assert s.github_client_secret is not None
    assert s.github_client_secret.get_secret_value() == rec["client_secret"]
    # set in the environment, they win over the stored App
    s = load_settings(credentials_file=path, need_secret=False, github_client_id="Iv1.other",
                      github_client_secret="other")
    assert s.github_client_id == "Iv1.other"


@pytest.mark.skipif(not CHROMIUM.exists() and not os.environ.get("CAMPAIGN_BOT_REQUIRE_BROWSER"),
                    reason=f"{CHROMIUM} is not installed")
def test_sign_in_and_out_in_chromium(served: Served) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            ctx = b.new_context(viewport={"width": 1280, "height": 800})
            page = ctx.new_page()
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(served.page(name="budget.html"))
            # redirected through /login to GitHub's (the double's) authorization page
            assert page.url.startswith(served.double.base_url + "/login/oauth/authorize?")
            page.fill("input[name=login]", "amy")
            page.click("button[value=authorize]")
            page.wait_for_url(served.page(name="budget.html"))
            assert page.locator("h1").count() == 1
            assert page.locator("form.account button").inner_text() == "Sign out"
            assert page.locator("form.account .who").inner_text() == "Signed in as amy"
            cookies = {c["name"]: c for c in ctx.cookies()}
            sess = cookies[signin.SESSION_COOKIE]
            assert sess["httpOnly"] and sess["sameSite"] == "Lax"
            assert page.evaluate("document.cookie") == ""  # not readable by scripts
            page.click("form.account button")
            page.wait_for_load_state()
            assert "Signed out" in page.content()
            assert signin.SESSION_COOKIE not in {c["name"] for c in ctx.cookies()}
            page.goto(served.page())
            assert page.url.startswith(served.double.base_url + "/login/oauth/authorize?")
            assert errors == []
            # someone without access: the flow completes, the page is a 404
            other = b.new_context().new_page()
            other.goto(served.page())
            other.fill("input[name=login]", "mallory")
            with other.expect_navigation(url=served.page()) as nav:
                other.click("button[value=authorize]")
            assert nav.value is not None and nav.value.status == 404
            assert live.NOT_FOUND.strip() in other.content()
        finally:
            b.close()


def test_pages_forbid_framing_sniffing_and_scripts_and_logout_checks_its_origin(
        served: Served) -> None:
    """Every answer carries a CSP with ``frame-ancestors 'none'`` and no script source,
    ``nosniff`` and ``X-Frame-Options``; ``POST /logout`` from another site's page is refused
    and the session kept, from the bot's own page it signs out."""
    with httpx.Client(timeout=30) as c:
        assert _sign_in(served, c, "amy").status_code == 303
        for url in (served.page(), served.page(repo=PUBLIC_REPO), served.base + "/healthz",
                    served.base + "/login?next=/"):
            r = c.get(url)
            csp = r.headers.get("content-security-policy", "")
            assert "frame-ancestors 'none'" in csp and "default-src 'none'" in csp, url
            assert "script-src" not in csp
            assert r.headers.get("x-content-type-options") == "nosniff", url
            assert r.headers.get("x-frame-options") == "DENY", url
        for origin in ("https://evil.example", "null"):
            r = c.post(served.base + "/logout", headers={"Origin": origin})
            assert r.status_code == 403, origin
            assert c.get(served.page()).status_code == 200  # still signed in
        r = c.post(served.base + "/logout", headers={"Referer": "http://evil.example/x"})
        assert r.status_code == 403
        r = c.post(served.base + "/logout", headers={"Origin": served.base})
        assert r.status_code == 200
        assert c.get(served.page()).status_code == 303  # signed out
