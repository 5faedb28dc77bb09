"""The /screen feature: A/B screens of a campaign's candidates on self-hosted runners.

``/screen`` on a PR queues screens per hardware pool, dispatches the screen workflow when the
pool is free, follows the run and reports verdicts; ``/campaign budget extend`` raises a
campaign's budget.  The flow, module by module in the order a screen lives it:

1. :mod:`.commands`: ``/screen candidate|control|status|cancel`` and ``/campaign budget
   extend``: authorise and pin the head (:mod:`.campaign`), estimate and check the budget
   (:mod:`.budget`), enqueue one screen per track, one status comment each (:mod:`.writes`).
2. :mod:`.dispatch`: when the pool is free, claim its next screen, authorise again, dispatch
   the default branch's screen workflow, create the check run; PR pushes and closes move or
   cancel queued screens.
3. :mod:`.results`: ``workflow_job`` (running on a runner) and ``workflow_run`` completed:
   charge, fetch and verify the bundle (:mod:`.bundle`), judge it, commit it as evidence
   (:mod:`.evidence`), post the result (:mod:`.report`), dispatch the pool's next screen.
4. :mod:`.watchdog`: dispatches that never started and runs that never reported.
5. :mod:`.clicks`: the buttons of a screen's check run (Cancel, Re-run, Approve head:
   :mod:`.buttons`) and GitHub's Re-run link, each the command it stands for.

What all steps share (options, runtime, the repository's settings, the requester's errors):
:mod:`.runtime`.  Parts: command grammar (:mod:`.grammar`), tables
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
    from bot.features.screen import jobs
    from bot.features.screen.handlers import (
        BISECT_SPEC,
        BUDGET_SPEC,
        COMPARE_SPEC,
        SCREEN_SPEC,
        ScreenHandlers,
    )
    from bot.features.screen.runtime import Runtime, ScreenOptions
    from bot.github.artifacts import Limits

    options = ScreenOptions(
        debounce_s=settings.debounce_s, dispatch_timeout_s=settings.dispatch_timeout_s,
        silence_factor=settings.silence_factor, silence_margin_s=settings.silence_margin_s,
        limits=Limits(max_compressed=settings.max_artifact_bytes,
                      max_uncompressed=settings.max_unpacked_bytes),
        public_url=app.public_url, web_url=app.web_url,
    )
    rt = Runtime(app.engine, options,
                 gh_for=lambda s: app.port_for(s.repo, s.installation_id),
                 git=app.git, configs=app.configs, emit=app.notices.emit)
    h = ScreenHandlers(rt)
    app.commands.add(BUDGET_SPEC, h.budget_command)
    app.commands.add(SCREEN_SPEC, h.screen_command)
    app.commands.add(COMPARE_SPEC, h.compare_command)
    app.commands.add(BISECT_SPEC, h.bisect_command)
    app.router.on("pull_request", "synchronize")(h.handle_push)
    app.router.on("pull_request", "closed")(h.handle_closed)
    app.router.on("workflow_job")(h.handle_job)
    app.router.on("workflow_run", "completed")(h.handle_run)
    app.router.on("check_run", "requested_action", "rerequested")(h.handle_check_run)
    app.jobs.extend(jobs.jobs(rt, watchdog_interval_s=settings.watchdog_interval_s,
                              flush_interval_s=settings.flush_interval_s))
