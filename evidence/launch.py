"""The ``campaign-bot`` console script: ``check DIRECTORY`` gets its hashing head start here,
before typer and the command modules are imported.

``check`` on a bag is bound by hashing (``benchmarks/verify.py``: two ``openssl dgst -sha256``
processes are the machine's floor).  Everything else it does (the interpreter, typer, the
document models, parsing every JSON document) runs on one thread; started first, it would
leave the other core idle for a fifth of a second.  So :func:`main` lists the payload files
of a bag at DIRECTORY (:func:`evidence.hashing.prefetch_bag`) before anything else is
imported and hands them to a hashing pool, which hashes them in a process of its own
(:meth:`evidence.hashing.HashPool.hash_in_child`: threads of this process would wait for the
interpreter lock while this one imports and parses; it reports progress for the terminal's
progress bar) or, where no process can be forked, in threads here; ``check``
(:func:`evidence.cli.check_cmd`) takes that pool over.  typer still
parses and validates the whole command line, and every digest is verified as if nothing had
been prefetched.

This module imports only the standard library and :mod:`evidence.prestart` at module level.
"""

from __future__ import annotations

import os
import sys

from evidence.prestart import (  # noqa: F401 - command_of, check_directory: the launch API
    EARLY_HASHING,
    HASHING_SWITCH_INTERVAL_S,
    check_directory,
    command_of,
)


def main() -> None:
    """Console-script entry point of ``campaign-bot`` (see the module docstring): start the
    hashing for ``check DIRECTORY``, then run :func:`evidence.cli.main`.

    After ``check`` the process ends with ``os._exit`` once stdout and stderr are flushed:
    ``check`` writes nothing else, and the interpreter's teardown (freeing every module and
    object, about 40 ms after a check of the 2 GiB benchmark bag) would only delay the exit
    status."""
    directory = check_directory(sys.argv[1:])
    is_check = directory is not None
    if directory is not None and directory.is_dir():
        progress = None
        if sys.stderr.isatty() or "FORCE_TERMINAL" in os.environ:
            from evidence.cli import _progress  # a terminal: the bar needs rich, at once

            progress = _progress()
        EARLY_HASHING.start(directory, progress)
        sys.setswitchinterval(HASHING_SWITCH_INTERVAL_S)
    from evidence.cli import main as cli_main

    try:
        cli_main()
    except SystemExit as e:
        if not is_check:
            raise
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if isinstance(e.code, str):
            sys.stderr.write(e.code + "\n")
        sys.stdout.flush()
        sys.stderr.flush()
        EARLY_HASHING.abandon()  # check never took it (a usage error): stop its process
        os._exit(code)
