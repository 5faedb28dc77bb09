"""deploy/Caddyfile in front of a real ``campaign-bot serve``: every route the service exposes
publicly answers through the proxy exactly as it answers directly, and nothing else does
(``/metrics`` and unknown paths get the proxy's own 404).

The Caddyfile is adapted by Debian's caddy (``caddy adapt``), as an operator's ``caddy
validate`` would; the adapted JSON then runs with its admin endpoint off, on plain HTTP
(``CAMPAIGN_BOT_DOMAIN=http://127.0.0.1:PORT``: no certificate to obtain here).  The routes
are read from the FastAPI application ``serve`` builds (setup mode, sign-in configured), so a
route added later without a line in the Caddyfile fails this test.  Skipped, with the reason,
when caddy is not installed; CI (.ci/run) installs it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from app_setup_helpers import serve_unconfigured
from webhook_helpers import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
CADDYFILE = ROOT / "deploy" / "Caddyfile"
PRIVATE = {"/metrics"}  # served, but only on the internal address
REFUSED_BODY = "Not Found"  # the Caddyfile's own answer to everything it does not forward

pytestmark = pytest.mark.skipif(
    shutil.which("caddy") is None and not os.environ.get("CAMPAIGN_BOT_REQUIRE_DEPLOY_TOOLS"),
    reason="Debian's caddy is not installed (apt-get install caddy); .ci/run installs it")


def served_routes(tmp: Path) -> list[tuple[str, str]]:
    """``(method, path template)`` of every route of the application ``serve`` builds in
    setup mode with GitHub sign-in configured (the most routes it ever has)."""
    from bot.app import create_app
    from bot.settings import Settings

    settings = Settings(public_url="https://bot.example.org",
                        database_url=f"sqlite:///{tmp / 'routes.sqlite3'}",
                        github_client_id="Iv23test", github_client_secret="x")
    app = create_app(settings, setup_token="t" * 32, run_worker=False)
    out: list[tuple[str, str]] = []

    def walk(routes: list[Any], prefix: str) -> None:
        for r in routes:
            inner = getattr(r, "original_router", None)  # an included APIRouter (FastAPI)
            if inner is not None:
                ctx = getattr(r, "include_context", None)
                walk(inner.routes, prefix + (getattr(ctx, "prefix", "") or ""))
            for method in sorted(getattr(r, "methods", None) or ()):
                if method != "HEAD":
                    out.append((method, prefix + r.path))
    walk(app.routes, "")
    return out


def concrete(template: str) -> str:
    """A request path for a route template (``{owner}`` -> ``o``; ``{name:path}`` ->
    ``a/b.html``)."""
    return re.sub(r"\{(\w+)(:path)?\}", lambda m: "a/b.html" if m.group(2) else m.group(1)[0],
                  template)


@pytest.fixture
def behind_caddy(github_double: Any, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """(the bot's own URL, the proxy's URL)."""
    bot = serve_unconfigured(github_double, tmp_path,
                             CAMPAIGN_BOT_GITHUB_CLIENT_ID="Iv23test",
                             CAMPAIGN_BOT_GITHUB_CLIENT_SECRET="x")
    proxy_port = free_port()
    env = {**os.environ, "HOME": str(tmp_path), "XDG_DATA_HOME": str(tmp_path / "data"),
           "XDG_CONFIG_HOME": str(tmp_path / "config"),
           "CAMPAIGN_BOT_DOMAIN": f"http://127.0.0.1:{proxy_port}",
           "CAMPAIGN_BOT_UPSTREAM": bot.url.removeprefix("http://")}
    adapted = subprocess.run(["caddy", "adapt", "--config", str(CADDYFILE),
                              "--adapter", "caddyfile"], env=env, capture_output=True,
                             text=True, timeout=60)
    assert adapted.returncode == 0, adapted.stderr
    config = json.loads(adapted.stdout)
    config["admin"] = {"disabled": True}  # no admin endpoint on :2019 beside other tests
    (tmp_path / "caddy.json").write_text(json.dumps(config))
    proc = subprocess.Popen(["caddy", "run", "--config", str(tmp_path / "caddy.json")],
                            env=env, stdout=subprocess.DEVNULL,
                            stderr=(tmp_path / "caddy.log").open("wb"))
    proxy = f"http://127.0.0.1:{proxy_port}"

    def up() -> bool:
        assert proc.poll() is None, (tmp_path / "caddy.log").read_text()[-3000:]
        try:
            return httpx.get(f"{proxy}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_for(up, 30, "caddy in front of serve")
        yield bot.url, proxy
    finally:
        proc.terminate()
        proc.wait(20)
        bot.stop()


def _answer(base: str, method: str, path: str) -> tuple[int, bytes]:
    r = httpx.request(method, base + path, timeout=10, follow_redirects=False,
                      headers={"Host": base.removeprefix("http://")})
    return r.status_code, r.content


def test_every_public_route_of_serve_is_forwarded_and_nothing_else(
        behind_caddy: tuple[str, str], tmp_path: Path) -> None:
    direct, proxy = behind_caddy
    routes = served_routes(tmp_path)
    paths = {p for _, p in routes}
    # the routes the bot posts links to or GitHub calls back, all present in what serve builds
    assert {"/webhook", "/healthz", "/setup", "/setup/callback", "/login", "/login/callback",
            "/logout", "/metrics"} <= paths, paths
    assert any(p.startswith("/c/") for p in paths), paths
    for method, template in routes:
        path = concrete(template)
        through = _answer(proxy, method, path)
        if template in PRIVATE:
            assert _answer(direct, method, path)[0] == 200
            assert through == (404, REFUSED_BODY.encode()), (method, path)
        else:
            assert through != (404, REFUSED_BODY.encode()), (method, path, "not forwarded")
            # what the bot answers directly (a 401 for an unsigned delivery, a page, a
            # redirect to GitHub's sign-in) is what the proxy returns
            assert through[0] == _answer(direct, method, path)[0], (method, path, through)
    # nothing beyond them: unknown paths, a prefix look-alike, the private metrics
    for path in ("/metrics", "/setupx", "/loginx", "/docs", "/openapi.json", "/c",
                 "/webhook/x", "/.git/config"):
        assert _answer(proxy, "GET", path) == (404, REFUSED_BODY.encode()), path
