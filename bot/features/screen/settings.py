"""The ``/screen`` feature's settings section: ``CAMPAIGN_BOT_SCREEN_*`` (or the same names in
``.env``), all optional; read once with the rest of :class:`bot.settings.Settings`::

    CAMPAIGN_BOT_SCREEN_DEBOUNCE_S           least seconds between two edits of one status
                                             comment (default 10)
    CAMPAIGN_BOT_SCREEN_DISPATCH_TIMEOUT_S   a dispatched screen whose job never starts fails
                                             after this (default 1800)
    CAMPAIGN_BOT_SCREEN_SILENCE_FACTOR       a running screen silent for factor x estimate
    CAMPAIGN_BOT_SCREEN_SILENCE_MARGIN_S     + margin seconds is checked and reported
                                             (defaults 2 and 3600)
    CAMPAIGN_BOT_SCREEN_WATCHDOG_INTERVAL_S  seconds between watchdog passes (default 60)
    CAMPAIGN_BOT_SCREEN_FLUSH_INTERVAL_S     seconds between status flushes (default 5)
    CAMPAIGN_BOT_SCREEN_MAX_ARTIFACT_BYTES   artifact zip cap (default 512 MiB)
    CAMPAIGN_BOT_SCREEN_MAX_UNPACKED_BYTES   unpacked bundle cap (default 2 GiB)
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from bot.github.artifacts import MAX_COMPRESSED_BYTES, MAX_UNCOMPRESSED_BYTES


class ScreenSettings(BaseModel):
    """``CAMPAIGN_BOT_SCREEN_*`` (see the module docstring); seconds unless named otherwise."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    debounce_s: float = Field(default=10.0, ge=0)
    dispatch_timeout_s: float = Field(default=1800.0, gt=0)
    silence_factor: float = Field(default=2.0, ge=1)
    silence_margin_s: float = Field(default=3600.0, ge=0)
    watchdog_interval_s: float = Field(default=60.0, gt=0)
    flush_interval_s: float = Field(default=5.0, gt=0)
    max_artifact_bytes: int = Field(default=MAX_COMPRESSED_BYTES, gt=0)
    max_unpacked_bytes: int = Field(default=MAX_UNCOMPRESSED_BYTES, gt=0)
