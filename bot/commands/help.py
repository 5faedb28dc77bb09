"""``/campaign help``: list every command with its usage, examples and who may use it.

The text is rendered from each command module's own :class:`bot.commands.CommandSpec`, so a
new command documents itself by registering.
"""

from __future__ import annotations

from bot.commands import REGISTRY, CommandContext, CommandSpec, Who, command
from bot.repo_config import CONFIG_PATH

SPEC = CommandSpec(
    verb="campaign help",
    usage="/campaign help",
    summary="Lists the commands this bot understands, with examples and who may use them.",
    examples=("/campaign help",),
    who=Who.ANYONE,
)


@command(SPEC)
async def campaign_help(ctx: CommandContext) -> None:
    """Reply with the help text for every registered command, in verb order."""
    specs = [REGISTRY[v] for v in sorted(REGISTRY)]
    await ctx.reply("help.md.j2", specs=specs, config_path=CONFIG_PATH)
