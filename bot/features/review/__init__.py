"""The review feature: PR review of campaign evidence, and ``/campaign verify``.

On ``pull_request`` opened / synchronize / reopened the PR's campaign evidence is checked
(:mod:`bot.features.review.review`: findings posted inline, one summary comment, one check
run ``campaign-bot/evidence``); on ``closed`` its head is pruned from the repository's mirror
(:meth:`bot.github.git.GitMirrors.forget_pull`).

Grammar: ``/campaign verify`` (no arguments; on a PR) re-runs that review at the PR's
current head SHA: findings already posted for this SHA are not posted again; the summary
comment and the check run are updated; the command gets one short reply with the outcome.

GitHub's "Re-run" link on the ``campaign-bot/evidence`` check run (``check_run``
rerequested) and "Re-run all checks" on its suite (``check_suite`` rerequested) are
``/campaign verify`` by the person who clicked (:func:`rerequested`): same authorisation,
and only while the check run's commit is still the PR's head (an older commit's review is
not redone); a refusal is written into the check run.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.commands import CommandContext, CommandSpec, Who, authorize
from bot.features.review.review import (
    CHECK_NAME,
    pull_of_check_run,
    review_on_push,
    review_pull,
)
from bot.github import CheckRun, GitHubPort
from bot.github.git import GitMirrors
from bot.inbox.router import Event
from bot.registry import Registry
from bot.repo_config import RepoConfig

SPEC = CommandSpec(
    verb="campaign verify",
    usage="/campaign verify",
    summary=(
        "Re-checks the evidence files of this pull request at its head commit (manifests, "
        "receipts, status snapshots, verdict rules), posts findings not yet posted for that "
        "commit, and updates the summary comment and the `campaign-bot/evidence` check."
    ),
    examples=("/campaign verify",),
    who=Who.WRITERS_REQUESTERS_OR_AUTHOR,
    pull_only=True,
    needs_config=True,
)


def register(app: Registry) -> None:
    """Add the review handler and ``/campaign verify``, reading evidence through ``app.git``
    (the repositories' bare mirrors)."""
    git = app.git
    public_url = app.public_url

    def on_pull_request(event: Event, gh: GitHubPort, config: RepoConfig | None) -> None:
        review_on_push(event, gh, config, git=git, public_url=public_url)

    def verify(ctx: CommandContext) -> None:
        campaign_verify(ctx, git=git, public_url=public_url)

    def on_closed(event: Event, gh: GitHubPort, config: RepoConfig | None) -> None:
        # a closed PR is never reviewed again: its head leaves the mirror (a reopen fetches
        # it again)
        git.forget_pull(gh.repo, int(event.payload["pull_request"]["number"]))

    def on_rerequest(event: Event, gh: GitHubPort, config: RepoConfig | None) -> None:
        rerequested(event.payload, gh, config, git=git, public_url=public_url)

    on_pull_request.__module__ = verify.__module__ = on_closed.__module__ = __name__
    on_rerequest.__module__ = __name__
    app.router.on("check_run", "rerequested")(on_rerequest)
    app.router.on("check_suite", "rerequested")(on_rerequest)
    app.router.on("pull_request", "opened", "synchronize", "reopened")(on_pull_request)
    app.router.on("pull_request", "closed")(on_closed)
    app.commands.add(SPEC, verify)


def campaign_verify(ctx: CommandContext, *, git: GitMirrors,
                    public_url: str | None = None) -> None:
    """Run the review through ``git`` (the bare mirrors) and reply with its counts
    (``public_url``: see :func:`~bot.features.review.review.review_pull`)."""
    assert ctx.config is not None  # needs_config
    outcome = review_pull(ctx.gh, ctx.config, ctx.number, git=git, trigger="command",
                          public_url=public_url)
    ctx.reply("verify_reply.md.j2", outcome=outcome, paths=ctx.config.campaigns.paths)


log = logging.getLogger(__name__)


def rerequested(payload: dict[str, Any], gh: GitHubPort, config: RepoConfig | None, *,
                git: GitMirrors, public_url: str | None = None) -> str | None:
    """``check_run`` or ``check_suite`` rerequested: review again the PR whose evidence
    check run it is (found by the run's ``external_id``, ``pull/N``; for a suite, the
    evidence run on the suite's head), as ``/campaign verify`` by the ``sender``.  Returns
    what was done (``reviewed``, ``refused: ...``), None when the event is about no evidence
    check run of this bot (another App's run, a screen's run)."""
    sender = payload.get("sender") or {}
    login = str(sender.get("login") or "")
    if "check_run" in payload:
        run = payload["check_run"] or {}
        if run.get("name") != CHECK_NAME:
            return None
        runs = [CheckRun(int(run["id"]), CHECK_NAME, str(run.get("head_sha") or ""),
                         str(run.get("status") or ""), run.get("conclusion"),
                         (run.get("output") or {}).get("title"),
                         (run.get("output") or {}).get("summary"), run.get("external_id"))]
    else:
        head = str((payload.get("check_suite") or {}).get("head_sha") or "")
        runs = gh.list_check_runs(head, CHECK_NAME) if head else []
    found = [(r, n) for r in runs for n in [pull_of_check_run(r.external_id)] if n]
    if not found or not login or sender.get("type") == "Bot" or config is None:
        return None
    run, number = max(found, key=lambda rn: rn[0].id)
    pr = gh.get_pull(number)
    decision = authorize(gh, login, SPEC.who, config, pr_author=pr.author)
    why = None
    if not decision.allowed:
        why = f"@{login} may not re-run this check ({decision.reason})"
    elif pr.head_sha != run.head_sha:
        why = (f"this check run is for {run.head_sha[:12]}, but the PR head is now "
               f"{pr.head_sha[:12]}: its own check run is the one to re-run")
    if why is not None:
        log.info("evidence check run %s: re-run refused: %s", run.id, why)
        gh.update_check_run(run.id, title=run.title or CHECK_NAME,
                            summary=run.summary or CHECK_NAME,
                            text=f"**Re-run** by @{login} was refused: {why}.")
        return f"refused: {why}"
    review_pull(gh, config, number, git=git, trigger="rerequested", pull=pr,
                public_url=public_url)
    return "reviewed"
