"""Creating the bot's GitHub App from the running service (GitHub's App manifest flow) and
keeping its credentials.

When ``campaign-bot serve`` starts with no webhook secret and no App credentials, it prints a
one-time setup URL (``PUBLIC_URL/setup?token=...``, a random token).  That page holds a form
that POSTs the bot's manifest (:mod:`bot.manifest`) to GitHub (``GITHUB_URL/settings/apps/new``
for a personal account, ``GITHUB_URL/organizations/ORG/settings/apps/new`` for an
organisation) with a random ``state``.  GitHub lets the person name the App, creates it and
redirects to ``PUBLIC_URL/setup/callback?code=...&state=...``; the bot checks the state,
exchanges the code (``POST /app-manifests/{code}/conversions``, within the hour GitHub allows)
and stores the App id, slug, private key, webhook secret, client id and client secret (the
GitHub sign-in of the live pages) in the credentials file (mode
0600, written atomically; never logged), then starts processing as that App: no restart.

The credentials file (``CAMPAIGN_BOT_CREDENTIALS_FILE``, default
``campaign-bot-app.json`` in the working directory) is read again by every later start; values
set in the environment win over it.
"""

from __future__ import annotations

import hmac
import json
import logging
import os
import re
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, StrictUndefined, select_autoescape

from templates import TEMPLATE_DIR

log = logging.getLogger(__name__)

CODE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
ORG_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})$")
MAX_CREDENTIALS_BYTES = 64 * 1024


class CredentialsError(Exception):
    """The credentials file cannot be read, is malformed, or cannot be written; the message
    names the file (never its secrets)."""


@dataclass(frozen=True)
class StoredApp:
    """The App the manifest flow created: ``app_id``, ``slug`` (the bot's login is
    ``SLUG[bot]``), ``private_key`` (PEM), ``webhook_secret``, and where it lives."""

    app_id: int
    slug: str
    private_key: str
    webhook_secret: str
    name: str = ""
    owner: str = ""
    html_url: str = ""
    client_id: str = ""
    created_at: str = ""
    client_secret: str = ""
    """The App's OAuth client secret (GitHub sign-in on the live pages); empty in files
    written before the bot stored it."""

    def __repr__(self) -> str:  # never print the secrets
        return f"StoredApp(app_id={self.app_id}, slug={self.slug!r}, owner={self.owner!r})"

    __str__ = __repr__

    @property
    def bot_login(self) -> str:
        """The login the App writes as."""
        return f"{self.slug}[bot]"

    @property
    def install_url(self) -> str:
        """Where the App's owner installs it on repositories."""
        return f"{self.html_url}/installations/new" if self.html_url else ""


def load_credentials(path: Path) -> StoredApp | None:
    """The stored App, or None when ``path`` does not exist.  Raises
    :class:`CredentialsError` for an unreadable or malformed file."""
    try:
        if not path.exists():
            return None
        if path.stat().st_size > MAX_CREDENTIALS_BYTES:
            raise CredentialsError(f"{path}: larger than {MAX_CREDENTIALS_BYTES} bytes")
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CredentialsError(f"{path}: cannot read the stored App credentials: "
                               f"{type(exc).__name__}") from None
    try:
        return StoredApp(app_id=int(data["app_id"]), slug=str(data["slug"]),
                         private_key=str(data["private_key"]),
                         webhook_secret=str(data["webhook_secret"]),
                         name=str(data.get("name", "")), owner=str(data.get("owner", "")),
                         html_url=str(data.get("html_url", "")),
                         client_id=str(data.get("client_id", "")),
                         created_at=str(data.get("created_at", "")),
                         client_secret=str(data.get("client_secret", "")))
    except (KeyError, TypeError, ValueError) as exc:
        raise CredentialsError(f"{path}: stored App credentials lack or mangle {exc}") from None


def save_credentials(path: Path, app: StoredApp) -> None:
    """Write ``app`` to ``path`` with mode 0600 (created 0600: never readable by others, not
    even for a moment), atomically (a temporary file renamed over it).  Raises
    :class:`CredentialsError`."""
    data = json.dumps({
        "app_id": app.app_id, "slug": app.slug, "name": app.name, "owner": app.owner,
        "html_url": app.html_url, "client_id": app.client_id, "created_at": app.created_at,
        "webhook_secret": app.webhook_secret, "private_key": app.private_key,
        "client_secret": app.client_secret,
    }, indent=2).encode() + b"\n"
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise CredentialsError(f"{path}: cannot store the App credentials: "
                               f"{exc.strerror or exc}") from None


