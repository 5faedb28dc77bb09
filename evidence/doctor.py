"""The table every ``campaign-bot doctor`` command prints: one row per check with its result,
what was found, and for each failure the fix.  Shared by ``doctor runner`` (runners/) and
``doctor bot`` (bot/), which add themselves to the ``doctor`` command group.

Exit codes, as for every command: 0 every check passed (warnings allowed), 1 a check failed,
2 bad usage or a configuration that cannot be read (raised before any check runs).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from rich.console import Console
from rich.markup import escape
from rich.table import Table

Status = Literal["ok", "warn", "fail", "skip"]
MARKS = {"ok": "[green]ok[/]", "warn": "[yellow]warn[/]", "fail": "[red]FAIL[/]",
         "skip": "[dim]skip[/]"}


@dataclass(frozen=True)
class Check:
    """One doctor check: ``status`` (ok, warn, fail, skip), ``detail`` (what was found) and
    ``fix`` (what to do; required for fail and warn)."""

    name: str
    status: Status
    detail: str
    fix: str = ""


def print_checks(console: Console, title: str, checks: Sequence[Check]) -> int:
    """Print ``checks`` as a table and return the exit code (1 if any failed, else 0)."""
    t = Table(title=title, title_justify="left", show_lines=False)
    for col in ("check", "result", "found", "fix"):
        t.add_column(col, overflow="fold")
    for c in checks:
        t.add_row(escape(c.name), MARKS[c.status], escape(c.detail), escape(c.fix))
    console.print(t)
    failed = [c for c in checks if c.status == "fail"]
    warned = [c for c in checks if c.status == "warn"]
    console.print(f"{len(checks)} checks: {len(failed)} failed, {len(warned)} warning(s)")
    return 1 if failed else 0
