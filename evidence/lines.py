"""Map a field path (a pydantic error ``loc`` such as ``("requests", 0, "client_wall_s")``) to
the 1-based line of a JSON or TOML text where that field is written.

The standard parsers keep no positions, so this module walks the text once:

* JSON: a small recursive scanner (strings via ``json.decoder.scanstring``) records the line
  of every object key and every array element.
* TOML: a line scanner tracks ``[table]`` and ``[[array.of.tables]]`` headers (counting the
  array index) and ``key = value`` lines, including dotted keys.  Keys inside inline tables
  and multi-line arrays map to the line of their enclosing key.

:func:`line_of` returns the line of the deepest prefix of ``loc`` that was found (pydantic
adds union tags such as ``"float"`` that are not in the text), 1 for an empty ``loc``, and
None when the text cannot be scanned.
"""

from __future__ import annotations

import functools
import json.decoder
import re
from collections.abc import Sequence
from typing import Literal

Loc = tuple[str | int, ...]

_scanstring = json.decoder.scanstring  # type: ignore[attr-defined]
_WS = re.compile(r"[ \t\n\r]*")
_NUM = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|NaN|-?Infinity|true|false|null")


class _JsonLines:
    def __init__(self, text: str) -> None:
        self.s = text
        self.nl = [i for i, c in enumerate(text) if c == "\n"]
        self.map: dict[Loc, int] = {}

    def line(self, pos: int) -> int:
        lo, hi = 0, len(self.nl)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.nl[mid] < pos:
                lo = mid + 1
            else:
                hi = mid
        return lo + 1

    def ws(self, i: int) -> int:
        m = _WS.match(self.s, i)
        return m.end() if m else i

    def value(self, i: int, loc: Loc) -> int:
        i = self.ws(i)
        c = self.s[i] if i < len(self.s) else ""
        if c == "{":
            i = self.ws(i + 1)
            if self.s[i] == "}":
                return i + 1
            while True:
                i = self.ws(i)
                if self.s[i] != '"':
                    raise ValueError("key expected")
                key, j = _scanstring(self.s, i + 1)
                self.map[(*loc, key)] = self.line(i)
                j = self.ws(j)
                if self.s[j] != ":":
                    raise ValueError("colon expected")
                i = self.ws(self.value(j + 1, (*loc, key)))
                if self.s[i] == ",":
                    i += 1
                    continue
                if self.s[i] == "}":
                    return i + 1
                raise ValueError("comma expected")
        if c == "[":
            i = self.ws(i + 1)
            if self.s[i] == "]":
                return i + 1
            n = 0
            while True:
                i = self.ws(i)
                self.map[(*loc, n)] = self.line(i)
                i = self.ws(self.value(i, (*loc, n)))
                n += 1
                if self.s[i] == ",":
                    i += 1
                    continue
                if self.s[i] == "]":
                    return i + 1
                raise ValueError("comma expected")
        if c == '"':
            return _scanstring(self.s, i + 1)[1]
        m = _NUM.match(self.s, i)
        if not m:
            raise ValueError("value expected")
        return m.end()


@functools.lru_cache(maxsize=64)
def json_line_map(text: str) -> dict[Loc, int]:
    """``{loc: line}`` for every key and array element of a JSON text (``{}`` if invalid)."""
    jl = _JsonLines(text)
    try:
        jl.value(0, ())
    except (ValueError, IndexError):
        pass  # keep what was mapped before the damage
    return jl.map


_TABLE = re.compile(r"^\s*(\[\[?)\s*([^\]]+?)\s*\]\]?\s*(#.*)?$")
_BARE = r"""(?:[A-Za-z0-9_-]+|"[^"]*"|'[^']*')"""
_KEY = re.compile(rf"^\s*({_BARE}(?:\s*\.\s*{_BARE})*)\s*=")


def _split_key(k: str) -> list[str]:
    parts = re.findall(r"""[A-Za-z0-9_-]+|"[^"]*"|'[^']*'""", k)
    return [p[1:-1] if p[:1] in "\"'" else p for p in parts]


@functools.lru_cache(maxsize=16)
def toml_line_map(text: str) -> dict[Loc, int]:
    """``{loc: line}`` for tables, array-of-table entries and keys of a TOML text."""
    out: dict[Loc, int] = {}
    counts: dict[Loc, int] = {}
    table: Loc = ()
    depth = 0
    in_multi: str | None = None
    for no, line in enumerate(text.split("\n"), 1):
        if in_multi:
            if in_multi in line:
                in_multi = None
            continue
        if depth > 0:
            depth += _bracket_delta(line)
            continue
        m = _TABLE.match(line)
        if m and not _KEY.match(line):
            parts = _split_key(m.group(2))
            if m.group(1) == "[[":
                # the array's index is counted under the array's own parent path
                base: Loc = ()
                for p in parts[:-1]:
                    base = (*base, p)
                    if base in counts:
                        base = (*base, counts[base])
                arr = (*base, parts[-1])
                counts[arr] = counts.get(arr, -1) + 1
                table = (*arr, counts[arr])
                out.setdefault(arr, no)
            else:
                t: Loc = ()
                for p in parts:
                    t = (*t, p)
                    if t in counts:
                        t = (*t, counts[t])
                table = t
            out[table] = no
            continue
        k = _KEY.match(line)
        if k:
            key = (*table, *_split_key(k.group(1)))
            out.setdefault(key, no)
            rest = line[k.end():]
            for q in ('"""', "'''"):
                if rest.count(q) == 1:
                    in_multi = q
            if not in_multi:
                depth = _bracket_delta(rest)
    return out


def _bracket_delta(s: str) -> int:
    s = re.sub(r'"(?:\\.|[^"\\])*"|\'[^\']*\'', "", s.split(" #")[0])
    return s.count("[") + s.count("{") - s.count("]") - s.count("}")


def line_of(text: str, loc: Sequence[str | int], *,
            fmt: Literal["json", "toml"] = "json") -> int | None:
    """The 1-based line where field ``loc`` is written in ``text`` (JSON or TOML).

    Falls back to the deepest enclosing field found; returns 1 for ``()`` and None when no
    prefix of ``loc`` is in the text.
    """
    if not loc:
        return 1
    m = toml_line_map(text) if fmt == "toml" else json_line_map(text)
    key = tuple(loc)
    while key:
        if key in m:
            return m[key]
        key = key[:-1]
    return None
