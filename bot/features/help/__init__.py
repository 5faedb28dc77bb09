"""The help feature: ``/campaign help`` lists every command with its usage, examples and who
may use it, and a ``/campaign SUB`` or ``/screen`` line that no command implements gets a
short reply naming the known ones.

Grammar: ``/campaign help`` (no arguments; anyone may ask).

The text is rendered from each command's own :class:`bot.commands.CommandSpec`, so a new
command documents itself by being added.
"""

from __future__ import annotations

from bot.commands import CommandContext, CommandFn, Commands, CommandSpec, Who
from bot.registry import Registry
from bot.repo_config import CONFIG_PATH

SPEC = CommandSpec(
    verb="campaign help",
    usage="/campaign help",
    summary="Lists the commands this bot understands, with examples and who may use them.",
    examples=("/campaign help",),
    who=Who.ANYONE,
)


def register(app: Registry) -> None:
    """Add the unknown-command reply (first ``issue_comment`` handler) and ``/campaign help``."""
    app.router.on("issue_comment", "created", "edited")(app.commands.unknown_commands)
    app.commands.add(SPEC, _help_for(app.commands))


def _help_for(commands: Commands) -> CommandFn:
    def campaign_help(ctx: CommandContext) -> None:
        """Reply with the help text for every added command, in verb order."""
        ctx.reply("help.md.j2", specs=commands.specs, config_path=CONFIG_PATH)

    campaign_help.__module__ = __name__
    return campaign_help
