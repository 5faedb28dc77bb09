"""Slash commands: parsing, authorization and reply plumbing shared by every feature.

The grammar is in :mod:`bot.commands.parser`.  A feature declares a :class:`CommandSpec`
(usage, examples, who may use it: that is what ``/campaign help`` shows) and adds its
function with :meth:`Commands.add`, which puts a handler on the application's router for
``issue_comment`` created/edited.  For each delivery the handler

1. ignores comments by bots (``sender.type == "Bot"``, ``...[bot]`` logins, the bot itself);
2. parses the body; on ``edited`` only commands new since ``changes.body.from`` count;
3. picks the commands of its verb, checks the repository config is readable when the
   command needs it, and authorizes the commenter (:func:`authorize`: GitHub's permission
   API, never ``author_association``);
4. calls the command with a :class:`CommandContext`, whose :meth:`CommandContext.reply`
   posts one short comment per command (hidden marker ``reply comment=ID line=N``, so a
   retried delivery edits rather than repeats it).

A :class:`UserError` raised by a command becomes that short reply.  GitHub errors propagate:
a :class:`bot.github.GitHubRetryableError` leaves the delivery retryable; anything else is
logged with the delivery id by the router and never shown raw.
"""

from __future__ import annotations

import enum
import inspect
import logging
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from bot.commands.parser import Command, Prefixes, new_commands, parse
from bot.comments import upsert_comment
from bot.github.port import GitHubPort
from bot.inbox.payloads import IssueCommentPayload
from bot.inbox.router import Event, Router
from bot.render import marker, render
from bot.repo_config import CONFIG_PATH, RepoConfig, RepoConfigs, find_campaign_dirs

log = logging.getLogger(__name__)

WRITE_PERMISSIONS = frozenset({"admin", "write"})
"""GitHub's legacy roles that may run guarded commands (``maintain`` maps to ``write``)."""


class Who(enum.StrEnum):
    """Who may use a command; the value is how ``/campaign help`` says it."""

    ANYONE = "anyone"
    WRITERS = "users with write or admin permission on the repository"
    WRITERS_OR_REQUESTERS = (
        "users with write or admin permission, the campaign's requesters, and logins listed "
        "in `[screen] allowed`"
    )
    WRITERS_REQUESTERS_OR_AUTHOR = (
        "users with write or admin permission, the campaign's requesters, and the PR's author"
    )
    CAMPAIGN_REQUESTERS = (
        "the campaign's requesters (`requesters` in its campaign.toml on the default branch)"
    )
    """The command names its campaign (``campaign=ID``), so the command checks the login
    against that campaign's requesters itself (``bot.features.screen.commands.extend_budget``);
    :func:`authorize` lets it through to that check."""


