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

import asyncio
import hmac
import json
import logging
import os
import re
import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
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


STATE_COOKIE = "campaign_bot_setup_state"
"""The cookie that binds a manifest form's ``state`` to the browser that loaded the form."""
STATE_TTL_S = 3600
"""How long a form's ``state`` stays valid: GitHub's manifest code itself expires after one
hour ("Exchange the temporary code ... within one hour", GitHub Docs, "Registering a GitHub
App from a manifest")."""
MAX_PENDING_STATES = 64
"""Forms issued and not yet used that are remembered; the oldest goes first beyond this."""


@dataclass
class SetupFlow:
    """One service's setup: the one-time ``token`` of the setup URL, the manifest, where
    GitHub is, where credentials go, and what to run once the App exists
    (``on_configured``); ``secure_cookie`` when the public URL is https.  Every setup page
    issues its own ``state`` (:meth:`new_state`), bound to that browser by the
    :data:`STATE_COOKIE` cookie and used at most once (RFC 6749 section 10.12); callbacks
    run one at a time (``lock``).  ``done`` once an App is stored."""

    token: str
    manifest: dict[str, Any]
    github_url: str
    api_url: str
    credentials_file: Path
    on_configured: Callable[[StoredApp], Awaitable[None]]
    done: StoredApp | None = None
    secure_cookie: bool = False
    pending: dict[str, float] = field(default_factory=dict)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)

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

    def new_state(self) -> str:
        """A fresh random ``state`` (24 bytes, URL-safe) for one setup page, remembered for
        :data:`STATE_TTL_S` seconds (at most :data:`MAX_PENDING_STATES` of them)."""
        now = time.monotonic()
        for k in [k for k, t in self.pending.items() if t < now]:
            del self.pending[k]
        while len(self.pending) >= MAX_PENDING_STATES:
            del self.pending[next(iter(self.pending))]
        state = secrets.token_urlsafe(24)
        self.pending[state] = now + STATE_TTL_S
        return state

    def take_state(self, given: str, cookie: str | None) -> bool:
        """True when ``given`` is a state this service issued, not yet used nor expired, and
        the browser's cookie holds the same value; it is then used up."""
        if not given or not cookie or not hmac.compare_digest(given.encode(), cookie.encode()):
            return False
        expires = self.pending.pop(given, None)
        return expires is not None and expires >= time.monotonic()


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

    def configured() -> HTMLResponse:
        # once an App is stored, nothing of it is shown to whoever has (or guesses) a URL
        return page(410, kind="configured")

    @app.get("/setup")
    async def setup(request: Request) -> Response:
        if flow.done is not None:
            return configured()
        if not flow.token_ok(request.query_params.get("token")):
            return page(403, kind="error", message="This setup link is not valid. Use the URL "
                        "`campaign-bot serve` printed when it started.")
        org = (request.query_params.get("org") or "").strip()
        if org and not ORG_RE.match(org):
            return page(400, kind="error", message=f"{org!r} is not an organization name.")
        base = flow.github_url.rstrip("/")
        state = flow.new_state()
        action = (f"{base}/organizations/{org}/settings/apps/new" if org
                  else f"{base}/settings/apps/new") + f"?state={state}"
        resp = page(200, kind="start", action=action, org=org, token=flow.token,
                    manifest=flow.manifest, manifest_json=json.dumps(flow.manifest))
        resp.set_cookie(STATE_COOKIE, state, max_age=STATE_TTL_S, path="/setup",
                        httponly=True, samesite="lax", secure=flow.secure_cookie)
        return resp

    @app.get("/setup/callback")
    async def callback(request: Request) -> Response:
        async with flow.lock:  # one callback at a time: one App is stored, never two
            if flow.done is not None:
                return configured()
            code = request.query_params.get("code") or ""
            state = request.query_params.get("state") or ""
            if not flow.take_state(state, request.cookies.get(STATE_COOKIE)):
                return page(403, kind="error", message="The state of this callback does not "
                            "match a setup page opened in this browser (or was used "
                            "already): start again from the setup URL.")
            if not CODE_RE.match(code):
                return page(400, kind="error", message="GitHub's redirect carried no valid "
                            "code.")
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
            resp = page(200, kind="done", app=stored)
            resp.delete_cookie(STATE_COOKIE, path="/setup")
            return resp

    @app.get("/setup/installed")
    async def installed() -> Response:
        return page(200, kind="installed")
