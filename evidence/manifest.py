"""Hash manifests: a one-pass verifier and a BagIt writer.

Three forms are read, anywhere in a tree:

* **BagIt** bags (RFC 8493, and the drafts 0.93-0.97 before it): a directory with
  ``bagit.txt`` (or with a ``manifest-ALG.txt`` beside a ``data/`` directory).  Every payload
  manifest (``manifest-md5/sha1/sha224/sha256/sha384/sha512.txt``) is verified and must cover
  every payload file under ``data/``; tag manifests cover tag files; tag files are decoded
  with the declared ``Tag-File-Character-Encoding`` and may end lines with LF, CR or CRLF;
  ``bag-info.txt`` may carry a ``Payload-Oxum`` (``octets.streamcount``), checked as a
  warning only; ``fetch.txt`` lists payload files that live elsewhere (reported as external;
  a target outside ``data/`` is an unsafe path).  A bag inside another bag's ``data/`` is
  payload, not a bag.  MD5 and SHA-1 manifests are verified with a P3 note (not
  collision-resistant).  The Library of Congress BagIt conformance suite runs as a test
  (tests/test_bagit_conformance.py).
* **SHA256SUMS-style** files (``SHA256SUMS``, ``sha256sums.txt``, ``*.sha256``,
  ``checksums.sha256``, and ``manifest-sha256.txt`` outside a bag): the GNU ``sha256sum``
  line format ``HEX  PATH`` / ``HEX *PATH`` (and the BSD ``SHA256 (PATH) = HEX`` form),
  paths relative to the file's own directory, exactly as ``sha256sum -c`` reads them.
* **JSON integrity maps**: a ``*.json`` object of ``path -> sha256`` (optionally under a
  ``files``/``sha256``/``digests``/``hashes``/``artifacts``/``integrity`` key, values may be
  ``{"sha256": ..., "external": true, "url": ...}``; an ``external`` key holds digests of
  artifacts kept outside the bundle), like campaign #320's ``plan/preflight-integrity.json``.
  Paths resolve against the map's directory first, then against the checked root.

:func:`verify_tree` reports everything in one pass, never only the first failure: entries
checked, mismatched, missing, extra (payload files not in every payload manifest, unknown files
at the root of a bag campaign-bot wrote), duplicate entries, malformed lines (with line number),
unsafe paths (absolute, ``..``, symlinks resolving outside the checked root, which are never
opened), CR/CRLF line ends, uppercase hex, unreadable and oversized files, and the
Payload-Oxum.  One rule in one file is reported at most :data:`MAX_FINDINGS_PER_RULE_AND_FILE`
times, then once more with the count of the rest.  Digests of artifacts not
in the bundle are reported as "external, digest recorded, not verifiable here", never as
verified.

Hashing is :mod:`evidence.hashing`'s (one thread per core, largest file first, one reused
buffer per thread, memory flat whatever the file sizes; a file listed by manifests of several
algorithms is read once and fed to every digest); with a :class:`HashPool`,
:func:`verify_tree` submits the files the BagIt and SHA256SUMS manifests list as soon as those
manifests are read, so the files hash while the JSON documents are parsed.
"""

from __future__ import annotations

import codecs
import os
import re
import stat
import time
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from evidence import safejson
from evidence.hashing import (  # noqa: F401 - public here too
    ALGORITHMS,
    CHUNK_BYTES,
    WEAK_ALGORITHMS,
    HashPool,
    ProgressFn,
    digest_file,
    digest_files,
    hash_files,
    inside,
    read_regular,
    sha256_file,
)
from evidence.lines import line_of
from evidence.models import Finding, Severity

DEFAULT_MAX_FILE_BYTES = 64 << 20
"""Default limit (64 MiB) for files read whole into memory: manifests and other line-oriented
text.  Payload files are streamed and have no size limit."""

DEFAULT_MAX_DOCUMENT_BYTES = 8 << 20
"""Default limit (8 MiB) for JSON and TOML files parsed whole (documents, integrity maps):
parsing builds Python objects several times the size of the text, so this bounds memory per
document.  A receipt of 10,000 measured requests is about 4.3 MiB (indented JSON)."""

MAX_FINDINGS_PER_RULE_AND_FILE = 20
"""Findings of one rule in one file listed one by one; the rest become one finding that
counts them (a 200,000-line broken manifest gives 21 findings, not 200,000)."""

BAGIT_VERSION = "1.0"
SKIP_DIRS = frozenset({".git", ".hg", ".svn", "__pycache__", ".venv", "node_modules"})
"""Directories not walked outside bags (version-control and tool state, not evidence).
Inside a bag or a signed bundle every directory is walked: a file hidden there is still a
file of the bag."""

# ALGORITHMS (BagIt manifest algorithms verified, with their hex digest lengths) and
# WEAK_ALGORITHMS (verified with a P3 note) come from evidence.hashing.

ALGORITHM_NAMES = {"md5": "MD5", "sha1": "SHA-1", "sha224": "SHA-224", "sha256": "SHA-256",
                   "sha384": "SHA-384", "sha512": "SHA-512"}

SYSTEM_FILES = re.compile(r"(^|/)(\.DS_Store|Thumbs\.db|desktop\.ini|\._[^/]+)$", re.I)
"""Operating-system metadata files (Finder, Windows Explorer) that copying tools drop: listed
but absent, they are a P3 note, not a missing file."""

HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")
_GNU_LINE = re.compile(r"^(\\?)([0-9a-fA-F]+) ([ *])(.*)$")
_BSD_LINE = re.compile(r"^(\\?)SHA256 ?\((.*)\) ?= ?([0-9a-fA-F]+)$")
_BAG_LINE = re.compile(r"^([0-9a-fA-F]+)[ \t]+(.*)$")
_BAG_MANIFEST = re.compile(r"^(tag)?manifest-([A-Za-z0-9]+)\.txt$")
_SUMS_NAMES = re.compile(
    r"^(sha256sums?(\.txt)?|checksums?\.sha256|.*\.sha256(sum)?|manifest-sha256\.txt)$", re.I
)
_MAP_KEYS = ("files", "sha256", "digests", "hashes", "artifacts", "integrity", "manifest")
_META_KEYS = frozenset(
    {"schema", "version", "algorithm", "generated_at", "created_at", "as_of", "note", "notes",
     "description", "base", "root", "campaign", "title"}
)
_BAG_TAG_NAMES = frozenset({"bagit.txt", "bag-info.txt", "package-info.txt", "fetch.txt"})
BAG_ROOT_SIGNATURES = re.compile(r"^.+\.(dsse\.json|intoto\.jsonl|sig|sigstore(\.json)?)$")
"""Signature envelopes allowed at a bag root without a tagmanifest entry (a signature over
the tag manifest cannot be listed in it): ``*.dsse.json``, ``*.intoto.jsonl``, ``*.sig``,
``*.sigstore[.json]``."""

Kind = Literal["bagit", "bagit-tags", "sha256sums", "json-map"]


# ------------------------------------------------------------------------------- writer


def _bag_encode(rel: str) -> str:
    """RFC 8493 2.1.3: percent-encode only %, CR and LF in manifest paths."""
    return rel.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _bag_decode(rel: str) -> str:
    return re.sub(r"%(25|0[aA]|0[dD])", lambda m: {"25": "%", "0a": "\n", "0d": "\r"}[
        m.group(1).lower()], rel)


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8", newline="\n")
    os.replace(tmp, path)


