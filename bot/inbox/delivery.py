"""Webhook delivery primitives shared by the endpoint, the worker and ``replay``:
signature check, payload parsing, and the serialisation key.

Signature (GitHub Docs, "Validating webhook deliveries"): ``X-Hub-Signature-256:
sha256=<hex HMAC-SHA256(secret, raw body)>``, compared with :func:`hmac.compare_digest` over
the raw bytes before any parsing.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any
from urllib.parse import parse_qs

from evidence import safejson

SIGNATURE_HEADER = "x-hub-signature-256"
EVENT_HEADER = "x-github-event"
DELIVERY_HEADER = "x-github-delivery"
# Headers never stored with a delivery (GitHub sends none of these; a proxy might).
DROPPED_HEADERS = frozenset({"authorization", "cookie", "proxy-authorization"})
MAX_DELIVERY_ID_CHARS = 200
"""Longest ``X-GitHub-Delivery`` accepted (characters; the inbox column holds 200).  GitHub
sends a 36-character GUID; a longer id is refused, never cut: two ids sharing their first 200
characters would otherwise be taken for one delivery and the second dropped as a duplicate."""
MAX_EVENT_CHARS = 100
"""Longest ``X-GitHub-Event`` accepted (characters; GitHub's event names are under 40)."""
MAX_PAYLOAD_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in a webhook body (levels; GitHub's
payloads are under 10).  Deeper text is refused before parsing (:mod:`evidence.safejson`):
Python's parser would exhaust its recursion limit instead."""


class PayloadError(ValueError):
    """The (signed) body is not a JSON object, or not a form with a ``payload`` field."""


def sign(secret: str | bytes, body: bytes) -> str:
    """The ``X-Hub-Signature-256`` value GitHub would send for ``body``."""
    key = secret.encode() if isinstance(secret, str) else secret
    return "sha256=" + hmac.new(key, body, hashlib.sha256).hexdigest()


def verify_signature(secret: str | bytes, body: bytes, header: str | None) -> bool:
    """True when ``header`` is the valid signature of ``body`` (constant-time compare).

    A missing header, another algorithm (e.g. the legacy SHA-1 ``sha1=``) or any mismatch is
    False."""
    if not header or not header.startswith("sha256="):
        return False
    return hmac.compare_digest(sign(secret, body).encode(), header.strip().encode())


def parse_payload(body: bytes, content_type: str | None) -> dict[str, Any]:
    """The delivery's JSON object.

    GitHub sends ``application/json``, or ``application/x-www-form-urlencoded`` with the JSON
    in the ``payload`` field when the webhook is configured so.  Raises :class:`PayloadError`
    with a one-line reason (also for JSON nested deeper than :data:`MAX_PAYLOAD_DEPTH`)."""
    ct = (content_type or "").split(";")[0].strip().lower()
    raw: bytes | str = body
    if ct == "application/x-www-form-urlencoded":
        try:
            form = parse_qs(body.decode("utf-8"), strict_parsing=True)
        except (UnicodeDecodeError, ValueError) as exc:
            raise PayloadError(f"form body unreadable: {exc}") from None
        if "payload" not in form:
            raise PayloadError("form body has no 'payload' field")
        raw = form["payload"][0]
    try:
        obj = safejson.loads(raw, limit=MAX_PAYLOAD_DEPTH)
    except safejson.JSONTooDeep as exc:
        raise PayloadError(f"body is not accepted: {exc}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise PayloadError(f"body is not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise PayloadError(f"body is JSON {type(obj).__name__}, not an object")
    return obj


def delivery_key(payload: dict[str, Any]) -> str:
    """The serialisation key of a delivery: deliveries with one key are processed one at a
    time, in arrival order.

    One key per repository (``repo:OWNER/NAME``), whether or not the payload carries an
    ``installation`` block; only a delivery with no repository (``installation``,
    ``github_app_authorization``) is keyed by its installation, and one with neither is
    ``global``.  The key must not depend on the payload's shape: an App's webhook sends an
    ``installation`` block and a repository webhook does not, and both can reach the bot for
    one pull request (a repository webhook left from before the App; a redelivery).  Keyed by
    installation, those two ran at once and the PR got two summary comments and two reviews
    of one head.  A finer key per pull request would let a ``push`` (which names no PR) race
    the ``pull_request`` ``synchronize`` it causes, and two PRs' screens race for the campaign's
    budget; per repository serialises every write to any one issue or PR, whatever event
    touches it.  Deliveries of different repositories of one installation now run at once;
    GitHub's advice to "make requests serially" per installation (GitHub Docs, "Best practices
    for using the REST API") is about secondary rate limits, which the GitHub adapter's
    back-off handles (:mod:`bot.github.pygithub`)."""
    repo = payload.get("repository")
    if isinstance(repo, dict) and isinstance(repo.get("full_name"), str):
        return f"repo:{repo['full_name']}"
    inst = payload.get("installation")
    if isinstance(inst, dict) and isinstance(inst.get("id"), int):
        return f"installation:{inst['id']}"
    return "global"


def repo_of(payload: dict[str, Any]) -> str | None:
    """``owner/name`` of the payload's repository, if any."""
    repo = payload.get("repository")
    if isinstance(repo, dict) and isinstance(repo.get("full_name"), str):
        return repo["full_name"]
    return None
