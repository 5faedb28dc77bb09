"""Clicks on the buttons of a screen's check run (``campaign-bot/screen: NAME``), and GitHub's own
"Re-run" link.

GitHub shows at most three ``requested_action`` buttons on a check run (GitHub REST, "Create
a check run", ``actions``); a click sends ``check_run.requested_action`` with the button's
identifier to the App that made the run, and GitHub's "Re-run" link sends
``check_run.rerequested``.  Which buttons a run has follows the screen's state
(:func:`actions_for`):

==========================  =======================================================
the screen                  buttons
==========================  =======================================================
dispatched or running       **Cancel** (``/screen cancel ID``)
finished, failed, cancelled **Re-run** (``/screen candidate NAME track=T sha=HEAD``)
a fork's screen cancelled   **Approve head** on a check run of the fork's new head
by a new push               (the same ``/screen`` line, naming that head)
finished INCONCLUSIVE, a    **+N sessions** beside Re-run (``/screen continue ID
follow-up projected, a      sha=HEAD``: the next look, with the projected sessions)
sequential design
==========================  =======================================================

Each click is the command it stands for, with the same authorisation: the clicker
(``sender``) must be allowed the command (:func:`bot.commands.authorize`: GitHub's
permission API, ``[screen] allowed``, the campaign's requesters; never
``author_association``), and the head is the check run's own ``head_sha``, in full: a
Re-run, an approval or a +N sessions is refused when the PR's head has moved since (the
click was about that commit, and on a fork PR that is the commit the approver reviewed),
and a Cancel when the run is not the screen's.  A click acts once per check run: it is
recorded in the command table in the same transaction as what it queued
(:func:`queue.claim_command`, keyed by the check run id and the button), so a redelivered or
repeated click changes nothing.
Every answer (done, refused and why) is written into the check run's text, where the click
was made; bots' clicks are ignored.

``check_run.rerequested`` on a screen's check run is its Re-run button (same rules; a screen
still running is not queued twice).  ``check_suite.rerequested`` ("Re-run all checks") does
not start screens: each costs device hours, so only a person's click on one screen's button
or a ``/screen`` does.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.commands import UserError, Who, authorize
from bot.features.screen import followup
from bot.features.screen import queue as screens
from bot.features.screen.buttons import BUTTONS, RERUN, click_key
from bot.features.screen.commands import (
    CommandSeen,
    cancel_screen,
    continue_screen,
    request_screens,
    resume_command,
)
from bot.features.screen.grammar import ScreenCancel, ScreenContinue, ScreenRequest
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import (
    CHECK_PREFIX,
    CommentContext,
    Runtime,
    ScreenConfig,
    refusal_text,
)
from bot.github import CheckAction, GitHubError, GitHubPort
from bot.render import marker
from bot.repo_config import RepoConfig, find_campaign_dirs

log = logging.getLogger(__name__)
ANSWER_MARK = marker("click-answer")
"""Separates the answer to the last click from the text the screen wrote in its check run."""


def click_source(check_run_id: int) -> int:
    """Where a click is recorded in place of a comment id (the command table, the screens'
    ``source_comment_id``): the check run id, negated, so it never meets a comment's id
    (GitHub numbers comments and check runs separately; both are positive)."""
    return -int(check_run_id)


def _screen_config(gh: GitHubPort, config: RepoConfig) -> ScreenConfig:
    ref = gh.get_default_branch()
    return ScreenConfig(tuple(find_campaign_dirs(gh, config, ref)), config.screen)


def _answer(gh: GitHubPort, run: dict[str, Any], text: str,
            actions: list[CheckAction] | None = None, *, conclusion: str | None = None,
            title: str | None = None) -> None:
    """Write ``text`` at the top of check run ``run``'s text (``run`` from the payload; its
    title and summary are kept, as an output needs both, and so is the text the screen
    wrote, below a hidden marker: a later answer replaces only the earlier answer) and,
    when given, its new buttons and conclusion."""
    out = run.get("output") or {}
    before = str(out.get("text") or "")
    if ANSWER_MARK in before:
        before = before.split(ANSWER_MARK, 1)[1].lstrip("\n")
    body = f"{text}\n\n{ANSWER_MARK}\n{before}"
    gh.update_check_run(
        int(run["id"]), title=title or out.get("title") or str(run.get("name") or "screen"),
        summary=out.get("summary") or str(run.get("name") or "screen"), text=body[:65000],
        actions=actions, conclusion=conclusion)


def on_check_run(rt: Runtime, gh: GitHubPort, payload: dict[str, Any],
                 config: RepoConfig | None) -> str | None:
    """``check_run`` ``requested_action`` or ``rerequested`` on one of this feature's check
    runs: act as the button says (see the module docstring).  Returns what was done (for
    logs and tests): ``ignored``, ``seen``, ``refused: ...`` or ``done: ...``."""
    run = payload.get("check_run") or {}
    sender = payload.get("sender") or {}
    repo = (payload.get("repository") or {}).get("full_name") or ""
    name = str(run.get("name") or "")
    if not name.startswith(CHECK_PREFIX) or not isinstance(run.get("id"), int):
        return None  # another feature's check run (or another App's)
    if sender.get("type") == "Bot" or not sender.get("login"):
        return "ignored"
    login = str(sender["login"])
    if payload.get("action") == "rerequested":
        identifier = "rerun"
    else:
        identifier = str((payload.get("requested_action") or {}).get("identifier") or "")
    if identifier not in BUTTONS:
        return "ignored"
    head = str(run.get("head_sha") or "").lower()
    rid = str(run.get("external_id") or "")
    with rt.db() as db:
        s = screens.by_request_id(db, repo, rid)
        seen = screens.command_seen(db, repo, click_source(run["id"]),
                                    click_key(run["id"], identifier))
    if s is None:
        return "ignored"  # not a screen's run (a user cannot make check runs of this App)
    if seen:
        # a redelivered or repeated click: finish what a failed first attempt left, no more
        ctx = CommentContext(repo, s.pr_number, login, click_source(run["id"]),
                             s.installation_id, True)
        resume_command(rt, gh, ctx)
        return "seen"
    try:
        if config is None:
            raise UserError("the repository config (.github/campaign-bot.toml) is broken; "
                            "fix it first")
        if identifier == "cancel":
            return _cancel(rt, gh, run, s, login, head)
        if identifier == "continue":
            return _continue(rt, gh, run, s, login, head, config)
        return _request(rt, gh, run, s, login, head, identifier, config)
    except UserError as exc:
        why = refusal_text(exc)
        log.info("check run %s: %s by %s refused: %s", run["id"], identifier, login, why)
        _answer(gh, run, f"**{_label(s, identifier)}** by @{login} was refused: {why}.")
        return f"refused: {why}"


def _label(s: Screen, identifier: str) -> str:
    """The clicked button's label as the check run shows it: "+N sessions" names the
    projected follow-up's sessions (both arms) when ``s`` has one."""
    proj = (s.summary or {}).get("followup")
    if identifier == "continue" and isinstance(proj, dict) and proj.get("sessions_per_arm"):
        return f"+{2 * int(proj['sessions_per_arm'])} sessions"
    return BUTTONS[identifier].label


