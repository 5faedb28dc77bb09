"""The campaign status header's handlers, commands and job, bound to one
:class:`bot.features.header.service.HeaderService`.

Grammar (comments on a campaign issue, parsed by :mod:`bot.commands.parser`)::

    /campaign refresh          re-read the evidence now and rewrite the header if it changed
    /campaign history [N]      reply with the last N header changes (default 5, at most 20)

Examples: ``/campaign refresh``, ``/campaign history 10``.  Anyone who may comment may ask;
both commands only read evidence and write the bot's own text.
"""

from __future__ import annotations

import logging
import posixpath
from collections.abc import Iterable
from typing import Any

from bot.commands import CommandContext, CommandSpec, UserError, Who
from bot.features.header.block import BlockState, locate, outside
from bot.features.header.changes import HISTORY_DEFAULT, HISTORY_MAX
from bot.features.header.service import HeaderService, RefreshResult, _aware
from bot.features.header.sources import CAMPAIGN_FILE, campaign_roots, config_or_default
from bot.features.header.store import CampaignHeader
from bot.inbox.router import Event

log = logging.getLogger(__name__)


def _default_branch(event: Event) -> str:
    repo = event.payload.get("repository") or {}
    return str(repo.get("default_branch") or repo.get("master_branch") or "main")


REFRESH_SPEC = CommandSpec(
    verb="campaign refresh",
    usage="/campaign refresh",
    summary=(
        "Re-reads this campaign's evidence (default branch and candidate PRs) and the screen "
        "queue now, and rewrites the status header at the top of the issue if it changed."
    ),
    examples=("/campaign refresh",),
    who=Who.ANYONE,
)
HISTORY_SPEC = CommandSpec(
    verb="campaign history",
    usage=f"/campaign history [N]   (N from 1 to {HISTORY_MAX}, default {HISTORY_DEFAULT})",
    summary="Lists the last changes of this issue's status header: when, why, what changed.",
    examples=("/campaign history", "/campaign history 10"),
    who=Who.ANYONE,
)


