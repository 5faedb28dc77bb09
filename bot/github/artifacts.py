"""Download and unpack a workflow run's artifact as untrusted data.

GitHub: "A ``workflow_run`` workflow should treat artifacts uploaded by other workflows as
untrusted data, since their contents can come from a fork" (GitHub Docs, "Security hardening
for GitHub Actions").  So:

- the compressed size is capped twice: GitHub's ``size_in_bytes`` before the download, and
  the bytes actually received while streaming;
- ``GET .../artifacts/{id}/zip`` answers 302 to a short-lived URL (it "expires after 1
  minute"); the redirect is followed by hand and the ``Authorization`` header is never sent
  to the redirect target (the blob URL is pre-signed);
- every zip entry is checked before anything is written: no absolute paths (``/x``, ``C:x``,
  ``\\x``), no ``..`` component, no symbolic links or other special files, no duplicates, no
  encrypted entries, at most ``max_files`` entries; no name component over 255 bytes and no
  path over 4096 bytes (Linux's ``NAME_MAX`` and ``PATH_MAX``), at most ``max_depth``
  components, and no entry that is a file and also the directory of another entry (a file
  ``data`` beside ``data/x``); the uncompressed size is capped per archive, counting the bytes
  really inflated (a zip bomb may lie in its headers).

Errors raise :class:`ArtifactError` with a one-line reason fit for the status comment; an
``OSError`` while writing (disk full, a limit of the file system) is one too.
"""

from __future__ import annotations

import io
import stat
import struct
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import httpx

MAX_COMPRESSED_BYTES = 512 * 1024 * 1024
"""Default cap on the artifact zip: 512 MiB.  A screen bundle holds receipts, logs and the
MP4 outputs of at most 24 sessions (~10 MB each at 1344x768, 15 s)."""
MAX_UNCOMPRESSED_BYTES = 2 * 1024 * 1024 * 1024
"""Default cap on the unpacked bundle: 2 GiB."""
MAX_FILES = 10_000
"""Default cap on the number of entries in the archive."""
MAX_DEPTH = 32
"""Default cap on the components of an entry's path (a screen bundle is 4 deep)."""
NAME_MAX = 255
"""Longest path component in bytes (UTF-8), Linux's ``NAME_MAX``."""
PATH_MAX = 4096
"""Longest entry path in bytes (UTF-8), Linux's ``PATH_MAX``."""
CHUNK = 1 << 16


