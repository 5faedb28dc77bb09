"""Secrets never reach a message or a log line: database URL passwords, GitHub tokens, the
webhook secret, App private keys.

* :func:`mask_url` renders a database URL with its password as ``***`` (SQLAlchemy's
  ``URL.render_as_string(hide_password=True)``);
* :class:`Redactor` replaces known secret values (the configured ones) and anything shaped
  like a secret (the patterns below) in a text;
* :class:`RedactingFilter` is a :class:`logging.Filter` that runs every log record (message,
  arguments, traceback, stack) through a :class:`Redactor`; the composition root
  (:func:`bot.app.configure_logging`) installs it on every handler.

The token shapes are GitHub's: ``ghp_`` (personal), ``gho_`` (OAuth), ``ghu_`` (user-to-server),
``ghs_`` (installation), ``ghr_`` (refresh) followed by base62 characters, and
``github_pat_`` fine-grained tokens (GitHub Docs, "About authentication to GitHub",
"GitHub's token formats").
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable

MASK = "***"

TOKEN = re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{20,})")
"""GitHub token shapes (see the module docstring)."""
AUTH_HEADER = re.compile(r"(?i)(\bauthorization['\"]?\s*[:=]\s*['\"]?"
                         r"(?:(?:bearer|token|basic)\s+)?)([^\s'\",}]+)")
"""An ``Authorization`` header's credentials, as a header line or a dict repr shows them."""
BEARER = re.compile(r"(?i)(\b(?:bearer|token)\s+)([A-Za-z0-9._~+/=-]{20,})")
"""``Bearer X`` / ``token X`` where X is long enough to be a credential (20+ characters)."""
URL_PASSWORD = re.compile(r"(?P<head>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@\s'\"]*:)"
                          r"(?P<pw>[^@/\s'\"]+)(?P<at>@)")
"""``scheme://user:password@host``: the password part."""
PRIVATE_KEY = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?(?:-----END [A-Z ]*PRIVATE "
                         r"KEY-----|\Z)", re.S)
"""A PEM private key block (or its start, when a message was cut)."""


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (SQLAlchemy's renderer; a string it
    cannot parse as a URL is masked with :data:`URL_PASSWORD`)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url).render_as_string(hide_password=True)
    except (ArgumentError, ValueError):
        return URL_PASSWORD.sub(lambda m: m["head"] + MASK + m["at"], url)


def url_password(url: str) -> str | None:
    """The password of database URL ``url`` (None when it has none or does not parse)."""
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        pw = make_url(url).password
    except (ArgumentError, ValueError):
        return None
    return str(pw) if pw else None


class Redactor:
    """Masks ``secrets`` (exact values: tokens, the webhook secret, database passwords, a
    private key's text and each of its long lines) and every :data:`TOKEN`,
    :data:`AUTH_HEADER`, :data:`BEARER`, :data:`URL_PASSWORD` and :data:`PRIVATE_KEY` match in
    a text.  Values shorter than 4 characters are ignored (masking them would mangle ordinary
    text)."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        values: set[str] = set()
        for s in secrets:
            if not s:
                continue
            values.add(s)
            values.update(ln.strip() for ln in s.splitlines() if len(ln.strip()) >= 16)
        self.values = tuple(sorted((v for v in values if len(v) >= 4), key=len, reverse=True))

    def __call__(self, text: str) -> str:
        """``text`` with every secret masked."""
        for v in self.values:
            if v in text:
                text = text.replace(v, MASK)
        text = PRIVATE_KEY.sub("-----PRIVATE KEY " + MASK + "-----", text)
        text = TOKEN.sub(MASK, text)
        text = AUTH_HEADER.sub(lambda m: m.group(1) + MASK, text)
        text = BEARER.sub(lambda m: m.group(1) + MASK, text)
        return URL_PASSWORD.sub(lambda m: m["head"] + MASK + m["at"], text)


class RedactingFilter(logging.Filter):
    """Masks secrets in each record with ``redactor``: the message is formatted (arguments
    merged) and masked, the traceback and stack text too.  Never drops a record."""

    def __init__(self, redactor: Redactor) -> None:
        super().__init__()
        self.redactor = redactor
        self._fmt = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask ``record`` in place; always True."""
        try:
            msg = record.getMessage()
        except Exception:  # noqa: BLE001 - a bad format string: keep what logging would show
            msg = str(record.msg)
        record.msg, record.args = self.redactor(msg), None
        if record.exc_info and not record.exc_text:
            record.exc_text = self._fmt.formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self.redactor(record.exc_text)
        if record.stack_info:
            record.stack_info = self.redactor(record.stack_info)
        return True
