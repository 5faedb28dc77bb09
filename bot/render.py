"""Every text the bot writes comes from a Jinja2 template in ``templates/``.

Templates render with ``StrictUndefined`` (a missing variable is an error, never an empty
string).  Text that came from users or from files in a PR (comment bodies, logins, paths,
finding messages quoting file content) goes through the ``user`` filter: Markdown/HTML
control characters are escaped, so it cannot open a link, an HTML comment (a spoofed hidden
marker) or a table cell, and ``@mentions`` are neutralised with a zero-width space so echoing
them notifies nobody.

Filters: ``user`` (inline user text), ``cell`` (user text inside a table cell, one line),
``code`` (an inline code span that cannot be broken out of), ``short_sha``, ``utc`` (a time
as ``2026-12-01 10:00 UTC``).

The environment is built once per process (:func:`environment`) and never changed after.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from templates import TEMPLATE_DIR

TEMPLATES_DIR = TEMPLATE_DIR
ZWSP = "\u200b"
MAX_COMMENT_CHARS = 65536
"""GitHub's limit for an issue/comment body (longer ones get 422: PyGithub/PyGithub#1906)."""

_MENTION = re.compile(r"@(?=[A-Za-z0-9])")
_MD_SPECIAL = re.compile(r"([\\`*_\[\]|~#])")
_MARKER_KEY = re.compile(r"^[a-z][a-z0-9_-]*$")


def neutralise_mentions(text: str) -> str:
    """``@name`` -> ``@<ZWSP>name``: rendered the same, notifies nobody."""
    return _MENTION.sub("@" + ZWSP, text)


def escape_user_text(text: Any) -> str:
    """Escape user-supplied text for inline Markdown: HTML (``& < >``), Markdown control
    characters, and ``@mentions``."""
    s = str(text)
    s = s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    s = _MD_SPECIAL.sub(r"\\\1", s)
    return neutralise_mentions(s)


def table_cell(text: Any) -> str:
    """User text for one Markdown table cell: escaped, on one line."""
    return " ".join(escape_user_text(text).split())


def inline_code(text: Any) -> str:
    """An inline code span holding ``text`` verbatim (backtick runs fenced around, HTML-safe
    because GitHub renders code spans literally).  Newlines become spaces."""
    s = " ".join(str(text).splitlines())
    longest = max((len(m) for m in re.findall(r"`+", s)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if s.startswith("`") or s.endswith("`") or not s else ""
    return f"{fence}{pad}{neutralise_mentions(s)}{pad}{fence}"


def utc(value: datetime | None) -> str:
    """``2026-12-01 10:00 UTC``; naive datetimes are taken as UTC; None gives ``-``."""
    if value is None:
        return "-"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def marker(kind: str, **keys: Any) -> str:
    """A hidden marker ``<!-- campaign-bot:KIND k=v ... -->`` identifying a bot-owned text.

    Keys are sorted; values must not contain spaces or ``--`` (they are ids, numbers, SHAs)."""
    parts = [f"campaign-bot:{kind}"]
    for k in sorted(keys):
        v = str(keys[k])
        if not _MARKER_KEY.match(k) or not v or " " in v or "--" in v or ">" in v:
            raise ValueError(f"bad marker key/value {k}={v!r}")
        parts.append(f"{k}={v}")
    return "<!-- " + " ".join(parts) + " -->"


def has_marker(body: str, kind: str, **keys: Any) -> bool:
    """True when ``body`` carries exactly the marker :func:`marker` makes for these keys."""
    return marker(kind, **keys) in (body or "")


@lru_cache(maxsize=1)
def environment() -> Environment:
    """The shared Jinja2 environment (StrictUndefined, no autoescape: output is Markdown)."""
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES_DIR)),
        undefined=StrictUndefined,
        autoescape=False,
        keep_trailing_newline=False,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["user"] = escape_user_text
    env.filters["cell"] = table_cell
    env.filters["code"] = inline_code
    env.filters["short_sha"] = lambda s: str(s)[:7]
    env.filters["utc"] = utc
    env.globals["marker"] = marker
    return env


def render(template: str, **context: Any) -> str:
    """Render ``templates/TEMPLATE`` with ``context``; raises ``jinja2.UndefinedError`` for a
    missing variable.  The result is stripped and capped at GitHub's 65,536 characters (a
    longer text is cut with a note, keeping the leading marker)."""
    text = environment().get_template(template).render(**context).strip() + "\n"
    if len(text) > MAX_COMMENT_CHARS:
        note = "\n\n_(truncated: GitHub limits a comment to 65,536 characters)_\n"
        text = text[: MAX_COMMENT_CHARS - len(note)] + note
    return text
