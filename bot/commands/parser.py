r"""The slash-command grammar and its pure parser.

Grammar (a comment body, after ``\r\n`` and ``\r`` become ``\n``)::

    body       = { line }
    command    = indent prefix { ws arg } [ ws ]        ; one command per line
    indent     = 0..3 spaces                            ; 4+ spaces is never a command
    prefix     = "/" name                               ; an added command's first word
                                                        ; (screen, campaign), then a space
                                                        ; or line end
    arg        = bare | '"' { char } '"' | "'" { char } "'"   ; shell-like quoting
    bare       = 1*( any char except space, tab, quote )

A command is a line of *running text*: a line of a paragraph (or heading) as CommonMark
reads the comment (GitHub renders comments as GitHub Flavored Markdown, a CommonMark
superset: GitHub Docs, "About writing and formatting on GitHub").  The comment is parsed with
markdown-it-py's CommonMark preset, and text in these ranges never holds commands:

- code: fenced code blocks (an unclosed fence runs to the end), indented code blocks, and
  code spans (`` `...` ``, which may cross lines);
- quotes: block quotes, with their lazy continuation lines (a ``> /screen`` line followed by
  an unmarked ``/screen`` line is one quote: quoting someone's command does not re-run it);
- HTML: HTML blocks (``<pre>``, ``<blockquote>``, ``<details>``, a tag alone on its line
  ... up to where CommonMark ends them, e.g. the next blank line), HTML comments
  ``<!-- ... -->`` (which may span lines), and inside running text the content of the inline
  elements ``<code>``, ``<pre>``, ``<kbd>``, ``<samp>``, ``<tt>``, ``<q>`` and
  ``<blockquote>`` up to their closing tag (or the paragraph's end).

Code spans and HTML comments inside a command line are removed before its arguments are
split.  Text that markdown-it does not reach (nesting deeper than its limit of 20 levels)
holds no command: commands are taken from running text only, never from what was not read.

Several commands may appear in one comment, one per line, and run in order (the handlers run
a command repeated verbatim in one comment once).  Text after a
command on the same line is arguments; prose lines around commands are ignored.  On an
edited comment only *new* commands run: those whose normalised text occurs more often in
the new body than in ``changes.body.from`` (:func:`new_commands`).

A command whose quoting is unbalanced is still returned, with ``error`` set, so the bot can
say what is wrong rather than stay silent.
"""

from __future__ import annotations

import bisect
import functools
import re
import shlex
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.rules_inline import StateInline
from markdown_it.token import Token

Prefixes = Mapping[str, bool]
"""``{prefix: groups sub-commands}`` of the added commands, e.g. ``{"screen": False,
"campaign": True}`` (``/campaign help`` names the command ``campaign help``); built by
:attr:`bot.commands.Commands.prefixes` from the commands the features added."""

_COMMAND = re.compile(r"^/(?P<name>[a-z][a-z0-9-]*)(?=\s|$)(?P<rest>.*)$")


@functools.lru_cache(maxsize=8)
def _candidate(prefixes: frozenset[str]) -> re.Pattern[str]:
    """A raw line that may hold a command (0-3 spaces, a prefix); markdown decides if it
    does."""
    return re.compile(r"^ {0,3}/(?:" + "|".join(re.escape(p) for p in sorted(prefixes))
                      + r")(?:\s|$)")
_INLINE_CODE_TAGS = frozenset({"code", "pre", "kbd", "samp", "tt", "q", "blockquote"})
"""Inline HTML elements whose content is code or a quotation: no command inside."""
_TAG = re.compile(r"^<(/?)([A-Za-z][A-Za-z0-9-]*)")


@dataclass(frozen=True)
class Command:
    """One parsed command.

    ``name`` is the prefix without ``/`` (``screen`` or ``campaign``), ``args`` the split
    arguments, ``line`` the 1-based line in the body, ``text`` the normalised command text
    (``/name arg ...``), ``error`` a parse problem (unbalanced quote) or None, and
    ``grouped`` whether the prefix groups sub-commands (``campaign``).
    """

    name: str
    args: tuple[str, ...]
    line: int
    text: str
    error: str | None = None
    grouped: bool = False

    @property
    def verb(self) -> str:
        """``campaign help``/``campaign verify`` (a grouping prefix + its sub-command) or
        ``screen``."""
        if self.grouped:
            return f"{self.name} {self.args[0]}" if self.args else self.name
        return self.name

    @property
    def verb_args(self) -> tuple[str, ...]:
        """Arguments after the verb (a grouping prefix consumes its sub-command)."""
        return self.args[1:] if self.grouped and self.args else self.args


def _recording(rule: Any) -> Any:
    """Wrap an inline rule so that every span it consumes (outside link-label look-ahead) is
    recorded in ``env["spans"]`` as ``(rule name, start, end, text)`` of the inline source."""

    def wrapped(state: StateInline, silent: bool) -> bool:
        start = state.pos
        ok: bool = rule(state, silent)
        spans = state.env.get("spans") if isinstance(state.env, dict) else None
        if ok and not silent and spans is not None:
            spans.append((rule.__name__, start, state.pos, state.src[start:state.pos]))
        return ok

    return wrapped


