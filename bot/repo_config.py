"""Repository configuration: ``.github/campaign-bot.toml``, read from the default branch only.

Why the default branch: a PR could otherwise grant its own author the right to ``/screen`` or
point the bot at another workflow.  A PR that changes the file gets a validation comment
(the config feature, :mod:`bot.features.config`); the change takes effect once merged.

Format (every section optional; unknown keys are errors, ``extra="forbid"``)::

    [campaigns]
    paths = ["campaigns/*"]          # directories holding a campaign.toml; glob per level

    [screen]
    workflow = "screen.yml"          # .github/workflows/<file> on the default branch
    allowed = ["alice"]              # logins allowed to /screen besides admin/write
    allow_requesters = true          # the campaign's requesters (campaign.toml on the
                                     # default branch) may /screen
    commit_bundles = true            # commit each verified screen bundle (see below)
    evidence_path = "screens"        # where, relative to the campaign directory: a bundle
                                     # goes to <campaign>/<evidence_path>/<screen label>/
    max_committed_file_bytes = 10485760  # larger files (the output MP4s) stay in the run's
                                     # artifact, listed in the bundle's external-artifacts.json
    max_committed_files = 1000       # a bundle with more files to commit is not committed
    max_committed_bytes = 52428800   # nor one whose committed files exceed 50 MiB in all

    [review]
    enabled = true                   # review evidence on PRs
    check_run = true                 # report as check run campaign-bot/evidence
    max_inline_comments = 50         # further findings go into the review body

    [notify]
    targets = ["team-slack"]         # aliases the bot's CAMPAIGN_BOT_NOTIFY_TARGETS maps to
                                     # URLs (secrets never live in the repository)
    events = ["verdict_changed", "screen_failed"]  # default: every kind
    quiet_hours = "22:00-07:00"      # local time in `timezone`: held until the end
    timezone = "Asia/Shanghai"       # IANA name (default UTC)
    max_per_hour = 12                # per target; more wait for a free slot

    [notify.only]                    # optional: a target hears only these kinds
    team-slack = ["queue_stuck", "budget_exhausted"]

Runner labels are not configured here: the campaign's ``campaign.toml`` ``[pool]
runner_labels`` names them and the bot passes them to the screen workflow (its ``runs_on``
input).  A ``[pools]`` table, which older versions read, is reported as a problem that says so.

An absent file means all defaults.  A broken file yields ``None`` from :func:`load` together
with :class:`ConfigProblem` entries that say exactly what to fix (file, line, key, reason).
:class:`RepoConfigs` caches results for :data:`CACHE_TTL_S` seconds per repository.
"""

from __future__ import annotations

import re
import time
import tomllib
from dataclasses import dataclass, field
from fnmatch import fnmatch
from typing import TYPE_CHECKING, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from bot.events import KINDS
from evidence.repository import DEFAULT_CAMPAIGN_PATHS

if TYPE_CHECKING:
    from bot.github.port import GitHubPort

CONFIG_PATH = ".github/campaign-bot.toml"
SCREEN_WORKFLOW = "screen.yml"
"""The screen workflow's file name: ``.github/workflows/screen.yml``, as shipped in this
repository (and its copy ``examples/workflows/screen.yml``); ``[screen] workflow`` names
another one."""
REMOVED_POOLS = (
    "is no longer read: runner labels come from the campaign's campaign.toml [pool] "
    "runner_labels (the bot passes them to the screen workflow as its runs_on input); delete "
    "the [pools] tables, and the CAMPAIGN_BOT_POOL_LABELS repository variable if you set one")
