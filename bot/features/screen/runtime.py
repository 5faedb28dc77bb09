"""What every step of the /screen flow shares: its tunables (:class:`ScreenOptions`), the
runtime it runs on (:class:`Runtime`: database, GitHub access, mirrors, clock), the
repository's settings it obeys (:class:`ScreenConfig`), where a command came from
(:class:`CommentContext`), and the one error a requester is told about (:class:`UserError`).

The steps themselves, in the order a screen lives them: :mod:`.commands` (``/screen`` and
``/campaign budget``), :mod:`.dispatch` (the pool's next screen goes to a runner),
:mod:`.results` (``workflow_job`` and ``workflow_run`` report back), :mod:`.watchdog` (what
never reported).  Reading the campaign and authorising: :mod:`.campaign`; GitHub writes made
once and status comments: :mod:`.writes`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.orm import Session

from bot.commands import UserError
from bot.events import Notice
from bot.features.screen import queue as screens
from bot.features.screen.grammar import USAGE
from bot.features.screen.queue import Screen
from bot.github import GitHubPort
from bot.github.artifacts import Limits
from bot.github.git import GitMirrors
from bot.repo_config import SCREEN_WORKFLOW, RepoConfig, RepoConfigs, ScreenSection

CHECK_PREFIX = "campaign-bot/screen: "
"""Check run name prefix; the full name is ``campaign-bot/screen: NAME``."""
CAMPAIGN_FILE = "campaign.toml"
WRITE_PERMISSIONS = ("admin", "write")
"""Repository permissions that may screen without being a requester of the campaign."""

@dataclass
class ScreenOptions:
    """Tunables of the flow (seconds unless named otherwise).

    ``workflow``: the screen workflow file on the default branch.  ``debounce_s``: least
    time between two edits of one status comment.  ``dispatch_timeout_s``: a dispatched
    screen whose job never starts is failed after this.  ``silence_factor`` x estimate +
    ``silence_margin_s``: a running screen with no completion after this is checked against
    GitHub and, if still not complete, cancelled and reported.  ``write_retries``: how often a
    GitHub write refused for now (5xx, rate limit, connection) is tried again, after the
    ``Retry-After`` or rate-limit reset GitHub gave, else ``write_backoff_s`` doubling; a wait
    over ``max_write_wait_s`` is not slept (the delivery is retried later instead).  Before
    each new try the write is looked up: GitHub sometimes does the write and still answers an
    error (:func:`bot.features.screen.writes.write_once`).  ``workflow`` and
    ``campaign_paths`` are the settings used where no repository config is at hand
    (:meth:`ScreenConfig.from_options`: tests, replay).
    """

    workflow: str = SCREEN_WORKFLOW
    debounce_s: float = 10.0
    dispatch_timeout_s: float = 1800.0
    silence_factor: float = 2.0
    silence_margin_s: float = 3600.0
    limits: Limits = field(default_factory=Limits)
    campaign_paths: tuple[str, ...] = ()
    write_retries: int = 3
    write_backoff_s: float = 1.0
    max_write_wait_s: float = 60.0
    public_url: str | None = None
    """``CAMPAIGN_BOT_PUBLIC_URL``: screen results link to the campaign's live pages."""
    web_url: str = "https://github.com"
    """``CAMPAIGN_BOT_GITHUB_URL``: the web base that notices link to (:mod:`.notices`)."""


def reply_context(kind: str, **ctx: Any) -> dict[str, Any]:
    """The context of ``screen_reply.md.j2`` for ``kind`` (defaults filled in)."""
    ctx.setdefault("message", "")
    ctx.setdefault("valid", [])
    ctx.setdefault("usage", USAGE)
    return {"kind": kind, **ctx}


def user_error(kind: str, **ctx: Any) -> UserError:
    """A screen command refused: the command framework's :class:`bot.commands.UserError`,
    replied with ``screen_reply.md.j2`` of ``kind`` (``message``, ``usage``,
    ``unauthorised``, ``approve``, ``budget``) and its context ``ctx``."""
    context = reply_context(kind, **ctx)
    return UserError(str(context.pop("message")), template="screen_reply.md.j2", **context)


