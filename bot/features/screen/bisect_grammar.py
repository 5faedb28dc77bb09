"""The ``/compare`` and ``/bisect`` grammar (pure: no I/O); the commands themselves are
:mod:`bot.features.screen.bisect`.

Grammar (one command per line; ``REV`` is 7 to 40 hex digits, ``SHA`` 40; ``ID`` as in
``/screen``)::

    compare-command = "/compare" SP REV SP REV *( SP compare-option )
    compare-option  = track-option / sessions-option / campaign-option / sha-option
    bisect-command  = "/bisect" SP ( start / "status" / cancel )
    start           = SHA SP SHA SP track-option *( SP bisect-option )
    bisect-option   = cap-option / error-option / noise-option / campaign-option / sha-option
    track-option    = ( "--track" SP ID ) / ( "track=" ID )
    cap-option      = ( "--max-device-hours" SP NUMBER ) / ( "max-device-hours=" NUMBER )
                                     ; default: the campaign's device-hours left
    error-option    = "error-rate=" NUMBER   ; wrong culprit at most this often; default 0.05
    noise-option    = "noise=" NUMBER        ; sd of a session median's log; default 0.03
    cancel          = "cancel" SP ["B"] 1*DIGIT
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from bot.features.screen.grammar import FULL_SHA_RE, NAME_RE, ScreenUsageError
from evidence.revisions import REVISION_RE

COMPARE_USAGE = "/compare REV_A REV_B [--track ID] [sessions=N] [campaign=ID] [sha=SHA]"
BISECT_USAGE = (
    "/bisect GOOD BAD --track ID [--max-device-hours H] [error-rate=E] [noise=S] "
    "[campaign=ID] [sha=SHA]\n/bisect status\n/bisect cancel B1")
DEFAULT_ERROR_RATE = 0.05
DEFAULT_NOISE = 0.03
"""Standard deviation of a session median's natural log assumed when ``noise=`` is not given:
about 3 %, the spread of control session medians in the campaigns #293/#297 threads."""


@dataclass(frozen=True)
class CompareRequest:
    """A parsed ``/compare``."""

    rev_a: str
    rev_b: str
    tracks: tuple[str, ...] = ()
    sessions: int | None = None
    campaign: str | None = None
    sha: str | None = None


@dataclass(frozen=True)
class BisectStart:
    """A parsed ``/bisect GOOD BAD --track T ...``."""

    good: str
    bad: str
    track: str
    max_device_hours: float | None = None
    error_rate: float = DEFAULT_ERROR_RATE
    noise: float = DEFAULT_NOISE
    campaign: str | None = None
    sha: str | None = None


@dataclass(frozen=True)
class BisectCancel:
    """``/bisect cancel B1``."""

    bisection_id: int


@dataclass(frozen=True)
class BisectStatus:
    """``/bisect status``."""


def _pairs(toks: list[str]) -> list[tuple[str, str]]:
    """``--key value`` and ``key=value`` tokens as ``(key, value)``; raises
    ScreenUsageError for a ``--key`` without its value or a bare word."""
    out = []
    i = 0
    while i < len(toks):
        t = toks[i]
        if t.startswith("--"):
            if i + 1 >= len(toks):
                raise ScreenUsageError(f"{t} needs a value")
            out.append((t[2:], toks[i + 1]))
            i += 2
            continue
        key, eq, value = t.partition("=")
        if not eq:
            raise ScreenUsageError(f"unknown argument {t!r}")
        out.append((key, value))
        i += 1
    return out


def _number(key: str, value: str, lo: float, hi: float) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ScreenUsageError(f"{key}={value!r} is not a number") from None
    if not (lo < x <= hi) or not math.isfinite(x):
        raise ScreenUsageError(f"{key}={value} is out of range", [f"above {lo:g}, at most {hi:g}"])
    return x


def _revision(value: str, full: bool) -> str:
    v = value.lower()
    if not (FULL_SHA_RE if full else REVISION_RE).match(v):
        raise ScreenUsageError(
            f"bad engine revision {value!r}",
            ["the full 40 hex digits of a commit" if full else "7 to 40 hex digits"])
    return v


