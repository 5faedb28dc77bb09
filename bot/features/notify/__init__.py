"""The notify feature: what happens to a campaign reaches the chat and mail people watch.

Other features report happenings as notices (:mod:`bot.events`: a verdict changed, a screen
finished or failed, a queue is stuck, a budget is at 80 % or exhausted, a fork's screen
awaits approval); this feature records each one in its outbox in the transaction of the
change it reports (:mod:`.outbox`, tables in :mod:`.store`), routes it to the targets the
repository's ``[notify]`` section names (``.github/campaign-bot.toml`` on the default
branch, :class:`bot.repo_config.NotifySection`), and sends it through Apprise or as the
bot's signed webhook (:mod:`.send`) from a periodic job, outside quiet hours and within the
rate limit.  Targets are aliases: the bot's settings (:mod:`.settings`,
``CAMPAIGN_BOT_NOTIFY_TARGETS``) map each to its URL and secret.

This package's ``__init__`` stays light (``bot.settings`` imports its settings section): the
outbox is imported when :func:`register` runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from bot.events import Notice
    from bot.features.notify.outbox import Notifier
    from bot.features.notify.settings import NotifySettings
    from bot.registry import Registry

JOB_ID = "notify-outbox"


def register(app: Registry, settings: NotifySettings) -> Notifier | None:
    """Subscribe the outbox to ``app``'s notices and add the ``notify-outbox`` job (every
    ``settings.interval_s`` seconds: route new notices, send due ones).  Returns the
    notifier; None, with nothing subscribed nor scheduled, when ``settings`` define no
    target (no repository could name one; nothing is recorded to be sent later, when
    targets appear, as stale news)."""
    from bot.features.notify.outbox import Notifier, record
    from bot.repo_config import NotifySection
    from bot.scheduler import Job

    if not settings.targets:
        return None

    def section_for(repo: str) -> NotifySection | None:
        loaded = app.configs.load(app.port_for(repo))
        return loaded.config.notify if loaded.config is not None else None

    notifier = Notifier(app.engine, settings, section_for)

    def on_notice(db: Session, notice: Notice) -> None:
        record(db, notice, notifier.now())

    app.notices.subscribe(on_notice)
    app.jobs.append(Job(JOB_ID, settings.interval_s, notifier.run_pass,
                        "send the notification outbox (quiet hours, rate limits)"))
    return notifier
