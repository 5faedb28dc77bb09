"""Sending one notification to one target: through Apprise, or as the bot's signed webhook.

Why Apprise (https://github.com/caronc/apprise, BSD-2-Clause): one maintained library speaks
every chat and mail protocol campaigns ask for (Slack incoming webhooks, Feishu and Lark
custom bots, DingTalk robots with their signing, Microsoft Teams through Power Automate
workflows, e-mail over SMTP with STARTTLS or TLS, and about a hundred more), each in a plugin
that follows its service's API changes (Teams' retired Office 365 connectors gave way to
``workflows://``); a target is one URL the operator copies from the Apprise wiki.  It is a
base dependency because ``campaign-bot serve`` sends the notifications.

The signed webhook is the bot's own: Apprise's ``json://`` cannot sign a body, and a receiver
must be able to tell the bot's notifications from anyone's POST.  The body is JSON (see
:func:`signed_body`); ``X-Campaign-Bot-Signature-256: sha256=<hex>`` is HMAC-SHA256 of the raw
body under the target's ``signing_secret``, the way GitHub signs webhooks (GitHub Docs,
"Validating webhook deliveries"); ``X-Campaign-Bot-Delivery`` is the send's stable id, the
same on every try, so a receiver can drop one it has seen.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
from dataclasses import dataclass
from datetime import datetime

import httpx

from bot.features.notify.settings import Target

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Campaign-Bot-Signature-256"
DELIVERY_HEADER = "X-Campaign-Bot-Delivery"
EVENT_HEADER = "X-Campaign-Bot-Event"
SCHEMA = "campaign-bot/notification@1"


@dataclass(frozen=True)
class Message:
    """What is sent: ``title`` (one line), ``body`` (plain text ending with the link),
    ``url`` (the result), and for the signed webhook the structured fields."""

    delivery: str
    kind: str
    repo: str
    campaign: str | None
    title: str
    text: str
    url: str
    sent_at: datetime

    @property
    def body(self) -> str:
        """The text, then the link on its own line (every notification links to its result)."""
        return f"{self.text}\n\n{self.url}" if self.text else self.url


@dataclass(frozen=True)
class Outcome:
    """``ok``: the target accepted it; ``retry``: worth another try later; ``detail``: why
    not (never a URL nor a secret)."""

    ok: bool
    retry: bool = False
    detail: str = ""


def signed_body(m: Message) -> bytes:
    """The signed webhook's body: ``{"schema", "delivery", "event", "repository",
    "campaign", "title", "text", "url", "sent_at"}`` as compact UTF-8 JSON."""
    return json.dumps({
        "schema": SCHEMA, "delivery": m.delivery, "event": m.kind, "repository": m.repo,
        "campaign": m.campaign, "title": m.title, "text": m.text, "url": m.url,
        "sent_at": m.sent_at.isoformat(),
    }, separators=(",", ":"), ensure_ascii=False).encode()


def signature(secret: bytes, body: bytes) -> str:
    """``sha256=<hex>``: HMAC-SHA256 of ``body`` under ``secret``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def send(target: Target, m: Message, *, timeout_s: float = 10.0) -> Outcome:
    """Send ``m`` to ``target``; never raises for the target's failures (they are the
    outcome).  A 5xx, 429 or transport error is retryable; another 4xx is not."""
    if target.signed:
        return _send_signed(target, m, timeout_s)
    return _send_apprise(target, m, timeout_s)


def _send_signed(target: Target, m: Message, timeout_s: float) -> Outcome:
    assert target.signing_secret is not None
    body = signed_body(m)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "campaign-bot",
        SIGNATURE_HEADER: signature(target.signing_secret.get_secret_value().encode(), body),
        DELIVERY_HEADER: m.delivery,
        EVENT_HEADER: m.kind,
    }
    try:
        r = httpx.post(target.url.get_secret_value(), content=body, headers=headers,
                       timeout=timeout_s, follow_redirects=False)
    except httpx.HTTPError as exc:
        return Outcome(False, True, f"signed webhook: {type(exc).__name__}")
    if 200 <= r.status_code < 300:
        return Outcome(True)
    retry = r.status_code >= 500 or r.status_code == 429
    return Outcome(False, retry, f"signed webhook answered HTTP {r.status_code}")


def _send_apprise(target: Target, m: Message, timeout_s: float) -> Outcome:
    import apprise

    plugin = apprise.Apprise.instantiate(target.url.get_secret_value())
    if plugin is None:
        return Outcome(False, False, "not a URL Apprise can send to (see the Apprise wiki)")
    plugin.socket_connect_timeout = timeout_s
    plugin.socket_read_timeout = timeout_s
    ap = apprise.Apprise()
    ap.add(plugin)
    service = getattr(plugin, "service_name", type(plugin).__name__)
    try:
        ok = ap.notify(title=m.title, body=m.body, body_format=apprise.NotifyFormat.TEXT)
    except Exception as exc:  # noqa: BLE001 - a plugin's own defect is this send's failure
        return Outcome(False, True, f"{service}: {type(exc).__name__}")
    if ok:
        return Outcome(True)
    # Apprise tells only that it failed; its log (not ours: it may print the URL) says why
    return Outcome(False, True, f"{service} did not accept the notification")
