"""The config feature: a PR that changes ``.github/campaign-bot.toml`` gets one validation
comment (``<!-- campaign-bot:config pr=N -->``, edited in place on later pushes) that says
whether the file is valid and, if not, exactly what to fix (file, line, key, reason).  The
change takes effect once merged: the bot reads the file from the default branch only
(:mod:`bot.repo_config`).  A push to the default branch whose screen workflow differs from
this version's template gets a warning on the campaign issues (:mod:`.drift`).
"""

from __future__ import annotations

from typing import Any

from bot.comments import upsert_comment
from bot.github import GitHubPort
from bot.inbox.router import Event
from bot.registry import Registry
from bot.render import marker, render
from bot.repo_config import CONFIG_PATH, ConfigProblem, parse


def register(app: Registry) -> None:
    """Add the validation handler (``pull_request`` opened, synchronize, reopened) and the
    screen-workflow drift warning (``push`` to the default branch, :mod:`.drift`)."""
    from bot.features.config import drift

    app.router.on("pull_request", "opened", "synchronize", "reopened")(validate_config_change)
    app.router.on("push")(drift.on_push)


def validate_config_change(event: Event, gh: GitHubPort, config: Any) -> None:
    """A PR that changes ``.github/campaign-bot.toml`` gets one validation comment."""
    pr = event.payload.get("pull_request") or {}
    number = pr.get("number") or event.payload.get("number")
    head_sha = (pr.get("head") or {}).get("sha")
    if not number or not head_sha:
        return
    files = gh.list_pull_files(int(number))
    change = next((f for f in files if f.filename == CONFIG_PATH), None)
    if change is None:
        # an earlier push changed it and this one reverted it: say so in the same comment
        mark = marker("config", pr=number)
        if any(c.user == gh.bot_login and mark in c.body
               for c in gh.list_issue_comments(int(number))):
            body = render("config_check.md.j2", path=CONFIG_PATH, sha=head_sha, removed=False,
                          reverted=True, problems=[], default_branch="", marker_text=mark)
            upsert_comment(gh, int(number), body, "config", pr=number)
        return
    if change.status == "removed":
        problems: list[ConfigProblem] = []
        removed = True
    else:
        raw = gh.get_file(CONFIG_PATH, head_sha)
        _, problems = parse((raw or b"").decode("utf-8", errors="replace"))
        removed = False
    default_branch = (pr.get("base") or {}).get("repo", {}).get("default_branch") or \
        gh.get_default_branch()
    body = render("config_check.md.j2", path=CONFIG_PATH, sha=head_sha, removed=removed,
                  reverted=False, problems=problems, default_branch=default_branch,
                  marker_text=marker("config", pr=number))
    upsert_comment(gh, int(number), body, "config", pr=number)