def _markdown() -> MarkdownIt:
    """A CommonMark parser whose code-span and inline-HTML rules record their spans; the block
    pass only (inline text is parsed on demand, for the lines that may hold a command)."""
    from markdown_it.rules_inline import backtick, html_inline

    md = MarkdownIt("commonmark")
    md.core.ruler.disable("inline")
    md.inline.ruler.at("backticks", _recording(backtick))
    md.inline.ruler.at("html_inline", _recording(html_inline))
    return md


def _hidden_ranges(md: MarkdownIt, content: str) -> list[tuple[int, int]]:
    """``(start, end)`` ranges of ``content`` (one inline token's source) that hold code or
    quotation: code spans, HTML comments, and inline code/quote elements to their closing tag
    (or the end)."""
    env: dict[str, Any] = {"spans": []}
    md.inline.parse(content, md, env, [])
    out: list[tuple[int, int]] = []
    open_tags: dict[str, list[int]] = {}
    for rule, start, end, text in sorted(env["spans"], key=lambda x: x[1]):
        if rule == "backtick" or text.startswith("<!--"):
            out.append((start, end))
            continue
        m = _TAG.match(text)
        if m is None or m.group(2).lower() not in _INLINE_CODE_TAGS:
            continue
        name = m.group(2).lower()
        if not m.group(1):
            open_tags.setdefault(name, []).append(start)
        elif open_tags.get(name):
            out.append((open_tags[name].pop(), end))
    for starts in open_tags.values():
        out += [(s, len(content)) for s in starts]
    return out


def _merge(ranges: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``ranges`` sorted, overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for start, end in sorted(ranges):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _command_lines(body: str, candidates: set[int]) -> list[tuple[int, str]]:
    """``(0-based line, text)`` of each line of running text among ``candidates`` (lines that
    look like a command in the raw text): the line's text in its paragraph or heading, hidden
    ranges blanked, outside block quotes."""
    md = _markdown()
    lines = sorted(candidates)
    tokens: list[Token] = md.parse(body)
    quoted = 0
    out: list[tuple[int, str]] = []
    for tok in tokens:
        if tok.type == "blockquote_open":
            quoted += 1
        elif tok.type == "blockquote_close":
            quoted -= 1
        if tok.type != "inline" or quoted or tok.map is None:
            continue
        i = bisect.bisect_left(lines, tok.map[0])
        if i == len(lines) or lines[i] >= tok.map[1]:
            continue  # nothing here looks like a command: skip the inline parse
        content = tok.content
        merged = _merge(_hidden_ranges(md, content))
        parts, at = [], 0
        for start, end in merged:
            parts += [content[at:start], re.sub(r"[^\n]", " ", content[start:end])]
            at = end
        parts.append(content[at:])
        offset = j = 0
        for k, line in enumerate("".join(parts).split("\n")):
            # a line that starts inside code, a comment or a quotation is hidden whole
            while j < len(merged) and merged[j][1] <= offset:
                j += 1
            if not (j < len(merged) and merged[j][0] <= offset):
                out.append((tok.map[0] + k, line))
            offset += len(line) + 1
    return out


def parse(body: str | None, prefixes: Prefixes) -> list[Command]:
    """All commands in ``body`` whose prefix is one of ``prefixes``, in order (see the module
    grammar).  Pure; never raises."""
    if not body:
        return []
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    raw = text.split("\n")
    if not prefixes:
        return []
    is_candidate = _candidate(frozenset(prefixes)).match
    candidates = {n for n, line in enumerate(raw) if is_candidate(line)}
    if not candidates:
        return []
    out: list[Command] = []
    for n, line in _command_lines(text, candidates):
        if n not in candidates:
            continue  # 4+ spaces or a tab before the text, or no command prefix
        m = _COMMAND.match(line.lstrip(" "))
        if not m or m.group("name") not in prefixes:
            continue
        rest = m.group("rest")
        try:
            args = tuple(shlex.split(rest, posix=True))
            error = None
        except ValueError as exc:
            args = tuple(rest.split())
            error = f"cannot split arguments: {exc}"
        norm = " ".join([f"/{m.group('name')}", *args])
        out.append(Command(m.group("name"), args, n + 1, norm, error,
                           prefixes[m.group("name")]))
    return out


def new_commands(body: str | None, previous: str | None, prefixes: Prefixes
                 ) -> list[Command]:
    """Commands of ``body`` that ``previous`` (the body before an edit) did not already hold,
    compared as a multiset of normalised command texts; order of ``body`` kept."""
    seen = Counter(c.text for c in parse(previous, prefixes))
    out = []
    for c in parse(body, prefixes):
        if seen[c.text] > 0:
            seen[c.text] -= 1
        else:
            out.append(c)
    return out
