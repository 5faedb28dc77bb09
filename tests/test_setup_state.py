"""``/setup``'s ``state`` is bound to the browser that opened the setup page (a cookie), used
once, and the callbacks run one at a time: two people finishing the manifest flow at once
get one App stored and one clear refusal, never two "GitHub App created" pages.  Once
configured, ``GET /setup`` reveals nothing of the App.  Plain HTTP clients against
``campaign-bot serve`` and the GitHub double's manifest pages (no browser needed)."""

from __future__ import annotations

import html
import json
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from app_setup_helpers import serve_unconfigured

from bot.setup import STATE_COOKIE


def _open_setup(c: httpx.Client, setup_url: str) -> tuple[str, str]:
    """Load the setup page; returns (form action with its state, the manifest JSON)."""
    page = c.get(setup_url)
    assert page.status_code == 200, page.text
    action = html.unescape(re.search(r'<form method="post" action="([^"]+)"', page.text)[1])
    manifest = html.unescape(re.search(r'name="manifest" value="([^"]*)"', page.text)[1])
    return action, manifest


def _github_code(action: str, manifest: str, name: str) -> str:
    """The double's github.com page: create the App, follow it to the callback URL."""
    r = httpx.post(action.replace("/new?", "/new/confirm?"),
                   data={"manifest": manifest, "name": name})
    assert r.status_code == 302, r.text
    return r.headers["location"]


def test_state_is_bound_to_the_browser_used_once_and_callbacks_serialised(
        github_double: Any, tmp_path: Path) -> None:
    svc = serve_unconfigured(github_double, tmp_path)
    try:
        with httpx.Client(timeout=30) as a, httpx.Client(timeout=30) as b:
            act_a, man = _open_setup(a, svc.setup_url)
            act_b, _ = _open_setup(b, svc.setup_url)
            state_a = act_a.split("state=")[1]
            assert state_a != act_b.split("state=")[1]
            assert a.cookies.get(STATE_COOKIE) == state_a
            page = httpx.get(svc.setup_url)  # a third browser
            csp = page.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in csp and github_double.base_url in csp
            assert page.headers["x-content-type-options"] == "nosniff"
            back_a = _github_code(act_a, man, "bot a")
            back_b = _github_code(act_b, man, "bot b")
            # A's callback URL opened in B's browser (or in none): refused, nothing stored
            assert b.get(back_a).status_code == 403
            assert httpx.get(back_a).status_code == 403
            assert not svc.credentials.exists()
            # both finish at once: one App stored, the other told the bot is set up already
            with ThreadPoolExecutor(2) as pool:
                ra, rb = pool.map(lambda x: x[0].get(x[1]), [(a, back_a), (b, back_b)])
            codes = sorted([ra.status_code, rb.status_code])
            assert codes == [200, 410], (ra.text, rb.text)
            won, lost = (ra, rb) if ra.status_code == 200 else (rb, ra)
            stored = json.loads(svc.credentials.read_text())
            assert f"works as the App <strong>{stored['slug']}</strong>" in won.text
            assert stored["slug"] not in lost.text and "already works" in lost.text
            # a state is used once: replaying the winning callback gets nothing
            replay = (a if won is ra else b).get(back_a if won is ra else back_b)
            assert replay.status_code == 410 and stored["slug"] not in replay.text
            # after configuration the setup page names nothing of the App
            after = httpx.get(svc.setup_url)
            assert after.status_code == 410
            for secret in (stored["slug"], str(stored["app_id"]), "octocat"):
                assert secret not in after.text
    finally:
        svc.stop()
