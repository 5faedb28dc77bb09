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

This module imports only the standard library at module level.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evidence.hashing import HashPool

CHECK_VALUE_OPTIONS = frozenset({"--max-file-bytes", "--max-document-bytes", "--base",
                                 "--claims", "--trusted-keys"})
"""Options of ``check`` that take a value (the next argument unless written ``--opt=value``)."""

HASHING_SWITCH_INTERVAL_S = 0.0005
"""The interpreter's thread switch interval while ``check`` hashes and imports at once
(seconds; CPython's default is 0.005).  A hashing thread needs the GIL for a moment between
two chunks; while the main thread imports and parses, it would wait up to the whole interval
for it, its core idle meanwhile.  Measured on the 2 GiB bag of ``benchmarks/verify.py``
(2 cores): 0.005 s -> 0.91 s, 0.0005 s -> 0.89 s from the prefetch to the end."""

early_hashing: tuple[Path, HashPool, Any] | None = None
"""The pool started for ``check DIRECTORY`` (directory, pool, progress bar or None), until
``check`` takes it over."""


def command_of(args: list[str]) -> str | None:
    """The command word of a ``campaign-bot`` argument list (the root takes only flags)."""
    for a in args:
        if a == "--":
            return None
        if not a.startswith("-"):
            return a
    return None


def check_directory(args: list[str]) -> Path | None:
    """The DIRECTORY of a ``campaign-bot check`` argument list, or None when ``args`` is not
    a plain check (another command, ``--help``, ``--trusted-keys`` or a campaign folder with
    a ``trusted-keys.pem`` and no ``--no-signatures``: a signed bundle's files are read only
    after its signature verifies)."""
    if command_of(args) != "check":
        return None
    rest = args[args.index("check") + 1:]
    found: Path | None = None
    skip = False
    for a in rest:
        if skip:
            skip = False
            continue
        name = a.split("=", 1)[0]
        if a in ("--help", "-h") or name == "--trusted-keys" or a == "--":
            return None
        if name in CHECK_VALUE_OPTIONS:
            skip = "=" not in a
        elif not a.startswith("-") and found is None:
            found = Path(a)
    if found is not None and "--no-signatures" not in rest:
        from evidence.keyfile import campaign_keys_file

        if campaign_keys_file(found) is not None:  # the campaign's keys verify first
            return None
    return found


def start_check_hashing(directory: Path, progress: Any = None) -> None:
    """Queue the payload of a bag at ``directory`` on a new hashing pool, kept in
    :data:`early_hashing` until ``check`` takes it over (:func:`take_check_hashing`).
    ``progress(done, total)``: the pool's byte counter (a progress bar), or None."""
    global early_hashing
    from evidence.hashing import FileList, HashPool, prefetch_bag

    pool = HashPool(progress=progress, beneath=directory)
    early_hashing = (directory, pool, progress)
    files = FileList()
    prefetch_bag(directory, files)
    if not pool.hash_in_child(files.todo):  # a process of its own, else threads here
        for path, size, algorithms in files.todo:
            pool.submit(path, size, algorithms)


def take_check_hashing(directory: Path) -> tuple[HashPool, Any] | None:
    """The pool started for ``directory`` and its progress bar, handed over once (None when
    none was started for that directory)."""
    global early_hashing
    if early_hashing is None or early_hashing[0] != directory:
        return None
    _, pool, progress = early_hashing
    early_hashing = None
    return pool, progress


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
        start_check_hashing(directory, progress)
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
        if early_hashing is not None:  # check never took it (a usage error): stop its process
            early_hashing[1].close(cancel=True)
        os._exit(code)