class HeaderHandlers:
    """Event handlers and command functions over ``service``."""

    def __init__(self, service: HeaderService) -> None:
        self.service = service

    def refresh_all(
        self, gh: Any, items: Iterable[CampaignHeader], trigger: str, event: Event | None
    ) -> list[RefreshResult]:
        """Refresh each campaign of ``items``; one failing never stops the others, and the
        first error is raised at the end (the delivery stays retryable)."""
        svc = self.service
        out = []
        first_error: Exception | None = None
        for c in items:
            try:
                out.append(
                    svc.refresh(
                        gh, c, trigger=trigger, delivery_id=event.delivery_id if event else None
                    )
                )
            except Exception as exc:  # noqa: BLE001 - one campaign never stops the others
                log.exception(
                    "header refresh of %s#%s failed (delivery %s)",
                    c.repo, c.issue, event.delivery_id if event else "-",
                )
                first_error = first_error or exc
        if first_error is not None:
            raise first_error  # the delivery stays retryable; a retry rewrites nothing unchanged
        return out

    def on_push(self, event: Event, gh: Any, config: Any) -> None:
        """Push to the default branch: discover campaigns when a campaign.toml changed, then
        refresh every campaign whose directory the push touched."""
        repo = event.repo_full_name
        branch = _default_branch(event)
        svc = self.service
        if repo is None or event.payload.get("ref") != f"refs/heads/{branch}":
            return
        if _scope_changed(event.payload) or not svc.campaigns(repo):
            svc.discover(gh, config, branch)
        touched = svc.record_push(repo, event.payload)
        after = str(event.payload.get("after", ""))[:8]
        self.refresh_all(gh, touched, f"push {after}", event)

    def on_pull_request(self, event: Event, gh: Any, config: Any) -> None:
        """A PR that touches a campaign directory is a candidate PR: refresh its campaigns."""
        repo = event.repo_full_name
        pr = event.payload.get("pull_request")
        svc = self.service
        if repo is None or not isinstance(pr, dict):
            return
        also = [config_or_default(config).screen.evidence_path]  # where screens are committed
        touched = svc.record_pull(gh, pr, also)
        self.refresh_all(gh, touched, f"PR #{pr.get('number')} {event.action}", event)

    def on_workflow_run(self, event: Event, gh: Any, config: Any) -> None:
        """The screen workflow (``[screen] workflow`` of the repo config) finished: refresh the
        repository's campaigns (queue and budget change; an unchanged campaign costs two reads
        and no write)."""
        repo = event.repo_full_name
        run = event.payload.get("workflow_run") or {}
        workflow = config_or_default(config).screen.workflow
        svc = self.service
        if repo is None or not str(run.get("path") or "").endswith(f"/{workflow}"):
            return  # not the screen workflow (CI runs do not change campaign evidence)
        self.refresh_all(gh, svc.campaigns(repo), "screen result", event)

    def on_issue_edited(self, event: Event, gh: Any, config: Any) -> None:
        """A human edited a campaign issue.  The bot's own edits are ignored.

        - Markers there before and gone now: refresh, which says so once in a comment.
        - A lost update: GitHub has no conditional PATCH, so a human edit landing between the
          bot's read and its write is overwritten.  The event still carries the human's text:
          when the body now holds the human part as it was *before* this edit (``changes.body
          .from``), the bot puts the human's version back with the current header (one read,
          one write; nothing otherwise).
        """
        svc = self.service
        edit = _human_edit(event, svc.bot_login)
        if edit is None:
            return
        repo, number, before, after = edit
        campaigns = svc.campaigns_of_issue(repo, number)
        if not campaigns:
            return
        if (locate(before).state is BlockState.PRESENT
                and locate(after).state is not BlockState.PRESENT):
            for c in campaigns:
                svc.refresh(gh, c, trigger="issue edited", delivery_id=event.delivery_id)
            return
        if outside(before) == outside(after):
            return  # only the bot's block was touched: the next refresh restores it
        svc.restore_human_edit(gh, campaigns[0], before, after, event.delivery_id)

    def _campaigns_for(self, ctx: CommandContext) -> list[CampaignHeader]:
        repo = ctx.event.repo_full_name or ctx.gh.repo
        svc = self.service
        found = svc.campaigns_of_issue(repo, ctx.number)
        if not found:
            svc.discover(ctx.gh, ctx.config, _default_branch(ctx.event))
            found = svc.campaigns_of_issue(repo, ctx.number)
        if not found:
            raise UserError(
                f"this issue is not a campaign issue: no `{CAMPAIGN_FILE}` under "
                f"{', '.join(campaign_roots(ctx.config))} names issue #{ctx.number}"
            )
        return found

    def campaign_refresh(self, ctx: CommandContext) -> None:
        """Refresh the header now and say what happened in one sentence."""
        results = self.refresh_all(
            ctx.gh, self._campaigns_for(ctx), f"/campaign refresh by @{ctx.login}", ctx.event
        )
        words = {
            "written": "updated from the evidence",
            "unchanged": "already up to date (nothing written)",
            "notice-posted": "not updated: its markers are missing (see my note)",
            "markers-missing": "not updated: its markers are missing (see my earlier note)",
            "campaign-missing":
                "not updated: the campaign directory is gone from the default branch",
        }
        ctx.say("; ".join(f"status header {words.get(r.outcome, r.outcome)}"
                          for r in results))

    def campaign_history(self, ctx: CommandContext) -> None:
        """Reply with the last N header changes."""
        args = ctx.command.verb_args
        try:
            n = HISTORY_DEFAULT if not args else int(args[0])
        except ValueError:
            n = -1
        if not 1 <= n <= HISTORY_MAX or len(args) > 1:
            raise UserError(f"usage: {HISTORY_SPEC.usage}")
        repo = ctx.event.repo_full_name or ctx.gh.repo
        self._campaigns_for(ctx)
        rows = self.service.history(repo, ctx.number, n)
        ctx.reply("campaign_history.md.j2", rows=[
            {
          "at": (_aware(r.at) or r.at).strftime("%Y-%m-%d %H:%M"),
          "kind": r.kind,
          "trigger": r.trigger,
          "evidence": (r.evidence_sha or "")[:8],
          "summary": r.summary,
            }
            for r in rows
        ])


def _scope_changed(push: dict[str, Any]) -> bool:
    """Whether a commit of ``push`` added or changed a ``campaign.toml``."""
    return any(posixpath.basename(f) == CAMPAIGN_FILE
               for c in push.get("commits") or []
               for f in (*(c.get("added") or []), *(c.get("modified") or [])))


def _human_edit(event: Event, bot_login: str) -> tuple[str, int, str, str] | None:
    """``(repo, issue number, body before, body after)`` of an ``issues.edited`` event whose
    body a human changed; None for the bot's own edit, a title edit, or a payload without
    them."""
    issue = event.payload.get("issue") or {}
    number = issue.get("number")
    before = ((event.payload.get("changes") or {}).get("body") or {}).get("from")
    if event.repo_full_name is None or event.sender_is_bot or \
            event.sender_login == bot_login or not isinstance(number, int) or before is None:
        return None
    return event.repo_full_name, number, before, issue.get("body") or ""
