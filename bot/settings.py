"""The one settings object of the service: environment variables with the ``CAMPAIGN_BOT_``
prefix, or a ``.env`` file in the working directory (environment wins), read once by
:func:`load_settings` when a command starts.  ``campaign-bot serve`` hands the object it read
to its worker process (:func:`dump_settings` / :func:`restore_settings`), so both run on
exactly the same settings.

The service's own variables (README "webhook service" lists them with defaults)::

    CAMPAIGN_BOT_WEBHOOK_SECRET      the secret configured on the GitHub webhook/App (required
                                     by ``serve`` and ``replay``)
    CAMPAIGN_BOT_APP_ID              GitHub App id (with a private key), or
    CAMPAIGN_BOT_PRIVATE_KEY         the App's PEM private key text
    CAMPAIGN_BOT_PRIVATE_KEY_FILE    ... or a path to it
    CAMPAIGN_BOT_TOKEN               a token for a single repository instead of an App
    CAMPAIGN_BOT_GITHUB_API_URL      REST base URL (default https://api.github.com)
    CAMPAIGN_BOT_GITHUB_URL          web base URL, for the App manifest flow (default
                                     https://github.com)
    CAMPAIGN_BOT_CREDENTIALS_FILE    where the App created by the setup page is stored (mode
                                     0600; default campaign-bot-app.json); read at start,
                                     the variables above win over it
    CAMPAIGN_BOT_DATABASE_URL        SQLAlchemy URL (default sqlite file in the working dir)
    CAMPAIGN_BOT_PUBLIC_URL          public base URL of this service: the status header, screen
                                     results and the check run link to its live campaign pages
    CAMPAIGN_BOT_GITHUB_CLIENT_ID    the App's client id and
    CAMPAIGN_BOT_GITHUB_CLIENT_SECRET  client secret: GitHub sign-in for the live pages of
                                     private repositories (the setup page stores both)
    CAMPAIGN_BOT_SESSION_SECRET      key material for the sign-in cookies (default: derived
                                     from the client secret); changing it signs everyone out
    CAMPAIGN_BOT_BOT_LOGIN           the bot's own login (its comments are found by it)
    CAMPAIGN_BOT_HOST / _PORT        where ``campaign-bot serve`` listens
    CAMPAIGN_BOT_MAX_BODY_BYTES      largest accepted webhook body
    CAMPAIGN_BOT_MAX_INFLIGHT_BODY_BYTES  body bytes all unanswered requests may hold (503)
    CAMPAIGN_BOT_BODY_TIMEOUT_S      seconds a request body may take to arrive (408)
    CAMPAIGN_BOT_HEADER_TIMEOUT_S    seconds a request head may take to arrive (closed)
    CAMPAIGN_BOT_MAX_CONNECTIONS     open connections (lowered below the descriptor limit)
    CAMPAIGN_BOT_MAX_ATTEMPTS        attempts per delivery before it is marked failed
    CAMPAIGN_BOT_RETRY_DELAYS        seconds between attempts, comma separated
    CAMPAIGN_BOT_WORKER_CONCURRENCY  deliveries of different installations processed at once
    CAMPAIGN_BOT_EXTRA_HANDLERS      comma-separated modules whose ``register(app)`` adds
                                     handlers (as a feature's does), after the features
    CAMPAIGN_BOT_RUN_WORKER          false: only receive and store (no processing)
    CAMPAIGN_BOT_WORKER_MODE         process (default: a child process) or thread
    CAMPAIGN_BOT_SQLITE_SYNCHRONOUS  SQLite ``PRAGMA synchronous``: NORMAL (default; a stored
                                     delivery survives a killed process, not a power loss)
                                     or FULL (fsync per commit: survives power loss too)
    CAMPAIGN_BOT_LOG_LEVEL           logging level name
    CAMPAIGN_BOT_GITHUB_THROTTLE     false drops PyGithub's request pacing (tests only)
    CAMPAIGN_BOT_LEASE_S             seconds a replica's claim on a delivery lasts without a
                                     renewal (PostgreSQL replicas; renewed every third of it)
    CAMPAIGN_BOT_REDELIVER_INTERVAL_S  seconds between runs of the job that asks GitHub to
                                     redeliver missed deliveries (App credentials needed;
                                     0 turns it off)
    CAMPAIGN_BOT_REDELIVER_MAX_PER_RUN  redeliveries asked for per run at most
    CAMPAIGN_BOT_REDELIVER_MAX_PAGES  pages of 100 entries of the App's webhook log read per
                                     run at most (the scan resumes there next run)
    CAMPAIGN_BOT_REDELIVER_WINDOW_S  seconds of the App's webhook log read back (GitHub keeps
                                     deliveries redeliverable for 3 days on github.com)

Any of them can instead be a file in the directory named by ``CAMPAIGN_BOT_SECRETS_DIR``, named
like the variable in lower case (``campaign_bot_webhook_secret``): container secrets and
systemd credentials (deploy/).

Sections are nested models read from ``CAMPAIGN_BOT_<SECTION>_<FIELD>``:
``CAMPAIGN_BOT_SCREEN_*`` is :class:`bot.features.screen.settings.ScreenSettings` (the screen
feature's own), ``CAMPAIGN_BOT_NOTIFY_*`` is
:class:`bot.features.notify.settings.NotifySettings` (the notification targets: aliases mapped
to URLs and secrets), ``CAMPAIGN_BOT_GIT_*`` is :class:`GitSettings` (evidence read through
git, used by the review, the header, the live pages and the screen commits)::

    CAMPAIGN_BOT_GIT_CACHE_DIR           where the bare mirrors live (default
                                         ``campaign-bot-git`` in the working directory)
    CAMPAIGN_BOT_GIT_TIMEOUT_S           seconds one git command may run (default 600)
    CAMPAIGN_BOT_GIT_MAX_CAMPAIGN_BYTES  largest campaign directory read (default 2 GiB)
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from bot.features.notify.settings import NotifySettings
from bot.features.screen.settings import ScreenSettings
from bot.github.git import DEFAULT_MAX_CAMPAIGN_BYTES, DEFAULT_TIMEOUT_S

ENV_PREFIX = "CAMPAIGN_BOT_"
DEFAULT_DATABASE_URL = "sqlite:///campaign-bot.sqlite3"
# GitHub caps webhook payloads at 25 MB ("If an event would produce a larger payload, the
# webhook is not fired": GitHub Docs, "Webhook events and payloads"), so nothing genuine is
# larger.
DEFAULT_MAX_BODY_BYTES = 25 * 1024 * 1024
# Two bodies of the largest size GitHub sends, or many ordinary ones, may be in flight at once;
# every body is unauthenticated until it is read whole (the signature covers the raw bytes).
DEFAULT_MAX_INFLIGHT_BODY_BYTES = 2 * DEFAULT_MAX_BODY_BYTES


SECRETS_DIR_ENV = "CAMPAIGN_BOT_SECRETS_DIR"
"""A directory of secret files, one per setting, named like the variable in lower case
(``campaign_bot_webhook_secret``, ``campaign_bot_database_url``...): how container secrets
(``/run/secrets``) and systemd credentials (``$CREDENTIALS_DIRECTORY``) reach the settings.
Environment variables win over the files."""


class GitSettings(BaseModel):
    """``CAMPAIGN_BOT_GIT_*``: the bare mirrors evidence is read from (see
    :class:`bot.github.git.GitMirrors`)."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    cache_dir: Path = Path("campaign-bot-git")
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0)
    max_campaign_bytes: int = Field(default=DEFAULT_MAX_CAMPAIGN_BYTES, gt=0)


