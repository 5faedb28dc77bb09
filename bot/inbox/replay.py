"""``campaign-bot replay``: one saved delivery through the same signature check and router as
the service, printing the GitHub writes it would make (made only with ``--apply``).

Accepted files (JSON):

* as printed by ``campaign-bot deliveries --export ID``: ``{"headers": {...}, "body": "..."}``
  where ``body`` is the exact text GitHub signed;
* as saved from GitHub's Recent Deliveries (``GET /app/hook/deliveries/{id}``):
  ``{"request": {"headers": {...}, "payload": {...}}, ...}``.  The payload there is parsed
  JSON, so the signed bytes are rebuilt; GitHub sends compact JSON, which is tried first, then
  other usual spellings.  If none matches the stored signature, use ``--resign``.

Dry runs wrap the event's GitHub port in :class:`bot.github.recording.RecordingGitHub`
(reads go to GitHub, writes are recorded, not made); offline (no credentials, ``--offline``,
or GitHub unreachable) the reads are answered from the delivery's own payload by
:class:`bot.github.offline.OfflineGitHub`.  The handlers and the GitHub factory are
given by the caller (the composition root's :func:`bot.app.replay`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bot.github.recording import RecordingGitHub
from bot.inbox.delivery import (
    DELIVERY_HEADER,
    EVENT_HEADER,
    SIGNATURE_HEADER,
    PayloadError,
    parse_payload,
    sign,
    verify_signature,
)
from bot.inbox.router import Event, HandlerResult, Router
from bot.inbox.worker import ContextFactory
from evidence import safejson


class ReplayInputError(Exception):
    """The delivery file is unreadable or lacks headers/body; the message names the file."""


class SignatureMismatch(Exception):
    """The saved signature does not match the body under the configured secret."""


@dataclass
class SavedDelivery:
    """A delivery read from a file: lower-case headers and candidate body spellings (the
    first is the exact body when the file had one)."""

    path: Path
    headers: dict[str, str]
    bodies: list[bytes]


@dataclass
class ReplayReport:
    """What a replay did: handler results and the GitHub writes recorded (or made)."""

    delivery_id: str
    event: str
    action: str | None
    applied: bool
    handlers: list[HandlerResult] = field(default_factory=list)
    writes: list[Any] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """True when every handler finished."""
        return all(h.ok for h in self.handlers)


def load_delivery_file(path: Path) -> SavedDelivery:
    """Read a replay file (see the module docstring); raises :class:`ReplayInputError`."""
    try:
        doc = safejson.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ReplayInputError(f"{path}: cannot read: {exc.strerror}") from None
    except (UnicodeDecodeError, ValueError) as exc:  # not JSON, too deep
        raise ReplayInputError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ReplayInputError(f"{path}: expected a JSON object with headers and body")
    req = doc.get("request")
    src: dict[str, Any] = req if isinstance(req, dict) else doc
    headers = src.get("headers")
    if not isinstance(headers, dict):
        raise ReplayInputError(f"{path}: no 'headers' object (or 'request.headers')")
    headers = {str(k).lower(): str(v) for k, v in headers.items()}
    if isinstance(src.get("body"), str):
        bodies = [src["body"].encode("utf-8", errors="surrogateescape")]
    elif isinstance(src.get("payload"), dict | list):
        p = src["payload"]
        bodies = [
            json.dumps(p, separators=(",", ":"), ensure_ascii=False).encode(),
            json.dumps(p, separators=(",", ":")).encode(),
            json.dumps(p, indent=2, ensure_ascii=False).encode(),
            json.dumps(p, ensure_ascii=False).encode(),
        ]
    else:
        raise ReplayInputError(f"{path}: no 'body' string nor 'payload' object "
                               "(or 'request.payload')")
    for h in (EVENT_HEADER, DELIVERY_HEADER):
        if h not in headers:
            raise ReplayInputError(f"{path}: headers lack {h!r}")
    return SavedDelivery(path, headers, bodies)


def recorded_writes(port: Any) -> list[Any]:
    """The writes a recording port collected."""
    return list(getattr(port, "writes", []))


def check(saved: SavedDelivery, secret: str | bytes, *, resign: bool = False) -> Event:
    """The saved delivery's event, after its signature was checked against ``secret`` (or,
    with ``resign``, replaced by a signature under ``secret``).

    Raises :class:`SignatureMismatch` when no body spelling matches ``X-Hub-Signature-256``,
    and :class:`ReplayInputError` for a body that is not a JSON object.
    """
    if resign:
        body = saved.bodies[0]
        saved.headers[SIGNATURE_HEADER] = sign(secret, body)
    else:
        sig = saved.headers.get(SIGNATURE_HEADER)
        if not sig:
            raise SignatureMismatch(f"{saved.path}: no X-Hub-Signature-256 header "
                                    "(use --resign to sign with the configured secret)")
        match = [b for b in saved.bodies if verify_signature(secret, b, sig)]
        if not match:
            raise SignatureMismatch(
                f"{saved.path}: X-Hub-Signature-256 does not match the body under "
                "CAMPAIGN_BOT_WEBHOOK_SECRET (wrong secret, or an edited payload: --resign)")
        body = match[0]
    try:
        payload = parse_payload(body, saved.headers.get("content-type"))
    except PayloadError as exc:
        raise ReplayInputError(f"{saved.path}: {exc}") from None
    return Event(delivery_id=saved.headers[DELIVERY_HEADER], name=saved.headers[EVENT_HEADER],
                 payload=payload)


def replay(event: Event, router: Router, context_factory: ContextFactory, *,
           apply: bool = False, offline: ContextFactory | None = None,
           offline_reason: str | None = None) -> ReplayReport:
    """Route ``event`` (from :func:`check`) to ``router``'s handlers with GitHub ports from
    ``context_factory`` (writes recorded unless ``apply``), and return what happened.

    ``offline`` is the factory of a read-only port answering from the delivery's payload
    (:class:`bot.github.offline.OfflineGitHub`).  With ``offline_reason`` it is used from the
    start (the reason is reported as a note); a dry run also falls back to it, with a
    warning, when ``context_factory`` fails (GitHub unreachable, credentials refused).

    Raises :class:`ReplayInputError` when ``apply`` has no GitHub access."""
    report = ReplayReport(event.delivery_id, event.name, event.action, applied=apply)
    if not router.handlers_for(event):
        return report
    if offline is not None and offline_reason is not None and not apply:
        report.notes.append(offline_reason)
        gh, config = offline(event)
    else:
        try:
            gh, config = context_factory(event)
        except Exception as exc:  # noqa: BLE001 - no credentials, GitHub unreachable, ...
            why = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            if apply or offline is None:
                raise ReplayInputError(f"{'--apply' if apply else 'replay'} needs GitHub "
                                       f"access: {why}") from None
            report.warnings.append(f"no GitHub access ({why}); reads answer from the "
                                   "delivery's payload, as with --offline")
            gh, config = offline(event)
    port = gh if apply else RecordingGitHub(gh)
    report.handlers = router.dispatch(event, port, config)
    report.writes = recorded_writes(port)
    return report


def _describe(w: Any) -> tuple[str, str]:
    if hasattr(w, "describe"):
        op, _, rest = str(w.describe()).partition(" ")
        return op, rest
    if isinstance(w, dict):
        op = str(w.get("op") or w.get("method") or w.get("name") or "?")
        extra = {k: v for k, v in w.items() if k not in ("op", "method", "name")}
        return op, json.dumps(extra, default=str)[:2000]
    for a in ("op", "method", "name"):
        if hasattr(w, a):
            d = getattr(w, "__dict__", {})
            return str(getattr(w, a)), json.dumps({k: v for k, v in d.items() if k != a},
                                                  default=str)[:2000]
    return type(w).__name__, str(w)[:2000]


def print_report(report: ReplayReport, console: Console) -> None:
    """Handlers as a table, then each GitHub write."""
    ev = report.event + (f".{report.action}" if report.action else "")
    console.print(f"delivery {report.delivery_id} ({ev}): signature ok", highlight=False)
    for n in report.notes:
        console.print(f"note: {n}", highlight=False, markup=False, soft_wrap=True)
    for w in report.warnings:
        console.print(f"warning: {w}", highlight=False, markup=False, soft_wrap=True)
    if not report.handlers:
        console.print("no handler matches this event; nothing would be written")
        return
    t = Table(title="handlers")
    t.add_column("handler")
    t.add_column("result")
    for h in report.handlers:
        t.add_row(h.handler, "ok" if h.ok else f"[red]failed[/]: {h.error}")
    console.print(t)
    verb = "made" if report.applied else "would make"
    if report.applied:
        console.print("--apply: the writes were made on GitHub")
        return
    console.print(f"{len(report.writes)} GitHub write(s) the handlers {verb}:")
    for i, w in enumerate(report.writes, 1):
        op, args = _describe(w)
        console.print(f"  {i}. {op} {args}", highlight=False, markup=False, soft_wrap=True)
        body = getattr(w, "args", {}).get("body") if isinstance(getattr(w, "args", None),
                                                                 dict) else None
        if isinstance(body, str) and body:
            # the full text the write would post (the line above shortens it)
            console.print(f"  --- body of write {i} ---", highlight=False, markup=False)
            console.print(body, highlight=False, markup=False, soft_wrap=True)
            console.print(f"  --- end of write {i} ---", highlight=False, markup=False)
