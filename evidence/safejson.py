"""JSON parsing with a nesting limit, for every evidence path that reads untrusted JSON.

Python's ``json`` recurses once per nesting level and ends in ``RecursionError`` somewhere
near 1000 levels, after building everything before that point, and without saying where.
:func:`loads` first measures the nesting of the text (brackets inside strings do not count;
it costs a fraction of the parse) and refuses a text nested deeper than
:data:`MAX_JSON_DEPTH` with :class:`JSONTooDeep`, which names the depth and the line where
the limit was first passed.  Only then does it parse.

The documents campaign-bot writes are a few levels deep (a receipt: 4; a DSSE envelope: 3),
so the limit only refuses text built to exhaust the parser.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

MAX_JSON_DEPTH = 64
"""Deepest nesting of arrays and objects accepted in an evidence JSON text (levels)."""

_TOKENS = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.S)
_KEEP = b'"[]{}'
_DROP = bytes(b for b in range(256) if b not in _KEEP)
_PAIRS = re.compile(rb"\[\]|\{\}")


def _brackets_outside_strings(text: str) -> bytes:
    """The ``[]{}`` of ``text`` that are not inside a string, in order, at C speed: drop
    escaped backslashes and escaped quotes (left to right, as JSON reads them), keep only
    quotes and brackets (``bytes.translate``); then every other quote-delimited run is string
    content.  Right for valid JSON; for other text, whatever the parser refuses."""
    raw = text.encode("utf-8", "surrogatepass").replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = raw.translate(None, _DROP)
    del raw
    # Two adjacent quotes enclose nothing, or join two strings with nothing between them:
    # dropping them keeps every other quote's parity, and leaves few quotes to split on.
    kept = kept.replace(b'""', b"")
    return b"".join(kept.split(b'"')[::2])


class JSONTooDeep(ValueError):
    """A JSON text nested deeper than the limit.

    ``depth`` is the deepest nesting found (levels), ``limit`` the limit, ``line`` the
    1-based line where the limit was first passed."""

    def __init__(self, depth: int, limit: int, line: int) -> None:
        self.depth, self.limit, self.line = depth, limit, line
        super().__init__(f"JSON nested too deeply: {depth} levels at line {line} "
                         f"(the limit is {limit} levels)")


def nesting_depth(text: str, limit: int = MAX_JSON_DEPTH) -> tuple[int, int | None]:
    """``(deepest nesting, line where it first passed limit or None)`` of a JSON text.

    Counts ``[``/``{`` against ``]``/``}`` outside strings; text that is not JSON gives a
    number that the parser will refuse anyway.  Fast path: the brackets outside strings are
    extracted at C speed, then innermost bracket pairs are removed one level per pass, at most
    ``limit + 1`` passes.  Only a text that passes the limit is scanned token by token, for
    the exact depth and the line."""
    brackets = _brackets_outside_strings(text)
    depth = 0
    while brackets and depth <= limit:
        fewer = _PAIRS.sub(b"", brackets)
        if len(fewer) == len(brackets):
            break  # unbalanced: not JSON, the parser will say where
        brackets, depth = fewer, depth + 1
    if depth <= limit:
        return depth, None
    depth = deepest = 0
    over_at: int | None = None
    for m in _TOKENS.finditer(text):
        c = text[m.start()]
        if c == "[" or c == "{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if depth > limit and over_at is None:
                    over_at = text.count("\n", 0, m.start()) + 1
        elif c == "]" or c == "}":
            depth -= 1
    return deepest, over_at


def loads(text: str | bytes, *, limit: int = MAX_JSON_DEPTH,
          object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None = None) -> Any:
    """``json.loads`` after a nesting check.

    Raises :class:`JSONTooDeep` (nested deeper than ``limit`` levels),
    ``json.JSONDecodeError`` (syntax, with line and column), ``UnicodeDecodeError`` (bytes
    that are not UTF-8) or ``ValueError`` (e.g. an integer literal over Python's 4300-digit
    limit)."""
    if isinstance(text, bytes | bytearray):
        text = text.decode("utf-8")
    deepest, line = nesting_depth(text, limit)
    if line is not None:
        raise JSONTooDeep(deepest, limit, line)
    try:
        return json.loads(text, object_pairs_hook=object_pairs_hook)
    except RecursionError:  # cannot happen under the limit; kept as a last guard
        raise JSONTooDeep(deepest, limit, 1) from None


def write_atomic(path: os.PathLike[str] | str, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path`` through ``PATH.tmp`` and a rename, creating the
    parent folders, so a reader never sees a half-written document.  Raises ``OSError``."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(target.suffix + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(target)


class DuplicateKey(ValueError):
    """A JSON object names one key twice.  RFC 8259 section 4 leaves which value wins to the
    reader ("the behavior of software that receives such an object is unpredictable"), so a
    signed document that holds one is refused: the bot and ``campaign-bot check`` must read
    the same numbers from the same bytes."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise DuplicateKey(f"duplicate key {k!r} in one object: readers disagree on "
                                   "which value wins")
            seen.add(k)
    return out


def loads_document(text: str | bytes, *, limit: int = MAX_JSON_DEPTH) -> Any:
    """:func:`loads` for a signed evidence document (receipt, media report): also raises
    :class:`DuplicateKey`.  The one reader the bot uses for bundle documents; ``campaign-bot
    check`` reports the same duplicates as ``JSON_INVALID`` findings
    (:mod:`evidence.bundle`)."""
    return loads(text, limit=limit, object_pairs_hook=_unique)
