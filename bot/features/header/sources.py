"""What a campaign status header is computed from, apart from the GitHub reads: which
directories are campaigns and which files are their evidence, the campaign's scope read from
``campaign.toml``, the evidence loader and verdict engine (:func:`evidence.bundle.load_campaign`,
:func:`evidence.header.source_from_campaign`), and the bot's own state of the campaign (screen
queue, budget ledger, finished screens) with its content hash for the refresh input key.

:class:`bot.features.header.service.HeaderService` takes these as its defaults; tests pass
their own loader, evaluator or queue provider.
"""

from __future__ import annotations

import hashlib
import json
import logging
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from sqlalchemy.orm import Session

from bot.features.header.store import CampaignHeader
from bot.repo_config import RepoConfig
from evidence.header import BudgetLine, EvidenceSource, QueueItem, ScreenOutcome
from evidence.models import DEFAULT_EVIDENCE_PATHS, CampaignScope

log = logging.getLogger(__name__)

SOURCE_CACHE_ENTRIES = 256
"""Judged evidence sources kept in memory (by repository, campaign, PR and SHA)."""
CAMPAIGN_FILE = "campaign.toml"
"""The file that makes a directory a campaign (its scope)."""
TEXT_SUFFIXES = (".json", ".toml", ".md", ".txt", ".sha256", ".jsonl", ".csv", ".yaml", ".yml")
"""The files of a campaign the header reads (written from git objects for the loader); media
and other binaries are not needed for a header."""


Evaluator = Callable[[Any, str, int | None], EvidenceSource]
"""``(loaded_campaign, sha, pr) -> EvidenceSource``: the verdict engine applied to one loaded
campaign (default :func:`evidence.header.source_from_campaign`)."""
Loader = Callable[[Path], Any]
"""``(directory) -> LoadedCampaign`` (default ``evidence.bundle.load_campaign``)."""


class QueueState(Protocol):
    """What the bot itself knows about a campaign: the screen ``queue`` (None: unknown), the
    ``budget`` lines (None: computed from receipts) and the ``finished`` screens, newest
    first."""

    queue: list[QueueItem] | None
    budget: list[BudgetLine] | None
    finished: list[ScreenOutcome]


@dataclass
class BotState:
    """A :class:`QueueState` with nothing known (the default without a queue provider)."""

    queue: list[QueueItem] | None = None
    budget: list[BudgetLine] | None = None
    finished: list[ScreenOutcome] = field(default_factory=list)


def state_digest(state: QueueState) -> str:
    """Content hash of ``state`` (part of the refresh input key)."""
    blob = json.dumps(
        [
            [q.__dict__ for q in state.queue] if state.queue is not None else None,
            [b.__dict__ for b in state.budget] if state.budget is not None else None,
            [f.__dict__ for f in state.finished],
        ],
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(blob.encode()).hexdigest()


QueueProvider = Callable[[Session, str, CampaignScope], QueueState]
"""``(db, repo, scope) -> state`` from the bot's screen queue and budget ledger (the /screen
feature's :func:`bot.features.screen.campaign_state.campaign_state`, wired by the
composition root)."""


def default_loader(path: Path) -> Any:
    """:func:`evidence.bundle.load_campaign` of ``path`` (imported on first use)."""
    from evidence.bundle import load_campaign

    return load_campaign(path)


def default_evaluator(loaded: Any, sha: str, pr: int | None) -> EvidenceSource:
    """:func:`evidence.header.source_from_campaign` of ``loaded`` at commit ``sha`` (of PR
    ``pr``, None for the default branch)."""
    from evidence.header import source_from_campaign  # the verdict engine

    return source_from_campaign(loaded, sha=sha, pr=pr)


def no_queue(db: Session, repo: str, scope: CampaignScope) -> QueueState:
    """The :class:`QueueProvider` that knows nothing (:class:`BotState` empty)."""
    return BotState()


def under(file: str, directory: str) -> bool:
    """Whether repository path ``file`` is ``directory`` or lies below it (``""``: the root,
    under which everything lies)."""
    directory = directory.strip("/")
    return directory == "" or file == directory or file.startswith(directory + "/")


def touches_evidence(file: str, c: CampaignHeader, also: Sequence[str] = ()) -> bool:
    """Whether ``file`` lies under one of the campaign's evidence paths (or ``also``)."""
    eps = [*(c.evidence_paths or DEFAULT_EVIDENCE_PATHS), *also]
    return any(under(file, posixpath.join(c.path, e)) for e in eps)


def parse_scope(raw: bytes, where: str) -> CampaignScope | None:
    """The scope in ``raw`` (a ``campaign.toml``'s bytes, read from ``where``), or None when it
    is not valid: logged here, reported with file, field and line by the PR review."""
    import tomllib

    try:
        return CampaignScope.model_validate(tomllib.loads(raw.decode("utf-8")))
    except Exception as exc:  # noqa: BLE001 - reported by the PR review, logged here
        log.warning("%s: not a valid campaign.toml: %s", where, str(exc).splitlines()[0])
        return None


def scope_of(loaded: Any, path: str) -> CampaignScope:
    """The scope of a loaded campaign; raises ``ValueError`` naming ``path``'s campaign.toml
    and its first problems when it has none."""
    doc = getattr(loaded, "scope", None)
    if doc is None:
        problems = "; ".join(f.message for f in getattr(loaded, "findings", [])[:3])
        raise ValueError(f"{path}/{CAMPAIGN_FILE} could not be read: {problems}")
    return doc.model


def config_or_default(config: RepoConfig | None) -> RepoConfig:
    """``config``, or the defaults when the repository has none (or a broken one)."""
    return config if config is not None else RepoConfig()


def campaign_roots(config: RepoConfig | None) -> list[str]:
    """The ``[campaigns] paths`` globs of the repo config (defaults when None)."""
    return list(config_or_default(config).campaigns.paths)


def pull_fields(pr: dict[str, Any]) -> tuple[int, str, str, str]:
    """``(number, head SHA, "open" or "closed", title cut at 500 characters)`` of a
    ``pull_request`` payload's PR."""
    return (int(pr["number"]), str((pr.get("head") or {}).get("sha") or ""),
            "open" if pr.get("state") == "open" else "closed", str(pr.get("title") or "")[:500])


def last_commit_touching(commits: Sequence[dict[str, Any]], path: str
                          ) -> dict[str, Any] | None:
    """The last of a push's ``commits`` that added, changed or removed a file under
    ``path``, or None."""
    last = None
    for commit in commits:
        files = [*(commit.get("added") or []), *(commit.get("modified") or []),
                 *(commit.get("removed") or [])]
        if any(under(f, path) for f in files):
            last = commit
    return last