def _payload_files(data: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(data, followlinks=False):
        dirnames.sort()
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                raise ValueError(f"{os.path.join(dirpath, d)}: symlinked directory in payload; "
                                 "a bag must hold its files, not links")
        for name in sorted(filenames):
            p = Path(dirpath, name)
            if any(c in name for c in "%\r\n"):
                # RFC 8493 would percent-encode these; bagit-python does not decode %25 and
                # sha256sum reads neither, so such a bag would not interoperate.
                raise ValueError(f"{p}: file name contains '%', CR or LF; rename it")
            st = p.lstat()
            if not stat.S_ISREG(st.st_mode):
                raise ValueError(f"{p}: not a regular file (symlink, socket or device); "
                                 "a bag must hold regular files only")
            out.append(p)
    return out


def write_bag(root: Path, *, info: dict[str, str] | None = None) -> None:
    """Turn ``root`` (whose payload already lives under ``root/data/``) into a BagIt 1.0 bag.

    Writes ``bagit.txt``, ``bag-info.txt`` (``Bagging-Date``, ``Bag-Software-Agent``,
    ``Payload-Oxum`` = ``octets.count`` of the payload, then ``info`` in the given order),
    ``manifest-sha256.txt`` (every file under ``data/``, sorted, ``HEX  data/PATH``, which
    ``sha256sum -c`` also reads) and ``tagmanifest-sha256.txt`` (every other file outside
    ``data/``).  Existing ``manifest-*.txt``/``tagmanifest-*.txt`` are replaced, so calling it
    again after the payload changed re-seals the bag.  Files are written atomically.

    Raises ``FileNotFoundError`` when ``root/data`` is missing, ``ValueError`` for a symlink or
    special file in the payload or a bad ``info`` label (empty, containing ``:`` or a line
    break, or ``Payload-Oxum``, which is always computed), and for payload names containing
    ``%``, CR or LF: RFC 8493 2.1.3 percent-encodes them, but bagit-python does not decode
    ``%25`` and ``sha256sum -c`` decodes neither, so such names are refused, not written.
    """
    root = Path(root)
    data = root / "data"
    if not data.is_dir() or data.is_symlink():
        raise FileNotFoundError(f"{data}: no payload directory; put the payload under data/")
    user = dict(info or {})
    for k, v in user.items():
        if not k or ":" in k or "\n" in k or "\r" in k or k != k.strip():
            raise ValueError(f"bag-info label {k!r}: must be non-empty, without ':' or breaks")
        if k.lower() == "payload-oxum":
            raise ValueError("bag-info 'Payload-Oxum' is computed by write_bag, do not pass it")
        if "\r" in str(v):
            raise ValueError(f"bag-info {k!r}: value contains a carriage return")
    for p in root.iterdir():
        if re.match(r"^(tag)?manifest-\w+\.txt$", p.name) and p.is_file():
            p.unlink()
    files = _payload_files(data)
    digests = hash_files(files)
    octets = 0
    lines = []
    for p in files:
        r = digests[p]
        if isinstance(r, OSError):
            raise r
        hexd, size = r
        octets += size
        lines.append(f"{hexd}  {_bag_encode(p.relative_to(root).as_posix())}\n")
    _atomic_write(root / "bagit.txt",
                  f"BagIt-Version: {BAGIT_VERSION}\nTag-File-Character-Encoding: UTF-8\n")
    from evidence import __version__

    base = {
        "Bagging-Date": datetime.now(UTC).date().isoformat(),
        "Bag-Software-Agent": f"campaign-bot {__version__}",
    }
    for k in user:
        base.pop(k, None)
    info_lines = [f"{k}: {v}" for k, v in base.items()]
    info_lines.append(f"Payload-Oxum: {octets}.{len(files)}")
    for k, v in user.items():
        # Multi-line values continue on lines indented by whitespace (RFC 8493 2.2.2).
        info_lines.append(f"{k}: " + "\n    ".join(str(v).split("\n")))
    _atomic_write(root / "bag-info.txt", "\n".join(info_lines) + "\n")
    _atomic_write(root / "manifest-sha256.txt", "".join(lines))
    tags: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        rel_dir = Path(dirpath).relative_to(root)
        if rel_dir == Path("."):
            dirnames[:] = [d for d in dirnames if d != "data"]
        dirnames.sort()
        for name in sorted(filenames):
            p = Path(dirpath, name)
            if rel_dir == Path(".") and name.startswith("tagmanifest-"):
                continue
            if name.startswith(".") and name.endswith(".tmp"):
                continue
            if not stat.S_ISREG(p.lstat().st_mode):
                raise ValueError(f"{p}: not a regular file; a bag must hold regular files only")
            tags.append(p)
    tag_digests = hash_files(tags)
    tag_lines = []
    for p in tags:
        r = tag_digests[p]
        if isinstance(r, OSError):
            raise r
        tag_lines.append(f"{r[0]}  {_bag_encode(p.relative_to(root).as_posix())}\n")
    _atomic_write(root / "tagmanifest-sha256.txt", "".join(tag_lines))


# ------------------------------------------------------------------------------ results


EXTERNAL_ARTIFACTS_FILE = "external-artifacts.json"
"""A bundle's external-artifacts map, at its root beside ``bagit.txt``: payload files kept
outside the repository (campaign-bot commits a verified screen bundle without its files over
the size threshold, the output MP4s).  A JSON integrity map (``schema``
``campaign-bot/integrity@1``) whose ``external`` object maps each bag-relative payload path to
``{"sha256": HEX, "size": BYTES, "external": true, "url": ..., "run_id": ..., "artifact": ...}``.
A payload file it lists that is absent is reported as external (digest recorded, not
verifiable here) instead of missing, provided the map's SHA-256 equals the one the payload
manifest lists; a JSON document is never external (receipts and reports must be present)."""


@dataclass(frozen=True)
class ExternalFile:
    """A file kept outside the checked tree: its ``sha256`` (hex) and ``size`` (bytes, None
    when unknown), where that was recorded (``source``, e.g. ``external-artifacts.json line 4``
    or ``Git LFS pointer``) and a ``url`` or provenance text ("" when none)."""

    sha256: str
    size: int | None = None
    source: str = ""
    url: str = ""


def read_external_map(path: Path, *, limit: int = 16 << 20) -> tuple[dict[str, ExternalFile],
                                                                      list[str]]:
    """The entries of the external-artifacts map at ``path`` (see
    :data:`EXTERNAL_ARTIFACTS_FILE`): ``(bag-relative path -> ExternalFile, problems)``.
    A problem (unreadable, not JSON, not a map, a malformed entry) is one message naming the
    file and, where known, the line; the entries that are well-formed are still returned."""
    name = path.name
    try:
        if path.is_symlink() or not path.is_file():
            return {}, [f"{name}: not a regular file"]
        raw = read_regular(path, limit=limit + 1)  # a FIFO swapped in is refused, not waited on
        if len(raw) > limit:
            return {}, [f"{name}: larger than {limit} bytes; not read"]
        text = raw.decode("utf-8")
        obj = safejson.loads(text)
    except (OSError, ValueError) as exc:
        return {}, [f"{name}: cannot read: {getattr(exc, 'strerror', None) or exc}"]
    ext = obj.get("external") if isinstance(obj, dict) else None
    if not isinstance(ext, dict):
        return {}, [f"{name}: not an external-artifacts map (an object with an 'external' "
                    "object of path -> {sha256, size})"]
    out: dict[str, ExternalFile] = {}
    problems = []
    for listed, v in ext.items():
        line = line_of(text, ("external", listed))
        where = f"{name} line {line}" if line else name
        digest = v.get("sha256") if isinstance(v, dict) else v
        if isinstance(digest, str) and digest.startswith("sha256:"):
            digest = digest[7:]
        if not isinstance(digest, str) or not HEX64.match(digest):
            problems.append(f"{where}: {listed}: sha256 is not 64 hex digits")
            continue
        size = v.get("size") if isinstance(v, dict) else None
        url = v.get("url") if isinstance(v, dict) else None
        rel = listed[2:] if listed.startswith("./") else listed
        if rel.startswith("/") or ".." in PurePosixPath(rel).parts:
            problems.append(f"{where}: {listed}: unsafe path")
            continue
        out[rel] = ExternalFile(digest.lower(), size if isinstance(size, int) else None, where,
                                url if isinstance(url, str) else "")
    return out, problems


class ManifestSummary(BaseModel):
    """Counts for one manifest file (``path`` relative to the checked root)."""

    model_config = ConfigDict(defer_build=True)

    path: str
    kind: Kind
    entries: int = Field(description="Entries read (lines or map items), malformed excluded.")
    verified: int = Field(description="Entries whose file hashed to the listed digest.")
    mismatched: int = 0
    missing: int = 0
    external: int = 0
    unsafe: int = 0
    malformed: int = 0
    duplicates: int = 0
    extra: int = Field(default=0, description="Bags only: files present but not listed.")


class ExternalDigest(BaseModel):
    """A digest recorded for an artifact that is not in the bundle: not verifiable here."""

    model_config = ConfigDict(defer_build=True)

    path: str = Field(description="Path or URL as listed.")
    sha256: str
    listed_in: str
    line: int | None = None
    status: str = "external, digest recorded, not verifiable here"


class VerifyResult(BaseModel):
    """Everything :func:`verify_tree` found, in one pass.

    ``hashes_checked`` counts manifest entries compared against a computed digest (a file
    listed by two manifests counts twice, as campaigns report "checked 471 hashes");
    ``files_hashed``/``bytes_hashed`` count distinct files actually read.
    """

    model_config = ConfigDict(defer_build=True)

    hashes_checked: int = 0
    hashes_ok: int = 0
    mismatched: int = 0
    missing: int = 0
    extra: int = 0
    duplicates: int = 0
    malformed: int = 0
    unsafe: int = 0
    files_hashed: int = 0
    bytes_hashed: int = 0
    hash_seconds: float = 0.0
    manifests: list[ManifestSummary] = Field(default_factory=list)
    external: list[ExternalDigest] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)

    @property
    def errors(self) -> int:
        """Integrity errors: mismatched + missing + unsafe + malformed entries, plus extra
        files (present but not listed where they must be)."""
        return self.mismatched + self.missing + self.unsafe + self.malformed + self.extra


