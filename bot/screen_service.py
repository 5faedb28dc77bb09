"""Wiring of the /screen flow into ``campaign-bot serve``: the runtime the handlers use
(database, options, a GitHub port per repository for the watchdog) and the scheduler.

Options come from environment variables with the ``CAMPAIGN_BOT_SCREEN_`` prefix (or the
``.env`` file), all optional::

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

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict
from sqlalchemy.engine import Engine

from bot import screen, watchdog
from bot.artifacts import MAX_COMPRESSED_BYTES, MAX_UNCOMPRESSED_BYTES, Limits
from bot.router import Event

log = logging.getLogger(__name__)


class ScreenSettings(BaseSettings):
    """``CAMPAIGN_BOT_SCREEN_*`` (see the module docstring)."""

    model_config = SettingsConfigDict(env_prefix="CAMPAIGN_BOT_SCREEN_", env_file=".env",
                                      extra="ignore")

    debounce_s: float = Field(default=10.0, ge=0)
    dispatch_timeout_s: float = Field(default=1800.0, gt=0)
    silence_factor: float = Field(default=2.0, ge=1)
    silence_margin_s: float = Field(default=3600.0, ge=0)
    watchdog_interval_s: float = Field(default=60.0, gt=0)
    flush_interval_s: float = Field(default=5.0, gt=0)
    max_artifact_bytes: int = Field(default=MAX_COMPRESSED_BYTES, gt=0)
    max_unpacked_bytes: int = Field(default=MAX_UNCOMPRESSED_BYTES, gt=0)


@dataclass
class Service:
    """What :func:`start` started; :meth:`stop` undoes it."""

    runtime: screen.Runtime
    scheduler: Any | None

    def stop(self) -> None:
        """Stop the scheduler and detach the runtime."""
        if self.scheduler is not None:
            self.scheduler.shutdown(wait=False)
        screen.attach(None)


def gh_for_factory(context_factory: Any) -> screen.GitHubFor:
    """A ``Screen -> port`` function over the worker's context factory (one synthetic event
    per call, carrying the screen's repository and installation)."""

    def gh_for(s: Any) -> Any:
        payload: dict[str, Any] = {"repository": {"full_name": s.repo}}
        if s.installation_id:
            payload["installation"] = {"id": s.installation_id}
        ev = Event(delivery_id=f"screen-{s.id}", name="workflow_run", payload=payload)
        port, _config = asyncio.run(context_factory(ev))
        return screen._port(port)

    return gh_for


def start(engine: Engine, context_factory: Any | None, *, scheduler: bool = True) -> Service:
    """Attach the /screen runtime to ``engine`` and start the watchdog jobs.

    ``context_factory`` is the worker's ``event -> (port, config)`` factory; without one the
    flow still answers commands but the watchdog cannot reach GitHub (logged)."""
    st = ScreenSettings()
    opts = screen.ScreenOptions(
        debounce_s=st.debounce_s, dispatch_timeout_s=st.dispatch_timeout_s,
        silence_factor=st.silence_factor, silence_margin_s=st.silence_margin_s,
        limits=Limits(max_compressed=st.max_artifact_bytes,
                      max_uncompressed=st.max_unpacked_bytes),
    )
    rt = screen.Runtime(engine, opts,
                        gh_for=gh_for_factory(context_factory) if context_factory else None)
    screen.attach(rt)
    sched = None
    if scheduler and context_factory is not None:
        sched = watchdog.start(rt, intervals={
            "screen-watchdog": st.watchdog_interval_s,
            "screen-status-flush": st.flush_interval_s,
        })
    elif scheduler:
        log.warning("no GitHub credentials: the /screen watchdog is not started")
    return Service(rt, sched)
