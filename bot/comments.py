"""The bot's own comments: each carries a hidden marker (``<!-- campaign-bot:KIND ... -->``,
:func:`bot.render.marker`) and is edited in place, found by marker AND the bot's login (a user
quoting the marker is ignored)."""

from __future__ import annotations

from typing import Any

from bot.github.port import Comment, GitHubError, GitHubPort
from bot.render import marker


def upsert_comment(gh: GitHubPort, number: int, body: str, kind: str,
                   **keys: Any) -> str:
    """Create or edit the bot's one comment carrying ``marker(kind, **keys)`` on issue/PR
    ``number``.  Found by marker AND the bot's login (a user quoting the marker is ignored);
    not rewritten when unchanged.  Returns ``created``, ``edited`` or ``unchanged``.

    GitHub sometimes stores a comment and still answers an error (a 502): when the create
    fails with an error worth a retry, the comment is looked up again before the error is
    raised (and the delivery retried, which finds it by its marker)."""
    mark = marker(kind, **keys)
    if mark not in body:
        body = f"{mark}\n{body}"
    found = _find(gh, number, mark)
    if found is not None:
        if found.body.strip() == body.strip():
            return "unchanged"
        gh.edit_issue_comment(found.id, body)
        return "edited"
    try:
        gh.create_issue_comment(number, body)
    except GitHubError as exc:
        if exc.retryable and _find(gh, number, mark) is not None:
            return "created"
        raise
    return "created"


def _find(gh: GitHubPort, number: int, mark: str) -> Comment | None:
    for c in gh.list_issue_comments(number):
        if c.user == gh.bot_login and mark in c.body:
            return c
    return None
