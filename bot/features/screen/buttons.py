"""The buttons of a screen's check run: which ones a state shows (:func:`actions_for`) and
the approval check run a fork's new head gets (:func:`approval_check_run`); the "+N
sessions" button of a finished INCONCLUSIVE look (:func:`more_sessions`).  What a click
does: :mod:`.clicks`.

GitHub shows at most three ``requested_action`` buttons on a check run, each with a label of
at most 20 characters, a description of at most 40 and an identifier of at most 20 (GitHub
REST, "Create a check run", ``actions``).  The fixed buttons' texts are within those limits
as written; :func:`more_sessions`, whose label carries a number, checks its own.
"""

from __future__ import annotations

import logging
from types import MappingProxyType

from bot.features.screen import queue as screens
from bot.features.screen.queue import Screen
from bot.features.screen.runtime import CHECK_PREFIX
from bot.github import CheckAction, GitHubError, GitHubPort

log = logging.getLogger(__name__)

RERUN = CheckAction("Re-run", "Queue this screen again at this head", "rerun")
CANCEL = CheckAction("Cancel", "Cancel this screen's workflow run", "cancel")
APPROVE = CheckAction("Approve head", "Screen this exact fork head again", "approve")
MORE = CheckAction("+N sessions", "Queue the next look (/screen continue)", "continue")
"""The "+N sessions" button as registered; a check run shows :func:`more_sessions`'s."""
BUTTONS = MappingProxyType({a.identifier: a for a in (RERUN, CANCEL, APPROVE, MORE)})
"""Button identifier -> button."""
LABEL_MAX, DESCRIPTION_MAX, IDENTIFIER_MAX = 20, 40, 20
"""GitHub's limits on a button's texts, in characters (GitHub REST, "Create a check run",
``actions``)."""


def more_sessions(sessions: int, look: int) -> CheckAction:
    """The "+N sessions" button of a finished INCONCLUSIVE look whose follow-up
    (``/screen continue``) would be accepted: ``sessions`` is the follow-up screen's
    sessions, both arms together (twice the projection's ``sessions_per_arm``, as
    :func:`bot.features.screen.followup.plan_followup` queues), ``look`` its look number.

    Raises :class:`ValueError` when ``sessions`` is not positive or a text would pass
    GitHub's limits (which GitHub answers with 422 and no check run update)."""
    if sessions < 1:
        raise ValueError(f"a follow-up has at least one session, not {sessions}")
    b = CheckAction(f"+{sessions} sessions", f"Look {look}: {sessions // 2} more per arm "
                    "(continue)", MORE.identifier)
    if (len(b.label) > LABEL_MAX or len(b.description) > DESCRIPTION_MAX
            or len(b.identifier) > IDENTIFIER_MAX):
        raise ValueError(f"button {b.label!r} ({b.description!r}) is longer than GitHub "
                         f"allows ({LABEL_MAX}/{DESCRIPTION_MAX} characters)")
    return b


def actions_for(s: Screen, more: CheckAction | None = None) -> list[CheckAction]:
    """The buttons of ``s``'s check run in its current state: Cancel while dispatched or
    running, Re-run once it ended, and ``more`` (:func:`more_sessions`, given only when a
    follow-up of ``s`` would be accepted) after it on a finished screen; none otherwise (a
    queued screen has no check run yet; a cancelling one waits for its run to stop).
    Never more than two: GitHub shows three at most."""
    if s.state in (screens.DISPATCHED, screens.RUNNING):
        return [CANCEL]
    if s.state in screens.TERMINAL_STATES:
        return [RERUN, more] if more is not None and s.state == screens.FINISHED else [RERUN]
    return []


def click_key(check_run_id: int, identifier: str) -> str:
    """The command-table text recording one button of one check run (never a comment's
    command: those start with ``/``)."""
    return f"check_run {check_run_id} {identifier}"


def approval_check_run(gh: GitHubPort, s: Screen, head: str) -> None:
    """A fork PR's queued screen ``s`` was cancelled by a push of ``head``: put a check run
    ``campaign-bot/screen: NAME`` on that head, ``action_required``, with the Approve head
    button (the approval stays a person's: the click is authorised as ``/screen`` is).
    A check run GitHub refuses is logged: the status comment says the same."""
    try:
        gh.create_check_run(
            CHECK_PREFIX + s.name, head, status="completed", conclusion="action_required",
            external_id=s.request_id,
            title=f"{s.label} awaits approval of {head[:12]}",
            summary=(f"The fork pushed {head} after {s.label} (`{s.name}` on `{s.track}`) "
                     "was approved, so it was cancelled: fork code runs on a self-hosted "
                     "runner only for the head a writer or requester reviewed. Review the "
                     "new commits, then click **Approve head**, or comment "
                     f"`/screen {s.kind}{' ' + s.candidate if s.kind == 'candidate' else ''}"
                     f" track={s.track} sha={head}`."),
            actions=[APPROVE])
    except GitHubError:
        log.exception("approval check run of %s on %s not created", s.label, head[:12])
