"""The /screen grammar: the pure parser and the scope check (valid values in every error)."""

from __future__ import annotations

import re

import pytest
from screen_scope import make_scope

from bot.features.screen.grammar import (
    ScreenCancel,
    ScreenContinue,
    ScreenRequest,
    ScreenStatus,
    ScreenUsageError,
    check_against_scope,
    parse_screen,
    session_order,
)


@pytest.mark.parametrize(
    "text,expected",
    [
        ("candidate cache-dit", ScreenRequest("candidate", "cache-dit")),
        (
            "candidate cache-dit track=5s-lossless track=15s-lossy sessions=8 dry-run",
            ScreenRequest("candidate", "cache-dit", ("5s-lossless", "15s-lossy"), 8, True),
        ),
        ("candidate x track=a track=a", ScreenRequest("candidate", "x", ("a",))),
        ("control", ScreenRequest("control", "control")),
        (
            "candidate x campaign=h3 sha=ABCDEF1",
            ScreenRequest("candidate", "x", campaign="h3", sha="abcdef1"),
        ),
        ("control track=5s-lossless", ScreenRequest("control", "control", ("5s-lossless",))),
        ("status", ScreenStatus()),
        ("cancel S12", ScreenCancel(12)),
        ("cancel 7", ScreenCancel(7)),
    ],
    ids=["bare", "all-options", "dup-track", "control", "campaign-sha", "control-track",
         "status", "cancel-S", "cancel-num"],
)
def test_parse_valid(text: str, expected: object) -> None:
    assert parse_screen(text) == expected


@pytest.mark.parametrize(
    "text,message,valid",
    [
        ("", "missing sub-command",
         ["candidate", "control", "status", "cancel", "continue", "confirm"]),
        ("launch x", "unknown sub-command 'launch'",
         ["candidate", "control", "status", "cancel", "continue", "confirm"]),
        ("candidate", "needs a candidate NAME", []),
        ("candidate track=a", "needs a candidate NAME", []),
        ("candidate a/b", "bad candidate name 'a/b'", ["letters, digits, '.', '_', '-'"]),
        ("candidate x sessions=five", "is not a number", ["an even number from 2 to 24"]),
        ("candidate x sessions=7", "sessions=7 is out of range", ["an even number from 2 to 24"]),
        ("candidate x sessions=26", "out of range", ["an even number from 2 to 24"]),
        ("candidate x speed=fast", "unknown argument 'speed=fast'",
         ["track=ID", "sessions=N", "campaign=ID", "sha=SHA", "dry-run"]),
        ("control sessions=4", "unknown argument 'sessions=4' for '/screen control'",
         ["track=ID", "campaign=ID", "sha=SHA"]),
        ("control dry-run", "unknown argument 'dry-run'", ["track=ID", "campaign=ID", "sha=SHA"]),
        ("candidate x sha=xyz", "bad commit sha 'xyz'", ["the full 40 hex digits of the PR head"]),
        ("status now", "takes no arguments", []),
        ("cancel", "exactly one screen id", ["S<number>, e.g. S12"]),
        ("cancel X1", "bad screen id 'X1'", ["S<number>, e.g. S12"]),
    ],
)
def test_parse_errors_name_valid_values(text: str, message: str, valid: list[str]) -> None:
    with pytest.raises(ScreenUsageError) as ei:
        parse_screen(text)
    assert message in ei.value.message
    assert ei.value.valid == valid


def test_session_order_repeats_or_cuts_protocol() -> None:
    assert session_order("ABBAAB", None) == "ABBAAB"
    assert session_order("ABBAAB", 4) == "ABBA"
    assert session_order("ABBA", 10) == "ABBAABBAAB"


def test_scope_check_resolves_tracks_and_order() -> None:
    scope = make_scope()
    chk = check_against_scope(parse_screen("candidate cache-dit"), scope)
    assert chk.tracks == ["5s-lossless", "15s-lossy"] and chk.order == "ABBAAB"
    chk = check_against_scope(parse_screen("control track=15s-lossy"), scope)
    assert chk.tracks == ["15s-lossy"]


@pytest.mark.parametrize(
    "text,message,valid",
    [
        ("candidate nope", "has no candidate 'nope'", ["cache-dit", "fp8-attn", "teacache"]),
        ("candidate cache-dit track=30s", "has no track '30s'", ["5s-lossless", "15s-lossy"]),
        ("candidate cache-dit sessions=4", "gives 2 session(s) per arm",
         ["an even number from 6 to 24"]),
    ],
)
def test_scope_check_errors(text: str, message: str, valid: list[str]) -> None:
    with pytest.raises(ScreenUsageError) as ei:
        check_against_scope(parse_screen(text), make_scope())
    assert message in ei.value.message
    assert ei.value.valid == valid


@pytest.mark.parametrize(("text", "expected"), [
    ("continue S12", ScreenContinue(12)),
    ("continue 3 sessions=4 sha=" + "a" * 40, ScreenContinue(3, 4, "a" * 40)),
    ("confirm cache-dit", ScreenRequest("candidate", "cache-dit", confirm=True)),
    ("confirm cache-dit track=5s sessions=8",
     ScreenRequest("candidate", "cache-dit", ("5s",), 8, confirm=True)),
], ids=["continue", "continue-options", "confirm", "confirm-options"])
def test_follow_up_and_confirm_parse(text: str, expected: object) -> None:
    assert parse_screen(text) == expected


@pytest.mark.parametrize(("text", "message"), [
    ("continue", "'/screen continue' needs the screen id first"),
    ("continue x", "'/screen continue' needs the screen id first"),
    ("continue S1 track=a", "unknown argument 'track=a' for '/screen continue'"),
    ("continue S1 sessions=3", "sessions=3 is out of range"),
    ("confirm", "'/screen confirm' needs a candidate NAME first"),
    ("confirm x dry-run", "unknown argument 'dry-run' for '/screen confirm'"),
], ids=["no-id", "bad-id", "track", "odd-sessions", "no-name", "dry-run"])
def test_follow_up_and_confirm_errors(text: str, message: str) -> None:
    with pytest.raises(ScreenUsageError, match=re.escape(message)):
        parse_screen(text)
