"""The consoles every ``campaign-bot`` command prints through, and its one error style.

* :func:`print_error`: ``error: MESSAGE`` on one line of stderr, the way every command reports
  a user error (bad input, bad usage, an unreadable file): never a traceback, never a parser's
  dump, never folded into a pipe or a log.
* :func:`output_console`: a rich console on stdout (or stderr) that, on a terminal, fits
  tables to the terminal's width, and into a pipe, a file or a log prints them at their
  natural width (up to :data:`PIPE_WIDTH` columns), so a row is one line and copy and paste
  of a value, a command or a path works.  ``COLUMNS`` set in the environment still wins, as
  it does for rich.

Only the standard library and rich are imported (command plug-in modules may import this one
at call time without slowing ``--help``: ``tests/test_startup.py``).
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rich.console import Console

PIPE_WIDTH = 1000
"""Columns a console gets when its output is not a terminal and ``COLUMNS`` is unset: wider
than any table row the commands print (so rich never folds a cell), narrow enough that a
rule or an expanding table stays readable."""


def output_console(*, stderr: bool = False) -> Console:
    """A console that wraps only on a terminal.

    Returns a :class:`rich.console.Console` on stdout (``stderr=True``: on stderr), with
    highlighting off and soft wrap on (a printed line is never broken: a terminal folds it).
    When its file is not a terminal and ``COLUMNS`` is unset, its width is
    :data:`PIPE_WIDTH`: tables take their natural width, one line per row."""
    from rich.console import Console

    con = Console(stderr=stderr, highlight=False, soft_wrap=True)
    if not con.is_terminal and "COLUMNS" not in os.environ:
        con = Console(stderr=stderr, highlight=False, soft_wrap=True, width=PIPE_WIDTH)
    return con


@functools.cache
def _stderr() -> Console:
    return output_console(stderr=True)


def print_error(message: str) -> None:
    """Print ``error: MESSAGE`` on stderr as one line: the one error style of every command.

    ``message`` is shown as text (rich markup in it is escaped); ``error:`` is red on a
    terminal.  The line is never wrapped: a terminal folds it, a pipe or a log gets it whole.
    Callers then exit with status 2 (bad input or usage) or 1 (problems found)."""
    from rich.markup import escape

    _stderr().print(f"[red]error:[/] {escape(message)}")


def print_warning(message: str) -> None:
    """Print ``warning: MESSAGE`` on stderr as one line, in :func:`print_error`'s style."""
    from rich.markup import escape

    _stderr().print(f"[yellow]warning:[/] {escape(message)}")
