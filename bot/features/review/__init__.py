"""The review feature: PR review of campaign evidence, and ``/campaign verify``.

On ``pull_request`` opened / synchronize / reopened the PR's campaign evidence is checked
(:mod:`bot.features.review.review`: findings posted inline, one summary comment, one check
run ``campaign-bot/evidence``); on ``closed`` its head is pruned from the repository's mirror
(:meth:`bot.github.git.GitMirrors.forget_pull`).

Grammar: ``/campaign verify`` (no arguments; on a PR) re-runs that review at the PR's
current head SHA: findings already posted for this SHA are not posted again; the summary
comment and the check run are updated; the command gets one short reply with the outcome.
"""

from __future__ import annotations

from bot.commands import CommandContext, CommandSpec, Who
from bot.features.review.review import review_on_push, review_pull
from bot.github import GitHubPort
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

    on_pull_request.__module__ = verify.__module__ = on_closed.__module__ = __name__
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
