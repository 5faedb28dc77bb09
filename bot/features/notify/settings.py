"""The notify feature's settings section: ``CAMPAIGN_BOT_NOTIFY_*`` (or the same names in
``.env``, or files in ``CAMPAIGN_BOT_SECRETS_DIR``), all optional::

    CAMPAIGN_BOT_NOTIFY_TARGETS      JSON object: alias -> Apprise URL, or alias -> {"url":
                                     URL, "repos": ["owner/*", ...], "signing_secret": S}
                                     (the repository config names aliases, never URLs)
    CAMPAIGN_BOT_NOTIFY_INTERVAL_S   seconds between passes of the sending job (default 10)
    CAMPAIGN_BOT_NOTIFY_TIMEOUT_S    seconds one send may take (default 10)
    CAMPAIGN_BOT_NOTIFY_MAX_ATTEMPTS sends tried per notification before it is given up
                                     (default 5; a failed try waits 1, 2, 4 ... minutes)

A target's URL is an Apprise URL (``slack://``, ``feishu://``, ``lark://``, ``dingtalk://``,
``workflows://`` for Microsoft Teams, ``mailtos://`` ..., see the Apprise wiki), or, with
``signing_secret``, an ``http(s)://`` URL that gets the bot's own signed JSON
(:mod:`bot.features.notify.send`).  ``repos`` limits which repositories may name the alias
(``fnmatch`` patterns on ``owner/name``; default every repository this bot serves).
URLs and secrets are :class:`pydantic.SecretStr`: never printed, never logged.
"""

from __future__ import annotations

import re
from fnmatch import fnmatchcase

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

ALIAS_RE = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}"


class Target(BaseModel):
    """One target: where (``url``), who may name it (``repos``), and for a signed webhook the
    HMAC key (``signing_secret``)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: SecretStr
    repos: tuple[str, ...] = ("*",)
    signing_secret: SecretStr | None = None

    @field_validator("url")
    @classmethod
    def _url(cls, v: SecretStr) -> SecretStr:
        if "://" not in v.get_secret_value():
            raise ValueError("must be a URL (scheme://...), e.g. slack://T/B/C")
        return v

    @property
    def signed(self) -> bool:
        """True for the bot's own signed JSON webhook (``signing_secret`` set)."""
        return self.signing_secret is not None

    def allows(self, repo: str) -> bool:
        """True when ``repo`` (``owner/name``) may name this target (case-insensitive)."""
        return any(fnmatchcase(repo.lower(), p.lower()) for p in self.repos)


class NotifySettings(BaseModel):
    """``CAMPAIGN_BOT_NOTIFY_*`` (see the module docstring); seconds unless named otherwise."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    targets: dict[str, Target] = Field(default_factory=dict)
    interval_s: float = Field(default=10.0, gt=0)
    timeout_s: float = Field(default=10.0, gt=0)
    max_attempts: int = Field(default=5, ge=1)

    @field_validator("targets", mode="before")
    @classmethod
    def _targets(cls, v: object) -> object:
        if not isinstance(v, dict):
            return v
        out = {}
        for alias, t in v.items():
            if not isinstance(alias, str) or not re.fullmatch(ALIAS_RE, alias):
                raise ValueError(f"{alias!r} is not a target alias (letters, digits, _ . -)")
            out[alias] = {"url": t} if isinstance(t, str) else t
            if isinstance(t, dict) and t.get("signing_secret") is not None and not str(
                    t.get("url", "")).startswith(("https://", "http://")):
                raise ValueError(f"{alias}: a target with signing_secret needs an http(s) URL")
        return out