# ------------------------------------------------------------------------------- walking


@dataclass
class TreeIndex:
    """One walk of the checked root (symlinks are recorded, never followed).

    ``files``: root-relative POSIX path -> size of every regular file; ``links``: path ->
    whether its target resolves inside the root; ``special``: FIFOs, sockets, devices;
    ``unlistable``: directories that could not be read.
    """

    root: Path
    real_root: str
    files: dict[str, int] = field(default_factory=dict)
    links: dict[str, bool] = field(default_factory=dict)
    special: list[str] = field(default_factory=list)
    unlistable: list[str] = field(default_factory=list)
    dirs: set[str] = field(default_factory=set)

    def inside(self, real: str) -> bool:
        """True when the resolved path ``real`` lies within the root."""
        return inside(real, self.real_root)


def index_tree(root: Path) -> TreeIndex:
    """Walk ``root`` once without following symlinks; skips :data:`SKIP_DIRS` except inside
    a bag or a signed bundle (a directory holding ``bagit.txt`` or ``attestation.dsse.json``,
    and everything below it).

    Raises ``NotADirectoryError``/``FileNotFoundError``/``PermissionError`` when ``root``
    itself cannot be listed (the caller turns that into exit 2).
    """
    root = Path(root)
    os.listdir(root)  # raise early for a missing or unreadable root
    idx = TreeIndex(root=root, real_root=os.path.realpath(root))

    def onerror(e: OSError) -> None:
        rel = os.path.relpath(e.filename or str(root), root)
        idx.unlistable.append(Path(rel).as_posix())

    in_bag: set[str] = set()  # directories inside a bag or signed bundle: nothing skipped
    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        bagged = rel_dir in in_bag or "bagit.txt" in filenames or \
            "attestation.dsse.json" in filenames
        keep = []
        for d in sorted(dirnames):
            full = os.path.join(dirpath, d)
            rel = Path(rel_dir, d).as_posix() if rel_dir != "." else d
            if os.path.islink(full):
                idx.links[rel] = idx.inside(os.path.realpath(full))
            elif bagged or d not in SKIP_DIRS:
                keep.append(d)
                idx.dirs.add(rel)
                if bagged:
                    in_bag.add(os.path.join(rel_dir, d) if rel_dir != "." else d)
        dirnames[:] = keep
        for name in filenames:
            full = os.path.join(dirpath, name)
            rel = Path(rel_dir, name).as_posix() if rel_dir != "." else name
            try:
                st = os.lstat(full)
            except OSError:
                idx.unlistable.append(rel)
                continue
            if stat.S_ISLNK(st.st_mode):
                idx.links[rel] = idx.inside(os.path.realpath(full))
            elif stat.S_ISREG(st.st_mode):
                idx.files[rel] = st.st_size
            else:
                idx.special.append(rel)
    return idx


# ------------------------------------------------------------------------------ parsing


@dataclass
class Entry:
    """One manifest entry: ``listed`` as written, ``rel`` the root-relative target (None when
    unsafe or external), the lowercase ``digest`` of algorithm ``alg``, and where it was
    read.  ``variant`` is the name as listed when it matched a file only after case or
    Unicode normalization."""

    manifest: str
    line: int | None
    listed: str
    digest: str
    rel: str | None
    external: bool = False
    alg: str = "sha256"
    variant: str | None = None


def _finding(rule: str, sev: Severity, path: str, msg: str, *, line: int | None = None,
             fieldp: str | None = None, fix: str | None = None) -> Finding:
    return Finding(rule=rule, severity=sev, path=path, line=line, field=fieldp, message=msg,
                   resolution=fix)


_SEV_ORDER = {"P0": 0, "P1": 1, "P2": 2, "P3": 3}


class FindingCap:
    """Keeps at most ``limit`` findings per (rule, path); counts the rest.

    :meth:`add` returns False for a finding past the limit (it is dropped and counted, its
    severity kept if more severe, its line if later); :meth:`summaries` gives one finding per
    capped (rule, path): ``and N more RULE findings in PATH``, with the most severe dropped
    severity (so the exit code is what the full list would give) and the last dropped line
    (so it sorts after the listed ones)."""

    def __init__(self, limit: int = MAX_FINDINGS_PER_RULE_AND_FILE) -> None:
        self.limit = limit
        self.count: dict[tuple[str, str], int] = {}
        self.dropped: dict[tuple[str, str], tuple[int, Severity, int | None]] = {}

    def add(self, f: Finding) -> bool:
        key = (f.rule, f.path)
        n = self.count.get(key, 0) + 1
        self.count[key] = n
        if n <= self.limit:
            return True
        k, sev, line = self.dropped.get(key, (0, f.severity, None))
        if _SEV_ORDER[f.severity] < _SEV_ORDER[sev]:
            sev = f.severity
        if f.line is not None and (line is None or f.line > line):
            line = f.line
        self.dropped[key] = (k + 1, sev, line)
        return False

    def summaries(self) -> list[Finding]:
        out = []
        for (rule, path), (n, sev, line) in self.dropped.items():
            upto = f", up to line {line}" if line is not None else ""
            out.append(_finding(rule, sev, path, f"and {n} more {rule} findings in {path}"
                                f"{upto} (the first {self.limit} are listed)", line=line))
        return out


