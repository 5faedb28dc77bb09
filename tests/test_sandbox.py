"""``campaign-bot sandbox`` as a new user meets it: the real command in a subprocess, its page
in headless Chromium (Debian's ``/usr/bin/chromium`` through Playwright), a ``/screen``
comment written in the page, and the bot's reply, check run, status header and committed
evidence seen there; then Ctrl-C (SIGINT) stops everything: exit 0, no process left.

The page's guards (JSON only, its own Host only, bad comments refused) are checked over HTTP
on the same running sandbox.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import psutil
import pytest
from app_setup_helpers import chromium_available

CHROMIUM = "/usr/bin/chromium"
CLI = [sys.executable, "-c", "from evidence.launch import main; main()"]

pytestmark = pytest.mark.slow


@dataclass
class Running:
    proc: subprocess.Popen[str]
    url: str
    work: Path
    lines: list[str]


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    work = tmp_path_factory.mktemp("sandbox")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    proc = subprocess.Popen([*CLI, "sandbox", "--port", "0", "--no-open", "--work", str(work)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    assert proc.stdout is not None
    lines: list[str] = []
    url = None
    end = time.monotonic() + 120
    while url is None and time.monotonic() < end:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        m = re.match(r"sandbox page: (http://127\.0\.0\.1:\d+/)$", line.strip())
        if m:
            url = m.group(1)
    assert url, "".join(lines)
    run = Running(proc, url, work, lines)
    tree = psutil.Process(proc.pid).children(recursive=True)
    try:
        yield run
    finally:
        # Ctrl-C: everything stops, exit 0, no process of the sandbox left behind
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            pytest.fail("the sandbox did not stop on SIGINT within 60 s")
        lines.append(out)
        assert proc.returncode == 0, "".join(lines)
        assert "sandbox: stopped" in out, out
        gone, alive = psutil.wait_procs(tree, timeout=10)
        assert not alive, alive


def test_a_screen_from_the_page_in_chromium(sandbox: Running, tmp_path: Path) -> None:
    if not chromium_available():
        if os.environ.get("CAMPAIGN_BOT_REQUIRE_BROWSER"):
            pytest.fail("Playwright or /usr/bin/chromium is missing and "
                        "CAMPAIGN_BOT_REQUIRE_BROWSER is set")
        pytest.skip("Playwright or /usr/bin/chromium not installed")
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(sandbox.url)
            # the status header the sandbox asked for at start
            expect(page.locator("#header table").first).to_be_visible(timeout=60_000)
            # a visitor (read access, not a requester) is refused
            page.select_option("#user", "visitor")
            page.select_option("#number", "2")
            page.fill("#body", "/screen candidate noop")
            page.click("#send")
            expect(page.locator("#prcomments .bot").first).to_contain_text(
                "visitor", timeout=60_000)
            # the maintainer's screen: reply, result, check run, committed evidence
            page.select_option("#user", "maintainer")
            page.fill("#body", "/screen candidate noop")
            page.click("#send")
            result = page.locator("#prcomments .bot", has_text="Screen S1 result")
            expect(result).to_contain_text("Verdict:", timeout=120_000)
            expect(page.locator("#checks")).to_contain_text(
                "campaign-bot/screen: noop: completed", timeout=60_000)
            expect(page.locator("#evidence")).to_contain_text(
                "campaigns/standin/screens/S1/attestation.dsse.json", timeout=60_000)
            expect(page.locator("#runs")).to_contain_text("noop on 1s-lossless: completed")
            # the header shows the screen of PR #2 once the evidence is committed
            expect(page.locator("#header")).to_contain_text("noop", timeout=60_000)
            # /campaign budget on the issue gets an answer there
            page.select_option("#number", "1")
            page.fill("#body", "/campaign budget")
            page.click("#send")
            expect(page.locator("#issuecomments .bot").nth(1)).to_contain_text(
                "device-hours", timeout=60_000)
            expect(page.locator("#rest")).to_contain_text(
                "0 answer(s) outside GitHub's REST description")
            # the page's link to the live pages of the campaign answers
            live = page.locator("a", has_text="live pages").first.get_attribute("href")
            assert live and httpx.get(live, timeout=30).status_code == 200, live
            # no link the bot wrote leaves the machine: workflow runs, the header's "Updated
            # from evidence" commit, check runs open the sandbox's page (they were github.com)
            hrefs = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
            assert not [h for h in hrefs if urlsplit(h).hostname not in ("127.0.0.1",
                                                                         "localhost")], hrefs
            runs = [h for h in hrefs if "/actions/runs/" in h]
            assert runs, hrefs
            evidence = page.locator("#header a", has_text=re.compile(r"^[0-9a-f]{8}$"))
            tree = evidence.first.get_attribute("href")
            assert tree and tree.startswith(sandbox.url) and "/tree/" in tree, tree
            for h in {*runs, tree}:
                r = httpx.get(h, timeout=30)
                assert r.status_code == 303 and r.headers["location"].startswith("/#"), h
                assert httpx.get(h, timeout=30, follow_redirects=True).status_code == 200
            page.goto(runs[0])
            run_id = runs[0].rsplit("/", 1)[1]
            expect(page.locator(f"#run-{run_id}")).to_have_class("target", timeout=30_000)
            page.goto(tree)
            expect(page.locator("#committed")).to_have_class("target", timeout=30_000)
            page.screenshot(path=str(tmp_path / "sandbox.png"), full_page=True)
            assert not errors, errors
        finally:
            browser.close()


def test_the_page_refuses_what_is_not_its_own(sandbox: Running) -> None:
    url = sandbox.url
    comment = {"user": "maintainer", "number": 2, "body": "/help"}
    # a cross-site form can send only form encodings or text/plain
    r = httpx.post(f"{url}api/comment", content=b'{"user":"maintainer","number":2,"body":"x"}',
                   headers={"Content-Type": "text/plain"})
    assert r.status_code == 415
    # DNS rebinding: the browser sends the attacker's host name
    r = httpx.post(f"{url}api/comment", json=comment, headers={"Host": "evil.example:80"})
    assert r.status_code == 421
    r = httpx.get(f"{url}api/state", headers={"Host": "evil.example"})
    assert r.status_code == 421
    for bad, why in (({**comment, "user": "root"}, "unknown user"),
                     ({**comment, "number": 99}, "no issue or pull request #99"),
                     ({**comment, "body": "  "}, "1 to 65,536 characters"),
                     ({"user": "maintainer"}, "number")):
        r = httpx.post(f"{url}api/comment", json=bad)
        assert r.status_code == 400 and why in r.json()["error"], (bad, r.text)
    # a comment with raw HTML is shown as text, never as markup
    r = httpx.post(f"{url}api/comment", json={**comment, "body": '<img src=x onerror="1">'})
    assert r.status_code == 201
    state = httpx.get(f"{url}api/state").json()
    (mine,) = [c for c in state["comments"] if c["id"] == r.json()["id"]]
    assert "<img" not in mine["html"] and "&lt;img" in mine["html"]


def test_a_taken_port_is_a_one_line_error(sandbox: Running) -> None:
    port = sandbox.url.rsplit(":", 1)[1].strip("/")
    res = subprocess.run([*CLI, "sandbox", "--port", port, "--no-open"], capture_output=True,
                         text=True, timeout=60)
    assert res.returncode == 2
    assert res.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}: "), res.stderr
    assert res.stderr.count("\n") == 1, res.stderr


def test_stopping_before_the_page_started_returns(tmp_path: Path) -> None:
    """When a part fails to start (``serve`` dying at start), the sandbox stops its page
    before that page ever served: that must return at once (it waited forever for a serve
    loop that never ran, so the sandbox hung instead of exiting 2 with the error)."""
    import threading

    from sandbox.page import PageServer
    from sandbox.stand import Stand

    page = PageServer(Stand(tmp_path / "work", log=lambda line: None), port=0)
    t = threading.Thread(target=page.stop, daemon=True)
    t.start()
    t.join(5)
    assert not t.is_alive()


def test_github_web_links_map_to_sections_of_the_page() -> None:
    """Each kind of GitHub web link the bot writes opens a section of the sandbox page;
    anything else under the page's address stays 404."""
    from sandbox.page import web_link_target
    from sandbox.stand import REPO

    assert web_link_target(f"/{REPO}/actions/runs/7", REPO) == "/#run-7"
    assert web_link_target(f"/{REPO}/actions/runs/7/job/3", REPO) == "/#run-7"
    assert web_link_target(f"/{REPO}/runs/12", REPO) == "/#check-12"
    assert web_link_target(f"/{REPO}/pull/2", REPO) == "/#pr"
    assert web_link_target(f"/{REPO}/issues/1#issuecomment-5", REPO) == "/#issue"
    assert web_link_target(f"/{REPO}/tree/{'a' * 40}/campaigns/standin", REPO) == "/#committed"
    assert web_link_target(f"/{REPO}/commit/{'a' * 40}", REPO) == "/#committed"
    assert web_link_target(f"/{REPO}", REPO) == "/"
    assert web_link_target("/maintainer", REPO) == "/"
    assert web_link_target("/other/repo/pull/2", REPO) is None
    assert web_link_target(f"/{REPO}/settings", REPO) is None


def test_the_double_writes_no_fixed_github_web_address() -> None:
    """Every web link the local GitHub gives is under its ``web_url`` (the sandbox points it
    at its page): no answer of the double's spells github.com itself."""
    import re as _re

    from sandbox import github_double

    src = (Path(github_double.__file__).parent / "server.py").read_text(encoding="utf-8")
    fixed = [ln.strip() for ln in src.splitlines()
             if _re.search(r"""f?["']https://github\.com/""", ln)]
    assert fixed == [], fixed
