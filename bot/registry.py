"""What a feature's ``register()`` adds to, and what its handlers and jobs may use.

The composition root (:mod:`bot.app`) makes one :class:`Registry` per application and hands
it to each feature in turn; features never import each other or the root.  A feature adds

* handlers for GitHub events: ``app.router.on(event, *actions)(handler)``;
* slash commands: ``app.commands.add(spec, fn)``;
* periodic jobs: ``app.jobs.append(Job(...))`` (run by the worker process's one scheduler);
* notices (:mod:`bot.events`): ``app.notices.emit(db, notice)`` tells whoever subscribed with
  ``app.notices.subscribe(fn)`` (the notify feature) that something happened;

and receives its own settings section as an argument of its ``register()``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.engine import Engine

from bot.commands import Commands
from bot.events import Notices
from bot.github.git import GitMirrors
from bot.inbox.router import Event, Router
from bot.repo_config import RepoConfigs
from bot.scheduler import Job

ContextFactory = Callable[[Event], tuple[Any, Any]]
"""``def context(event) -> (gh, config)``: the GitHub port for the event's repository
and installation, and the repository's parsed config (None when broken)."""


@dataclass
class Registry:
    """One application's handlers, commands and jobs, and what they run on.

    ``engine``: the bot database (migrated); ``context``: the per-event GitHub factory (jobs
    call it with a synthetic event naming a repository); ``configs``: the repository-config
    cache; ``bot_login``: the login the bot writes as; ``git``: the repositories' bare
    mirrors, where evidence is read and screen bundles are committed.
    """

    engine: Engine
    context: ContextFactory
    configs: RepoConfigs
    bot_login: str
    git: GitMirrors
    """The repositories' bare mirrors evidence is read from (``CAMPAIGN_BOT_GIT_*``)."""
    public_url: str | None = None
    """``CAMPAIGN_BOT_PUBLIC_URL``: where the live campaign pages are (see :mod:`bot.links`);
    None: texts on GitHub link to none."""
    web_url: str = "https://github.com"
    """``CAMPAIGN_BOT_GITHUB_URL``: GitHub's web base, for links outside GitHub (notices) and
    the links the bot writes to files and commits (the status header's evidence link)."""
    router: Router = field(default_factory=Router)
    jobs: list[Job] = field(default_factory=list)
    notices: Notices = field(default_factory=Notices)
    """What features report to each other (:mod:`bot.events`): screen results, stuck queues,
    budgets, forks awaiting approval; the notify feature subscribes."""
    commands: Commands = field(init=False)

    def __post_init__(self) -> None:
        self.commands = Commands(self.router, self.configs)

    def port_for(self, repo: str, installation_id: int | None = None) -> Any:
        """A GitHub port for ``repo`` outside any delivery (for jobs): the context factory
        asked with a synthetic event that carries only the repository and installation."""
        payload: dict[str, Any] = {"repository": {"full_name": repo}}
        if installation_id:
            payload["installation"] = {"id": installation_id}
        port, _config = self.context(Event(f"job-{repo}", "schedule", payload))
        return port