DEFAULT_MAX_COMMITTED_FILE_BYTES = 10 * 1024 * 1024
"""Files of a screen bundle larger than this (10 MiB: the output MP4s) are not committed; the
run's artifact keeps them and the bundle's ``external-artifacts.json`` records their SHA-256,
size and origin.  GitHub warns about files over 50 MB and refuses files over 100 MB (GitHub
Docs, "About large files on GitHub")."""
DEFAULT_MAX_COMMITTED_FILES = 1000
"""Files one screen may commit: a screen of campaign #320's protocol (6 sessions) bundles
about 40 (receipts, logs, media reports, manifests); a thousand leaves room for long orders
and still stops a runner that fills its bundle with files from ending up in the repository
(9,015 files went into one commit before this cap)."""
DEFAULT_MAX_COMMITTED_BYTES = 50 * 1024 * 1024
"""Bytes one screen may commit (files under ``max_committed_file_bytes`` only): logs and
JSON documents of a screen are a few MiB; 50 MiB stops a bundle of many just-small-enough
files (60 MiB went into one commit before this cap)."""
CACHE_TTL_S = 60.0
"""Seconds a loaded config is reused (a push to the default branch shows within a minute)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _relative_glob(v: str) -> str:
    if not v or v.startswith("/") or ".." in v.split("/"):
        raise ValueError(f"{v!r} must be a relative path inside the repository (no '..')")
    return v.strip("/") or "."


class CampaignsSection(_Strict):
    """Where campaigns live: each directory matching one of ``paths`` holds a campaign.toml."""

    paths: list[str] = Field(default_factory=lambda: list(DEFAULT_CAMPAIGN_PATHS),
                             min_length=1)

    @field_validator("paths")
    @classmethod
    def _paths(cls, v: list[str]) -> list[str]:
        return [_relative_glob(p) for p in v]


class ScreenSection(_Strict):
    """``/screen``: which workflow runs screens, who besides writers may start one, and where
    verified screen bundles are committed."""

    workflow: str = Field(default=SCREEN_WORKFLOW, pattern=r"^[A-Za-z0-9._-]+\.ya?ml$")
    allowed: list[str] = Field(default_factory=list)
    allow_requesters: bool = True
    commit_bundles: bool = Field(default=True, description=(
        "Commit each verified screen bundle (the PR's head branch; campaign-bot/screens/PR-N "
        "for a fork)."))
    evidence_path: str = Field(
        default="screens", pattern=r"^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$",
        description="Where, relative to the campaign directory: EVIDENCE_PATH/SCREEN_LABEL/.")
    max_committed_file_bytes: int = Field(
        default=DEFAULT_MAX_COMMITTED_FILE_BYTES, ge=0, description=(
            "Larger bundle files stay in the run's artifact, listed with their SHA-256 in "
            "external-artifacts.json."))

    max_committed_files: int = Field(
        default=DEFAULT_MAX_COMMITTED_FILES, ge=1, description=(
            "A verified bundle with more files to commit than this is not committed (it stays "
            "the run's artifact)."))
    max_committed_bytes: int = Field(
        default=DEFAULT_MAX_COMMITTED_BYTES, ge=0, description=(
            "A verified bundle whose files to commit add up to more bytes than this is not "
            "committed (it stays the run's artifact)."))

    @field_validator("evidence_path")
    @classmethod
    def _evidence_path(cls, v: str) -> str:
        if any(p in (".", "..") or p.casefold() == ".git" for p in v.split("/")):
            raise ValueError(f"{v!r} must stay inside the campaign directory")
        return v

    @field_validator("allowed")
    @classmethod
    def _logins(cls, v: list[str]) -> list[str]:
        for login in v:
            if not re.fullmatch(r"[A-Za-z0-9-]+(\[bot\])?", login):
                raise ValueError(f"{login!r} is not a GitHub login")
        return v


LABEL_NAME_RE = r"^[^,]{0,50}$"
"""A label name GitHub accepts (at most 50 characters); "" turns that label off.  Commas are
refused: GitHub's label lists are comma-separated in its search syntax."""


class LabelsSection(_Strict):
    """Labels the bot keeps on a pull request from its screens: each is created in the
    repository the first time it is used, set while it holds and removed when it no longer
    does.  An empty name turns that label off."""

    enabled: bool = Field(default=True, description="Keep the labels below on pull requests.")
    supported: str = Field(default="screen:supported", pattern=LABEL_NAME_RE, description=(
        "The latest judged screen of a candidate on a track is SUPPORTED (or EQUIVALENT)."))
    inconclusive: str = Field(default="screen:inconclusive", pattern=LABEL_NAME_RE,
                              description=(
        "The latest judged screen of a candidate on a track is INCONCLUSIVE."))
    failed: str = Field(default="screen:failed", pattern=LABEL_NAME_RE,
                        description=(
        "The latest judged screen of a candidate on a track is FAILED or REJECTED."))
    awaiting_approval: str = Field(default="awaiting-approval", pattern=LABEL_NAME_RE,
                                   description=(
        "A fork pushed after its screen was approved; the new head awaits an approval."))


class ReviewSection(_Strict):
    """PR review of evidence."""

    enabled: bool = True
    check_run: bool = True
    max_inline_comments: int = Field(default=50, ge=0, le=100)


NOTIFY_EVENTS = KINDS
"""The ``[notify] events`` a repository may choose (:data:`bot.events.KINDS`)."""
NOTIFY_ALIAS_RE = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$"
"""A target alias: what ``CAMPAIGN_BOT_NOTIFY_TARGETS`` names (letters, digits, ``_.-``)."""
QUIET_HOURS_RE = r"^(([01][0-9]|2[0-3]):[0-5][0-9]-([01][0-9]|2[0-3]):[0-5][0-9])?$"
"""``HH:MM-HH:MM`` (24-hour clock), or empty for none."""


