"""The GitHub App manifest of this bot, generated from what the code uses.

GitHub's App manifest flow (GitHub Docs, "Registering a GitHub App from a manifest") takes a
JSON manifest POSTed as the form field ``manifest`` to ``https://github.com/settings/apps/new``
(or ``/organizations/ORG/settings/apps/new``), lets the person name the App, and redirects to
the manifest's ``redirect_url`` with a temporary ``code`` (valid for one hour) that
``POST /app-manifests/{code}/conversions`` exchanges for the App's id, private key and webhook
secret.  Manifest keys used here: ``name``, ``url``, ``hook_attributes`` (``url``,
``active``), ``redirect_url``, ``callback_urls`` (where GitHub may send a person back after
user authorization: the live pages' sign-in, ``/login/callback``), ``setup_url``,
``description``, ``public``, ``default_permissions``, ``default_events``.

``default_events`` are the events the registered handlers subscribe to (the composition root's
router) and ``default_permissions`` the permissions the GitHub port's methods and those events
need (:mod:`bot.github.permissions`), so the App asks for what the code uses, no more.
"""

from __future__ import annotations

from collections.abc import Iterable
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from bot.github.permissions import ALWAYS_DELIVERED, EVENT_PERMISSIONS, PORT_NEEDS, permissions_for

DEFAULT_APP_NAME = "campaign-bot"
WEBHOOK_PATH = "/webhook"
CALLBACK_PATH = "/setup/callback"
SIGNIN_CALLBACK_PATH = "/login/callback"
"""The live pages' GitHub sign-in callback (:mod:`bot.features.dashboard.signin`)."""
INSTALLED_PATH = "/setup/installed"
DESCRIPTION = ("A/B screens of ML inference candidates on self-hosted runners, signed evidence "
               "bundles, verdicts and campaign status headers.")
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class ManifestError(Exception):
    """The public URL cannot serve an App: the message says why."""


def public_base(url: str) -> str:
    """``url`` checked as the service's public base URL (scheme and host, optional path; no
    query or fragment) and stripped of a trailing slash.  Plain ``http`` is accepted only for
    a loopback host (tests, a local tunnel): GitHub sends the webhook secret's signatures and
    the setup redirect to this URL.  Raises :class:`ManifestError`."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise ManifestError(f"{url!r} is not an absolute http(s) URL such as "
                            "https://bot.example.org")
    if parts.query or parts.fragment:
        raise ManifestError(f"{url!r}: give the base URL only (no ?query or #fragment)")
    if parts.scheme == "http" and parts.hostname not in LOOPBACK:
        raise ManifestError(f"{url!r}: GitHub must reach the bot over https (put it behind a "
                            "TLS reverse proxy, see deploy/Caddyfile); plain http is accepted "
                            "only for 127.0.0.1/localhost")
    return url.strip().rstrip("/")


def build_manifest(url: str, events: Iterable[str], *, methods: Iterable[str] | None = None,
                   name: str = DEFAULT_APP_NAME, public: bool = False) -> dict[str, Any]:
    """The manifest for a bot served at ``url`` whose handlers subscribe to ``events`` and
    whose port calls ``methods`` (default: every port method).

    Events GitHub delivers without a subscription (``installation``, ``ping``) are left out of
    ``default_events``.  Raises :class:`ManifestError` for an unusable URL and
    :class:`bot.github.permissions.UnknownEvent` for an event without a known permission."""
    base = public_base(url)
    events = sorted(set(events))
    methods = sorted(PORT_NEEDS) if methods is None else sorted(set(methods))
    return {
        "name": name,
        "url": base,
        "hook_attributes": {"url": base + WEBHOOK_PATH, "active": True},
        "redirect_url": base + CALLBACK_PATH,
        "callback_urls": [base + SIGNIN_CALLBACK_PATH],
        "setup_url": base + INSTALLED_PATH,
        "description": DESCRIPTION,
        "public": public,
        "default_permissions": permissions_for(methods, events),
        "default_events": [e for e in events if e not in ALWAYS_DELIVERED],
    }


PERMISSION_TITLES = MappingProxyType({
    "actions": "Actions", "checks": "Checks", "contents": "Contents", "issues": "Issues",
    "metadata": "Metadata", "pull_requests": "Pull requests",
})
"""The names GitHub's App settings page shows for the permission keys used here."""


def permission_table(manifest: dict[str, Any]) -> str:
    """Markdown tables of the manifest's repository permissions (with the port methods and
    events that need each) and subscribed events, for registering the App by hand."""
    perms: dict[str, str] = manifest["default_permissions"]
    lines = ["| Repository permission | Access | Needed by |", "|---|---|---|"]
    for perm, access in perms.items():
        users = sorted(m for m, n in PORT_NEEDS.items() if n.permission == perm)
        evs = sorted(e for e in manifest["default_events"] if EVENT_PERMISSIONS.get(e) == perm)
        what = ", ".join([f"`{m}`" for m in users] + [f"`{e}` events" for e in evs]) or \
            "mandatory for every App"
        lines.append(f"| {PERMISSION_TITLES.get(perm, perm)} | {access.capitalize()} | {what} |")
    lines += ["", "| Subscribe to event | Needs |", "|---|---|"]
    for e in manifest["default_events"]:
        perm = EVENT_PERMISSIONS[e]
        lines.append(f"| `{e}` | {PERMISSION_TITLES.get(perm, perm)} |")
    return "\n".join(lines) + "\n"