class ArtifactError(Exception):
    """The artifact could not be fetched or is unsafe; ``str()`` is the one-line reason and
    ``status`` the HTTP status that refused the download (None otherwise)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ArtifactTooLarge(ArtifactError):
    """The zip is over the compressed-size cap (by GitHub's size, or while streaming)."""


@dataclass(frozen=True)
class Limits:
    """Caps in bytes and entries (defaults above)."""

    max_compressed: int = MAX_COMPRESSED_BYTES
    max_uncompressed: int = MAX_UNCOMPRESSED_BYTES
    max_files: int = MAX_FILES
    max_depth: int = MAX_DEPTH


def download_zip(
    url: str,
    token: str | None,
    size_in_bytes: int | None,
    limits: Limits = Limits(),
    timeout_s: float = 60.0,
    client: httpx.Client | None = None,
) -> bytes:
    """Fetch an artifact zip from ``archive_download_url``.

    Sends ``Authorization: Bearer TOKEN`` to the API URL only; follows at most 3 redirects
    without it.  Returns the zip bytes.  Raises :class:`ArtifactError` when GitHub's size or
    the received bytes exceed ``limits.max_compressed``, or on any HTTP failure.
    """
    import httpx  # here: the settings import this module's caps, and httpx is slow to import

    if size_in_bytes is not None and size_in_bytes > limits.max_compressed:
        raise ArtifactTooLarge(
            f"artifact is {size_in_bytes} bytes, over the {limits.max_compressed}-byte cap"
        )
    own = client is None
    c = client or httpx.Client(timeout=timeout_s, follow_redirects=False)
    try:
        headers = {"Accept": "application/vnd.github+json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        target = url
        for _hop in range(4):
            with c.stream("GET", target, headers=headers) as r:
                if r.status_code in (301, 302, 303, 307, 308):
                    loc = r.headers.get("location")
                    if not loc:
                        raise ArtifactError(f"HTTP {r.status_code} without Location")
                    target = str(r.url.join(loc))
                    headers = {}  # never forward the token to the blob host
                    continue
                if r.status_code != 200:
                    raise ArtifactError(f"artifact download answered HTTP {r.status_code}",
                                        r.status_code)
                buf = io.BytesIO()
                for chunk in r.iter_bytes(CHUNK):
                    buf.write(chunk)
                    if buf.tell() > limits.max_compressed:
                        raise ArtifactTooLarge(
                            f"artifact download exceeded the {limits.max_compressed}-byte cap"
                        )
                return buf.getvalue()
        raise ArtifactError("too many redirects")
    except httpx.HTTPError as exc:
        raise ArtifactError(f"artifact download failed: {type(exc).__name__}") from exc
    finally:
        if own:
            c.close()


def _check_name(name: str) -> PurePosixPath:
    if not name or "\x00" in name:
        raise ArtifactError(f"entry with an empty or NUL name: {name!r}")
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise ArtifactError(f"absolute path in archive: {name!r}")
    if "\\" in name:
        raise ArtifactError(f"backslash in archive path: {name!r}")
    p = PurePosixPath(name)
    if any(part == ".." for part in p.parts):
        raise ArtifactError(f"'..' in archive path: {name!r}")
    if len(name.encode("utf-8", "surrogateescape")) > PATH_MAX:
        raise ArtifactError(f"archive path over {PATH_MAX} bytes: {name[:60]!r}...")
    for part in p.parts:
        if len(part.encode("utf-8", "surrogateescape")) > NAME_MAX:
            raise ArtifactError(f"archive path component over {NAME_MAX} bytes: "
                                f"{part[:60]!r}... in {name[:120]!r}")
    return p


def safe_extract(data: bytes, dest: Path, limits: Limits = Limits()) -> list[str]:
    """Unpack zip ``data`` into the empty or new directory ``dest``, checking every entry
    first (module docstring).  Returns the extracted file paths (POSIX, relative).

    Raises :class:`ArtifactError` on the first unsafe entry or exceeded cap; on a cap hit
    while inflating, the partial output stays in ``dest`` for inspection, but the call fails.
    """
    if len(data) > limits.max_compressed:
        raise ArtifactError(f"archive is over the {limits.max_compressed}-byte cap")
    try:
        zf = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError, EOFError, OverflowError, NotImplementedError,
            struct.error) as exc:  # a broken or hostile central directory
        raise ArtifactError(f"not a zip archive: {exc}") from exc
    infos = zf.infolist()
    if len(infos) > limits.max_files:
        raise ArtifactError(f"archive has {len(infos)} entries, over the {limits.max_files} cap")
    seen: set[str] = set()
    files: dict[str, str] = {}
    parents: dict[str, str] = {}
    declared = 0
    for info in infos:
        p = _check_name(info.filename)
        if len(p.parts) > limits.max_depth:
            raise ArtifactError(f"archive path {info.filename[:120]!r} is {len(p.parts)} levels "
                                f"deep, over the {limits.max_depth} cap")
        ftype = stat.S_IFMT(info.external_attr >> 16)
        if info.create_system == 3 and ftype and ftype not in (stat.S_IFREG, stat.S_IFDIR):
            kind = "symbolic link" if ftype == stat.S_IFLNK else "special file"
            raise ArtifactError(f"{kind} in archive: {info.filename!r}")
        if info.flag_bits & 0x1:
            raise ArtifactError(f"encrypted entry in archive: {info.filename!r}")
        key = str(p).rstrip("/")
        if key in seen:
            raise ArtifactError(f"duplicate entry in archive: {info.filename!r}")
        seen.add(key)
        if not info.is_dir():
            files[key] = info.filename
        for i in range(1, len(p.parts)):
            parents.setdefault(PurePosixPath(*p.parts[:i]).as_posix(), info.filename)
        declared += info.file_size
    for key, name in files.items():
        if key in parents:
            raise ArtifactError(f"archive entry {name!r} is a file and also the directory of "
                                f"{parents[key]!r}")
    if declared > limits.max_uncompressed:
        raise ArtifactError(
            f"archive unpacks to {declared} bytes, over the {limits.max_uncompressed}-byte cap"
        )
    dest.mkdir(parents=True, exist_ok=True)
    root = dest.resolve()
    out: list[str] = []
    total = 0
    for info in infos:
        try:
            target = (root / info.filename).resolve()
            if root not in target.parents and target != root:
                raise ArtifactError(f"entry escapes the destination: {info.filename!r}")
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "wb") as dst:
                while chunk := src.read(CHUNK):
                    total += len(chunk)
                    if total > limits.max_uncompressed:
                        raise ArtifactError(
                            f"archive inflated past the {limits.max_uncompressed}-byte cap"
                        )
                    dst.write(chunk)
        except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError) as exc:
            # zipfile stops at the declared size and then fails the CRC: a lying header
            raise ArtifactError(f"corrupt archive entry {info.filename!r}: {exc}") from exc
        except OSError as exc:  # the checks above should leave none; a full disk still can
            raise ArtifactError(f"cannot unpack archive entry {info.filename[:120]!r}: "
                                f"{exc.strerror or exc}") from exc
        out.append(info.filename)
    return out