def _common(key: str, value: str) -> tuple[str, str] | None:
    """``campaign``, ``sha`` and ``track`` values, checked; None for another key."""
    if key == "campaign":
        if not NAME_RE.match(value):
            raise ScreenUsageError(f"bad campaign id {value!r}", ["a campaign id"])
        return key, value
    if key == "sha":
        if not FULL_SHA_RE.match(value.lower()):
            raise ScreenUsageError(f"bad commit sha {value!r}",
                                   ["the full 40 hex digits of the PR head"])
        return key, value.lower()
    if key == "track":
        if not NAME_RE.match(value):
            raise ScreenUsageError(f"bad track id {value!r}", ["a track id of the scope"])
        return key, value
    return None


def _sessions(value: str) -> int:
    if not value.isdigit() or int(value) < 2 or int(value) > 24 or int(value) % 2:
        raise ScreenUsageError(f"sessions={value} is out of range",
                               ["an even number from 2 to 24"])
    return int(value)


def _two(toks: list[str], full: bool, what: str) -> tuple[str, str]:
    """The two revisions that open the command; raises ScreenUsageError."""
    if len(toks) < 2:
        raise ScreenUsageError(f"needs {what}", [COMPARE_USAGE, *BISECT_USAGE.split("\n")])
    a, b = _revision(toks[0], full), _revision(toks[1], full)
    if a == b:
        raise ScreenUsageError("the two revisions are the same commit; /screen control is "
                               "the repeatability screen")
    return a, b


def parse_compare(args: str) -> CompareRequest:
    """Parse the text after ``/compare``.  Raises ScreenUsageError naming the bad argument."""
    toks = args.split()
    a, b = _two(toks, False, "two engine revisions")
    kw: dict[str, Any] = {"tracks": ()}
    for key, value in _pairs(toks[2:]):
        got = _common(key, value)
        if got is not None:
            kw.update({"tracks": (*kw["tracks"], value)} if key == "track" else {key: got[1]})
        elif key == "sessions":
            kw["sessions"] = _sessions(value)
        else:
            raise ScreenUsageError(f"unknown argument {key!r} for '/compare'",
                                   ["--track ID", "sessions=N", "campaign=ID", "sha=SHA"])
    return CompareRequest(a, b, **kw)


BISECT_NUMBERS = (("max-device-hours", "max_device_hours", 1e6), ("error-rate", "error_rate", 0.5),
                  ("noise", "noise", 1.0))
"""``/bisect`` options with a number: (key, field, largest value); each must be above 0."""


def _cancel(toks: list[str]) -> BisectCancel:
    m = re.match(r"^[Bb]?([0-9]{1,9})$", toks[1]) if len(toks) == 2 else None
    if m is None:
        raise ScreenUsageError("'/bisect cancel' takes one bisection id", ["B<number>"])
    return BisectCancel(int(m.group(1)))


def parse_bisect(args: str) -> BisectStart | BisectCancel | BisectStatus:
    """Parse the text after ``/bisect``.  Raises ScreenUsageError naming the bad argument."""
    toks = args.split()
    if toks[:1] == ["status"]:
        return BisectStatus()
    if toks[:1] == ["cancel"]:
        return _cancel(toks)
    good, bad = _two(toks, True, "GOOD and BAD commits")
    kw: dict[str, Any] = {}
    for key, value in _pairs(toks[2:]):
        got = _common(key, value)
        if got is not None:
            kw[key] = got[1]
        elif (num := next((n for n in BISECT_NUMBERS if n[0] == key), None)) is not None:
            kw[num[1]] = _number(key, value, 0, num[2])
        else:
            raise ScreenUsageError(f"unknown argument {key!r} for '/bisect'",
                                   ["--track ID", "--max-device-hours H", "error-rate=E",
                                    "noise=S", "campaign=ID", "sha=SHA"])
    if "track" not in kw:
        raise ScreenUsageError("'/bisect' needs --track ID (one track is bisected)")
    return BisectStart(good, bad, **kw)
