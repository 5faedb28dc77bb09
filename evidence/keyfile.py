"""Where a campaign's trusted keys live: standard library only, so that ``campaign-bot
check`` can tell before anything is hashed (:mod:`evidence.launch`) whether signatures come
first."""

from __future__ import annotations

from pathlib import Path

TRUSTED_KEYS_FILE = "trusted-keys.pem"
"""A campaign's trusted keys, beside its ``campaign.toml`` (the bot reads it there, from the
default branch)."""


def campaign_keys_file(directory: Path) -> Path | None:
    """The trusted keys file that covers ``directory``, found the way the bot finds a
    campaign's keys: ``TRUSTED_KEYS_FILE`` in the campaign folder, the one holding
    ``campaign.toml``.  That is ``directory`` itself when it holds ``campaign.toml`` or the
    file; otherwise (a bundle checked on its own) the nearest folder above it that holds
    ``campaign.toml``, never beyond a folder holding ``.git`` (the repository's top).  Returns
    the path when that folder has the file (whatever it holds), else None.

    The repository configuration (``.github/campaign-bot.toml``) has no key setting: the keys
    of a campaign live only in its folder."""
    here = Path(directory).absolute()
    for d in (here, *here.parents):
        if (d / "campaign.toml").is_file() or (d == here and (d / TRUSTED_KEYS_FILE).exists()):
            kf = d / TRUSTED_KEYS_FILE
            return kf if kf.exists() or kf.is_symlink() else None
        if (d / ".git").exists():
            return None
    return None


def campaign_folder(directory: Path) -> Path | None:
    """The campaign folder covering ``directory`` (absolute): the nearest of it and the
    folders above it that holds ``campaign.toml``, never beyond a folder holding ``.git``;
    None when there is none (the folder :func:`campaign_keys_file` looks in)."""
    here = Path(directory).absolute()
    for d in (here, *here.parents):
        if (d / "campaign.toml").is_file():
            return d
        if (d / ".git").exists():
            return None
    return None
