"""The /screen feature: A/B screens of a campaign's candidates on self-hosted runners.

``/screen`` on a PR queues screens per hardware pool, dispatches the screen workflow when the
pool is free, follows the run and reports verdicts (:mod:`.flow`); ``/campaign budget extend``
raises a campaign's budget (:mod:`.budget`).  Parts: command grammar (:mod:`.grammar`), tables
(:mod:`.queue`, :mod:`.budget`), bundle checks (:mod:`.bundle`), result view (:mod:`.report`),
handlers (:mod:`.handlers`),
periodic jobs (:mod:`.jobs`), settings section (:mod:`.settings`,
``CAMPAIGN_BOT_SCREEN_*``), and what the campaign status header shows of the screens
(:mod:`.campaign_state`).

This package's ``__init__`` stays light (``bot.settings`` imports its settings section): the
flow is imported when :func:`register` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.features.screen.settings import ScreenSettings
    from bot.registry import Registry


def register(app: Registry, settings: ScreenSettings) -> None:
    """Add the /screen and /campaign budget commands, the ``pull_request`` synchronize and
    closed, ``workflow_job`` and ``workflow_run`` completed handlers, and the watchdog and status
    flush jobs, all on one runtime over ``app``'s database and GitHub access."""
    import asyncio

    from bot.features.screen import flow, jobs
    from bot.features.screen.handlers import BUDGET_SPEC, SCREEN_SPEC, ScreenHandlers
    from bot.github.artifacts import Limits

    options = flow.ScreenOptions(
        debounce_s=settings.debounce_s, dispatch_timeout_s=settings.dispatch_timeout_s,
        silence_factor=settings.silence_factor, silence_margin_s=settings.silence_margin_s,
        limits=Limits(max_compressed=settings.max_artifact_bytes,
                      max_uncompressed=settings.max_unpacked_bytes),
        public_url=app.public_url,
    )
    rt = flow.Runtime(app.engine, options,
                      gh_for=lambda s: asyncio.run(app.port_for(s.repo, s.installation_id)),
                      git=app.git)
    h = ScreenHandlers(rt)
    app.commands.add(BUDGET_SPEC, h.budget_command)
    app.commands.add(SCREEN_SPEC, h.screen_command)
    app.router.on("pull_request", "synchronize")(h.handle_push)
    app.router.on("pull_request", "closed")(h.handle_closed)
    app.router.on("workflow_job")(h.handle_job)
    app.router.on("workflow_run", "completed")(h.handle_run)
    app.jobs.extend(jobs.jobs(rt, watchdog_interval_s=settings.watchdog_interval_s,
                              flush_interval_s=settings.flush_interval_s))
