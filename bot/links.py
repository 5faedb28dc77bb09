"""URLs of the live campaign pages that ``campaign-bot serve`` answers (see
:mod:`bot.features.dashboard.live`), for the texts the bot writes on GitHub.

Every feature may link to them (the status header, screen results, the evidence check run)
without importing the dashboard: the URL scheme lives here, in the core.
"""

from __future__ import annotations

from urllib.parse import quote

PREFIX = "/c"
"""Path prefix of the live pages: ``{public URL}/c/{owner}/{repo}/{campaign}/{page}``."""


def campaign_page(public_url: str | None, repo: str, campaign: str,
                  page: str = "") -> str | None:
    """The absolute URL of ``page`` (``""`` the overview, ``findings.html``, ``queue.html``,
    ...) of ``campaign`` (its id) in ``repo`` (``owner/name``) under ``public_url``
    (``CAMPAIGN_BOT_PUBLIC_URL``); None when ``public_url`` is unset or not http(s), so
    nothing links to a service that has no public address."""
    if not public_url or not public_url.startswith(("https://", "http://")):
        return None
    owner, _, name = repo.partition("/")
    parts = "/".join(quote(p, safe="") for p in (owner, name, campaign))
    return f"{public_url.rstrip('/')}{PREFIX}/{parts}/{quote(page)}"
