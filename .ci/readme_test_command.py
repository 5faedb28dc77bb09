"""Print the README's test command: the one fenced ``sh`` block between the lines
``<!-- ci:test-command -->`` and ``<!-- /ci:test-command -->`` of README.md (set-up command 2).

Usage: ``python3 .ci/readme_test_command.py [README.md]`` (default: README.md in the current
folder).  Prints the block's lines, dedented, and exits 0.  Exits 2 with a message naming the
file and line when the markers are missing, repeated or out of order, or when the text between
them is not exactly one non-empty ``sh`` block.  Standard library only: CI runs it before any
install.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

START = "<!-- ci:test-command -->"
END = "<!-- /ci:test-command -->"


class MarkerError(ValueError):
    """The README's test-command markers or the block between them are malformed."""


def extract(text: str, name: str = "README.md") -> str:
    """The command between the markers of ``text`` (lines joined by ``\\n``, no trailing
    newline).  Raises :class:`MarkerError` naming ``name`` and the line at fault."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.strip() == START]
    ends = [i for i, line in enumerate(lines) if line.strip() == END]
    if not starts or not ends:
        missing = " and ".join(m for m, found in ((START, starts), (END, ends)) if not found)
        raise MarkerError(f"{name}: no {missing} line: mark the test command (set-up command 2) "
                          f"with {START} ... {END} around its ```sh block")
    if len(starts) > 1 or len(ends) > 1:
        where = ", ".join(str(i + 1) for i in starts + ends)
        raise MarkerError(f"{name} lines {where}: the test-command markers must appear once each")
    first, last = starts[0], ends[0]
    if last < first:
        raise MarkerError(f"{name} line {last + 1}: {END} comes before {START} "
                          f"(line {first + 1})")
    body = lines[first + 1:last]
    fences = [i for i, line in enumerate(body) if line.strip().startswith("```")]
    if len(fences) != 2 or body[fences[0]].strip() != "```sh" or body[fences[1]].strip() != "```":
        raise MarkerError(f"{name} line {first + 1}: expected exactly one ```sh ... ``` block "
                          f"between the test-command markers")
    outside = [i for i, line in enumerate(body)
               if line.strip() and not fences[0] <= i <= fences[1]]
    if outside:
        raise MarkerError(f"{name} line {first + 2 + outside[0]}: only the ```sh block may stand "
                          f"between the test-command markers")
    command = textwrap.dedent("\n".join(body[fences[0] + 1:fences[1]])).strip()
    if not command:
        raise MarkerError(f"{name} line {first + 2 + fences[0]}: the test-command block is empty")
    return command


def main(argv: list[str]) -> int:
    path = Path(argv[1]) if len(argv) > 1 else Path("README.md")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        print(f"{path}: cannot read: {exc}", file=sys.stderr)
        return 2
    try:
        print(extract(text, str(path)))
    except MarkerError as exc:
        print(exc, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
