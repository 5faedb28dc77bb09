"""What a git tree holds, as the bot reads it, and which of its names and blobs may be
written to disk or committed: entries of a recursive listing (:class:`TreeEntry`), Git LFS
pointer files (:func:`parse_lfs_pointer`, :class:`LfsPointer`), and the path rules
(:func:`unsafe_path`, :func:`twin_paths`), and the per-file hunks of a ``git diff``
(:func:`split_patches`).  Pure functions and values: no git runs here;
:mod:`bot.github.git` applies them to what it lists and writes, and the screen feature to the
bundles it commits.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

LFS_POINTER_MAX_BYTES = 1024
"""Git LFS pointer files are smaller than 1024 bytes (Git LFS specification, "The pointer")."""
LFS_VERSIONS = (b"https://git-lfs.github.com/spec/v1", b"https://hawser.github.com/spec/v1")


@dataclass(frozen=True)
class TreeEntry:
    """One entry of a recursive tree listing: ``path`` relative to the listed directory,
    git ``mode`` (``100644``, ``100755``, ``120000`` link, ``160000`` submodule), object
    ``sha`` and ``size`` in bytes (0 for a submodule)."""

    path: str
    mode: str
    sha: str
    size: int

    @property
    def is_file(self) -> bool:
        """A regular file (mode 100644 or 100755)."""
        return self.mode in ("100644", "100755")


@dataclass(frozen=True)
class LfsPointer:
    """A Git LFS pointer file: the content lives on the LFS server; ``sha256`` and ``size``
    (bytes) are what the pointer records."""

    path: str
    sha256: str
    size: int


def parse_lfs_pointer(data: bytes) -> tuple[str, int] | None:
    """``(sha256 hex, size)`` when ``data`` is a Git LFS pointer file, else None (Git LFS
    specification: a ``version`` line first, then sorted ``key value`` lines with ``oid
    sha256:HEX`` and ``size N``, each ending in LF, under 1024 bytes)."""
    if len(data) >= LFS_POINTER_MAX_BYTES or not data.startswith(b"version ") \
            or not data.endswith(b"\n"):
        return None
    lines = data[:-1].split(b"\n")
    if lines[0][len(b"version "):] not in LFS_VERSIONS:
        return None
    values: dict[bytes, bytes] = {}
    for line in lines[1:]:
        key, sep, value = line.partition(b" ")
        if not sep or not re.fullmatch(rb"[a-z0-9.-]+", key):
            return None
        values[key] = value
    oid = re.fullmatch(rb"sha256:([0-9a-f]{64})", values.get(b"oid", b""))
    size = re.fullmatch(rb"[0-9]+", values.get(b"size", b""))
    if oid is None or size is None:
        return None
    return oid.group(1).decode(), int(size.group(0))


BIDI_CONTROLS = frozenset("\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e"
                          "\u2066\u2067\u2068\u2069")
"""Unicode bidirectional formatting characters (UAX #9, and CVE-2021-42574 "Trojan Source"):
a name holding one can show other text than it is."""


def unsafe_path(path: str, *, max_path_bytes: int = 4096) -> str | None:
    """Why repository path ``path`` must not be written (absolute, ``..``, ``.``, an empty
    or ``.git`` component, a control character such as NUL, CR or LF, a bidirectional
    formatting character, a component over 255 bytes or a path over 4,096 bytes: Linux
    ``NAME_MAX``/``PATH_MAX``; ``max_path_bytes`` lower when the path is written under a
    folder, whose own name counts), or None."""
    whole = _unsafe_whole(path, max_path_bytes)
    if whole is not None:
        return whole
    return next((why for why in map(_unsafe_component, path.split("/")) if why), None)


def _unsafe_whole(path: str, max_path_bytes: int) -> str | None:
    """What :func:`unsafe_path` finds wrong with ``path`` as a whole, or None."""
    if not path or path.startswith("/") or "\0" in path:
        return "absolute or empty path"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "a control character (CR, LF, tab ...) in the name"
    if any(c in BIDI_CONTROLS for c in path):
        return "a bidirectional formatting character in the name"
    if len(os.fsencode(path)) > max_path_bytes:
        return f"path over {max_path_bytes:,} bytes"
    return None


def _unsafe_component(part: str) -> str | None:
    """What :func:`unsafe_path` finds wrong with one ``/``-separated component, or None."""
    if part in ("", ".", ".."):
        return f"path component {part!r}"
    if part.casefold() == ".git":
        return "path component .git"
    if len(os.fsencode(part)) > 255:
        return "path component over 255 bytes"
    return None


def twin_paths(paths: Iterable[str]) -> str | None:
    """Why ``paths`` (repository paths, ``/``-separated) must not be written together,
    naming two of them that are one file or folder on a case-insensitive or normalising
    file system, or None. Twins are paths equal once Unicode-normalised
    (NFC) and case-folded (``README.md`` and ``readme.md``; ``café`` written precomposed,
    NFC, and decomposed, NFD, as macOS HFS+ stores it).  Every folder prefix is compared
    too (``Data/a`` and ``data/b`` put two folders in one).  A checkout on macOS or Windows
    keeps one of the twins and drops or overwrites the other, so a reviewer and the signed
    manifest could read different bytes under one name (Unicode Standard Annex #15,
    "Unicode Normalization Forms"; Unicode case folding, ``str.casefold``).  The first twin
    pair in sorted order is named."""
    seen: dict[str, str] = {}
    for path in sorted(set(paths)):
        parts = path.split("/")
        for i in range(1, len(parts) + 1):
            prefix = "/".join(parts[:i])
            key = unicodedata.normalize("NFC", unicodedata.normalize("NFC", prefix).casefold())
            other = seen.setdefault(key, prefix)
            if other != prefix:
                return (f"{other!r} and {prefix!r}: one name once case-folded or "
                        "Unicode-normalised")
    return None


__all__ = ["BIDI_CONTROLS", "LfsPointer", "TreeEntry", "parse_lfs_pointer", "twin_paths",
           "unsafe_path"]


def split_patches(diff: str) -> dict[str, str]:
    """Per-file hunks (from the first ``@@``) of a ``git diff`` in unified format."""
    out: dict[str, str] = {}
    current: str | None = None
    lines: list[str] = []
    for line in diff.split("\n"):
        if line.startswith("diff --git "):
            if current is not None:
                out[current] = "\n".join(lines).rstrip("\n")
            current, lines = None, []
            continue
        if current is None and line.startswith("+++ "):
            target = line[4:]
            current = target[2:] if target.startswith("b/") else target
            continue
        if current is not None:
            lines.append(line)
    if current is not None:
        out[current] = "\n".join(lines).rstrip("\n")
    return out


def left_on_server(listing: bytes, what: str) -> None:
    """Raise :class:`~bot.github.gitcmd.GitError` when ``listing`` (``git ls-tree COMMIT --
    PATH`` of a file git could not read, ``what``) names a blob: the tree has the file but
    the mirror lacks its content, which a partial fetch (``--filter=blob:none``) left on the
    server; a later fetch of a commit reusing it does not bring it (the server counts it as
    the mirror's).  Such a file must never read as absent: a trusted keys file read as
    absent would mean "verify no signature"."""
    from bot.github.gitcmd import GitError

    if b" blob " in listing:
        raise GitError(f"{what} is not in the mirror (a partial fetch left its content on "
                       "the server)")


def human_size(n: float) -> str:
    """``n`` bytes for a message: ``512 bytes``, ``1.5 KiB``, ``3.0 MiB``, ``2.1 GiB``."""
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
