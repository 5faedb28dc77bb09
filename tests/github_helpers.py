"""Helpers for handler tests against the GitHub double: ports, fixture events, seeded repos."""

from __future__ import annotations

import copy
import json
import tempfile
from pathlib import Path
from typing import Any

from github import Auth

from bot.app import compose
from bot.database import make_engine, migrate
from bot.github.client import make_client, make_retry
from bot.github.pygithub import PyGithubPort
from bot.inbox.router import Event
from bot.metrics import Metrics
from bot.registry import Registry
from bot.settings import GitSettings, Settings
from sandbox.github_double import GitHubDouble

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "github"
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"
REPO = "Codertocat/Hello-World"
"""The repository of the octokit example payloads; the double serves it in these tests."""
BOT = "campaign-bot[bot]"


def fast_retry() -> Any:
    """Read retries with no backoff and a 0.2 s secondary-rate-limit wait (tests)."""
    return make_retry(total=3, backoff_factor=0.0, secondary_rate_wait=0.2,
                      max_rate_limit_wait=5.0)


def port(double: GitHubDouble, repo: str = REPO, retry: Any = None,
         metrics: Metrics | None = None) -> PyGithubPort:
    """A PyGithub port on the double (token auth, no throttling)."""
    auth = Auth.Token("test-token")
    client = make_client(double.base_url, auth, retry=retry or fast_retry(), throttle=False)
    return PyGithubPort(client, repo, BOT, auth=auth, base_url=double.base_url,
                        metrics=metrics)


def handler_app() -> Registry:
    """Every feature composed as the service composes them (their router dispatches a test's
    events), on a scratch SQLite database of this test session."""
    work = Path(tempfile.mkdtemp(prefix="campaign-bot-tests-"))
    engine = make_engine(f"sqlite:///{work / 'bot.sqlite3'}", sqlite_synchronous="NORMAL")
    migrate(engine)
    return compose(Settings(bot_login=BOT, git=GitSettings(cache_dir=work / "git")), engine)


APP = handler_app()
router = APP.router
"""The composed features' router (handler tests dispatch through it)."""
GIT = APP.git
"""The composed features' bare mirrors (in this session's scratch folder)."""


def clear_configs() -> None:
    """Forget the repository configs :data:`APP` cached (each test sets up its own repo)."""
    APP.configs.clear()


def fixture(rel: str) -> dict[str, Any]:
    """A webhook payload from ``tests/fixtures/github/`` (path relative to it)."""
    return json.loads((FIXTURES / rel).read_text())


def comment_event(body: str, *, login: str = "alice", number: int = 2, pull: bool = True,
                  action: str = "created", previous: str | None = None,
                  comment_id: int = 555, user_type: str = "User",
                  delivery: str = "d-1") -> Event:
    """An ``issue_comment`` delivery built from the derived on-PR fixture."""
    p = copy.deepcopy(fixture("webhooks-derived/issue_comment/created.on-pull-request.json"))
    p["action"] = action
    p["issue"]["number"] = number
    if not pull:
        p["issue"].pop("pull_request", None)
    p["comment"].update(body=body, id=comment_id)
    p["comment"]["user"].update(login=login, type=user_type)
    p["sender"].update(login=login, type=user_type)
    if action == "edited":
        p["changes"] = {"body": {"from": previous or ""}}
    return Event(delivery, "issue_comment", p)


def pr_event(number: int, head_sha: str, action: str = "opened",
             delivery: str = "d-pr") -> Event:
    """A ``pull_request`` delivery built from the octokit ``opened`` example."""
    p = copy.deepcopy(fixture("webhooks/pull_request/opened.payload.json"))
    p["action"] = action
    p["number"] = number
    p["pull_request"]["number"] = number
    p["pull_request"]["head"]["sha"] = head_sha
    p["pull_request"]["base"]["ref"] = "main"  # the double's default branch
    return Event(delivery, "pull_request", p)


def example_files(prefix: str = "campaigns/h3") -> dict[str, bytes]:
    """The bundled example campaign's files under repo directory ``prefix``."""
    return {f"{prefix}/{p.relative_to(EXAMPLE).as_posix()}": p.read_bytes()
            for p in sorted(EXAMPLE.rglob("*")) if p.is_file()}
