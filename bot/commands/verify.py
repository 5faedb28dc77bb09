"""``/campaign verify``: re-run the evidence review of this PR at its current head SHA.

Same work as the ``pull_request`` opened/synchronize/reopened review (:mod:`bot.review`):
findings already posted for this SHA are not posted again; the summary comment and the
``campaign-bot/evidence`` check run are updated.  The command gets one short reply with the
outcome.
"""

from __future__ import annotations

from bot.commands import CommandContext, CommandSpec, Who, command

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


@command(SPEC)
async def campaign_verify(ctx: CommandContext) -> None:
    """Run the review and reply with its counts."""
    from bot.review import review_pull

    assert ctx.config is not None  # needs_config
    outcome = await review_pull(ctx.gh, ctx.config, ctx.number, trigger="command")
    await ctx.reply("verify_reply.md.j2", outcome=outcome, paths=ctx.config.campaigns.paths)
