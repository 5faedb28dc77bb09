"""``/screen``: start, inspect and cancel A/B screens of a campaign's candidates.

Grammar (one command per line, at the start of the line; arguments are separated by spaces;
keywords are lower case; ``NAME`` and ``ID`` match ``[A-Za-z0-9._-]+``)::

    screen-command  = "/screen" SP ( candidate | control | status | cancel | continue
                                   | confirm )
    candidate       = "candidate" SP NAME *( SP option ) [ SP "dry-run" ]
    control         = "control" *( SP ( track-option / campaign-option / sha-option ) )
    status          = "status"
    cancel          = "cancel" SP SCREEN-ID
    continue        = "continue" SP SCREEN-ID *( SP ( sessions-option / sha-option ) )
                                              ; sessions: the follow-up's; default: what
                                              ; the screen's result projected
    confirm         = "confirm" SP NAME *( SP option )
                                              ; tracks default: every track where NAME's
                                              ; SUPPORTED awaits confirmation
    option          = track-option / sessions-option / campaign-option / sha-option
    track-option    = "track=" ID             ; repeatable; default: every track of the scope
    sessions-option = "sessions=" 1*DIGIT     ; sessions of the screen, both arms; even, 2..24;
                                              ; default: the length of the protocol's order
    campaign-option = "campaign=" ID          ; needed only when the repository holds several
    sha-option      = "sha=" 40HEXDIG         ; the full head commit approved; required on fork
                                              ; PRs (7 to 39 digits parse, and are refused with
                                              ; the exact command naming the full head)
    SCREEN-ID       = ["S"] 1*DIGIT            ; as printed in the status comment, e.g. S12

A track list gives one screen per track, each queued separately.  ``dry-run`` plans and
quotes the screen (sessions, estimated device time, budget left) and
stops; nothing is queued or charged.  ``control`` runs the control against itself (a
repeatability screen, which lossless verdicts need: if two control runs already differ,
lossless is INCONCLUSIVE).

Examples::

    /screen candidate cache-dit track=5s-lossless sessions=6
    /screen candidate fp8-attn dry-run
    /screen control track=5s-lossless
    /screen candidate cache-dit sha=3f9c2e1d0b6a4c8e9f7a5b3c1d2e4f6a8b0c9d7e   (fork PR)
    /screen status
    /screen cancel S12
    /screen continue S12
    /screen confirm cache-dit sessions=8

``continue`` queues a follow-up screen of screen ``S12``: the next look of its
group-sequential series (the campaign's ``[protocol.sequential]``, declared before the first
look; evidence.sequential), with the sessions the screen's INCONCLUSIVE result projected
(``FOLLOW_UP``); it runs under the same frozen scope as the first look, with the protocol's
order and a server per session, and is budgeted like any screen.  ``confirm`` queues the
confirmation screen of a candidate whose SUPPORTED is provisional: one fixed-design screen
per track against the original control, which turns SUPPORTED (provisional) into
SUPPORTED (confirmed) or (not confirmed) (docs/verdict-statistics.md).

Who may use it: users with ``write`` or ``admin`` permission on the repository, or one of the
campaign's requesters (``requesters`` in campaign.toml).  On a PR from a fork the approval is
bound to the full 40-digit head SHA it was given for (``sha=``, equal to the PR's head: a
prefix could name another commit pushed later); a new push needs a new ``/screen``, and
queued screens of the old head are cancelled.

The parser here is pure (no I/O); names are checked against the campaign scope by
:func:`check_against_scope`, and every argument error carries the valid values.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

NAME_RE = re.compile(r"^[A-Za-z0-9._-]+$")
SCREEN_ID_RE = re.compile(r"^[Ss]?([0-9]{1,9})$")
SHA_RE = re.compile(r"^[0-9a-f]{7,40}$")
"""What ``sha=`` parses (7 to 40 hex digits); only 40 approve (:data:`FULL_SHA_RE`)."""
FULL_SHA_RE = re.compile(r"^[0-9a-f]{40}$")

SUBCOMMANDS = ("candidate", "control", "status", "cancel", "continue", "confirm")
MIN_SESSIONS = 2
MAX_SESSIONS = 24
"""Bounds of ``sessions=N``: at least one session per arm; 24 keeps one screen within a
working day at ~10-minute 15 s sessions (campaign #297's budget of 16 wall-hours)."""

USAGE = (
    "/screen candidate NAME [track=ID ...] [sessions=N] [campaign=ID] [sha=SHA] [dry-run]\n"
    "/screen control [track=ID ...] [campaign=ID] [sha=SHA]\n"
    "/screen status\n"
    "/screen cancel ID\n"
    "/screen continue ID [sessions=N] [sha=SHA]\n"
    "/screen confirm NAME [track=ID ...] [sessions=N] [campaign=ID] [sha=SHA]"
)


class ScreenUsageError(ValueError):
    """A ``/screen`` line that does not follow the grammar.

    ``message`` says what is wrong; ``valid`` lists the valid values (or forms) for the
    offending argument, for the reply.
    """

    def __init__(self, message: str, valid: list[str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.valid = list(valid or [])

    def __str__(self) -> str:
        if self.valid:
            return f"{self.message} (valid: {', '.join(self.valid)})"
        return self.message


@dataclass(frozen=True)
class ScreenRequest:
    """A parsed ``/screen candidate`` or ``/screen control``.

    ``arm_b`` is the candidate name, or ``"control"`` for a control-vs-control screen;
    ``tracks`` empty means every track of the scope; ``sessions`` None means the protocol's
    order length.
    """

    kind: Literal["candidate", "control"]
    name: str
    tracks: tuple[str, ...] = ()
    sessions: int | None = None
    dry_run: bool = False
    campaign: str | None = None
    sha: str | None = None
    control_revision: str | None = None
    """A revision screen (``/compare``, ``/bisect``): the control arm's engine revision."""
    candidate_revision: str | None = None
    """A revision screen: arm B runs the control config at this engine revision; ``name``
    is then :func:`evidence.revisions.revision_candidate` of it."""
    confirm: bool = False
    """``/screen confirm NAME``: the confirmation screen(s) of a provisional SUPPORTED."""


@dataclass(frozen=True)
class ScreenStatus:
    """``/screen status``."""


@dataclass(frozen=True)
class ScreenCancel:
    """``/screen cancel ID``; ``screen_id`` is the numeric id (``S12`` -> 12)."""

    screen_id: int


@dataclass(frozen=True)
class ScreenContinue:
    """``/screen continue ID``: a follow-up screen (the next look) of screen ``screen_id``;
    ``sessions`` None: the projected follow-up's."""

    screen_id: int
    sessions: int | None = None
    sha: str | None = None


ScreenCommand = ScreenRequest | ScreenStatus | ScreenCancel | ScreenContinue


def parse_screen(args: str) -> ScreenCommand:
    """Parse the text after ``/screen`` on one command line.

    Returns a :class:`ScreenRequest`, :class:`ScreenStatus` or :class:`ScreenCancel`.
    Raises :class:`ScreenUsageError` naming the bad argument and the valid values.
    """
    toks = args.split()
    if not toks:
        raise ScreenUsageError("missing sub-command", list(SUBCOMMANDS))
    sub, rest = toks[0], toks[1:]
    if sub == "status":
        if rest:
            raise ScreenUsageError(f"'/screen status' takes no arguments, got {rest[0]!r}")
        return ScreenStatus()
    if sub == "cancel":
        if len(rest) != 1:
            raise ScreenUsageError(
                "'/screen cancel' takes exactly one screen id", ["S<number>, e.g. S12"]
            )
        m = SCREEN_ID_RE.match(rest[0])
        if not m:
            raise ScreenUsageError(
                f"bad screen id {rest[0]!r}", ["S<number>, e.g. S12"]
            )
        return ScreenCancel(int(m.group(1)))
    if sub == "candidate":
        if not rest or "=" in rest[0] or rest[0] == "dry-run":
            raise ScreenUsageError("'/screen candidate' needs a candidate NAME first")
        name = rest[0]
        if not NAME_RE.match(name):
            raise ScreenUsageError(
                f"bad candidate name {name!r}", ["letters, digits, '.', '_', '-'"]
            )
        return _options(
            "candidate", name, rest[1:], allow=("track", "sessions", "campaign", "sha", "dry-run")
        )
    if sub == "control":
        return _options("control", "control", rest, allow=("track", "campaign", "sha"))
    if sub == "continue":
        m = SCREEN_ID_RE.match(rest[0]) if rest else None
        if not m:
            raise ScreenUsageError("'/screen continue' needs the screen id first",
                                   ["S<number>, e.g. S12"])
        opts = _options("candidate", "-", rest[1:], allow=("sessions", "sha"),
                        command="continue")
        return ScreenContinue(int(m.group(1)), opts.sessions, opts.sha)
    if sub == "confirm":
        if not rest or "=" in rest[0] or not NAME_RE.match(rest[0]):
            raise ScreenUsageError("'/screen confirm' needs a candidate NAME first",
                                   ["letters, digits, '.', '_', '-'"])
        req = _options("candidate", rest[0], rest[1:],
                       allow=("track", "sessions", "campaign", "sha"), command="confirm")
        return ScreenRequest("candidate", req.name, req.tracks, req.sessions, False,
                             req.campaign, req.sha, confirm=True)
    raise ScreenUsageError(f"unknown sub-command {sub!r}", list(SUBCOMMANDS))


def _options(
    kind: Literal["candidate", "control"], name: str, toks: list[str], allow: tuple[str, ...],
    command: str | None = None,
) -> ScreenRequest:
    tracks: list[str] = []
    sessions: int | None = None
    dry_run = False
    campaign: str | None = None
    sha: str | None = None
    forms = {
        "track": "track=ID",
        "sessions": "sessions=N",
        "campaign": "campaign=ID",
        "sha": "sha=SHA",
        "dry-run": "dry-run",
    }
    valid_forms = [forms[a] for a in allow]
    for tok in toks:
        key, eq, value = tok.partition("=")
        if tok == "dry-run" and "dry-run" in allow:
            dry_run = True
        elif eq and key == "track" and "track" in allow:
            if not NAME_RE.match(value):
                raise ScreenUsageError(f"bad track id {value!r}", ["a track id of the scope"])
            if value not in tracks:
                tracks.append(value)
        elif eq and key == "sessions" and "sessions" in allow:
            if not value.isdigit():
                raise ScreenUsageError(
                    f"sessions={value!r} is not a number",
                    [f"an even number from {MIN_SESSIONS} to {MAX_SESSIONS}"],
                )
            n = int(value)
            if n < MIN_SESSIONS or n > MAX_SESSIONS or n % 2:
                raise ScreenUsageError(
                    f"sessions={n} is out of range",
                    [f"an even number from {MIN_SESSIONS} to {MAX_SESSIONS}"],
                )
            sessions = n
        elif eq and key == "campaign" and "campaign" in allow:
            if not NAME_RE.match(value):
                raise ScreenUsageError(f"bad campaign id {value!r}", ["a campaign id"])
            campaign = value
        elif eq and key == "sha" and "sha" in allow:
            if not SHA_RE.match(value.lower()):
                raise ScreenUsageError(
                    f"bad commit sha {value!r}", ["the full 40 hex digits of the PR head"]
                )
            sha = value.lower()
        else:
            raise ScreenUsageError(f"unknown argument {tok!r} for '/screen {command or kind}'",
                                   valid_forms)
    return ScreenRequest(kind, name, tuple(tracks), sessions, dry_run, campaign, sha)


def command_text(req: ScreenRequest, sha: str | None) -> str:
    """The ``/screen`` line asking for ``req`` again with ``sha=SHA`` (dropped when None):
    what a reply gives a requester to copy.  Every part was validated by the parser."""
    parts = ["/screen", "confirm" if req.confirm else req.kind]
    if req.kind == "candidate":
        parts.append(req.name)
    parts += [f"track={t}" for t in req.tracks]
    if req.sessions is not None:
        parts.append(f"sessions={req.sessions}")
    if req.campaign is not None:
        parts.append(f"campaign={req.campaign}")
    if sha is not None:
        parts.append(f"sha={sha}")
    if req.dry_run:
        parts.append("dry-run")
    return " ".join(parts)


def continue_text(cmd: ScreenContinue, sha: str | None) -> str:
    """The ``/screen continue`` line asking for ``cmd`` again with ``sha=SHA``."""
    parts = ["/screen", "continue", f"S{cmd.screen_id}"]
    if cmd.sessions is not None:
        parts.append(f"sessions={cmd.sessions}")
    if sha is not None:
        parts.append(f"sha={sha}")
    return " ".join(parts)


@dataclass
class ScopeCheck:
    """Result of checking a request against the campaign scope: the tracks it resolves to
    and the session order, or an error with the valid values."""

    tracks: list[str] = field(default_factory=list)
    order: str = ""


def session_order(protocol_order: str, sessions: int | None) -> str:
    """The session order of a screen: the protocol's order (e.g. ``ABBAAB``), repeated or cut
    to ``sessions`` sessions.  ``A`` = control, ``B`` = candidate (or the second control)."""
    if not sessions:
        return protocol_order
    reps = sessions // len(protocol_order) + 1
    return (protocol_order * reps)[:sessions]


def check_against_scope(req: ScreenRequest, scope: object) -> ScopeCheck:
    """Resolve ``req`` against a ``CampaignScope``: candidate name and track ids must exist.

    Raises :class:`ScreenUsageError` with the scope's valid names.  Each arm must get at
    least ``protocol.min_measured_sessions_per_arm`` sessions (the frozen protocol).
    """
    from evidence.models import CampaignScope
    from evidence.revisions import revision_scope

    assert isinstance(scope, CampaignScope)
    if req.candidate_revision is not None:
        scope = revision_scope(scope, req.control_revision, req.candidate_revision)
    if req.kind == "candidate":
        names = [c.name for c in scope.candidates]
        if req.name not in names:
            raise ScreenUsageError(
                f"campaign {scope.id!r} has no candidate {req.name!r}", names or ["(none declared)"]
            )
    track_ids = [t.id for t in scope.tracks]
    for t in req.tracks:
        if t not in track_ids:
            raise ScreenUsageError(f"campaign {scope.id!r} has no track {t!r}", track_ids)
    order = session_order(scope.protocol.order, req.sessions)
    per_arm = min(order.count("A"), order.count("B"))
    need = scope.protocol.min_measured_sessions_per_arm
    if per_arm < need:
        lo = 2 * need
        raise ScreenUsageError(
            f"sessions={len(order)} gives {per_arm} session(s) per arm; the protocol needs "
            f"at least {need}",
            [f"an even number from {lo} to {MAX_SESSIONS}"],
        )
    return ScopeCheck(tracks=list(req.tracks) or track_ids, order=order)
