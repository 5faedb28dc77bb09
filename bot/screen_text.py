"""Rendering helpers of the /screen comments: the shared environment of :mod:`bot.render`
(StrictUndefined; ``user``, ``cell`` and ``code`` filters) plus a ``utc`` filter."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from bot.render import environment, marker
from bot.render import render as _render


def utc(value: datetime | None) -> str:
    """``2026-12-01 10:00 UTC``; naive datetimes are taken as UTC; None gives ``-``."""
    if value is None:
        return "-"
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


environment().filters["utc"] = utc


def render(template: str, **ctx: Any) -> str:
    """Render ``templates/TEMPLATE`` (see :func:`bot.render.render`)."""
    return _render(template, **ctx)


__all__ = ["marker", "render", "utc"]
