"""Shared by the App setup tests: ``campaign-bot serve`` started with no credentials (setup
mode) against the GitHub double, and the manifest flow clicked through in headless Chromium
(Playwright, with the machine's /usr/bin/chromium; never a downloaded browser)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from webhook_helpers import free_port, wait_for

CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@dataclass
class Service:
    """A running ``campaign-bot serve``: its process, base URL, setup URL and files."""

    proc: subprocess.Popen[bytes]
    url: str
    setup_url: str
    log: Path
    credentials: Path
    db: Path

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def serve_unconfigured(double: Any, tmp: Path, **extra_env: str) -> Service:
    """Start ``campaign-bot serve`` with no webhook secret, App or token; wait for the setup
    URL it prints and for /healthz."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env.update({
        "CAMPAIGN_BOT_PUBLIC_URL": url, "CAMPAIGN_BOT_PORT": str(port),
        "CAMPAIGN_BOT_GITHUB_URL": double.base_url,
        "CAMPAIGN_BOT_GITHUB_API_URL": double.base_url,
        "CAMPAIGN_BOT_CREDENTIALS_FILE": str(tmp / "state" / "app.json"),
        "CAMPAIGN_BOT_DATABASE_URL": f"sqlite:///{tmp / 'bot.sqlite3'}",
        "CAMPAIGN_BOT_GITHUB_THROTTLE": "false", "CAMPAIGN_BOT_RETRY_DELAYS": "1",
        "CAMPAIGN_BOT_SCREEN_DEBOUNCE_S": "0", "COLUMNS": "200", "PYTHONFAULTHANDLER": "1",
    })
    env.update(extra_env)
    log = tmp / "serve.log"
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([*CLI, "serve"], cwd=tmp, env=env, stdout=out,
                            stderr=subprocess.STDOUT)
    found: list[str] = []

    def printed() -> bool:
        if proc.poll() is not None:
            pytest.fail("serve exited:\n" + log.read_text()[-3000:])
        m = re.search(r"(http://\S+/setup\?token=[A-Za-z0-9_-]+)", log.read_text())
        if m:
            found.append(m.group(1))
        return bool(found)

    wait_for(printed, 30, "the setup URL")

    def up() -> bool:
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "campaign-bot serve /healthz")
    return Service(proc, url, found[0], log, tmp / "state" / "app.json", tmp / "bot.sqlite3")


def chromium_available() -> bool:
    """True when Playwright and /usr/bin/chromium are both here."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return False
    return Path(CHROMIUM).is_file() or shutil.which("chromium") is not None


def create_app_in_browser(setup_url: str, app_name: str, org: str | None = None,
                          shots: Path | None = None) -> dict[str, str]:
    """Open the setup URL in headless Chromium, (optionally choose an organisation,) click
    "Create GitHub App", name the App on the double's github.com page, confirm, and return
    the texts of the final page (``title``, ``body``, ``install_href``)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(setup_url)
            if org:
                page.fill("input[name=org]", org)
                page.click("#use-org")
                page.wait_for_load_state()
            if shots:
                page.screenshot(path=str(shots / "1-setup.png"))
            page.click("#create")
            page.wait_for_selector("text=Create GitHub App for")
            page.fill("input[name=name]", app_name)
            if shots:
                page.screenshot(path=str(shots / "2-github.png"))
            page.click("button[type=submit]")
            page.wait_for_selector("h1", timeout=30000)
            deadline = time.monotonic() + 30
            while "/setup/callback" not in page.url and time.monotonic() < deadline:
                page.wait_for_timeout(100)
            if shots:
                page.screenshot(path=str(shots / "3-done.png"))
            link = page.query_selector("#install")
            return {"title": page.inner_text("h1"), "body": page.inner_text("body"),
                    "install_href": link.get_attribute("href") or "" if link else "",
                    "url": page.url}
        finally:
            browser.close()
