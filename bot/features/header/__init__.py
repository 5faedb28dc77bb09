"""The header feature: campaign issues keep a true status header by themselves.

The header sits between hidden markers at the top of the campaign issue body
(:mod:`.block`), is computed from evidence and rendered (:mod:`.render`) by the service
(:mod:`.service`), recorded in its tables (:mod:`.store`), refreshed by the handlers, the
``/campaign refresh`` and ``/campaign history`` commands and a 30-minute job
(:mod:`.handlers`), and printed offline by ``campaign-bot header DIR`` (:mod:`.cli`).

This package's ``__init__`` stays light (the CLI plug-in lives here): the service is imported
when :func:`register` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bot.features.header.handlers import HeaderHandlers
    from bot.features.header.service import HeaderService
    from bot.features.header.sources import QueueProvider
    from bot.registry import Registry

JOB_ID = "campaign-header-refresh"


def register(app: Registry, queue: QueueProvider | None = None,
             service: HeaderService | None = None) -> HeaderHandlers:
    """Add the ``push``, ``pull_request``, ``workflow_run`` completed and ``issues`` edited
    handlers, ``/campaign refresh`` and ``/campaign history``, and the 30-minute safety-net
    job, over one service: ``service``, or a new one on ``app``'s database.  ``queue`` tells
    the header what the bot knows of each campaign's screens (None: unknown).  Returns the
    handlers."""
    from bot.features.header.handlers import HISTORY_SPEC, REFRESH_SPEC, HeaderHandlers
    from bot.features.header.service import SCHEDULE_MINUTES, HeaderService, scheduled_refresh
    from bot.scheduler import Job

    svc = service if service is not None else HeaderService(app.engine, bot_login=app.bot_login,
                                                            public_url=app.public_url,
                                                            html_base=app.web_url.rstrip("/"))
    if svc.git is None:
        svc.git = app.git
    if queue is not None:
        svc.queue = queue
    h = HeaderHandlers(svc)
    app.router.on("push")(h.on_push)
    app.router.on("pull_request", "opened", "synchronize", "reopened", "closed",
                  "edited")(h.on_pull_request)
    app.router.on("workflow_run", "completed")(h.on_workflow_run)
    app.router.on("issues", "edited")(h.on_issue_edited)
    app.commands.add(REFRESH_SPEC, h.campaign_refresh)
    app.commands.add(HISTORY_SPEC, h.campaign_history)
    app.jobs.append(Job(JOB_ID, SCHEDULE_MINUTES * 60.0,
                        lambda: scheduled_refresh(svc, app.port_for),
                        "refresh every campaign header whose evidence changed"))
    return h
