"""The /screen feature's handlers and commands, bound to one :class:`.runtime.Runtime`.

Commands (grammar in :mod:`bot.features.screen.grammar` and :mod:`bot.features.screen.budget`):
``/screen candidate|control|status|cancel ...`` and ``/campaign budget extend ...``.  Events:
``pull_request`` synchronize (a fork's new head cancels its queued screens, a same-repository
PR's re-pins them), ``pull_request`` closed (its queued screens are cancelled),
``workflow_job`` (the run started on a runner), ``workflow_run`` completed (report the
screen), and ``check_run`` requested_action / rerequested (the check run's buttons:
:mod:`bot.features.screen.clicks`).  Each blocks (GitHub, git, the database): the worker
runs it on its thread pool.
"""

from __future__ import annotations

from bot.commands import CommandContext, CommandSpec, Who
from bot.features.screen.bisect import BISECT_USAGE, COMPARE_USAGE, run_bisect, run_compare
from bot.features.screen.budget import EXTEND_USAGE
from bot.features.screen.clicks import on_check_run
from bot.features.screen.commands import run_from_command, run_revisions
from bot.features.screen.dispatch import on_pr_closed, on_push
from bot.features.screen.grammar import USAGE
from bot.features.screen.results import on_workflow_job, on_workflow_run_completed
from bot.features.screen.runtime import Runtime, screen_section
from bot.github import GitHubPort
from bot.inbox.router import Event
from bot.repo_config import RepoConfig

SCREEN_SPEC = CommandSpec(
    verb="screen",
    usage=USAGE.replace("\n", " | "),
    summary=(
        "Queues an A/B screen of a candidate (or of the control against itself) on the "
        "campaign's hardware pool, one screen per track; dispatches the screen workflow when "
        "the pool is free and posts the result with verdicts. `status` lists this PR's "
        "screens and the budget; `cancel` takes a screen out of the queue or cancels its run."
    ),
    examples=(
        "/screen candidate cache-dit track=5s-lossless",
        "/screen candidate fp8-attn dry-run",
        "/screen control track=5s-lossless",
        "/screen status",
        "/screen cancel S12",
    ),
    who=Who.WRITERS_OR_REQUESTERS,
    pull_only=True,
    needs_config=True,
)


BUDGET_SPEC = CommandSpec(
    verb="campaign budget",
    usage=EXTEND_USAGE,
    summary=(
        "Raises the campaign's budget (candidate directions, wall-hours, device-hours); "
        "only the campaign's requesters may, and every change is recorded."
    ),
    examples=("/campaign budget extend device-hours=16 wall-hours=4 reason=second round",),
    who=Who.CAMPAIGN_REQUESTERS,  # checked against the named campaign: commands.extend_budget
    pull_only=False,
    needs_config=True,
)



COMPARE_SPEC = CommandSpec(
    verb="compare",
    usage=COMPARE_USAGE,
    summary=(
        "Queues a screen of two engine revisions as control and candidate under the "
        "campaign's frozen protocol (arm A the control config at REV_A, arm B at REV_B), one "
        "per track, through the same authorisation, budget, queue and evidence as /screen."
    ),
    examples=("/compare 922f1e9f1cb8 3f9c2e1d0b6a --track 5s-lossless",),
    who=Who.WRITERS_OR_REQUESTERS,
    pull_only=True,
    needs_config=True,
)

BISECT_SPEC = CommandSpec(
    verb="bisect",
    usage=BISECT_USAGE.replace("\n", " | "),
    summary=(
        "Finds the first engine commit of GOOD..BAD that moves the track's latency by more "
        "than the campaign's margin: probabilistic bisection, each step a screen with its "
        "signed bundle; stops at --max-device-hours with the narrowed range. `status` lists "
        "this PR's bisections; `cancel` stops one."
    ),
    examples=(
        "/bisect 922f1e9f1cb85b9f2b66d86e1eb500e6872b2dcb "
        "3f9c2e1d0b6a4c8e9f7a5b3c1d2e4f6a8b0c9d7e --track 5s-lossless --max-device-hours 40",
        "/bisect status",
        "/bisect cancel B1",
    ),
    who=Who.WRITERS_OR_REQUESTERS,
    pull_only=True,
    needs_config=True,
)


class ScreenHandlers:
    """Handlers and command functions of the flow on runtime ``rt``."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt

    def screen_command(self, ctx: CommandContext) -> None:
        """``/screen ...``: run the flow (replies through ``ctx``)."""
        run_from_command(self.rt, ctx, ctx.command.verb_args, budget=False)

    def compare_command(self, ctx: CommandContext) -> None:
        """``/compare REV_A REV_B ...``: a revision screen per track (replies through
        ``ctx``)."""
        run_revisions(self.rt, ctx, ctx.command.verb_args, run_compare)

    def bisect_command(self, ctx: CommandContext) -> None:
        """``/bisect ...``: start, list or cancel a bisection (replies through ``ctx``)."""
        run_revisions(self.rt, ctx, ctx.command.verb_args, run_bisect)

    def budget_command(self, ctx: CommandContext) -> None:
        """``/campaign budget extend ...``: one ledger entry by a requester."""
        run_from_command(self.rt, ctx, ctx.command.verb_args, budget=True)

    def handle_push(self, event: Event, gh: GitHubPort | None,
                    config: RepoConfig | None) -> None:
        """A new push: a fork PR's queued screens are cancelled (approval was for the old
        head), a same-repository PR's are re-pinned to the new head."""
        if gh is None:
            return
        on_push(self.rt, gh, event.payload)

    def handle_closed(self, event: Event, gh: GitHubPort | None,
                      config: RepoConfig | None) -> None:
        """A closed PR's queued screens are cancelled."""
        if gh is None:
            return
        on_pr_closed(self.rt, gh, event.payload)

    def handle_job(self, event: Event, gh: GitHubPort | None,
                   config: RepoConfig | None) -> None:
        """``workflow_job`` progress of a screen's run."""
        if gh is None:
            return
        on_workflow_job(self.rt, gh, event.payload)

    def handle_check_run(self, event: Event, gh: GitHubPort | None,
                         config: RepoConfig | None) -> None:
        """``check_run`` requested_action (a button of a screen's check run) and
        rerequested (GitHub's Re-run link): :func:`bot.features.screen.clicks.on_check_run`."""
        if gh is None:
            return
        on_check_run(self.rt, gh, event.payload, config)

    def handle_run(self, event: Event, gh: GitHubPort | None,
                   config: RepoConfig | None) -> None:
        """``workflow_run`` completed: report the screen."""
        if gh is None:
            return
        on_workflow_run_completed(self.rt, gh, event.payload, screen_section(config))