class NotifySection(_Strict):
    """Notifications: which targets hear which events, when they are held back, and how
    many each target gets per hour.  Targets are aliases: the
    bot's settings map each to a URL and secret, so the repository holds no secret and a
    target it does not name never hears of it."""

    targets: list[str] = Field(default_factory=list, description=(
        "Aliases of the targets to notify (CAMPAIGN_BOT_NOTIFY_TARGETS maps each to a URL)."))
    events: list[str] = Field(default_factory=lambda: list(NOTIFY_EVENTS), description=(
        "Kinds of notice sent: " + ", ".join(NOTIFY_EVENTS) + " (default all)."))
    only: dict[str, list[str]] = Field(default_factory=dict, description=(
        "Per target alias, the only kinds it hears (a subset of events)."))
    quiet_hours: str = Field(default="", pattern=QUIET_HOURS_RE, description=(
        "HH:MM-HH:MM in timezone: notices are held until the quiet hours end (empty: none)."))
    timezone: str = Field(default="UTC", description="IANA time zone of quiet_hours.")
    max_per_hour: int = Field(default=12, ge=1, le=1000, description=(
        "Notifications per target in any 60 minutes; more wait for a free slot."))

    @field_validator("targets")
    @classmethod
    def _targets(cls, v: list[str]) -> list[str]:
        for alias in v:
            if not re.fullmatch(NOTIFY_ALIAS_RE, alias):
                raise ValueError(f"{alias!r} is not a target alias (letters, digits, _ . -)")
        if len(set(v)) != len(v):
            raise ValueError("a target is named twice")
        return v

    @field_validator("events")
    @classmethod
    def _events(cls, v: list[str]) -> list[str]:
        for kind in v:
            if kind not in NOTIFY_EVENTS:
                raise ValueError(f"{kind!r} is not an event; known: {', '.join(NOTIFY_EVENTS)}")
        return v

    @field_validator("only")
    @classmethod
    def _only(cls, v: dict[str, list[str]]) -> dict[str, list[str]]:
        for alias, kinds in v.items():
            for kind in kinds:
                if kind not in NOTIFY_EVENTS:
                    raise ValueError(f"{alias}: {kind!r} is not an event; known: "
                                     f"{', '.join(NOTIFY_EVENTS)}")
        return v

    @field_validator("timezone")
    @classmethod
    def _timezone(cls, v: str) -> str:
        from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"{v!r} is not an IANA time zone (e.g. Europe/Berlin)") from None
        return v

    @model_validator(mode="after")
    def _only_names_targets(self) -> NotifySection:
        unknown = sorted(set(self.only) - set(self.targets))
        if unknown:
            raise ValueError(f"[notify.only] names {', '.join(unknown)}, which targets does "
                             "not list")
        return self

    def hears(self, alias: str, kind: str) -> bool:
        """True when target ``alias`` (named in :attr:`targets`) hears notices of ``kind``."""
        if alias not in self.targets or kind not in self.events:
            return False
        return kind in self.only[alias] if alias in self.only else True


class RepoConfig(_Strict):
    """The parsed ``.github/campaign-bot.toml``."""

    campaigns: CampaignsSection = Field(default_factory=CampaignsSection)
    screen: ScreenSection = Field(default_factory=ScreenSection)
    review: ReviewSection = Field(default_factory=ReviewSection)
    notify: NotifySection = Field(default_factory=NotifySection)
    labels: LabelsSection = Field(default_factory=LabelsSection)


@dataclass(frozen=True)
class ConfigProblem:
    """One thing to fix: ``key`` is the dotted key (``screen.workflow``), ``line`` 1-based."""

    key: str
    line: int | None
    message: str

    def __str__(self) -> str:
        where = f"line {self.line}, " if self.line else ""
        key = f"`{self.key}`: " if self.key else ""
        return f"{CONFIG_PATH} {where}{key}{self.message}"


@dataclass
class LoadedConfig:
    """Result of reading the config: ``config`` (None when broken), ``problems``, whether the
    file exists, and the ref it was read at."""

    config: RepoConfig | None
    problems: list[ConfigProblem] = field(default_factory=list)
    present: bool = False
    ref: str = ""


def _key_lines(text: str) -> dict[str, int]:
    """Dotted key -> 1-based line, for table headers and ``key =`` lines (simple TOML)."""
    out: dict[str, int] = {}
    table = ""
    for i, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        m = re.match(r"^\[\[?\s*([^\]]+?)\s*\]\]?", line)
        if m:
            table = ".".join(p.strip().strip('"') for p in m.group(1).split("."))
            out.setdefault(table, i)
            continue
        m = re.match(r'^("?[A-Za-z0-9_.-]+"?)\s*=', line)
        if m:
            key = ".".join(p.strip('"') for p in m.group(1).split("."))
            out.setdefault(f"{table}.{key}" if table else key, i)
    return out


