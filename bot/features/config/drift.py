"""The screen workflow against this version's template: on every push to the default branch the
bot compares ``.github/workflows/<[screen] workflow>`` with the template packaged with the
running campaign-bot (the file ``campaign-bot init`` writes) and, when they differ, keeps one
warning comment on each campaign's issue (``issue`` in campaign.toml), marker
``<!-- campaign-bot:workflow-drift -->``.  When the workflow matches again, an existing
warning is edited to say so; no comment is created for a workflow that never drifted.
"""

from __future__ import annotations

import logging
import tomllib
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from pydantic import ValidationError

from bot.github import GitHubNotFound, GitHubPort
from bot.inbox.router import Event
from bot.render import marker, render
from bot.repo_config import RepoConfig, find_campaign_dirs
from bot.scaffold import WORKFLOWS_DIR, workflow_drift
from evidence.models import CampaignScope

log = logging.getLogger(__name__)

KIND = "workflow-drift"


def _version() -> str:
    try:
        return version("campaign-bot")
    except PackageNotFoundError:  # a source tree never installed
        return "(source tree)"


def _touched(payload: dict[str, Any], path: str) -> bool:
    for c in payload.get("commits") or []:
        if isinstance(c, dict) and any(path in (c.get(k) or [])
                                       for k in ("added", "modified", "removed")):
            return True
    return False


def _campaign_issues(gh: GitHubPort, config: RepoConfig, sha: str) -> list[int]:
    issues: set[int] = set()
    for d in find_campaign_dirs(gh, config, sha):
        path = f"{d}/campaign.toml" if d != "." else "campaign.toml"
        try:
            raw = gh.get_file(path, sha)
        except GitHubNotFound:
            continue
        if raw is None:
            continue
        try:
            scope = CampaignScope.model_validate(tomllib.loads(raw.decode("utf-8")))
        except (tomllib.TOMLDecodeError, UnicodeDecodeError, ValidationError):
            continue  # an invalid campaign.toml is reported by the header and the review
        if scope.issue:
            issues.add(scope.issue)
    return sorted(issues)


def on_push(event: Event, gh: GitHubPort, config: Any) -> None:
    """``push`` to the default branch: warn on the campaign issues when the screen workflow
    differs from this version's template (or clear the warning when it matches again)."""
    p = event.payload
    repo = p.get("repository") or {}
    branch = repo.get("default_branch")
    sha = p.get("after")
    if not branch or p.get("ref") != f"refs/heads/{branch}" or not isinstance(sha, str) \
            or p.get("deleted"):
        return
    cfg = config if isinstance(config, RepoConfig) else RepoConfig()
    path = f"{WORKFLOWS_DIR}/{cfg.screen.workflow}"
    try:
        raw = gh.get_file(path, sha)
    except GitHubNotFound:
        raw = None
    drift = workflow_drift(raw, cfg.screen.workflow)
    if drift.state == "same" and not _touched(p, path):
        return  # nothing drifted, and nothing that could have cleared a warning changed
    mark = marker(KIND)
    body = render("workflow_drift.md.j2", marker_text=mark, state=drift.state, path=path,
                  branch=branch, sha=sha, version=_version(), notes=drift.notes)
    for number in _campaign_issues(gh, cfg, sha):
        mine = [c for c in gh.list_issue_comments(number)
                if c.user == gh.bot_login and mark in c.body]
        if mine:
            if mine[0].body.strip() != body.strip():
                gh.edit_issue_comment(mine[0].id, body)
        elif drift.state != "same":
            gh.create_issue_comment(number, body)
        log.info("screen workflow %s on %s: %s (campaign issue #%s)", path, event.repo_full_name,
                 drift.state, number)