def _continue(rt: Runtime, gh: GitHubPort, run: dict[str, Any], s: Screen, login: str,
              head: str, config: RepoConfig) -> str:
    """The +N sessions button: ``/screen continue ID sha=HEAD`` by the clicker, ``ID``
    being ``s`` and ``HEAD`` the check run's head in full, authorised as ``/screen`` is;
    :func:`continue_screen` refuses what that comment would be refused (a series that has
    decided, a look already open, a changed scope, a moved head, the budget)."""
    pr = gh.get_pull(s.pr_number)
    decision = authorize(gh, login, Who.WRITERS_OR_REQUESTERS, config,
                         pr_author=pr.author)
    if not decision.allowed:
        raise UserError(f"@{login} may not screen on this repository ({decision.reason})")
    ctx = CommentContext(s.repo, s.pr_number, login, click_source(run["id"]),
                         s.installation_id, True)
    label = _label(s, "continue")
    try:
        q = continue_screen(rt, gh, ctx, ScreenContinue(s.id, sha=head),
                            _screen_config(gh, config), admitted_as=decision.how,
                            command=click_key(run["id"], "continue"))
    except CommandSeen:  # a concurrent delivery of the same click claimed it first
        resume_command(rt, gh, ctx)
        return "seen"
    try:
        look = followup.plan_of(q).get("look")
        _answer(gh, run, f"**{label}** by @{login} at `{head}`: queued as {q.label}, look "
                f"{look} of the series (its status comment on the pull request follows "
                "it).", actions=[RERUN])
    except GitHubError:
        log.exception("check run %s: the answer was not written (%s queued)", run["id"],
                      q.label)
    return f"done: continue {q.label}"


