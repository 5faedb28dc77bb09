"""The "Reproduce this result" block of a screen's result comment and check run.

The commands come from :mod:`evidence.reproduce` (pure); this module fills in what the bot
knows of the screen: the repository's clone URL (from the GitHub port, never with a token),
the approved head, the frozen scope's blob, the engine revisions of the arms (``/compare``,
``/bisect``), and where the verified bundle went (the commit, else the run's artifact).
"""

from __future__ import annotations

import logging

from bot.features.screen.evidence import CommitOutcome
from bot.features.screen.queue import Screen
from bot.github import GitHubError, GitHubPort
from bot.render import render
from evidence.reproduce import ScreenRecipe, check_commands, runner_commands

log = logging.getLogger(__name__)


def recipe(gh: GitHubPort, s: Screen, scope_blob: str, default_branch: str
           ) -> ScreenRecipe | None:
    """The :class:`ScreenRecipe` of screen ``s`` run under the ``campaign.toml`` of git blob
    ``scope_blob``; None when the port knows no clone URL (a dry-run port)."""
    try:
        remote = gh.git_remote()
    except GitHubError:
        log.exception("no clone URL for %s", s.repo)
        return None
    if remote is None:
        return None
    return ScreenRecipe(
        clone_url=remote.url, campaign_path=s.campaign_path or ".", track=s.track,
        candidate=s.candidate if s.kind == "candidate" else None,
        sessions=len(s.session_order), head_sha=s.head_sha, scope_blob=scope_blob,
        label=s.label, pr_number=s.pr_number, default_branch=default_branch,
        control_revision=(s.control_revision or None) if s.candidate_revision else None,
        candidate_revision=s.candidate_revision,
    )


def reproduce_block(r: ScreenRecipe, s: Screen, evidence: CommitOutcome | None,
                    artifact: str | None) -> str:
    """The Markdown block (``screen_reproduce.md.j2``): the runner's commands, and the
    offline re-check of the committed bundle (``evidence`` committed or already there), else
    of the run's artifact; "" when there is neither (no run)."""
    committed = evidence is not None and evidence.state in ("committed", "already") \
        and evidence.sha is not None
    try:
        if committed:
            assert evidence is not None
            check = check_commands(r, bundle_path=evidence.path, commit=evidence.sha)
        else:
            check = check_commands(r, bundle_path=None, commit=None, run_id=s.run_id,
                                   artifact=artifact, repo=s.repo)
    except ValueError:
        return ""
    return render("screen_reproduce.md.j2", label=s.label, runner=runner_commands(r),
                  check=check, committed=committed)
