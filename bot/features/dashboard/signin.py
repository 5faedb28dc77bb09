"""GitHub sign-in for the live pages of private repositories: the GitHub App's user
authorization (the OAuth 2.0 web application flow, RFC 6749 section 4.1, as GitHub Docs
"Generating a user access token for a GitHub App" describes it).

Routes (all on the service's own origin)::

    GET  /login?next=/c/OWNER/REPO/CAMPAIGN/PAGE   start: a state cookie, then a redirect to
                                                   GITHUB_URL/login/oauth/authorize
    GET  /login/callback?code=...&state=...        GitHub's redirect back: the state is
                                                   checked, the code exchanged at
                                                   POST GITHUB_URL/login/oauth/access_token
                                                   for a user access token, the session
                                                   cookie set, then a redirect to ``next``
    POST /logout                                   the session cookie removed

Who may read a private repository's pages: whoever GitHub answers ``200`` for
``GET /repos/{owner}/{repo}`` with their user access token (a user access token reaches only
repositories that both the user and the App's installation can reach: GitHub Docs, "About
user access tokens"), with ``permissions.pull`` not false.  ``404``/``403`` means no access;
``401`` means the token is no longer valid (expired or revoked), and the person is sent to
sign in again.  Answers are kept :data:`ACCESS_TTL_S` seconds per (token, repository), so a
page view does not cost a GitHub call; the key is the token's SHA-256, never a name or id
from the cookie, so even a forged cookie cannot borrow someone else's answer.

Cookies (both ``HttpOnly``, ``SameSite=Lax``, ``Secure`` when the public URL is https):

- ``campaign_bot_signin_TAG`` (path ``/login``, :data:`STATE_TTL_S`; one per sign-in under
  way, TAG from the nonce's SHA-256): a random nonce.  The
  ``state`` sent to GitHub is that nonce and the page to return to, encrypted and
  authenticated with a key of this service (Fernet: AES-128-CBC and HMAC-SHA256 with a
  timestamp, from ``cryptography``) and valid :data:`STATE_TTL_S` seconds; the callback
  accepts it only with the matching cookie (RFC 6749 section 10.12: the state binds the
  request to the browser that started it), and removes the cookie (one use).
- ``campaign_bot_session`` (path ``/``): the user access token, its expiry and the login
  ``GET /user`` named at sign-in (shown on the pages, never used to decide access),
  encrypted and authenticated the same way with a second key; it is never readable by the browser's
  scripts nor in plain text anywhere.  It lasts as long as the token (GitHub's user access
  tokens expire after eight hours) and at most :data:`SESSION_MAX_S`; the refresh token is
  not kept: after expiry the person signs in again (GitHub answers at once when the App is
  already authorized).

Keys: HKDF-SHA256 (RFC 5869) of ``CAMPAIGN_BOT_SESSION_SECRET`` (or, unset, of the App's
client secret), one per cookie purpose.  Changing the secret signs everyone out.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import re
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal
from urllib.parse import quote, urlencode, urlsplit

import httpx
from cryptography.fernet import Fernet, InvalidToken
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

from bot import links as link_scheme

log = logging.getLogger(__name__)

LOGIN_PATH = "/login"
CALLBACK_PATH = "/login/callback"
LOGOUT_PATH = "/logout"
STATE_COOKIE = "campaign_bot_signin"
"""Prefix of the state cookies: one per sign-in under way, ``campaign_bot_signin_TAG``
(:func:`state_cookie_name`), so sign-ins started in two tabs both complete."""
SESSION_COOKIE = "campaign_bot_session"
STATE_TTL_S = 600
"""Seconds between ``/login`` and GitHub's redirect back (GitHub's codes themselves expire
after ten minutes: GitHub Docs, "Generating a user access token for a GitHub App")."""
SESSION_MAX_S = 8 * 3600
"""Longest session, seconds: GitHub's user access tokens expire after eight hours (GitHub
Docs, "Refreshing user access tokens"); a token without ``expires_in`` is kept no longer."""
ACCESS_TTL_S = 60.0
"""Seconds an answer "this token can (not) read this repository" is reused."""
ACCESS_CACHE_ENTRIES = 10_000
"""Most (token, repository) answers kept; the oldest are dropped first."""
HTTP_TIMEOUT_S = 15.0
CODE_RE = re.compile(r"^[A-Za-z0-9_.-]{1,200}$")
LOGIN_RE = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9-]{0,38}\Z")
"""A GitHub user login as the pages show it: letters, digits and hyphens, at most 39
characters, not starting with a hyphen (GitHub's sign-up rules); anything else is not
shown."""
Access = Literal["read", "none", "signed-out"]
SIGNED_OUT_PAGE = ('<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
                   '<title>Signed out · campaign-bot</title><link rel="icon" href="data:,">'
                   '</head><body><main><h1>Signed out</h1><p>Signed out of the campaign '
                   'pages. Opening a private campaign page again signs you in through GitHub.'
                   '</p></main></body></html>\n')


class SignInError(Exception):
    """The sign-in cannot be set up (the message names the setting) or GitHub refused the
    code exchange (the message says what GitHub answered, never a secret)."""


@dataclass(frozen=True)
class SignInConfig:
    """What the flow needs: the App's ``client_id`` and ``client_secret``; ``github_url``
    (web base, ``https://github.com``: the ``/login/oauth/*`` pages), ``api_url`` (REST
    base), ``public_url`` (this service's base URL: the callback is
    ``{public_url}/login/callback`` and must be one of the App's callback URLs) and
    ``secret`` (key material for the cookies, bytes)."""

    client_id: str
    client_secret: str
    github_url: str
    api_url: str
    public_url: str
    secret: bytes

    def __repr__(self) -> str:  # never print the secrets
        return f"SignInConfig(client_id={self.client_id!r}, public_url={self.public_url!r})"

    @property
    def callback_url(self) -> str:
        """The ``redirect_uri`` sent to GitHub."""
        return self.public_url.rstrip("/") + CALLBACK_PATH

    @property
    def secure(self) -> bool:
        """Cookies carry ``Secure`` (sent over https only) when the public URL is https."""
        return self.public_url.startswith("https://")


def _fernet(secret: bytes, purpose: bytes) -> Fernet:
    key = HKDF(algorithm=hashes.SHA256(), length=32, salt=None,
               info=b"campaign-bot sign-in v1: " + purpose).derive(secret)
    return Fernet(base64.urlsafe_b64encode(key))


def safe_next(target: str | None) -> str | None:
    """``target`` when it is a path of the live pages (``/c/...``) on this service, else
    None: the page to return to after sign-in is never another site (no open redirect)."""
    if not target or not target.startswith(link_scheme.PREFIX + "/") or "\\" in target:
        return None
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or any(ord(c) < 0x21 for c in target):
        return None
    if any(seg in (".", "..") for seg in parts.path.split("/")):
        return None  # "/c/../setup" is another page of this service
    return target


class SignIn:
    """The flow (:meth:`start`, :meth:`callback`, :meth:`logout`, served by
    :func:`signin_router`) and the two questions the live pages ask:
    :meth:`token` (whose session is this request) and :meth:`access` (may that token read
    ``owner/repo``).  ``http``: the HTTP client for GitHub (tests inject one); ``clock``:
    monotonic seconds, for the access cache.  Thread-safe."""

    def __init__(self, config: SignInConfig, *, http: httpx.Client | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.config = config
        self._state = _fernet(config.secret, b"state")
        self._session = _fernet(config.secret, b"session")
        self._http = http or httpx.Client(timeout=HTTP_TIMEOUT_S)
        self._clock = clock
        self._access: OrderedDict[tuple[str, str, str], tuple[float, Access]] = OrderedDict()
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ sessions

    def token(self, request: Request) -> str | None:
        """The user access token of ``request``'s session cookie, or None (no cookie, one
        this service did not write, or one past its expiry)."""
        data = self._session_data(request)
        return str(data["t"]) if data is not None else None

    def _session_data(self, request: Request) -> dict[str, Any] | None:
        """The decrypted session cookie of ``request`` (``t`` token, ``exp`` expiry, ``l``
        login), or None when there is none that this service wrote and that is unexpired."""
        raw = request.cookies.get(SESSION_COOKIE)
        if not raw:
            return None
        try:
            data = json.loads(self._session.decrypt(raw.encode(), ttl=SESSION_MAX_S))
        except (InvalidToken, ValueError):
            return None
        if not isinstance(data, dict) or not isinstance(data.get("t"), str):
            return None
        try:
            if float(data.get("exp", 0)) <= time.time():
                return None
        except (TypeError, ValueError):
            return None
        return data

    def session_value(self, token: str, lifetime: int, login: str | None = None) -> str:
        """The session cookie's value for ``token``, valid ``lifetime`` seconds (at most
        :data:`SESSION_MAX_S`): the token, its expiry and the GitHub login it belongs to
        (None when GitHub did not say), encrypted and authenticated."""
        data: dict[str, object] = {"t": token, "exp": int(time.time() + lifetime)}
        if login is not None:
            data["l"] = login
        return self._session.encrypt(json.dumps(data).encode()).decode()

    def login(self, request: Request) -> str | None:
        """The GitHub login of ``request``'s session, as GitHub named it at sign-in
        (:meth:`user_login`), or None (no valid session, or GitHub did not say).  Only for
        showing who is signed in: access is decided by :meth:`access` on the token."""
        data = self._session_data(request)
        return _valid_login(data.get("l") if data is not None else None)

    def user_login(self, token: str) -> str | None:
        """``GET {api_url}/user`` with ``token``: the login of the person it belongs to, or
        None when GitHub cannot be asked or answers anything but a user with a valid login
        (sign-in goes on without a name)."""
        try:
            r = self._api_get(token, "/user")
            body = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("sign-in: GET /user: %s", type(exc).__name__)
            return None
        return _valid_login(body.get("login") if isinstance(body, dict) else None)

    def _api_get(self, token: str, path: str) -> httpx.Response:
        """``GET {api_url}{path}`` with the user access ``token`` (REST API version
        2022-11-28).  Raises :class:`httpx.HTTPError` when GitHub cannot be reached."""
        return self._http.get(f"{self.config.api_url.rstrip('/')}{path}",
                              headers={"Authorization": f"Bearer {token}",
                                       "Accept": "application/vnd.github+json",
                                       "X-GitHub-Api-Version": "2022-11-28"})

    def access(self, token: str, owner: str, repo: str) -> Access:
        """``"read"`` when ``token`` can read ``owner/repo``, ``"none"`` when not (GitHub
        answers 404 or 403), ``"signed-out"`` when GitHub no longer accepts the token (401).
        Kept :data:`ACCESS_TTL_S` seconds.  Raises :class:`httpx.HTTPError` when GitHub
        cannot be asked (nothing is kept then)."""
        key = (hashlib.sha256(token.encode()).hexdigest(), owner, repo)
        now = self._clock()
        with self._lock:
            hit = self._access.get(key)
            if hit is not None and now - hit[0] < ACCESS_TTL_S:
                return hit[1]
        r = self._api_get(token, f"/repos/{quote(owner, safe='')}/{quote(repo, safe='')}")
        answer: Access
        if r.status_code == 200:
            try:
                body = r.json()
            except ValueError:
                body = {}
            perms = body.get("permissions") if isinstance(body, dict) else None
            answer = ("none" if isinstance(perms, dict) and perms.get("pull") is False
                      else "read")
        elif r.status_code in (403, 404):
            answer = "none"
        elif r.status_code == 401:
            answer = "signed-out"
        else:
            raise httpx.HTTPStatusError(f"GitHub answered {r.status_code}", request=r.request,
                                        response=r)
        with self._lock:
            self._access[key] = (now, answer)
            self._access.move_to_end(key)
            while len(self._access) > ACCESS_CACHE_ENTRIES:
                self._access.popitem(last=False)
        return answer

    def login_url(self, next_path: str) -> str:
        """Where a page sends a person who must sign in first."""
        return f"{LOGIN_PATH}?{urlencode({'next': next_path})}"

    # ------------------------------------------------------------------ the flow

    def start(self, next_path: str | None) -> Response:
        """``GET /login``: a fresh nonce in the state cookie and a redirect to GitHub's
        authorization page with the encrypted state."""
        target = safe_next(next_path)
        if target is None:
            return PlainTextResponse("Sign-in returns to a campaign page: open one (its "
                                     "address starts with /c/) and sign in from there.\n", 400)
        nonce = secrets.token_urlsafe(32)
        state = self._state.encrypt(json.dumps({"n": nonce, "next": target}).encode()).decode()
        query = urlencode({"client_id": self.config.client_id,
                           "redirect_uri": self.config.callback_url, "state": state})
        resp = RedirectResponse(f"{self.config.github_url.rstrip('/')}/login/oauth/authorize?"
                                f"{query}", 302, headers=_NO_STORE)
        resp.set_cookie(state_cookie_name(nonce), nonce, max_age=STATE_TTL_S, path=LOGIN_PATH,
                        httponly=True, samesite="lax", secure=self.config.secure)
        return resp

    def callback(self, request: Request) -> Response:
        """``GET /login/callback``: check the state against the cookie, exchange the code,
        set the session cookie, return to the page.  Every refusal (403: state; 400: no
        code; 502: GitHub refused the exchange) is a short text that says what to do, and
        nothing is signed in."""
        q = request.query_params
        state, code = q.get("state") or "", q.get("code") or ""
        try:
            data = json.loads(self._state.decrypt(state.encode(), ttl=STATE_TTL_S))
            nonce, target = str(data["n"]), safe_next(str(data["next"]))
        except (InvalidToken, ValueError, KeyError, TypeError):
            return _refused(403, "This sign-in link is not valid or is more than ten minutes "
                            "old. Open the campaign page again to sign in.")
        name = state_cookie_name(nonce)
        cookie = request.cookies.get(name) or ""
        if not cookie or not hmac.compare_digest(cookie.encode(), nonce.encode()) \
                or target is None:
            return _refused(403, "This sign-in was not started in this browser. Open the "
                            "campaign page again to sign in.")
        error = q.get("error")
        if error:
            return _refused(403, f"GitHub did not authorize the sign-in ({error[:100]}). "
                            "Open the campaign page to try again.")
        if not CODE_RE.match(code):
            return _refused(400, "GitHub's redirect carried no valid code.")
        try:
            token, lifetime = self.exchange(code)
        except SignInError as exc:
            log.warning("sign-in: %s", exc)
            return _refused(502, f"{exc}. Open the campaign page again to sign in.")
        resp = RedirectResponse(target, 303, headers=_NO_STORE)
        resp.delete_cookie(name, path=LOGIN_PATH, httponly=True, samesite="lax",
                           secure=self.config.secure)
        login = self.user_login(token)
        resp.set_cookie(SESSION_COOKIE, self.session_value(token, lifetime, login),
                        max_age=lifetime,
                        path="/", httponly=True, samesite="lax", secure=self.config.secure)
        return resp

    def exchange(self, code: str) -> tuple[str, int]:
        """``POST {github_url}/login/oauth/access_token``: ``(user access token, seconds it
        lives, at most SESSION_MAX_S)``.  Raises :class:`SignInError` with GitHub's error
        code (``bad_verification_code``, ``incorrect_client_credentials``,
        ``redirect_uri_mismatch``...) or the HTTP status."""
        url = f"{self.config.github_url.rstrip('/')}/login/oauth/access_token"
        try:
            r = self._http.post(url, data={"client_id": self.config.client_id,
                                           "client_secret": self.config.client_secret,
                                           "code": code,
                                           "redirect_uri": self.config.callback_url},
                                headers={"Accept": "application/json"})
        except httpx.HTTPError as exc:
            raise SignInError(f"cannot reach GitHub ({url}): {type(exc).__name__}") from None
        try:
            body = r.json()
        except ValueError:
            body = {}
        if r.status_code != 200 or not isinstance(body, dict):
            raise SignInError(f"GitHub answered {r.status_code} to the code exchange")
        if body.get("error") or not isinstance(body.get("access_token"), str):
            raise SignInError("GitHub refused the code exchange: "
                              f"{str(body.get('error') or 'no access_token')[:100]}")
        try:
            lifetime = int(body.get("expires_in") or SESSION_MAX_S)
        except (TypeError, ValueError):
            lifetime = SESSION_MAX_S
        return body["access_token"], max(60, min(lifetime, SESSION_MAX_S))

    def logout(self, request: Request | None = None) -> Response:
        """``POST /logout``: the session cookie removed; a short page that says so.  A
        request whose ``Origin`` (else ``Referer``) names another site than ``public_url``
        is refused with 403 and the session kept: another site cannot sign people out
        (cross-site request forgery; browsers send ``Origin`` on every cross-origin POST,
        Fetch standard)."""
        if request is not None and not self._same_origin(request):
            return _refused(403, "This sign-out did not come from this site's own page.")
        resp = HTMLResponse(SIGNED_OUT_PAGE, 200, headers=_NO_STORE)
        resp.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax",
                           secure=self.config.secure)
        return resp

    def _same_origin(self, request: Request) -> bool:
        own = urlsplit(self.config.public_url)
        sent = request.headers.get("origin") or request.headers.get("referer")
        if sent is None:
            return True  # not a browser's cross-site form: nothing to forge
        got = urlsplit(sent)
        return (got.scheme, got.netloc) == (own.scheme, own.netloc)

    def signed_out(self, next_path: str) -> Response:
        """The answer for a session GitHub no longer accepts: cookie removed, sign in
        again."""
        resp = RedirectResponse(self.login_url(next_path), 303, headers=_NO_STORE)
        resp.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax",
                           secure=self.config.secure)
        return resp


def _valid_login(value: object) -> str | None:
    """``value`` when it is a whole GitHub login (:data:`LOGIN_RE`), else None."""
    return value if isinstance(value, str) and LOGIN_RE.match(value) else None


_NO_STORE = MappingProxyType({"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})


def signin_router(current: Callable[[], SignIn | None]) -> APIRouter:
    """``GET /login``, ``GET /login/callback``, ``POST /logout`` of the :class:`SignIn`
    that ``current()`` returns; ``404 Not Found`` while it returns None (sign-in not
    configured).  Sync handlers: the code exchange blocks, in the server's thread pool."""
    r = APIRouter()

    def need() -> SignIn | None:
        return current()

    @r.get(LOGIN_PATH)
    def login(request: Request) -> Response:
        s = need()
        return s.start(request.query_params.get("next")) if s else _not_found()

    @r.get(CALLBACK_PATH)
    def callback(request: Request) -> Response:
        s = need()
        return s.callback(request) if s else _not_found()

    @r.post(LOGOUT_PATH)
    def logout(request: Request) -> Response:
        s = need()
        return s.logout(request) if s else _not_found()

    return r