class SettingsError(Exception):
    """Settings are missing or invalid; the message names the environment variable."""


class Settings(BaseSettings):
    """All settings of the service and its features; see the module docstring for the
    variable names."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_file=".env", env_file_encoding="utf-8", extra="ignore",
        # CAMPAIGN_BOT_SCREEN_DEBOUNCE_S -> screen.debounce_s (one split: field names keep _)
        env_nested_delimiter="_", env_nested_max_split=1,
    )

    webhook_secret: SecretStr | None = None
    database_url: str = DEFAULT_DATABASE_URL
    sqlite_synchronous: str = "NORMAL"
    app_id: int | None = None
    private_key: SecretStr | None = None
    private_key_file: Path | None = None
    token: SecretStr | None = None
    github_api_url: str = "https://api.github.com"
    github_url: str = "https://github.com"
    credentials_file: Path = Path("campaign-bot-app.json")
    public_url: str | None = None
    github_client_id: str | None = None
    github_client_secret: SecretStr | None = None
    session_secret: SecretStr | None = None
    bot_login: str = "campaign-bot[bot]"
    host: str = "127.0.0.1"
    port: int = Field(8080, ge=1, le=65535)
    max_body_bytes: int = Field(DEFAULT_MAX_BODY_BYTES, gt=0)
    max_inflight_body_bytes: int = Field(DEFAULT_MAX_INFLIGHT_BODY_BYTES, gt=0)
    # GitHub expects an answer within 10 s ("Best practices for using webhooks", GitHub
    # Docs): a body that takes longer than 20 s to arrive is not GitHub's
    body_timeout_s: float = Field(20.0, gt=0)
    header_timeout_s: float = Field(10.0, gt=0)
    max_connections: int = Field(1000, ge=1)
    max_attempts: int = Field(3, ge=1)
    retry_delays: str = "5,60,300"
    worker_concurrency: int = Field(4, ge=1)
    extra_handlers: str = ""
    run_worker: bool = True
    worker_mode: Literal["process", "thread"] = "process"
    log_level: str = "INFO"
    github_throttle: bool = True  # PyGithub's 0.25 s / 1 s pacing; false only for tests
    lease_s: float = Field(60.0, ge=3)
    redeliver_interval_s: float = Field(300.0, ge=0)
    redeliver_max_per_run: int = Field(20, ge=1)
    redeliver_max_pages: int = Field(10, ge=1)
    redeliver_window_s: float = Field(3 * 24 * 3600.0, gt=0, le=7 * 24 * 3600.0)
    screen: ScreenSettings = Field(default_factory=ScreenSettings)
    notify: NotifySettings = Field(default_factory=NotifySettings)
    git: GitSettings = Field(default_factory=GitSettings)

    @field_validator("webhook_secret")
    @classmethod
    def _secret_not_blank(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None and not v.get_secret_value().strip():
            raise ValueError("must not be empty")
        return v

    @field_validator("sqlite_synchronous")
    @classmethod
    def _sync_mode(cls, v: str) -> str:
        v = v.upper()
        if v not in {"FULL", "NORMAL", "EXTRA"}:
            raise ValueError("must be FULL, NORMAL or EXTRA")
        return v

    @field_validator("retry_delays")
    @classmethod
    def _delays(cls, v: str) -> str:
        try:
            vals = [float(x) for x in v.split(",") if x.strip()]
        except ValueError:
            raise ValueError("must be comma-separated seconds, e.g. 5,60,300") from None
        if not vals or any(x < 0 for x in vals):
            raise ValueError("must be comma-separated non-negative seconds, e.g. 5,60,300")
        return v

    @property
    def retry_delay_seconds(self) -> list[float]:
        """``retry_delays`` parsed: delay before attempt 2, 3, ... (the last one repeats)."""
        return [float(x) for x in self.retry_delays.split(",") if x.strip()]

    def secret(self) -> bytes:
        """The webhook secret's bytes.  Raises :class:`SettingsError` when it is not set."""
        if self.webhook_secret is None:
            raise SettingsError(f"{ENV_PREFIX}WEBHOOK_SECRET is not set (environment variable "
                                "or .env file)")
        return self.webhook_secret.get_secret_value().encode()

    @property
    def extra_handler_modules(self) -> list[str]:
        """``extra_handlers`` split on commas."""
        return [m.strip() for m in self.extra_handlers.split(",") if m.strip()]

    @property
    def has_github_credentials(self) -> bool:
        """True when App credentials (id and key) or a token are set."""
        return self.token is not None or (
            self.app_id is not None and (self.private_key is not None
                                         or self.private_key_file is not None))

    def with_stored_app(self) -> Settings:
        """These settings completed from the credentials file the setup page wrote
        (:mod:`bot.setup`): App id, key and webhook secret where the environment sets none,
        the App's client id and secret (sign-in) unless either is set, and the bot login
        ``SLUG[bot]`` unless ``CAMPAIGN_BOT_BOT_LOGIN`` is set.  Unchanged when credentials
        are configured otherwise or no file exists.  Raises
        :class:`SettingsError` for an unreadable file."""
        if self.has_github_credentials:
            return self
        from bot.setup import CredentialsError, load_credentials

        try:
            stored = load_credentials(self.credentials_file)
        except CredentialsError as exc:
            raise SettingsError(f"{ENV_PREFIX}CREDENTIALS_FILE: {exc}") from None
        if stored is None:
            return self
        update: dict[str, Any] = {"app_id": stored.app_id,
                                  "private_key": SecretStr(stored.private_key)}
        if self.github_client_id is None and self.github_client_secret is None \
                and stored.client_id and stored.client_secret:
            update["github_client_id"] = stored.client_id
            update["github_client_secret"] = SecretStr(stored.client_secret)
        if self.webhook_secret is None:
            update["webhook_secret"] = SecretStr(stored.webhook_secret)
        if "bot_login" not in self.model_fields_set:
            update["bot_login"] = stored.bot_login
        return self.model_copy(update=update)

    def private_key_text(self) -> tuple[str, str] | None:
        """``(text, where it came from)`` of the configured App private key, unchecked (what
        the log filter masks, whatever it is), or None.  Raises :class:`SettingsError` when
        the key file cannot be read."""
        if self.private_key is not None:
            return self.private_key.get_secret_value(), f"{ENV_PREFIX}PRIVATE_KEY"
        if self.private_key_file is None:
            return None
        try:
            text = self.private_key_file.read_text()
        except (OSError, UnicodeDecodeError) as exc:
            raise SettingsError(
                f"{ENV_PREFIX}PRIVATE_KEY_FILE: cannot read {self.private_key_file}: {exc}"
            ) from None
        return text, f"{ENV_PREFIX}PRIVATE_KEY_FILE ({self.private_key_file})"

    def private_key_pem(self) -> str | None:
        """The App private key text, from ``PRIVATE_KEY`` or ``PRIVATE_KEY_FILE``.

        Raises :class:`SettingsError` when the file cannot be read, or when the text is not
        a PEM RSA private key: GitHub signs App JWTs with RS256 only and gives each App an
        RSA key (GitHub Docs, "Generating a JSON Web Token (JWT) for a GitHub App"), so any
        other text (a README, an ed25519 runner key) would fail on the first GitHub call,
        long after ``serve`` said it was ready."""
        got = self.private_key_text()
        if got is None:
            return None
        _check_app_key(*got)
        return got[0]