def _allowed_keys(model: type[BaseModel] | None) -> str:
    return ", ".join(model.model_fields) if model else ""


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel] | None:
    model: Any = RepoConfig
    for part in loc[:-1]:
        is_model = isinstance(model, type) and issubclass(model, BaseModel)
        f = model.model_fields.get(part) if is_model else None
        if f is None:
            return None
        model = f.annotation if isinstance(f.annotation, type) else None
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def parse(text: str) -> tuple[RepoConfig | None, list[ConfigProblem]]:
    """Parse config ``text``: ``(config, [])`` or ``(None, problems)``.  Pure."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        return None, [ConfigProblem("", int(m.group(1)) if m else None,
                                    f"not valid TOML: {exc}")]
    lines = _key_lines(text)
    problems: list[ConfigProblem] = []
    if "pools" in data:
        data = {k: v for k, v in data.items() if k != "pools"}
        problems.append(_removed_pools(lines))
    try:
        cfg = RepoConfig.model_validate(data)
    except ValidationError as exc:
        return None, problems + [_problem(e, lines) for e in exc.errors()]
    return (None, problems) if problems else (cfg, [])


def _removed_pools(lines: dict[str, int]) -> ConfigProblem:
    """The problem of a ``[pools]`` table (removed: see :data:`REMOVED_POOLS`), at its line."""
    return ConfigProblem("pools", lines.get("pools") or next(
        (n for k, n in lines.items() if k.startswith("pools.")), None), REMOVED_POOLS)


def _problem(e: Any, lines: dict[str, int]) -> ConfigProblem:
    """One pydantic validation error ``e`` as a problem with its dotted key, the line of the
    nearest key of its path that the file has, and a sentence."""
    loc = tuple(e["loc"])
    line = next((n for k in range(len(loc), 0, -1)
                 if (n := lines.get(".".join(str(p) for p in loc[:k])))), None)
    return ConfigProblem(".".join(str(p) for p in loc), line, _problem_text(e, loc))


def _problem_text(e: Any, loc: tuple[Any, ...]) -> str:
    """What is wrong, in words: an unknown key (with the keys allowed there), a missing
    one, or pydantic's message with the value given."""
    if e["type"] == "extra_forbidden":
        allowed = _allowed_keys(_model_at(loc))
        return f"unknown key; allowed here: {allowed}" if allowed else "unknown key"
    if e["type"] == "missing":
        return "required key is missing"
    msg = e["msg"].removeprefix("Value error, ")
    if "input" in e and not isinstance(e["input"], dict | list):
        msg += f" (got {e['input']!r})"
    return msg


class RepoConfigs:
    """Loads repository configs, each cached for :data:`CACHE_TTL_S` seconds (one instance
    per application: the cache is not shared between processes)."""

    def __init__(self, ttl_s: float = CACHE_TTL_S) -> None:
        self.ttl_s = ttl_s
        self._cache: dict[str, tuple[float, LoadedConfig]] = {}

    def clear(self) -> None:
        """Forget cached configs (e.g. after a push to a default branch)."""
        self._cache.clear()

    def load(self, gh: GitHubPort, *, use_cache: bool = True) -> LoadedConfig:
        """The repository's config from its default branch, cached :attr:`ttl_s` seconds.

        Absent file: defaults.  Broken file: ``config`` None and ``problems`` set.  GitHub
        errors propagate (a transient one leaves the delivery retryable)."""
        now = time.monotonic()
        hit = self._cache.get(gh.repo)
        if use_cache and hit and now - hit[0] < self.ttl_s:
            return hit[1]
        ref = gh.get_default_branch()
        raw = gh.get_file(CONFIG_PATH, ref)
        if raw is None:
            loaded = LoadedConfig(RepoConfig(), [], False, ref)
        else:
            cfg, problems = parse(raw.decode("utf-8", errors="replace"))
            loaded = LoadedConfig(cfg, problems, True, ref)
        self._cache[gh.repo] = (now, loaded)
        return loaded


def find_campaign_dirs(gh: GitHubPort, config: RepoConfig, ref: str) -> list[str]:
    """Directories at ``ref`` matching ``config.campaigns.paths`` (glob per path level)."""
    found: list[str] = []
    for pattern in config.campaigns.paths:
        if pattern == ".":
            found.append(".")
            continue
        parts = pattern.split("/")
        level = [""]
        for part in parts:
            nxt = []
            for base in level:
                if not any(ch in part for ch in "*?["):
                    nxt.append(f"{base}/{part}" if base else part)
                    continue
                for e in gh.list_dir(base, ref):
                    if e.type == "dir" and fnmatch(e.path.rsplit("/", 1)[-1], part):
                        nxt.append(e.path)
            level = nxt
        found.extend(level)
    return sorted(set(found))
