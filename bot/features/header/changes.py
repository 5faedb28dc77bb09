"""The header's change log, as ``/campaign history`` shows it: how many changes it lists,
and the one-line summary of what changed between two headers."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from bot.features.header.store import CampaignHeader, HeaderChange

HISTORY_DEFAULT = 5
"""Changes ``/campaign history`` lists without a number."""
HISTORY_MAX = 20
"""The most changes ``/campaign history N`` lists (one comment stays short)."""


def previous_header(db: Session, row: CampaignHeader) -> str | None:
    """The text of the last header written to ``row``'s issue, None before the first write."""
    return db.scalar(
        select(HeaderChange.header_text)
        .where(
            HeaderChange.repo == row.repo,
            HeaderChange.issue == row.issue,
            HeaderChange.kind == "write",
        )
        .order_by(HeaderChange.id.desc())
        .limit(1)
    )


_KEY_LINES = ("**Current state:**", "**Decision needed:**", "**Next action:**")


def summarise_change(old: str | None, new: str) -> str:
    """One line for ``/campaign history``: which header parts changed between ``old`` and
    ``new`` (Current state, Decision needed, Next action, board rows...), with the new
    Decision needed when it changed."""
    if old is None:
        return "header inserted"
    o, n = old.splitlines(), new.splitlines()
    parts = [p for key in _KEY_LINES if (p := _key_line_change(key, o, n))]
    rest_o = [x for x in o if not x.startswith(_KEY_LINES)]
    rest_n = [x for x in n if not x.startswith(_KEY_LINES)]
    if rest_o != rest_n:
        changed = len(set(rest_n) - set(rest_o))
        parts.append(f"{changed} board/table line(s) changed")
    return "; ".join(parts) or "whitespace only"


def _key_line_change(key: str, old: list[str], new: list[str]) -> str | None:
    """How the line starting with ``key`` changed between the ``old`` and ``new`` headers'
    lines (the new Decision needed in full, at most 160 characters), or None."""
    ol = next((x for x in old if x.startswith(key)), "")
    nl = next((x for x in new if x.startswith(key)), "")
    if ol == nl:
        return None
    label = key.strip("*:")
    if key == "**Decision needed:**":
        return f"{label} now: {nl[len(key):].strip()[:160]}"
    return f"{label} changed"
