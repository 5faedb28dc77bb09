r"""The slash-command grammar and its pure parser.

Grammar (a comment body, after ``\r\n`` and ``\r`` become ``\n``)::

    body       = { line }
    command    = indent prefix { ws arg } [ ws ]        ; one command per line
    indent     = 0..3 spaces                            ; 4+ spaces is an indented code block
    prefix     = "/screen" | "/campaign"                ; lower case, then a space or line end
    arg        = bare | '"' { char } '"' | "'" { char } "'"   ; shell-like quoting
    bare       = 1*( any char except space, tab, quote )

Lines that never hold commands (their text is ignored):

- inside a fenced code block: from a line starting with `````` or ``~~~`` (up to 3 spaces
  of indent) to the closing fence of the same character, at least as long;
- indented code: 4+ spaces or a tab before the text;
- block quotes: lines whose first non-space character is ``>`` (quoting someone's
  ``/screen`` does not re-run it);
- inside an HTML comment ``<!-- ... -->`` (which may span lines);
- a line that starts with inline code (`` `/screen x` `` is prose about a command).  Inline
  code spans inside a command line are removed before its arguments are split.

Several commands may appear in one comment, one per line, and run in order (the handlers run
a command repeated verbatim in one comment once).  Text after a
command on the same line is arguments; prose lines around commands are ignored.  On an
edited comment only *new* commands run: those whose normalised text occurs more often in
the new body than in ``changes.body.from`` (:func:`new_commands`).

A command whose quoting is unbalanced is still returned, with ``error`` set, so the bot can
say what is wrong rather than stay silent.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from dataclasses import dataclass

PREFIXES = ("screen", "campaign")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_COMMAND = re.compile(r"^ {0,3}/(?P<name>[a-z]+)(?=\s|$)(?P<rest>.*)$")
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1")


@dataclass(frozen=True)
class Command:
    """One parsed command.

    ``name`` is the prefix without ``/`` (``screen`` or ``campaign``), ``args`` the split
    arguments, ``line`` the 1-based line in the body, ``text`` the normalised command text
    (``/name arg ...``) and ``error`` a parse problem (unbalanced quote) or None.
    """

    name: str
    args: tuple[str, ...]
    line: int
    text: str
    error: str | None = None

    @property
    def verb(self) -> str:
        """``campaign help``/``campaign verify`` (prefix + sub-command) or ``screen``."""
        if self.name == "campaign":
            return f"campaign {self.args[0]}" if self.args else "campaign"
        return self.name

    @property
    def verb_args(self) -> tuple[str, ...]:
        """Arguments after the verb (``campaign`` consumes its sub-command)."""
        return self.args[1:] if self.name == "campaign" and self.args else self.args


def _strip_html_comments(in_comment: bool, line: str) -> tuple[str, bool]:
    out = ""
    i = 0
    while i < len(line):
        if in_comment:
            end = line.find("-->", i)
            if end < 0:
                return out, True
            i = end + 3
            in_comment = False
        else:
            start = line.find("<!--", i)
            if start < 0:
                out += line[i:]
                break
            out += line[i:start]
            i = start + 4
            in_comment = True
    return out, in_comment


def parse(body: str | None) -> list[Command]:
    """All commands in ``body``, in order (see the module grammar).  Pure; never raises."""
    if not body:
        return []
    text = body.replace("\r\n", "\n").replace("\r", "\n")
    lines = text.split("\n")
    out: list[Command] = []
    fence: str | None = None
    in_comment = False
    for n, raw in enumerate(lines, 1):
        if fence is not None:
            m = _FENCE.match(raw)
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not raw.strip()[len(m.group(1)):].strip():
                fence = None
            continue
        if not in_comment:
            m = _FENCE.match(raw)
            if m:
                fence = m.group(1)
                continue
        line, in_comment_after = _strip_html_comments(in_comment, raw)
        was_in_comment = in_comment
        in_comment = in_comment_after
        if was_in_comment and not line.strip():
            continue
        if raw.startswith("\t") or re.match(r"^ {4,}", line):
            continue  # indented code block
        if line.lstrip().startswith(">"):
            continue  # block quote
        m = _COMMAND.match(line)
        if not m or m.group("name") not in PREFIXES:
            continue
        rest = _INLINE_CODE.sub(" ", m.group("rest"))
        try:
            args = tuple(shlex.split(rest, posix=True))
            error = None
        except ValueError as exc:
            args = tuple(rest.split())
            error = f"cannot split arguments: {exc}"
        norm = " ".join([f"/{m.group('name')}", *args])
        out.append(Command(m.group("name"), args, n, norm, error))
    return out


def new_commands(body: str | None, previous: str | None) -> list[Command]:
    """Commands of ``body`` that ``previous`` (the body before an edit) did not already hold,
    compared as a multiset of normalised command texts; order of ``body`` kept."""
    seen = Counter(c.text for c in parse(previous))
    out = []
    for c in parse(body):
        if seen[c.text] > 0:
            seen[c.text] -= 1
        else:
            out.append(c)
    return out
