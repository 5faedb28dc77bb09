"""The campaigns of a repository checkout, found as the bot finds them on GitHub.

``.github/campaign-bot.toml`` at the repository root names, in ``[campaigns] paths``, the
directories that hold a campaign (one glob per path level, default ``campaigns/*``); the bot
validates that file in full (``bot.repo_config``), this reads only that one key, for
``campaign-bot check`` on a repository root.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

CONFIG_PATH = ".github/campaign-bot.toml"
DEFAULT_CAMPAIGN_PATHS = ("campaigns/*",)
"""``[campaigns] paths`` when the repository config does not set it."""


class RepositoryError(ValueError):
    """The repository config cannot be read or its ``[campaigns] paths`` is not a list of
    relative paths; the message names the file."""


def campaign_dirs(root: Path) -> list[Path] | None:
    """The campaign directories (holding campaign.toml) of the repository checkout at
    ``root``, sorted; None when ``root`` holds no ``.github/campaign-bot.toml`` (not a
    repository root).  Paths that lead outside ``root`` are ignored.  Raises
    :class:`RepositoryError` for an unreadable or malformed config."""
    cfg = root / CONFIG_PATH
    if not cfg.is_file():
        return None
    try:
        data = tomllib.loads(cfg.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise RepositoryError(f"{cfg}: cannot read: {exc}") from None
    section = data.get("campaigns", {})
    paths = section.get("paths", list(DEFAULT_CAMPAIGN_PATHS)) if isinstance(section, dict) \
        else None
    if not isinstance(paths, list) or not all(isinstance(p, str) and p for p in paths):
        raise RepositoryError(f"{cfg}: [campaigns] paths must be a list of relative paths")
    top = root.resolve()
    found: set[Path] = set()
    for pattern in paths:
        if pattern.startswith("/") or ".." in pattern.split("/"):
            raise RepositoryError(f"{cfg}: [campaigns] paths: {pattern!r} is not a relative "
                                  "path inside the repository")
        for d in ([root] if pattern in (".", "") else root.glob(pattern)):
            if d.is_dir() and (d / "campaign.toml").is_file() and \
                    d.resolve().is_relative_to(top):
                found.add(d)
    return sorted(found)