def cap_findings(findings: list[Finding],
                 limit: int = MAX_FINDINGS_PER_RULE_AND_FILE) -> list[Finding]:
    """``findings`` with at most ``limit`` per (rule, path), in order, then one summary
    finding per capped (rule, path) (see :class:`FindingCap`)."""
    cap = FindingCap(limit)
    out = [f for f in findings if cap.add(f)]
    return out + cap.summaries()


def _split_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", text)


class _Verifier:
    def __init__(self, root: Path, idx: TreeIndex, max_file_bytes: int,
                 hasher: HashPool | None = None,
                 external_files: dict[str, ExternalFile] | None = None) -> None:
        self.root = root
        self.idx = idx
        self.max = max_file_bytes
        self.external_files: dict[str, ExternalFile] = dict(external_files or {})
        self.res = VerifyResult()
        self.entries: list[tuple[ManifestSummary, Entry]] = []
        self.hasher = hasher
        self.to_hash: dict[str, set[str]] = {}  # listed files not yet queued on the hasher
        self.cap = FindingCap()
        self.dup_severity: dict[str, Severity] = {}  # manifest -> severity of same-digest dups
        self._variants: dict[str, list[str]] | None = None

    # -- helpers
    def add(self, f: Finding) -> None:
        if self.cap.add(f):
            self.res.findings.append(f)

    def read_bytes(self, rel: str) -> bytes | None:
        """A tag file or manifest, read whole (size-limited); a finding for every failure."""
        size = self.idx.files.get(rel, 0)
        if size > self.max:
            self.add(_finding("FILE_TOO_LARGE", "P1", rel,
                              f"{size} bytes exceeds the {self.max}-byte limit for files read "
                              "whole; not read", fix="raise --max-file-bytes if this is right"))
            return None
        try:
            return read_regular(self.root / rel, beneath=self.idx.real_root)
        except OSError as e:
            self.add(_finding("UNREADABLE", "P1", rel, f"cannot read: {e.strerror or e}",
                              fix="fix the file's permissions"))
            return None

    def read_text(self, rel: str, *, encoding: str = "utf-8", bag: bool = False) -> str | None:
        """Read a manifest whole (size-limited) with LF line ends; findings for every failure.

        ``bag``: a BagIt tag file, decoded with the bag's ``encoding``; CR and CRLF line ends
        are RFC 8493's own (a P3 note: ``sha256sum -c`` would not read the file).  Otherwise
        a SHA256SUMS-style file, where they are a P2 finding."""
        raw = self.read_bytes(rel)
        if raw is None:
            return None
        try:
            text = raw.decode(encoding)
        except UnicodeDecodeError as e:
            line = raw[: e.start].count(b"\n") + 1
            self.add(_finding("MANIFEST_MALFORMED", "P1", rel,
                              f"not {encoding} text (byte {e.start}); not read", line=line))
            return None
        except (LookupError, TypeError, ValueError) as e:  # a codec that is not text
            self.add(_finding("MANIFEST_MALFORMED", "P1", rel,
                              f"cannot decode as {encoding}: {str(e)[:100]}; not read"))
            return None
        if "\r" in text:
            line = text[: text.index("\r")].count("\n") + 1
            if bag:
                self.add(_finding("MANIFEST_CRLF", "P3", rel,
                                  "CR/CRLF line ends: read as RFC 8493 allows; `sha256sum -c` "
                                  "would not read this file", line=line))
            else:
                self.add(_finding("MANIFEST_CRLF", "P2", rel,
                                  "CR/CRLF line ends; sha256sum manifests use LF only",
                                  line=line, fix="rewrite the manifest with LF line ends"))
            text = text.replace("\r\n", "\n").replace("\r", "\n")
        return text

    def resolve(self, summ: ManifestSummary, listed: str, line: int | None,
                base_dir: str, *, fallback_root: bool = False) -> str | None:
        """Root-relative POSIX target of ``listed`` or None (finding added) when unsafe."""
        mpath = summ.path
        if not listed:
            self.malformed(summ, line, "empty path")
            return None
        if "\0" in listed:
            self.malformed(summ, line, "path contains a NUL byte")
            return None
        if listed.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:[\\/]", listed):
            self.unsafe(summ, line, f"absolute path {listed!r}")
            return None
        parts = PurePosixPath(listed).parts
        if ".." in parts:
            self.unsafe(summ, line, f"path {listed!r} contains '..'")
            return None
        rel = PurePosixPath(base_dir, *parts).as_posix() if base_dir else PurePosixPath(
            *parts).as_posix()
        if fallback_root and base_dir and not self._exists(rel) and self._exists(
                PurePosixPath(*parts).as_posix()):
            rel = PurePosixPath(*parts).as_posix()
        # Any symlink on the way (file or directory) must resolve inside the root.  A regular
        # file the walk reached has none: the walk never follows a link, so every directory
        # above it is a real one inside the root (one realpath per entry would cost an
        # lstat per path component).
        if rel in self.idx.files:
            return rel
        real = os.path.realpath(self.root / rel)
        if not self.idx.inside(real):
            summ.unsafe += 1  # the walk counts the link itself once in res.unsafe
            self.add(_finding("SYMLINK_ESCAPES", "P0", mpath,
                              f"{rel} resolves outside the checked directory; not followed",
                              line=line, fix="replace the link with the file itself"))
            return None
        del mpath
        return rel

    def _exists(self, rel: str) -> bool:
        return rel in self.idx.files or rel in self.idx.links

    def variant_of(self, rel: str, bag_dir: str) -> str | None:
        """The one file of the bag whose name equals ``rel`` after Unicode NFC normalization
        and case folding (a manifest written on macOS or Windows), or None."""
        if self._variants is None:
            self._variants = {}
            for f in self.idx.files:
                self._variants.setdefault(unicodedata.normalize("NFC", f).casefold(),
                                          []).append(f)
        hits = [f for f in self._variants.get(unicodedata.normalize("NFC", rel).casefold(), [])
                if not bag_dir or f.startswith(f"{bag_dir}/")]
        return hits[0] if len(hits) == 1 else None

    def malformed(self, summ: ManifestSummary, line: int | None, why: str) -> None:
        self.res.malformed += 1
        summ.malformed += 1
        self.add(_finding("MANIFEST_MALFORMED", "P1", summ.path, f"malformed entry: {why}",
                          line=line, fix="write 'HEX  PATH' lines (sha256sum format)"))

    def unsafe(self, summ: ManifestSummary, line: int | None, why: str) -> None:
        self.res.unsafe += 1
        summ.unsafe += 1
        self.add(_finding("UNSAFE_PATH", "P0", summ.path, f"unsafe path: {why}; not opened",
                          line=line, fix="list paths relative to the manifest, without '..'"))

    def digest(self, summ: ManifestSummary, line: int | None, hexd: str,
               alg: str = "sha256", *, bag: bool = False) -> str | None:
        want = ALGORITHMS[alg]
        if len(hexd) != want or not re.fullmatch(r"[0-9a-fA-F]+", hexd):
            self.malformed(summ, line, f"digest {hexd[:80]!r} is not {want} hex digits "
                                       f"({ALGORITHM_NAMES[alg]})")
            return None
        if hexd != hexd.lower():
            self.add(_finding("MANIFEST_UPPERCASE_HEX", "P3" if bag else "P2", summ.path,
                              "uppercase hex digest; write lowercase (compared case-"
                              "insensitively)", line=line))
        return hexd.lower()

    # -- manifest forms
    def sums_file(self, rel: str) -> None:
        summ = ManifestSummary(path=rel, kind="sha256sums", entries=0, verified=0)
        self.res.manifests.append(summ)
        text = self.read_text(rel)
        if text is None:
            return
        base = PurePosixPath(rel).parent.as_posix()
        base = "" if base == "." else base
        name = PurePosixPath(rel).name
        for no, line in enumerate(text.split("\n"), 1):
            if not line.strip() or line.startswith("#"):
                continue
            m = _GNU_LINE.match(line)
            b = _BSD_LINE.match(line) if not m else None
            if m:
                esc, hexd, _mode, listed = m.groups()
            elif b:
                esc, listed, hexd = b.groups()
            elif HEX64.match(line.strip()) and re.search(r"\.sha256(sum)?$", name, re.I):
                esc, hexd, listed = "", line.strip(), re.sub(r"\.sha256(sum)?$", "", name,
                                                             flags=re.I)
            else:
                self.malformed(summ, no, "expected 'HEX64  PATH' or 'SHA256 (PATH) = HEX64'")
                continue
            if esc:
                listed = listed.replace("\\\\", "\0").replace("\\n", "\n").replace("\0", "\\")
            d = self.digest(summ, no, hexd)
            if d is None:
                continue
            self.add_entry(summ, Entry(rel, no, listed, d, None), base)

    def json_map(self, rel: str, obj: object, text: str) -> bool:
        """Read ``obj`` as an integrity map if it is one; return False when it is not."""
        found = _map_items(obj)
        if found is None:
            return False
        summ = ManifestSummary(path=rel, kind="json-map", entries=0, verified=0)
        self.res.manifests.append(summ)
        base = PurePosixPath(rel).parent.as_posix()
        base = "" if base == "." else base
        for loc, listed, value, external in found:
            line = line_of(text, loc)
            url = None
            if isinstance(value, dict):
                url = value.get("url") or value.get("uri")
                external = external or bool(value.get("external"))
                value = value.get("sha256")
            if not isinstance(value, str):
                self.malformed(summ, line, f"{listed!r}: digest is not a string")
                continue
            hexd = value[7:] if value.startswith("sha256:") else value
            d = self.digest(summ, line, hexd)
            if d is None:
                continue
            if "://" in listed or (url and not external):
                external = True
            self.add_entry(summ, Entry(rel, line, listed, d, None, external), base,
                           fallback_root=True)
        return True

    # -- BagIt
    def bag_declaration(self, pre: str) -> tuple[tuple[int, int] | None, str]:
        """Check ``bagit.txt`` (RFC 8493 2.1.1); returns ``(version, tag file encoding)``,
        ``(None, "utf-8")`` when it cannot be read."""
        rel = f"{pre}bagit.txt"
        if rel not in self.idx.files:
            self.add(_finding("BAG_DECLARATION", "P1", rel,
                              "bag has data/ and a manifest but no bagit.txt",
                              fix="write 'BagIt-Version: 1.0' and "
                                  "'Tag-File-Character-Encoding: UTF-8'"))
            return None, "utf-8"
        raw = self.read_bytes(rel)
        if raw is None:
            return None, "utf-8"
        if raw.startswith(codecs.BOM_UTF8):
            self.add(_finding("BAG_DECLARATION", "P1", rel, "bagit.txt starts with a byte-order "
                              "mark; RFC 8493 2.1.1 forbids one", line=1,
                              fix="write the file as UTF-8 without a BOM"))
            raw = raw[len(codecs.BOM_UTF8):]
        try:
            lines = [x for x in _split_lines(raw.decode("utf-8")) if x]
        except UnicodeDecodeError as e:
            self.add(_finding("BAG_DECLARATION", "P1", rel, f"not UTF-8 (byte {e.start}); "
                              "RFC 8493 2.1.1 requires UTF-8"))
            return None, "utf-8"
        m1 = re.fullmatch(r"BagIt-Version: (\d{1,9})\.(\d{1,9})", lines[0]) if lines else None
        m2 = re.fullmatch(r"Tag-File-Character-Encoding: (\S+)", lines[1]) \
            if len(lines) > 1 else None
        if len(lines) != 2 or m1 is None or m2 is None:
            self.add(_finding("BAG_DECLARATION", "P1", rel,
                              "bagit.txt must be exactly 'BagIt-Version: M.N' then "
                              "'Tag-File-Character-Encoding: ENC' (RFC 8493 2.1.1)",
                              line=1 if m1 is None else 2))
        version = (int(m1.group(1)), int(m1.group(2))) if m1 else None
        encoding = "utf-8"
        if m2 is not None:
            try:
                info = codecs.lookup(m2.group(1))
                if not getattr(info, "_is_text_encoding", True):  # rot13, base64, zlib...
                    raise LookupError(m2.group(1))
                encoding = info.name
            except LookupError:
                self.add(_finding("BAG_DECLARATION", "P1", rel, f"unknown tag file encoding "
                                  f"{m2.group(1)[:80]!r} (not a text encoding); tag files read "
                                  "as UTF-8", line=2))
        return version, encoding

    def bag_fetch(self, pre: str, encoding: str) -> dict[str, int]:
        """``fetch.txt`` (RFC 8493 2.2.3): bag-relative payload path -> line.  Targets
        outside ``data/`` are P0 unsafe paths (never fetched, never opened)."""
        rel = f"{pre}fetch.txt"
        out: dict[str, int] = {}
        if rel not in self.idx.files:
            return out
        text = self.read_text(rel, encoding=encoding, bag=True)
        for no, line in enumerate((text or "").split("\n"), 1):
            if not line.strip():
                continue
            parts = line.split(None, 2)
            if len(parts) != 3 or not re.fullmatch(r"\d+|-", parts[1]):
                self.add(_finding("MANIFEST_MALFORMED", "P1", rel,
                                  "expected 'URL LENGTH FILEPATH', LENGTH a number of octets "
                                  "or '-' (RFC 8493 2.2.3)", line=no))
                continue
            path = _bag_decode(parts[2])
            while path.startswith("./"):
                path = path[2:]
            if (path.startswith(("/", "\\", "~")) or re.match(r"^[A-Za-z]:[\\/]", path)
                    or ".." in PurePosixPath(path).parts or not path.startswith("data/")):
                self.res.unsafe += 1
                self.add(_finding("UNSAFE_PATH", "P0", rel,
                                  f"unsafe path: fetch target {path!r} is outside the payload "
                                  "directory data/ (RFC 8493 2.2.3); never fetched or opened",
                                  line=no, fix="list payload paths under data/ only"))
                continue
            out[path] = no
        return out

    def bag_external(self, pre: str) -> None:
        """The bag's external-artifacts map (:data:`EXTERNAL_ARTIFACTS_FILE`), if any: its
        payload entries join :attr:`external_files`; problems are P1 findings."""
        rel = f"{pre}{EXTERNAL_ARTIFACTS_FILE}"
        if rel not in self.idx.files and rel not in self.idx.links:
            return
        found, problems = read_external_map(self.root / rel)
        for msg in problems:
            self.add(_finding("EXTERNAL_MAP_INVALID", "P1", rel, msg.split(": ", 1)[-1],
                              fix="write the map as campaign-bot writes it: 'external' maps "
                                  "each payload path to its sha256 and size"))
        for path, ef in found.items():
            if not path.startswith("data/") or path.endswith(".json"):
                self.add(_finding("EXTERNAL_MAP_INVALID", "P1", rel,
                                  f"{path}: only payload files under data/ other than JSON "
                                  "documents may be kept outside the bundle", fix="commit it"))
                continue
            self.external_files[f"{pre}{path}"] = ef

    def _bag_agent_is_ours(self, pre: str, encoding: str) -> bool:
        """True when bag-info.txt names campaign-bot as Bag-Software-Agent: our writer lists
        every tag file in the tag manifest, so an unlisted one was added later."""
        rel = f"{pre}bag-info.txt"
        if self.idx.files.get(rel, self.max + 1) > self.max:
            return False
        try:
            text = read_regular(self.root / rel, beneath=self.idx.real_root).decode(
                encoding, errors="replace")
        except (OSError, LookupError):
            return False
        return bool(re.search(r"^Bag-Software-Agent:\s*campaign-bot\b", text, re.M))

    def bag(self, bag_dir: str) -> None:
        pre = f"{bag_dir}/" if bag_dir else ""
        files = self.idx.files
        version, encoding = self.bag_declaration(pre)
        fetched = self.bag_fetch(pre, encoding)
        self.bag_external(pre)
        dup_sev: Severity = "P3" if version is not None and version < (1, 0) else "P2"
        names = sorted(f[len(pre):] for f in files
                       if f.startswith(pre) and "/" not in f[len(pre):])
        payload_lists: dict[str, set[str]] = {}
        tag_listed: set[str] = set()
        tag_summ: ManifestSummary | None = None
        for name in names:
            m = _BAG_MANIFEST.match(name)
            if not m:
                continue
            tag, alg, path = bool(m.group(1)), m.group(2).lower(), f"{pre}{name}"
            if alg not in ALGORITHMS:
                self.add(_finding("MANIFEST_ALGORITHM", "P3", path,
                                  f"algorithm {alg!r} is not one campaign-bot computes "
                                  f"({', '.join(ALGORITHMS)}); this manifest is not verified"))
                continue
            if alg in WEAK_ALGORITHMS:
                self.add(_finding("MANIFEST_WEAK_ALGORITHM", "P3", path,
                                  f"verified, but {ALGORITHM_NAMES[alg]} is not "
                                  "collision-resistant: it detects damage, not forgery "
                                  "(RFC 8493 2.4 asks for SHA-512 or SHA-256)"))
            summ = ManifestSummary(path=path, kind="bagit-tags" if tag else "bagit",
                                   entries=0, verified=0)
            self.res.manifests.append(summ)
            self.dup_severity[path] = dup_sev
            listed = self._bag_manifest(summ, bag_dir, alg, encoding, fetched, payload=not tag)
            if tag:
                tag_listed |= listed
                tag_summ = tag_summ or summ
            else:
                payload_lists[path] = listed
        if not payload_lists:
            self.add(_finding("BAG_MANIFEST_MISSING", "P1", f"{pre}manifest-sha256.txt",
                              "bag has no payload manifest of an algorithm campaign-bot "
                              "computes; its payload is unverified"))
        for path, no in fetched.items():
            for mpath, listed in payload_lists.items():
                if f"{pre}{path}" not in listed:
                    self.add(_finding("FETCH_UNLISTED", "P1", f"{pre}fetch.txt",
                                      f"{path} is fetched but not listed in "
                                      f"{PurePosixPath(mpath).name} (RFC 8493 2.2.3: every "
                                      "fetched file is in every payload manifest)", line=no))
        ours = self._bag_agent_is_ours(pre, encoding)
        data_pre = f"{pre}data/"
        first_payload = next((m for m in self.res.manifests if m.path in payload_lists), None)
        for f in sorted(set(files) | {k for k in self.idx.links if k.startswith(pre)}):
            if not f.startswith(pre):
                continue
            if f.startswith(data_pre):
                absent = [m for m, listed in payload_lists.items() if f not in listed]
                if absent:
                    summs = [m for m in self.res.manifests if m.path in absent]
                    self._extra(summs, f, "payload file not in " + ", ".join(
                        PurePosixPath(m).name for m in absent))
                continue
            tail = f[len(pre):]
            if "/" not in tail and (tail in _BAG_TAG_NAMES or _BAG_MANIFEST.match(tail)
                                    or BAG_ROOT_SIGNATURES.match(tail)
                                    or tail == EXTERNAL_ARTIFACTS_FILE):
                continue
            if f in tag_listed:
                continue
            if ours:
                owner = tag_summ or first_payload
                self._extra([owner] if owner else [], f,
                            "unknown file outside data/ of a bag campaign-bot wrote (not a "
                            "tag file, not in its tag manifest): added after sealing")
            else:
                self.add(_finding("BAG_TAG_FILE_UNLISTED", "P3", f,
                                  "other tag file, in no tag manifest: not verified and not "
                                  "read as part of the bag (RFC 8493 2.2.4)"))
        self._oxum(pre, [f for f in files if f.startswith(data_pre)], encoding)

    def _extra(self, summs: list[ManifestSummary], f: str, why: str) -> None:
        self.res.extra += 1
        for summ in summs:
            summ.extra += 1
        self.add(_finding("MANIFEST_EXTRA_FILE", "P2", f, why,
                          fix="add it to the manifest (write_bag re-seals) or remove it"))

    def _bag_manifest(self, summ: ManifestSummary, bag_dir: str, alg: str, encoding: str,
                      fetched: dict[str, int], *, payload: bool) -> set[str]:
        listed: set[str] = set()
        text = self.read_text(summ.path, encoding=encoding, bag=True)
        if text is None:
            return listed
        pre = f"{bag_dir}/" if bag_dir else ""
        noted: set[str] = set()
        for no, line in enumerate(text.split("\n"), 1):
            if not line.strip():
                continue
            m = _BAG_LINE.match(line)
            if not m:
                self.malformed(summ, no, "expected 'CHECKSUM FILEPATH' (RFC 8493 2.1.3)")
                continue
            hexd, listed_path = m.group(1), m.group(2)
            if listed_path.startswith("*"):
                listed_path = listed_path[1:]
                if "*" not in noted:
                    noted.add("*")
                    self.add(_finding("MANIFEST_BINARY_MARKER", "P3", summ.path,
                                      "'*' before the path is the md5sum/sha256sum binary-mode "
                                      "marker, not part of the name; read without it",
                                      line=no))
            listed_path = _bag_decode(listed_path)
            if listed_path.startswith("./"):
                while listed_path.startswith("./"):
                    listed_path = listed_path[2:]
                if "./" not in noted:
                    noted.add("./")
                    self.add(_finding("MANIFEST_DOT_SLASH", "P3", summ.path,
                                      "path starts with './'; read relative to the bag, as "
                                      "RFC 8493 2.1.3 writes it without", line=no))
            d = self.digest(summ, no, hexd, alg, bag=True)
            if d is None:
                continue
            under_data = listed_path.startswith("data/")
            if payload and not under_data:
                self.unsafe(summ, no, f"{listed_path!r} is outside data/")
                continue
            if not payload and under_data:
                self.malformed(summ, no, f"tag manifest lists payload file {listed_path!r}")
                continue
            external = listed_path in fetched and f"{pre}{listed_path}" not in self.idx.files
            rel = self.add_entry(summ, Entry(summ.path, no, listed_path, d, None, external,
                                             alg), bag_dir, variants=True)
            if rel:
                listed.add(rel)
            elif external:
                listed.add(f"{pre}{listed_path}")  # fetched, absent: listed all the same
        return listed

    def _oxum(self, pre: str, payload_files: list[str], encoding: str) -> None:
        rel = next((f"{pre}{n}" for n in ("bag-info.txt", "package-info.txt")
                    if f"{pre}{n}" in self.idx.files), None)
        if rel is None:
            return
        text = self.read_text(rel, encoding=encoding, bag=True)
        if text is None:
            return
        for no, line in enumerate(text.split("\n"), 1):
            if not re.match(r"^payload-oxum\s*:", line, re.I):
                continue
            val = line.split(":", 1)[1].strip()
            m = re.match(r"^(\d{1,20})\.(\d{1,20})$", val)
            octets = sum(self.idx.files[f] for f in payload_files)
            # payload kept outside the tree (external-artifacts map, LFS) counts as the bag's
            kept = [ef for rel, ef in self.external_files.items()
                    if rel.startswith(f"{pre}data/") and rel not in self.idx.files]
            octets += sum(ef.size or 0 for ef in kept)
            payload_files = [*payload_files, *(["-"] * len(kept))]
            if not m:
                self.add(_finding("BAG_PAYLOAD_OXUM", "P3", rel,
                                  f"Payload-Oxum {val[:80]!r} is not 'octets.count' (at most "
                                  "20 digits each)", line=no))
            elif (int(m.group(1)), int(m.group(2))) != (octets, len(payload_files)):
                self.add(_finding("BAG_PAYLOAD_OXUM", "P3", rel,
                                  f"Payload-Oxum {val} but payload holds {octets}."
                                  f"{len(payload_files)} (octets.files); warning only, the "
                                  "manifest decides", line=no))

    def add_entry(self, summ: ManifestSummary, e: Entry, base: str, *,
                  fallback_root: bool = False, variants: bool = False) -> str | None:
        summ.entries += 1
        if e.external or "://" in e.listed:
            e.external = True
            self.res.external.append(ExternalDigest(path=e.listed, sha256=e.digest,
                                                    listed_in=e.manifest, line=e.line))
            summ.external += 1
            return None
        rel = self.resolve(summ, e.listed, e.line, base, fallback_root=fallback_root)
        if rel is None:
            return None
        ext = self.external_files.get(rel)
        if ext is not None and not self._exists(rel) and rel not in self.idx.dirs:
            e.external = True
            summ.external += 1
            if e.alg == "sha256" and e.digest != ext.sha256:
                self.res.mismatched += 1
                summ.mismatched += 1
                self.add(_finding("EXTERNAL_DIGEST_MISMATCH", "P1", e.manifest,
                                  f"{rel} is kept outside the tree ({ext.source}) with SHA-256 "
                                  f"{ext.sha256}, but this manifest lists {e.digest}",
                                  line=e.line, fix="the external record and the manifest "
                                  "must name the same file: restore the file or its record"))
                return None
            self.res.external.append(ExternalDigest(
                path=rel, sha256=e.digest, listed_in=e.manifest, line=e.line,
                status=f"external ({ext.source}{'; ' + ext.url if ext.url else ''}), digest "
                       "recorded, not verifiable here"))
            return rel
        if variants and not self._exists(rel) and rel not in self.idx.dirs:
            other = self.variant_of(rel, base)
            if other is not None and other != rel:
                e.variant = rel
                case = unicodedata.normalize("NFC", rel) != unicodedata.normalize("NFC", other)
                how = "in letter case" if case else "in Unicode normalization (NFC/NFD)"
                self.add(_finding("MANIFEST_NAME_VARIANT", "P3", e.manifest,
                                  f"{ascii(rel)} is not in the bag but {ascii(other)} is: the "
                                  f"names differ only {how}, one file on macOS and Windows "
                                  "file systems; verified against it", line=e.line))
                rel = other
        e.rel = rel
        self.entries.append((summ, e))
        if self.hasher is not None and (rel in self.idx.files or rel in self.idx.links):
            self.to_hash.setdefault(rel, set()).add(e.alg)
        return rel

    def queue_listed(self) -> None:
        """Queue the files listed so far on the hasher, each with every algorithm that lists
        it (so a bag with MD5 and SHA-512 manifests reads each payload file once)."""
        if self.hasher is not None:
            for rel, algs in self.to_hash.items():
                self.hasher.submit(self.root / rel, self.idx.files.get(rel), tuple(algs))
        self.to_hash.clear()

    # -- the single hashing pass
    def check_entries(self, progress: ProgressFn | None, workers: int | None) -> None:
        seen: dict[tuple[str, str], Entry] = {}
        todo: dict[str, dict[str, None]] = {}
        live: list[tuple[ManifestSummary, Entry]] = []
        for summ, e in self.entries:
            assert e.rel is not None
            key = (e.manifest, e.rel)
            if key in seen:
                first = seen[key]
                same = first.digest == e.digest
                self.res.duplicates += 1
                summ.duplicates += 1
                sev: Severity = self.dup_severity.get(e.manifest, "P2") if same else "P1"
                self.add(_finding(
                    "MANIFEST_DUPLICATE", sev, e.manifest,
                    f"{e.listed} listed again (first at line {first.line})"
                    + ("" if same else " with a different digest")
                    + (" (BagIt before 1.0 allowed this)" if sev == "P3" else ""),
                    line=e.line, fix="keep one line per file"))
                if same:
                    continue
            else:
                seen[key] = e
            live.append((summ, e))
            if e.rel in self.idx.files or e.rel in self.idx.links:
                todo.setdefault(e.rel, {})[e.alg] = None
        paths = {rel: self.root / rel for rel in todo if rel not in self.idx.special}
        t0 = time.perf_counter()
        total = sum(self.idx.files.get(r, 0) for r in paths)
        todo_paths = {p: tuple(todo[rel]) for rel, p in paths.items()}
        if self.hasher is not None:
            done = self.hasher.digests(todo_paths)
        else:
            done = digest_files(todo_paths, workers=workers, progress=progress,
                                total_bytes=total, beneath=self.idx.real_root)
        self.res.hash_seconds = time.perf_counter() - t0
        by_rel = {rel: done[p] for rel, p in paths.items()}
        for got in by_rel.values():
            if not isinstance(got, OSError):
                self.res.files_hashed += 1
                self.res.bytes_hashed += got[1]
        unreadable_named: set[str] = set()
        for summ, e in live:
            assert e.rel is not None
            r = by_rel.get(e.rel)
            if r is None:
                if e.rel in self.idx.dirs:
                    self.add(_finding("NOT_REGULAR_FILE", "P1", e.manifest,
                                      f"{e.rel} is a directory, not a file", line=e.line))
                    continue
                if e.rel in self.idx.special:
                    self.add(_finding("NOT_REGULAR_FILE", "P1", e.rel,
                                      f"listed in {e.manifest} but not a regular file; not "
                                      "opened", line=None))
                    continue
                if SYSTEM_FILES.search(e.rel):
                    self.add(_finding("SYSTEM_FILE_MISSING", "P3", e.manifest,
                                      f"{e.rel}: listed but absent; an operating-system "
                                      "metadata file that copying tools drop, not evidence",
                                      line=e.line))
                    continue
                self.res.missing += 1
                summ.missing += 1
                self.add(_finding("MANIFEST_MISSING_FILE", "P1", e.manifest,
                                  f"{e.rel}: listed but missing", line=e.line,
                                  fix="restore the file, or mark it external with its URL"))
                continue
            if isinstance(r, OSError):
                self.res.missing += 1
                summ.missing += 1
                if e.rel not in unreadable_named:
                    unreadable_named.add(e.rel)
                    self.add(_finding("UNREADABLE", "P1", e.rel,
                                      f"cannot read: {r.strerror or r} (listed in "
                                      f"{e.manifest})", fix="fix the file's permissions"))
                continue
            self.res.hashes_checked += 1
            got_hex = r[0][e.alg]
            if got_hex == e.digest:
                self.res.hashes_ok += 1
                summ.verified += 1
            else:
                self.res.mismatched += 1
                summ.mismatched += 1
                listed = (f" (listed as {ascii(e.variant)}, a name that differs only in "
                          "letter case or Unicode normalization)" if e.variant else "")
                self.add(_finding("MANIFEST_MISMATCH", "P1", e.rel,
                                  f"{ALGORITHM_NAMES[e.alg]} {got_hex} does not match "
                                  f"{e.digest} listed in {e.manifest} line {e.line}{listed}",
                                  line=None,
                                  fix="the file changed after sealing: restore it, or re-seal "
                                      "and explain why"))