def exchange_code(api_url: str, code: str, *, timeout_s: float = 30.0) -> StoredApp:
    """``POST /app-manifests/{code}/conversions``: the App the manifest flow created.  Raises
    :class:`CredentialsError` with GitHub's status and message (never the response body's
    secrets)."""
    url = f"{api_url.rstrip('/')}/app-manifests/{quote(code, safe='')}/conversions"
    try:
        r = httpx.post(url, headers={"Accept": "application/vnd.github+json",
                                     "X-GitHub-Api-Version": "2022-11-28"}, timeout=timeout_s)
    except httpx.HTTPError as exc:
        raise CredentialsError(f"cannot reach GitHub ({url}): {type(exc).__name__}") from None
    if r.status_code != 201:
        try:
            msg = str(r.json().get("message", ""))[:200]
        except ValueError:
            msg = ""
        raise CredentialsError(f"GitHub answered {r.status_code} to the code exchange"
                               + (f": {msg}" if msg else "") + " (a code is valid once, for "
                               "one hour: start again from the setup page)")
    try:
        d = r.json()
        owner = d.get("owner") or {}
        return StoredApp(app_id=int(d["id"]), slug=str(d["slug"]), private_key=str(d["pem"]),
                         webhook_secret=str(d["webhook_secret"]), name=str(d.get("name", "")),
                         owner=str(owner.get("login", "")), html_url=str(d.get("html_url", "")),
                         client_id=str(d.get("client_id", "")),
                         created_at=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                         client_secret=str(d.get("client_secret", "")))
    except (ValueError, KeyError, TypeError) as exc:
        raise CredentialsError(f"GitHub's answer to the code exchange lacks {exc}") from None


@dataclass
class SetupFlow:
    """One service's setup: the one-time ``token`` of the setup URL, the ``state`` bound to
    the manifest form, the manifest, where GitHub is, where credentials go, and what to run
    once the App exists (``on_configured``).  ``done`` once an App is stored."""

    token: str
    manifest: dict[str, Any]
    github_url: str
    api_url: str
    credentials_file: Path
    on_configured: Callable[[StoredApp], Awaitable[None]]
    state: str = ""
    done: StoredApp | None = None

    def __post_init__(self) -> None:
        if not self.state:
            self.state = secrets.token_urlsafe(24)

    @staticmethod
    def new_token() -> str:
        """A random setup token (32 bytes, URL-safe)."""
        return secrets.token_urlsafe(32)

    def setup_url(self, public_url: str) -> str:
        """The one-time URL ``serve`` prints."""
        return f"{public_url.rstrip('/')}/setup?token={self.token}"

    def token_ok(self, given: str | None) -> bool:
        """Constant-time check of a setup token."""
        return bool(given) and hmac.compare_digest(str(given).encode(), self.token.encode())


def _pages() -> Environment:
    return Environment(loader=FileSystemLoader(str(TEMPLATE_DIR)), undefined=StrictUndefined,
                       autoescape=select_autoescape(["html", "j2"]))


def add_setup_routes(app: FastAPI, flow: SetupFlow) -> None:
    """``GET /setup``, ``GET /setup/callback`` and ``GET /setup/installed``."""
    env = _pages()

    def page(status: int, **ctx: Any) -> HTMLResponse:
        html = env.get_template("setup_page.html.j2").render(**ctx)
        return HTMLResponse(html, status_code=status,
                            headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer",
                                     "X-Frame-Options": "DENY"})

    @app.get("/setup")
    async def setup(request: Request) -> Response:
        if flow.done is not None:
            return page(410, kind="done", app=flow.done)
        if not flow.token_ok(request.query_params.get("token")):
            return page(403, kind="error", message="This setup link is not valid. Use the URL "
                        "`campaign-bot serve` printed when it started.")
        org = (request.query_params.get("org") or "").strip()
        if org and not ORG_RE.match(org):
            return page(400, kind="error", message=f"{org!r} is not an organization name.")
        base = flow.github_url.rstrip("/")
        action = (f"{base}/organizations/{org}/settings/apps/new" if org
                  else f"{base}/settings/apps/new") + f"?state={flow.state}"
        return page(200, kind="start", action=action, org=org, token=flow.token,
                    manifest=flow.manifest, manifest_json=json.dumps(flow.manifest))

    @app.get("/setup/callback")
    async def callback(request: Request) -> Response:
        if flow.done is not None:
            return page(410, kind="done", app=flow.done)
        code = request.query_params.get("code") or ""
        state = request.query_params.get("state") or ""
        if not state or not hmac.compare_digest(state.encode(), flow.state.encode()):
            return page(403, kind="error", message="The state of this callback does not match "
                        "the setup page's: start again from the setup URL.")
        if not CODE_RE.match(code):
            return page(400, kind="error", message="GitHub's redirect carried no valid code.")
        import asyncio

        try:
            stored = await asyncio.to_thread(exchange_code, flow.api_url, code)
            await asyncio.to_thread(save_credentials, flow.credentials_file, stored)
        except CredentialsError as exc:
            log.warning("App setup failed: %s", exc)
            return page(502, kind="error", message=str(exc))
        flow.done = stored
        log.info("GitHub App %s (id %s) created; credentials stored in %s", stored.slug,
                 stored.app_id, flow.credentials_file)
        await flow.on_configured(stored)
        return page(200, kind="done", app=stored)

    @app.get("/setup/installed")
    async def installed() -> Response:
        return page(200, kind="installed")