def _not_found() -> Response:
    return PlainTextResponse("Not Found\n", 404)


def _refused(status: int, message: str) -> Response:
    return PlainTextResponse(message + "\n", status, headers=_NO_STORE)


def state_cookie_name(nonce: str) -> str:
    """The state cookie of the sign-in whose nonce is ``nonce``: ``campaign_bot_signin_``
    and 16 hex digits of its SHA-256."""
    return f"{STATE_COOKIE}_{hashlib.sha256(nonce.encode()).hexdigest()[:16]}"


def make_config(*, client_id: str | None, client_secret: str | None, github_url: str,
                api_url: str, public_url: str | None,
                session_secret: str | None) -> SignInConfig | None:
    """The sign-in configuration from the settings, or None when no client id and secret
    are set (private repositories then stay 404).  Raises :class:`SignInError` naming the
    variable when only one of the pair is set, or when the public URL is missing or not
    http(s)."""
    if not client_id and not client_secret:
        return None
    if not client_id or not client_secret:
        missing = "CLIENT_ID" if not client_id else "CLIENT_SECRET"
        raise SignInError(f"CAMPAIGN_BOT_GITHUB_{missing} is not set: sign-in needs both the "
                          "App's client id and client secret")
    if not public_url or not public_url.startswith(("https://", "http://")):
        raise SignInError("CAMPAIGN_BOT_PUBLIC_URL is not set (or not an http(s) URL): "
                          "sign-in needs the address GitHub sends people back to "
                          f"(PUBLIC_URL{CALLBACK_PATH})")
    secret = (session_secret or client_secret).encode()
    return SignInConfig(client_id=client_id, client_secret=client_secret,
                        github_url=github_url, api_url=api_url, public_url=public_url,
                        secret=secret)