def _looks_digest(v: object) -> bool:
    if isinstance(v, dict):
        return "sha256" in v
    if not isinstance(v, str):
        return False
    return bool(HEX64.match(v[7:] if v.startswith("sha256:") else v))


def _map_items(obj: object) -> list[tuple[tuple, str, object, bool]] | None:
    """Entries ``(json_loc, listed_path, value, external)`` of an integrity map, or None."""
    if not isinstance(obj, dict):
        return None
    schema = obj.get("schema")
    if isinstance(schema, str) and schema.startswith("campaign-bot/") and not schema.startswith(
            "campaign-bot/integrity@"):
        return None
    out: list[tuple[tuple, str, object, bool]] = []
    container = False
    for key in (*_MAP_KEYS, "external"):
        sub = obj.get(key)
        ext = key == "external"
        if isinstance(sub, dict) and sub and any(_looks_digest(v) for v in sub.values()):
            container = True
            out += [((key, k), k, v, ext) for k, v in sub.items()]
        elif isinstance(sub, list) and sub and all(isinstance(x, dict) and "path" in x
                                                   for x in sub):
            container = True
            out += [((key, i), str(x["path"]), x, ext) for i, x in enumerate(sub)]
    if container:
        return out
    digests = [k for k, v in obj.items() if _looks_digest(v)]
    if not digests or not all("/" in k or "." in k for k in digests):
        return None  # e.g. {"commit": HEX}: a digest-valued field, not a path map
    for k, v in obj.items():
        if k in _META_KEYS and not _looks_digest(v):
            continue
        if not _looks_digest(v) and not ("/" in k or "." in k):
            return None  # some other document that happens to hold a digest
        out.append(((k,), k, v, False))
    return out


