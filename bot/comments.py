"""The bot's own comments: each carries a hidden marker (``<!-- campaign-bot:KIND ... -->``,
:func:`bot.render.marker`) and is edited in place, found by marker AND the bot's login (a user
quoting the marker is ignored)."""

from __future__ import annotations

from typing import Any

from bot.github.port import GitHubPort
from bot.render import marker


async def upsert_comment(gh: GitHubPort, number: int, body: str, kind: str,
                         **keys: Any) -> str:
    """Create or edit the bot's one comment carrying ``marker(kind, **keys)`` on issue/PR
    ``number``.  Found by marker AND the bot's login (a user quoting the marker is ignored);
    not rewritten when unchanged.  Returns ``created``, ``edited`` or ``unchanged``."""
    mark = marker(kind, **keys)
    if mark not in body:
        body = f"{mark}\n{body}"
    for c in await gh.list_issue_comments(number):
        if c.user == gh.bot_login and mark in c.body:
            if c.body.strip() == body.strip():
                return "unchanged"
            await gh.edit_issue_comment(c.id, body)
            return "edited"
    await gh.create_issue_comment(number, body)
    return "created"