def refusal_text(exc: UserError) -> str:
    """One line saying why: the error's message, else its reply kind."""
    return exc.message or str(exc.context.get("kind", "refused"))


Replier = Callable[..., None]
"""``say(kind, **context)``: post the command's one reply from ``screen_reply.md.j2``."""

GitHubFor = Callable[[Screen], GitHubPort]
"""Returns the GitHub port for a screen's repository (pools are shared across repos)."""


@dataclass
class Runtime:
    """What the flow needs beyond ``(event, gh, config)``: the database, the options, and a
    way to reach GitHub for another repository's screen (``gh_for``; None: only the
    handler's own port)."""

    engine: Engine
    options: ScreenOptions = field(default_factory=ScreenOptions)
    gh_for: GitHubFor | None = None
    now: Callable[[], datetime] = screens.utcnow
    git: GitMirrors | None = None
    """Where verified bundles are committed from (None: they are not committed)."""
    configs: RepoConfigs = field(default_factory=RepoConfigs)
    """The repositories' ``.github/campaign-bot.toml`` (cached), for the steps that start
    from no webhook delivery (the watchdog)."""
    emit: Callable[[Session, Notice], None] | None = None
    """Where the flow's notices go (:mod:`.notices`, :meth:`bot.events.Notices.emit`);
    None: nowhere."""

    def port_for(self, s: Screen, default: GitHubPort | None = None) -> GitHubPort:
        """The GitHub port of ``s``'s repository: ``gh_for`` when set, else ``default``.
        Raises RuntimeError when neither is there."""
        if self.gh_for is not None:
            return self.gh_for(s)
        if default is None:
            raise RuntimeError(f"no GitHub port for {s.repo}")
        return default

    def screen_section(self, gh: GitHubPort) -> ScreenSection:
        """The ``[screen]`` section of ``gh``'s repository config on its default branch
        (cached by :attr:`configs`; defaults when the file is absent or broken, as webhook
        handlers get).  GitHub errors propagate."""
        return screen_section(self.configs.load(gh).config)

    @contextmanager
    def db(self) -> Iterator[Session]:
        """A session committed on success, rolled back on error."""
        with Session(self.engine, expire_on_commit=False) as s:
            try:
                yield s
                s.commit()
            except BaseException:
                s.rollback()
                raise


@dataclass
class CommentContext:
    """Where a command came from."""

    repo: str
    number: int
    login: str
    comment_id: int | None
    installation_id: int | None
    is_pr: bool


def screen_section(config: RepoConfig | None) -> ScreenSection:
    """``config``'s ``[screen]`` section; the defaults when there is no valid config (an
    absent file gives defaults; a broken one is reported by the config feature)."""
    return config.screen if config is not None else ScreenSection()


@dataclass(frozen=True)
class ScreenConfig:
    """The repository's settings a command obeys, from ``.github/campaign-bot.toml`` on
    the default branch: the campaign directories (``[campaigns] paths``, globs expanded by
    :func:`bot.repo_config.find_campaign_dirs`; ``""`` is the repository root) and the
    ``[screen]`` section (workflow file, bundle commits)."""

    campaign_dirs: tuple[str, ...]
    screen: ScreenSection = field(default_factory=ScreenSection)

    def __post_init__(self) -> None:
        dirs = tuple("" if d.strip("/") in ("", ".") else d.strip("/")
                     for d in self.campaign_dirs)
        object.__setattr__(self, "campaign_dirs", dirs or ("",))

    @property
    def workflow(self) -> str:
        """The screen workflow file (``[screen] workflow``), e.g. ``screen.yml``."""
        return self.screen.workflow

    @classmethod
    def from_options(cls, options: ScreenOptions) -> ScreenConfig:
        """The settings without a repository config: ``options.campaign_paths`` and
        ``options.workflow`` (tests and offline replay)."""
        return cls(options.campaign_paths, ScreenSection(workflow=options.workflow))