class UserError(Exception):
    """A problem the commenter can fix; it becomes the command's one reply.

    ``UserError("text")`` replies with that sentence (``templates/reply.md.j2``).  A feature
    with its own reply template names it and that template's context: ``UserError(message,
    template="screen_reply.md.j2", kind="budget", ...)``.  ``message`` (also ``str(exc)``)
    is in the context either way."""

    def __init__(self, message: str, *, template: str = "reply.md.j2",
                 **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.template = template
        self.context: dict[str, Any] = {**context, "message": message}


@dataclass(frozen=True)
class CommandSpec:
    """What ``/campaign help`` shows about a command, and how it is guarded.

    ``verb`` is ``screen`` or ``campaign SUB``; ``usage`` the syntax line; ``examples`` full
    command lines; ``pull_only`` refuses it on plain issues; ``needs_config`` refuses it while
    ``.github/campaign-bot.toml`` on the default branch is broken.
    """

    verb: str
    usage: str
    summary: str
    examples: tuple[str, ...]
    who: Who
    pull_only: bool = False
    needs_config: bool = False


@dataclass
class CommandContext:
    """Everything a command function gets.

    ``number`` is the issue/PR number, ``is_pull`` whether it is a PR, ``login`` the
    commenter, ``comment_id`` the comment holding the command, ``config`` the repository
    config (defaults when the file is absent; never None for ``needs_config`` commands).
    """

    event: Event
    gh: GitHubPort
    config: RepoConfig | None
    command: Command
    spec: CommandSpec
    number: int
    is_pull: bool
    login: str
    comment_id: int
    extra: dict[str, Any] = field(default_factory=dict)
    admitted_as: str = ""
    """How :func:`authorize` admitted the commenter (:attr:`Decision.how`)."""

    def reply(self, template: str, **context: Any) -> str:
        """Post (or edit, on a retried delivery) this command's one reply, rendered from
        ``templates/TEMPLATE``; returns ``created``, ``edited`` or ``unchanged``."""
        keys = {"comment": self.comment_id, "line": self.command.line}
        body = render(template, marker_text=marker("reply", **keys), login=self.login,
                      command=self.command.text, **context)
        return upsert_comment(self.gh, self.number, body, "reply", **keys)

    def say(self, message: str) -> str:
        """Reply with one plain sentence (``templates/reply.md.j2``)."""
        return self.reply("reply.md.j2", message=message)


CommandFn = Callable[[CommandContext], None]


@dataclass(frozen=True)
class Decision:
    """An authorization answer, the reason (for logs and the refusal reply), and how the
    login was admitted (``how``): ``anyone``, ``command`` (the command checks it itself),
    ``write`` (write or admin permission), ``author`` (the PR's author), ``allowed``
    (``[screen] allowed``) or ``requester`` (a campaign's requester); empty when refused.
    A command reads it from :attr:`CommandContext.admitted_as` instead of asking again."""

    allowed: bool
    reason: str
    how: str = ""


def campaign_requesters(gh: GitHubPort, config: RepoConfig, ref: str,
                        dirs: list[str] | None = None) -> set[str]:
    """Logins in ``requesters`` of the campaign.toml files under ``config.campaigns.paths``
    (or only ``dirs``) at ``ref``.  Call it with the default branch: requesters read from a
    PR head would let a PR authorize itself."""
    if dirs is None:
        dirs = find_campaign_dirs(gh, config, ref)
    out: set[str] = set()
    for d in dirs:
        raw = gh.get_file(f"{d}/campaign.toml" if d != "." else "campaign.toml", ref)
        if raw is None:
            continue
        try:
            data = tomllib.loads(raw.decode("utf-8", errors="replace"))
        except tomllib.TOMLDecodeError:
            log.info("campaign.toml in %s at %s is not TOML; no requesters from it", d, ref)
            continue
        reqs = data.get("requesters")
        if isinstance(reqs, list):
            out.update(str(r).lstrip("@").lower() for r in reqs if isinstance(r, str))
    return out


def authorize(gh: GitHubPort, login: str, who: Who, config: RepoConfig | None, *,
              pr_author: str | None = None,
              requesters: set[str] | None = None) -> Decision:
    """May ``login`` use a command guarded by ``who``?

    Asks GitHub for the login's permission (``admin``/``write`` pass; 404 is ``none``);
    ``author_association`` is never consulted: it says how a login relates to the repository,
    not what it may do there (rust-lang/triagebot#2094, actions/github-script#643).
    Otherwise, where ``who`` allows it, the campaign requesters (from the default branch, or
    ``requesters`` given), ``[screen] allowed`` and the PR author are accepted.
    ``Who.CAMPAIGN_REQUESTERS`` passes here: the command itself checks the campaign it names.
    """
    if who is Who.ANYONE:
        return Decision(True, "anyone may", "anyone")
    if who is Who.CAMPAIGN_REQUESTERS:
        return Decision(True, "the command checks the campaign's requesters itself",
                        "command")
    perm = gh.get_permission(login)
    if perm in WRITE_PERMISSIONS:
        return Decision(True, f"permission {perm}", "write")
    lower = login.lower()
    if who is Who.WRITERS_REQUESTERS_OR_AUTHOR and pr_author and lower == pr_author.lower():
        return Decision(True, "PR author", "author")
    if who in (Who.WRITERS_OR_REQUESTERS, Who.WRITERS_REQUESTERS_OR_AUTHOR) and config:
        if who is Who.WRITERS_OR_REQUESTERS and lower in {a.lower() for a in
                                                          config.screen.allowed}:
            return Decision(True, "listed in [screen] allowed", "allowed")
        if config.screen.allow_requesters or who is Who.WRITERS_REQUESTERS_OR_AUTHOR:
            if requesters is None:
                ref = gh.get_default_branch()
                requesters = campaign_requesters(gh, config, ref)
            if lower in requesters:
                return Decision(True, "campaign requester", "requester")
    return Decision(False, f"permission {perm}")


def _comment_target(event: Event, bot_login: str) -> tuple[int, bool, str, int, str,
                                                             str | None] | None:
    """``(number, is_pull, login, comment_id, body, previous body)`` of a human comment, or
    None (not a comment event, a bot's comment, an edit that left the body alone)."""
    if event.name != "issue_comment" or event.action not in ("created", "edited"):
        return None
    try:
        p = IssueCommentPayload.model_validate(event.payload)
    except ValidationError as exc:
        log.warning("delivery %s: issue_comment payload not understood: %s",
                    event.delivery_id, exc.errors()[:3])
        return None
    user = p.comment.user
    if user is None:
        # "user": null (a deleted account): nobody to authorise, so no command runs
        log.info("delivery %s: comment %s has no author (user: null); no command runs",
                 event.delivery_id, p.comment.id)
        return None
    if p.sender.is_bot or user.is_bot or user.login.lower() == bot_login.lower() \
            or p.comment.performed_via_github_app:
        return None
    previous = None
    if p.action == "edited":
        if p.changes is None or p.changes.body is None:
            return None  # the edit did not touch the body
        previous = p.changes.body.from_ or ""
    return (p.issue.number, p.issue.is_pull, user.login, p.comment.id, p.comment.body or "",
            previous)


def _unique(body: str, previous: str | None, prefixes: Prefixes) -> list[Command]:
    """Commands to run for a comment body (new ones only on an edit); a command repeated
    verbatim in one comment runs once."""
    cmds = (new_commands(body, previous, prefixes) if previous is not None
            else parse(body, prefixes))
    seen: set[str] = set()
    out = []
    for c in cmds:
        if c.text not in seen:
            seen.add(c.text)
            out.append(c)
    return out


def commands_in(event: Event, bot_login: str, prefixes: Prefixes) -> list[Command]:
    """The commands with ``prefixes`` an ``issue_comment`` delivery asks to run (bots
    ignored, edits diffed)."""
    target = _comment_target(event, bot_login)
    if target is None:
        return []
    *_, body, previous = target
    return _unique(body, previous, prefixes)


class Commands:
    """The application's slash commands: ``verb -> spec``, each with its handler on
    ``router`` (:meth:`add`).  ``configs`` reads the repository config of commands that need
    it when the delivery came without one."""

    def __init__(self, router: Router, configs: RepoConfigs) -> None:
        self.router = router
        self.configs = configs
        self._specs: dict[str, CommandSpec] = {}
        # each command's handler reads the same delivery: parse its comment once
        self._parsed: dict[int, tuple[dict[str, Any], Any, list[Command]]] = {}

    def _commands_of(self, event: Event, bot_login: str) -> tuple[Any, list[Command]]:
        """``(_comment_target(...), commands to run)`` of ``event``, parsed once per event
        (by its payload object, held while cached; the last 16 kept: a hostile comment costs
        markdown-it up to ~2 s to read, and every command's handler reads it)."""
        hit = self._parsed.get(id(event.payload))
        if hit is None or hit[0] is not event.payload:
            target = _comment_target(event, bot_login)
            hit = (event.payload, target,
                   _unique(target[4], target[5], self.prefixes) if target is not None
                   else [])
            self._parsed[id(event.payload)] = hit
            while len(self._parsed) > 16:
                self._parsed.pop(next(iter(self._parsed)))
        return hit[1], hit[2]

    @property
    def prefixes(self) -> dict[str, bool]:
        """``{prefix: groups sub-commands}`` of the added commands (the first word of each
        verb; it groups when a verb has a second word): the lines the parser reads as
        commands.  A feature adding ``/bench`` (verb ``bench``) or ``/campaign report``
        (verb ``campaign report``) needs nothing else."""
        out: dict[str, bool] = {}
        for verb in self._specs:
            first, _, sub = verb.partition(" ")
            out[first] = out.get(first, False) or bool(sub)
        return out

    @property
    def specs(self) -> list[CommandSpec]:
        """Every added command's spec, in verb order (what ``/campaign help`` lists)."""
        return [self._specs[v] for v in sorted(self._specs)]

    def add(self, spec: CommandSpec, fn: CommandFn) -> None:
        """Make ``fn`` the implementation of ``spec.verb`` and put its handler on the router.

        Raises ValueError when the verb is taken, TypeError for a coroutine function
        (command functions are synchronous, like handlers)."""
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"{fn.__qualname__}: command functions are synchronous")
        if spec.verb in self._specs:
            raise ValueError(f"command {spec.verb!r} is already added")
        self._specs[spec.verb] = spec

        def handle(event: Event, gh: GitHubPort, config: RepoConfig | None) -> None:
            target, cmds = self._commands_of(event, gh.bot_login)
            if target is None:
                return
            number, is_pull, login, cid, _body, _previous = target
            for cmd in cmds:
                if cmd.verb != spec.verb:
                    continue
                ctx = CommandContext(event, gh, config, cmd, spec, number, is_pull, login, cid)
                self._run(ctx, fn)

        handle.__name__ = handle.__qualname__ = f"command_{spec.verb.replace(' ', '_')}"
        handle.__module__ = fn.__module__
        self.router.on("issue_comment", "created", "edited")(handle)

    def _run(self, ctx: CommandContext, fn: CommandFn) -> None:
        spec, cmd = ctx.spec, ctx.command
        if cmd.error:
            ctx.say(f"I could not read this command: {cmd.error}. Usage: {spec.usage}")
            return
        if spec.pull_only and not ctx.is_pull:
            ctx.say(f"`/{spec.verb}` works on pull requests only.")
            return
        if spec.needs_config and ctx.config is None:
            loaded = self.configs.load(ctx.gh)
            if loaded.config is None:
                ctx.reply("config_broken.md.j2", path=CONFIG_PATH, ref=loaded.ref,
                          problems=loaded.problems)
                return
            ctx.config = loaded.config
        pr_author = None
        if ctx.is_pull and spec.who is Who.WRITERS_REQUESTERS_OR_AUTHOR:
            pr_author = ((ctx.event.payload.get("issue") or {}).get("user") or {}).get("login")
        decision = authorize(ctx.gh, ctx.login, spec.who, ctx.config, pr_author=pr_author)
        if not decision.allowed:
            log.info("delivery %s: %s refused for %s (%s)", ctx.event.delivery_id, cmd.text,
                     ctx.login, decision.reason)
            ctx.reply("refused.md.j2", who=spec.who.value)
            return
        ctx.admitted_as = decision.how
        try:
            fn(ctx)
        except UserError as exc:
            ctx.reply(exc.template, **exc.context)

    def unknown_commands(self, event: Event, gh: GitHubPort, config: Any) -> None:
        """Handler: answer ``/campaign SUB`` and ``/screen`` lines that no command implements
        (the reply lists the known ones)."""
        target, cmds = self._commands_of(event, gh.bot_login)
        if target is None:
            return
        number, is_pull, login, cid, _body, _previous = target
        for cmd in cmds:
            if cmd.verb in self._specs:
                continue
            spec = CommandSpec(cmd.verb, cmd.text, "", (), Who.ANYONE)
            ctx = CommandContext(event, gh, config, cmd, spec, number, is_pull, login, cid)
            known = ", ".join(f"`/{v}`" for v in sorted(self._specs))
            ctx.reply("unknown.md.j2", known=known)


__all__ = [
    "Command",
    "CommandContext",
    "CommandSpec",
    "Commands",
    "Decision",
    "UserError",
    "Who",
    "authorize",
    "campaign_requesters",
    "commands_in",
    "find_campaign_dirs",
]
