"""Rendering of the /screen status and result comments from ``templates/``.

Templates render with ``StrictUndefined`` (a missing value is an error, never an empty
string).  Filters: ``text`` escapes user- or runner-supplied text for Markdown and neutralises
@mentions; ``code`` makes text safe inside inline code; ``login`` shows a login without
pinging it; ``utc`` formats a datetime as ``YYYY-MM-DD HH:MM UTC``.
"""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from typing import Any

from jinja2 import Environment, FileSystemLoader, StrictUndefined

from templates import TEMPLATE_DIR

_MENTION = re.compile(r"@(?=[A-Za-z0-9])")


def md_text(value: object) -> str:
    """Escape ``value`` for Markdown/HTML and neutralise @mentions (a zero-width joiner
    after '@' keeps the text readable but stops GitHub from notifying)."""
    s = html.escape(str(value), quote=False)
    s = s.replace("|", "\\|").replace("`", "\\`")
    return _MENTION.sub("@\u200d", s)


def md_code(value: object) -> str:
    """Text safe inside single-backtick inline code (backticks and pipes replaced)."""
    return str(value).replace("`", "'").replace("|", "/").replace("\n", " ")


def md_login(value: object) -> str:
    """A GitHub login shown without notifying its owner."""
    return f"`{md_code(value)}`"


def utc(value: datetime | None) -> str:
    """``2026-12-01 10:00 UTC``; naive datetimes are taken as UTC; None gives ``-``."""
    if value is None:
        return "-"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


_env: Environment | None = None


def env() -> Environment:
    """The shared Jinja2 environment (StrictUndefined, the filters above)."""
    global _env
    if _env is None:
        e = Environment(
            loader=FileSystemLoader(str(TEMPLATE_DIR)),
            undefined=StrictUndefined,
            autoescape=False,
            keep_trailing_newline=True,
            trim_blocks=False,
        )
        e.filters.update(text=md_text, code=md_code, login=md_login, utc=utc)
        _env = e
    return _env


def render(template: str, **ctx: Any) -> str:
    """Render ``template`` with ``ctx``; collapses runs of 3+ newlines to 2."""
    out = env().get_template(template).render(**ctx)
    return re.sub(r"\n{3,}", "\n\n", out).strip() + "\n"
