"""``/campaign budget extend``: a requester of the campaign raises its budget.

Grammar (the arguments after ``/campaign budget``)::

    budget-command = "extend" 1*( SP increment ) [ SP "campaign=" ID ] [ SP "reason=" TEXT ]
    increment      = ( "directions=" 1*DIGIT ) / ( "wall-hours=" NUMBER )
                   / ( "device-hours=" NUMBER )

Every extension is one row of the campaign's budget ledger (who, when, how much, why), never
edited.  Only the campaign's requesters (``requesters`` in campaign.toml on the default
branch) may extend; the command answers anyone else with who can.
"""

from __future__ import annotations

from bot.budget import EXTEND_USAGE
from bot.commands import CommandContext, CommandSpec, Who, command

SPEC = CommandSpec(
    verb="campaign budget",
    usage=EXTEND_USAGE,
    summary=(
        "Raises the campaign's budget (candidate directions, wall-hours, device-hours); "
        "only the campaign's requesters may, and every change is recorded."
    ),
    examples=("/campaign budget extend device-hours=16 wall-hours=4 reason=second round",),
    who=Who.ANYONE,  # the requester check needs the campaign; bot.screen.extend_budget does it
    pull_only=False,
    needs_config=True,
)


@command(SPEC)
async def campaign_budget(ctx: CommandContext) -> None:
    """Run the extension through :mod:`bot.screen`."""
    from bot import screen as flow

    await flow.run_from_command(ctx, ctx.command.verb_args, budget=True)
