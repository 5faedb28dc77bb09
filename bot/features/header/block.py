"""The campaign status header's place in an issue body: find, insert and replace the text
between two hidden markers, and nothing else (GitHub's "Update an issue" replaces the body
whole, so the bot splices its block into the body it just read).

Pure string functions, no I/O.  The block looks like::

    <!-- campaign-bot:header start -->
    ...rendered header...
    <!-- campaign-bot:header end -->

Rules:

- The first time, the block is inserted at the very top of the body, followed by a blank line
  and the human text unchanged.
- Later, only the text between the markers is replaced.  Every character outside the block
  (human text above and below, including its ``\\r\\n`` line endings as typed in GitHub's web
  editor) is kept byte for byte.
- Comparison is done on normalised line endings (``\\r\\n`` and ``\\r`` become ``\\n``), so a
  body that GitHub's editor re-saved with CRLF is not "changed"; :func:`splice` returns None
  when the block would stay the same, so the caller makes no API write (and GitHub sends no
  ``issues.edited`` event).
- Markers that were there once and are now missing, or only one of them, duplicated, or in the
  wrong order, are *broken*: :func:`splice` refuses to touch the body and says why; the bot then
  tells the humans once in a comment instead of silently re-inserting the block.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

START = "<!-- campaign-bot:header start -->"
END = "<!-- campaign-bot:header end -->"


def normalise(text: str) -> str:
    """Return ``text`` with ``\\r\\n`` and lone ``\\r`` turned into ``\\n``."""
    return text.replace("\r\n", "\n").replace("\r", "\n")


class BlockState(enum.Enum):
    """Where the markers stand in a body."""

    ABSENT = "absent"
    """Neither marker is present."""
    PRESENT = "present"
    """Exactly one start marker followed by exactly one end marker."""
    BROKEN = "broken"
    """One marker only, several of one, or end before start."""


@dataclass(frozen=True)
class Located:
    """Markers found in a body: ``state``, and for PRESENT the character offsets of the inner
    text (``inner_start`` just after the start marker, ``inner_end`` at the end marker);
    ``problem`` describes a BROKEN state in one sentence."""

    state: BlockState
    inner_start: int = -1
    inner_end: int = -1
    problem: str | None = None


def locate(body: str) -> Located:
    """Find the header markers in ``body`` (any line endings)."""
    n_start = body.count(START)
    n_end = body.count(END)
    if n_start == 0 and n_end == 0:
        return Located(BlockState.ABSENT)
    if n_start != 1 or n_end != 1:
        return Located(
            BlockState.BROKEN,
            problem=f"the issue body holds {n_start} start and {n_end} end header markers; "
            "exactly one of each is needed",
        )
    s = body.index(START)
    e = body.index(END)
    if e < s:
        return Located(BlockState.BROKEN, problem="the header end marker comes before its start")
    return Located(BlockState.PRESENT, s + len(START), e)


def current_block(body: str) -> str | None:
    """The normalised text between the markers, or None when the markers are not PRESENT."""
    loc = locate(body)
    if loc.state is not BlockState.PRESENT:
        return None
    return normalise(body[loc.inner_start : loc.inner_end]).strip("\n")


class MarkersMissing(Exception):
    """The body's markers are broken, or absent where the bot had inserted them before.

    ``reason`` is one sentence for the comment that tells the humans.
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def splice(body: str | None, header: str, *, inserted_before: bool) -> str | None:
    """Return the new issue body with ``header`` between the markers, or None if unchanged.

    ``body``: the issue body as just read (None or "" for an empty body). ``header``: the
    rendered header text, without markers (line endings are normalised, surrounding blank lines
    trimmed). ``inserted_before``: whether the bot has already put a header block into this
    issue (from its database); when True and the markers are absent, they were deleted by a
    human.

    Raises :class:`MarkersMissing` when the markers are broken, or absent although
    ``inserted_before`` is True: the caller must not write and should say so once.
    """
    body = body or ""
    inner = "\n" + normalise(header).strip("\n") + "\n"
    loc = locate(body)
    if loc.state is BlockState.BROKEN:
        raise MarkersMissing(loc.problem or "the header markers are broken")
    if loc.state is BlockState.ABSENT:
        if inserted_before:
            raise MarkersMissing("the header markers were removed from the issue body")
        block = START + inner + END
        if not body.strip():
            return block + "\n"
        return block + "\n\n" + body
    old = body[loc.inner_start : loc.inner_end]
    if normalise(old).strip("\n") == normalise(header).strip("\n"):
        return None
    return body[: loc.inner_start] + inner + body[loc.inner_end :]


def outside(body: str | None) -> str:
    """The human part of ``body``: normalised, with the text between the markers removed
    (the markers stay, so a body without a block differs from one with an empty block)."""
    body = normalise(body or "")
    loc = locate(body)
    if loc.state is not BlockState.PRESENT:
        return body
    return body[: loc.inner_start] + body[loc.inner_end :]