def verify_tree(root: Path, *, max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
                progress: ProgressFn | None = None, workers: int | None = None,
                index: TreeIndex | None = None,
                json_docs: Mapping[str, tuple[object, str]]
                | Callable[[], Mapping[str, tuple[object, str]]] | None = None,
                max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES,
                hasher: HashPool | None = None,
                external_files: dict[str, ExternalFile] | None = None) -> VerifyResult:
    """Verify every manifest under ``root`` in one pass; see the module docstring.

    ``index`` reuses an earlier :func:`index_tree`; ``json_docs`` maps root-relative paths of
    already-parsed JSON files to ``(object, text)`` so integrity maps are not parsed twice
    (when None, JSON files are read here: those over ``min(max_file_bytes,
    max_document_bytes)`` or nested deeper than :data:`evidence.safejson.MAX_JSON_DEPTH` are
    skipped; the loader reports them).  It may be a function returning that mapping: it is
    called once the BagIt and SHA256SUMS manifests are read, so with ``hasher`` (a
    :class:`evidence.hashing.HashPool`, whose ``progress`` and ``workers`` then apply instead
    of this function's) their files hash while it parses.  Raises ``OSError`` only when
    ``root`` itself cannot be listed.

    ``external_files`` (root-relative path -> :class:`ExternalFile`) names files kept outside
    the tree (e.g. Git LFS pointers the caller did not fetch): a manifest entry for one that
    is absent is reported as external, its digest compared with the recorded one.  A bag's
    own :data:`EXTERNAL_ARTIFACTS_FILE` adds to them.
    """
    root = Path(root)
    idx = index or index_tree(root)
    v = _Verifier(root, idx, max_file_bytes, hasher, external_files)
    candidates = set()
    for f in idx.files:
        p = PurePosixPath(f)
        d = "" if p.parent.as_posix() == "." else p.parent.as_posix()
        data = f"{d}/data" if d else "data"
        if p.name == "bagit.txt" or (_BAG_MANIFEST.match(p.name) and not p.name.startswith(
                "tag") and data in idx.dirs):
            candidates.add(d)
    # A bag inside another bag's data/ is payload (RFC 8493 2.1.2), not a bag to judge.
    bag_dirs: list[str] = []
    for d in sorted(candidates, key=lambda x: (x.count("/") + bool(x), x)):
        if not any(_under(d, f"{b}/data" if b else "data") for b in bag_dirs):
            bag_dirs.append(d)
    payloads = [f"{b}/data" if b else "data" for b in bag_dirs]
    for d in bag_dirs:
        v.bag(d)
    for f in sorted(idx.files):
        p = PurePosixPath(f)
        d = "" if p.parent.as_posix() == "." else p.parent.as_posix()
        if p.name == "manifest-sha256.txt" and (d in bag_dirs or any(_under(d, x)
                                                                     for x in payloads)):
            continue  # a bag's own manifest, or a nested bag's (payload)
        if _SUMS_NAMES.match(p.name):
            v.sums_file(f)
    v.queue_listed()  # the BagIt and SHA256SUMS files hash while the documents are parsed
    if callable(json_docs):
        json_docs = json_docs()
    limit = min(max_file_bytes, max_document_bytes)
    for f in sorted(idx.files):
        if not f.endswith(".json"):
            continue
        p = PurePosixPath(f)
        if p.name == EXTERNAL_ARTIFACTS_FILE and (
                "" if p.parent.as_posix() == "." else p.parent.as_posix()) in bag_dirs:
            continue  # read by its bag: its entries excuse absent payload files there
        if json_docs is not None:
            if f not in json_docs:
                continue
            obj, text = json_docs[f]
        else:
            if idx.files[f] > limit:
                continue
            try:
                text = (root / f).read_text(encoding="utf-8")
                obj = safejson.loads(text)
            except (OSError, ValueError):
                continue
        v.json_map(f, obj, text)
    v.check_entries(progress, workers)
    for rel, link_inside in sorted(idx.links.items()):
        if not link_inside:
            v.res.unsafe += 1
            v.add(_finding("SYMLINK_ESCAPES", "P0", rel,
                           "symlink resolves outside the checked directory; never followed",
                           fix="replace the link with the file itself"))
    for rel in idx.special:
        v.add(_finding("NOT_REGULAR_FILE", "P2", rel, "FIFO, socket or device in the bundle; "
                       "not opened", fix="remove it"))
    for rel in idx.unlistable:
        v.add(_finding("UNREADABLE", "P1", rel, "cannot list or stat this path",
                       fix="fix its permissions"))
    _dedupe(v.res.findings)
    v.res.findings += v.cap.summaries()
    return v.res


def _under(path: str, directory: str) -> bool:
    """True when the POSIX path ``path`` is ``directory`` or lies below it."""
    return path == directory or path.startswith(f"{directory}/")


def _dedupe(findings: list[Finding]) -> None:
    seen: set[tuple] = set()
    out = []
    for f in findings:
        key = (f.rule, f.path, f.line, f.message)
        if key not in seen:
            seen.add(key)
            out.append(f)
    findings[:] = out
