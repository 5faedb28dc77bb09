"""Render :class:`evidence.header.HeaderContent` with ``templates/campaign_header.md.j2``.

Jinja2 with ``StrictUndefined`` (a missing field is an error, never an empty cell).  Repository
text (candidate names, source attributions, reasons) is escaped: ``<`` and ``>`` become HTML
entities, so nothing inside the header can open an HTML comment or forge the block's markers;
``|`` and newlines are escaped in table cells; ``@name`` in cells gets a zero-width joiner so it
does not notify anyone.  Only the Decision needed line names requesters on purpose.
"""

from __future__ import annotations

import re
from datetime import UTC
from functools import lru_cache
from pathlib import Path

import jinja2

import templates as _templates
from evidence.header import HeaderContent

TEMPLATE = "campaign_header.md.j2"
_MENTION = re.compile(r"(?<![\w`])@(?=[A-Za-z0-9])")


def text_filter(value: object) -> str:
    """Escape ``<`` and ``>`` (and ``&`` before them) in a sentence."""
    s = str(value)
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def cell_filter(value: object) -> str:
    """Escape a Markdown table cell: :func:`text_filter`, ``|``, newlines, @mentions."""
    s = text_filter(value).replace("|", "\\|").replace("\r", " ").replace("\n", " ")
    return _MENTION.sub("@\u200d", s)


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    """The Jinja2 environment over the ``templates`` package directory."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(Path(_templates.__file__).parent)),
        undefined=jinja2.StrictUndefined,
        autoescape=False,
        keep_trailing_newline=True,
    )
    env.filters["text"] = text_filter
    env.filters["cell"] = cell_filter
    return env


def render_header(content: HeaderContent, dashboard: str | None = None) -> str:
    """Return the header Markdown (without markers), ``\\n`` line endings, no trailing blank
    lines; ``dashboard``: the URL of the campaign's live pages, linked when given.  Raises
    ``jinja2.UndefinedError`` if the template asks for a missing field."""
    ev = content.evidence
    if ev.at.tzinfo is not None:
        content.evidence = type(ev)(ev.sha, ev.at.astimezone(UTC), ev.url)
    out = environment().get_template(TEMPLATE).render(h=content, dashboard=dashboard)
    return re.sub(r"\n{3,}", "\n\n", out).strip("\n")