def _check_app_key(pem: str, where: str) -> None:
    """Raise :class:`SettingsError` unless ``pem`` is a PEM RSA private key (what GitHub
    issues an App: "Managing private keys for GitHub Apps", GitHub Docs)."""
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import load_pem_private_key

    try:
        key = load_pem_private_key(pem.encode(), password=None)
    except (ValueError, TypeError) as exc:
        why = "it is encrypted" if isinstance(exc, TypeError) else "no PEM private key in it"
        raise SettingsError(f"{where}: not a GitHub App private key ({why}); download the "
                            "App's key (.pem) from its settings page on GitHub") from None
    if not isinstance(key, rsa.RSAPrivateKey):
        kind = type(key).__name__.removeprefix("_").removesuffix("PrivateKey").lower()
        raise SettingsError(f"{where}: the key type is {kind}, but a "
                            "GitHub App's private key is RSA (GitHub signs App JWTs with "
                            "RS256 only); download the App's key from its settings page")


def load_settings(*, need_secret: bool = True, **overrides: object) -> Settings:
    """Read the settings from the environment and ``.env``; ``overrides`` (field names) win.

    Raises :class:`SettingsError` naming every missing or invalid variable, e.g.
    ``CAMPAIGN_BOT_WEBHOOK_SECRET is not set``; the secret may be missing only when
    ``need_secret`` is False (commands that only read the database).
    """
    secrets_dir = os.environ.get(SECRETS_DIR_ENV, "").strip() or None
    if secrets_dir is not None and not Path(secrets_dir).is_dir():
        raise SettingsError(f"{SECRETS_DIR_ENV}: {secrets_dir} is not a directory")
    try:
        settings = Settings(_secrets_dir=secrets_dir, **overrides)  # type: ignore[arg-type,call-arg]
    except ValidationError as exc:
        problems = []
        for e in exc.errors():
            var = ENV_PREFIX + "_".join(str(p) for p in e["loc"]).upper()
            if e["type"] == "missing":
                problems.append(f"{var} is not set (environment variable or .env file)")
            else:
                problems.append(f"{var}: {e['msg']}")
        raise SettingsError("; ".join(problems)) from None
    settings = settings.with_stored_app()
    if need_secret:
        settings.secret()
    return settings


def dump_settings(settings: Settings) -> bytes:
    """``settings`` as JSON, secrets included (for the worker process, through a pipe: never
    on a command line or in the environment)."""

    def plain(v: Any) -> Any:
        if isinstance(v, SecretStr):
            return v.get_secret_value()
        if isinstance(v, Path):
            return str(v)
        if isinstance(v, BaseModel):
            return {k: plain(x) for k, x in v}
        if isinstance(v, dict):  # e.g. the notify targets: alias -> model
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [plain(x) for x in v]
        return v

    return json.dumps({k: plain(v) for k, v in settings}).encode()


def restore_settings(data: bytes) -> Settings:
    """The settings :func:`dump_settings` wrote, validated again; the environment is not read
    (``model_validate`` bypasses the settings sources)."""
    return Settings.model_validate(json.loads(data))