def _cancel(rt: Runtime, gh: GitHubPort, run: dict[str, Any], s: Screen, login: str,
            head: str) -> str:
    """The Cancel button: ``/screen cancel ID`` by the clicker, on the run of that head."""
    if head != s.head_sha.lower():
        raise UserError(f"this check run is for {head[:12]}, but {s.label} runs "
                        f"{s.head_sha[:12]}")
    ctx = CommentContext(s.repo, s.pr_number, login, None, s.installation_id, True)
    cancel_screen(rt, gh, ctx, ScreenCancel(s.id))
    with rt.db() as db:
        screens.claim_command(db, s.repo, click_source(run["id"]),
                              click_key(run["id"], "cancel"), rt.now())
    _answer(gh, run, f"**Cancel** by @{login}: {s.label} is being cancelled; the check run "
            "completes when its workflow run has stopped.", actions=[])
    return f"done: cancel {s.label}"


def _request(rt: Runtime, gh: GitHubPort, run: dict[str, Any], s: Screen, login: str,
             head: str, identifier: str, config: RepoConfig) -> str:
    """Re-run and Approve head: the ``/screen`` line of ``s`` again, naming the check run's
    head in full (``sha=``), authorised as that command is."""
    if identifier == "rerun" and s.state not in screens.TERMINAL_STATES:
        raise UserError(f"{s.label} has not ended yet ({s.state}); cancel it first")
    if identifier == "approve" and s.state != screens.CANCELLED:
        raise UserError(f"{s.label} is {s.state}: there is nothing to approve")
    pr = gh.get_pull(s.pr_number)
    decision = authorize(gh, login, Who.WRITERS_OR_REQUESTERS, config,
                         pr_author=pr.author)
    if not decision.allowed:
        raise UserError(f"@{login} may not screen on this repository ({decision.reason})")
    req = ScreenRequest("control" if s.kind == "control" else "candidate", s.candidate,
                        (s.track,), len(s.session_order), campaign=s.campaign, sha=head)
    ctx = CommentContext(s.repo, s.pr_number, login, click_source(run["id"]),
                         s.installation_id, True)

    def say(kind: str, **kw: Any) -> None:  # only a dry run replies; a button never is one
        log.info("check run %s: %s", run["id"], kind)

    queued = request_screens(rt, gh, ctx, req, _screen_config(gh, config), say,
                             admitted_as=decision.how,
                             command=click_key(run["id"], identifier))
    labels = ", ".join(q.label for q in queued)
    verb = "Re-run" if identifier == "rerun" else "Approve head"
    try:
        _answer(gh, run, f"**{verb}** by @{login} at `{head}`: queued as {labels} (its "
                "status comment on the pull request follows it).", actions=[],
                conclusion="success" if identifier == "approve" else None,
                title=f"{s.label} approved at {head[:12]}: {labels}"
                if identifier == "approve" else None)
    except GitHubError:
        log.exception("check run %s: the answer was not written (%s queued)", run["id"],
                      labels)
    return f"done: {identifier} {labels}"
