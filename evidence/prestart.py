"""What the ``campaign-bot`` console script decides before typer and the command modules are
imported, and hands to ``check``: the command word of an argument list, the DIRECTORY of a
plain ``check``, and the hashing pool started early for it (:data:`EARLY_HASHING`).  Read by
:mod:`evidence.launch` (the console script) and :mod:`evidence.cli` (``check`` takes the
pool over), so neither imports the other.

This module imports only the standard library at module level.
"""

from __future__ import annotations

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


class EarlyHashing:
    """The hashing pool started for ``check DIRECTORY`` before typer is imported, held until
    ``check`` takes it over.  One per process (:data:`EARLY_HASHING`): the console script
    runs one command."""

    def __init__(self) -> None:
        self._held: tuple[Path, HashPool, Any] | None = None

    def start(self, directory: Path, progress: Any = None) -> None:
        """Queue the payload of a bag at ``directory`` on a new hashing pool, held until
        :meth:`take`.  ``progress(done, total)``: the pool's byte counter (a progress bar),
        or None."""
        from evidence.hashing import FileList, HashPool, prefetch_bag

        pool = HashPool(progress=progress, beneath=directory)
        self._held = (directory, pool, progress)
        files = FileList()
        prefetch_bag(directory, files)
        if not pool.hash_in_child(files.todo):  # a process of its own, else threads here
            for path, size, algorithms in files.todo:
                pool.submit(path, size, algorithms)

    def take(self, directory: Path) -> tuple[HashPool, Any] | None:
        """The pool started for ``directory`` and its progress bar, handed over once (None
        when none was started for that directory)."""
        held, self._held = self._held, None
        if held is None or held[0] != directory:
            self._held = held
            return None
        return held[1], held[2]

    def abandon(self) -> None:
        """Stop a pool ``check`` never took (a usage error ended it first)."""
        held, self._held = self._held, None
        if held is not None:
            held[1].close(cancel=True)


EARLY_HASHING = EarlyHashing()
"""The process's early hashing pool (see :class:`EarlyHashing`)."""
