"""Signed evidence bundles: DSSE envelopes holding an in-toto Statement v1, ed25519 keys.

Pure verification and key handling (no network I/O).  The signer lives in
``runners.signer``.  Formats:

* DSSE v1 (``https://github.com/secure-systems-lab/dsse``, protocol.md): the signature covers
  ``PAE(type, body) = "DSSEv1" SP LEN(type) SP type SP LEN(body) SP body`` (lengths as ASCII
  decimal); the envelope is ``{"payload": b64, "payloadType": ..., "signatures":
  [{"keyid": ..., "sig": b64}]}``.
* in-toto Statement v1: ``{"_type": "https://in-toto.io/Statement/v1", "subject": [{"name",
  "digest": {"sha256"}}], "predicateType", "predicate"}``.  JSON is produced with the
  standard library, so integers stay integers (the issue warns that the
  ``in-toto-attestation`` bindings turn them into floats).
* Keys: ed25519, PEM.  A *trusted keys file* holds one or more ``-----BEGIN PUBLIC KEY-----``
  blocks (lines starting with ``#`` are comments).  A key id is ``sha256:`` + the SHA-256 hex
  of the raw 32-byte public key.

A bundle is a BagIt directory (``bagit.txt``, ``bag-info.txt``, ``manifest-sha256.txt``,
``tagmanifest-sha256.txt``, payload under ``data/``) plus ``ATTESTATION_FILE`` beside the
tag files.  :func:`check_signed_bundle` checks the chain signature -> subjects (tag
manifest) -> tag files -> payload manifest -> every payload file, and that every file present
anywhere under the bundle (no directory skipped) is covered by it.  Readers take documents
from a signed bundle only through :func:`verified_documents`, which lists them from the
signed payload manifest and never walks the tree.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from evidence import safejson
from evidence.manifest import EXTERNAL_ARTIFACTS_FILE, read_external_map

PAYLOAD_TYPE = "application/vnd.in-toto+json"
STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "urn:campaign-bot:predicate:screen:v1"
ATTESTATION_FILE = "attestation.dsse.json"
TAG_MANIFEST = "tagmanifest-sha256.txt"

PAYLOAD_MANIFEST = "manifest-sha256.txt"


class KeyFileError(ValueError):
    """A key file that cannot be read or holds no usable ed25519 key (message names it)."""


MAX_SMALL_FILE_BYTES = 16 << 20
"""Largest envelope, manifest or key file read whole (16 MiB; ours are a few KiB)."""


def read_small_text(path: Path, limit: int = MAX_SMALL_FILE_BYTES) -> str:
    """UTF-8 text of the regular file ``path``, at most ``limit`` bytes.

    Never blocks on a FIFO or reads a device forever: the file is opened non-blocking and
    refused unless it is a regular file.  Raises OSError (unreadable, missing) or ValueError
    (not a regular file, too large, not UTF-8) with a message for the user."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            kind = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO, socket or device"
            raise ValueError(f"is {kind}, not a regular file; not read")
        if st.st_size > limit:
            raise ValueError(f"{st.st_size} bytes is over the {limit}-byte limit; not read")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            raw = fh.read(limit + 1)
    finally:
        os.close(fd)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ValueError(f"not UTF-8 text (byte {exc.start}, line {line})") from None


def pae(payload_type: str, body: bytes) -> bytes:
    """DSSE v1 pre-authentication encoding of ``body`` (bytes) with ``payload_type``."""
    t = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(t), t, len(body), body)


def key_id(public_key: Ed25519PublicKey) -> str:
    """``sha256:<hex>`` of the raw 32-byte ed25519 public key."""
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def load_trusted_keys(path: Path) -> dict[str, Ed25519PublicKey]:
    """Read a trusted keys file (PEM public key blocks, ``#`` comments): key id -> key.

    Raises KeyFileError naming the file (and block number) when it is unreadable, holds a
    non-ed25519 key, or holds no key at all."""
    try:
        text = read_small_text(path, 1 << 20)
    except OSError as exc:
        raise KeyFileError(f"{path}: cannot read trusted keys file: "
                           f"{exc.strerror or exc}") from None
    except ValueError as exc:
        raise KeyFileError(f"{path}: cannot read trusted keys file: {exc}") from None
    lines = [ln for ln in text.splitlines() if not ln.lstrip().startswith("#")]
    blocks: list[str] = []
    cur: list[str] | None = None
    for ln in lines:
        if ln.startswith("-----BEGIN "):
            cur = [ln]
        elif cur is not None:
            cur.append(ln)
            if ln.startswith("-----END "):
                blocks.append("\n".join(cur) + "\n")
                cur = None
    keys: dict[str, Ed25519PublicKey] = {}
    for i, block in enumerate(blocks, 1):
        try:
            key = serialization.load_pem_public_key(block.encode())
        except (ValueError, UnsupportedAlgorithm) as exc:
            raise KeyFileError(f"{path}: PEM block {i} is not a public key: {exc}") from exc
        if not isinstance(key, Ed25519PublicKey):
            raise KeyFileError(f"{path}: PEM block {i} is not an ed25519 key")
        keys[key_id(key)] = key
    if not keys:
        raise KeyFileError(f"{path}: no '-----BEGIN PUBLIC KEY-----' block found")
    return keys


def verify_envelope(envelope: dict[str, Any], keys: dict[str, Ed25519PublicKey],
                    ) -> dict[str, Any]:
    """Verify a DSSE envelope with any of ``keys``; return the decoded in-toto Statement.

    Raises ValueError saying what failed (malformed envelope, wrong payload type, no
    signature by a trusted key, not a Statement v1, statement nested deeper than
    :data:`evidence.safejson.MAX_JSON_DEPTH`)."""
    return _verify_envelope(envelope, keys)[0]


_B64_STD = re.compile(r"[A-Za-z0-9+/]*={0,2}")
_B64_URL = re.compile(r"[A-Za-z0-9_-]*={0,2}")


def dsse_b64decode(text: Any) -> bytes:
    """Bytes of a DSSE ``payload`` or ``sig`` field.

    DSSE's envelope specification (``secure-systems-lab/dsse``, envelope.md) says a verifier
    MUST accept either the standard or the URL-safe base64 alphabet (RFC 4648 sections 4 and
    5), padded or not; the two alphabets are never mixed in one field.  Raises TypeError (not
    a string) or ValueError (neither encoding)."""
    if not isinstance(text, str):
        raise TypeError(f"expected a base64 string, got a JSON {type(text).__name__}")
    for rx, alt in ((_B64_STD, None), (_B64_URL, b"-_")):
        if rx.fullmatch(text):
            padded = text + "=" * (-len(text) % 4) if "=" not in text else text
            try:
                return base64.b64decode(padded, altchars=alt, validate=True)
            except ValueError:
                continue
    raise ValueError("not base64 (standard or URL-safe alphabet)")


def _verify_envelope(envelope: Any, keys: dict[str, Ed25519PublicKey],
                     ) -> tuple[dict[str, Any], str]:
    """:func:`verify_envelope`, also returning the id of the key that verified it."""
    if not isinstance(envelope, dict):
        raise ValueError(f"malformed DSSE envelope: a JSON {type(envelope).__name__}, "
                         "expected an object")
    try:
        ptype = envelope["payloadType"]
        body = dsse_b64decode(envelope["payload"])
        sigs = envelope["signatures"]
    except KeyError as exc:
        raise ValueError(f"malformed DSSE envelope: no {exc} field") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed DSSE envelope: {exc}") from exc
    if ptype != PAYLOAD_TYPE:
        raise ValueError(f"payloadType is {ptype!r}, expected {PAYLOAD_TYPE!r}")
    msg = pae(ptype, body)
    good: str | None = None
    for s in sigs if isinstance(sigs, list) else []:
        if not isinstance(s, dict):
            continue
        try:
            sig = dsse_b64decode(s["sig"])
        except (KeyError, TypeError, ValueError):
            continue
        kid = s.get("keyid")
        cands = ([(kid, keys[kid])] if isinstance(kid, str) and kid in keys
                 else list(keys.items()))
        for cid, k in cands:
            try:
                k.verify(sig, msg)
                good = cid
                break
            except InvalidSignature:
                continue
        if good:
            break
    if not good:
        raise ValueError("no signature by a trusted key verifies this envelope")
    try:
        stmt = safejson.loads(body)
    except ValueError as exc:  # JSONDecodeError, too deep, not UTF-8, huge integers
        raise ValueError(f"payload is not JSON: {exc}") from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise ValueError(f"payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    if not isinstance(stmt.get("subject"), list) or not stmt["subject"]:
        raise ValueError("statement has no subjects")
    return stmt, good


def sha256_file(path: Path) -> str:
    """SHA-256 hex of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


_SIGNED_LINE = re.compile(r"^([0-9a-fA-F]{64})[ \t]+(.+)$")


def _read_manifest(path: Path) -> tuple[dict[str, str], list[str]]:
    """Entries ``path -> sha256`` of a manifest we wrote (``HEX  PATH``, LF) and problems
    (malformed lines, unsafe paths, paths listed twice)."""
    entries: dict[str, str] = {}
    problems: list[str] = []
    for n, line in enumerate(read_small_text(path).split("\n"), 1):
        if not line.strip():
            continue
        m = _SIGNED_LINE.match(line)
        if m is None:
            problems.append(f"{path.name}:{n}: not '<sha256>  <path>'")
            continue
        digest, rel = m.group(1).lower(), m.group(2)
        rel = rel.replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")
        parts = rel.split("/")
        if rel.startswith("/") or "" in parts or "." in parts or ".." in parts or "\0" in rel:
            problems.append(f"{path.name}:{n}: unsafe path {rel!r} (absolute, empty part, '.' "
                            "or '..')")
            continue
        if rel in entries:
            problems.append(f"{path.name}:{n}: {rel} is listed twice")
            continue
        entries[rel] = digest
    return entries, problems


def _walk_everything(root: Path) -> tuple[dict[str, str], list[str]]:
    """Every path under ``root`` (no directory skipped, symlinks never followed):
    ``rel -> "file" | "link" | "special"``, and the directories that could not be listed."""
    present: dict[str, str] = {}
    unlistable: list[str] = []

    def onerror(e: OSError) -> None:
        unlistable.append(Path(os.path.relpath(e.filename or str(root), root)).as_posix())

    for dirpath, dirnames, filenames in os.walk(root, onerror=onerror, followlinks=False):
        rel_dir = os.path.relpath(dirpath, root)
        keep = []
        for d in dirnames:
            rel = d if rel_dir == "." else Path(rel_dir, d).as_posix()
            if os.path.islink(os.path.join(dirpath, d)):
                present[rel] = "link"
            else:
                keep.append(d)
        dirnames[:] = keep
        for name in filenames:
            rel = name if rel_dir == "." else Path(rel_dir, name).as_posix()
            try:
                mode = os.lstat(os.path.join(dirpath, name)).st_mode
            except OSError:
                unlistable.append(rel)
                continue
            present[rel] = ("file" if stat.S_ISREG(mode) else
                            "link" if stat.S_ISLNK(mode) else "special")
    return present, unlistable


_KIND_TEXT = {"link": "a symlink", "special": "a FIFO, socket or device"}


MAX_LISTED_UNSIGNED = 20
"""Unsigned files named one by one in messages and findings; the rest are counted."""

UNSIGNED_MESSAGE = ("not covered by the signed manifests (added after signing); the bundle is "
                    "refused and nothing in it is read")


@dataclass
class BundleVerification:
    """The result of :func:`check_signed_bundle` for one bundle directory ``root``.

    ``problems``: why the signature chain does not hold (envelope, subjects, manifests,
    listed files), as messages naming the file.  ``unsigned``: bundle-relative POSIX paths
    present under ``root`` (in any directory, none skipped) that no signed manifest covers.
    ``payload``/``tags``: the signed manifests' entries (``path -> sha256``), filled once the
    envelope verifies.  ``key_id``: the trusted key that signed it."""

    root: Path
    problems: list[str] = field(default_factory=list)
    unsigned: list[str] = field(default_factory=list)
    payload: dict[str, str] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    key_id: str | None = None
    external: list[str] = field(default_factory=list)
    """Signed payload files kept outside the bundle (absent, recorded in its
    external-artifacts map or by the caller with the signed SHA-256): not verifiable here."""
    external_map: bool = False
    """True when the bundle's external-artifacts map was read (it is then covered)."""
    predicate: dict[str, Any] = field(default_factory=dict)
    """The signed statement's predicate (what the runner says it ran), once the envelope
    verifies."""

    @property
    def ok(self) -> bool:
        """True when the signature chain holds and every file present is covered."""
        return not self.problems and not self.unsigned

    def covered(self) -> set[str]:
        """Bundle-relative paths the signature covers: the envelope, the two manifests and
        every file they list; and the external-artifacts map, which is not signed but can
        only say that a signed payload file with exactly the signed SHA-256 lives elsewhere."""
        extra = {EXTERNAL_ARTIFACTS_FILE} if self.external_map else set()
        return {ATTESTATION_FILE, TAG_MANIFEST, *self.tags, *self.payload, *extra}

    def documents(self) -> list[str]:
        """Bundle-relative paths of the JSON documents listed in the signed payload manifest
        (sorted): the only documents a reader may take from this bundle."""
        return sorted(p for p in self.payload if p.endswith(".json"))

    def messages(self, limit: int = MAX_LISTED_UNSIGNED) -> list[str]:
        """``problems`` then one line per unsigned file (the first ``limit``, then a count)."""
        out = list(self.problems)
        for rel in self.unsigned[:limit]:
            out.append(f"{rel}: {UNSIGNED_MESSAGE}")
        if len(self.unsigned) > limit:
            out.append(f"and {len(self.unsigned) - limit} more files not covered by the signed "
                       "manifests")
        return out


class BundleRefused(ValueError):
    """A signed bundle that does not verify.  ``problems`` holds every reason (see
    :meth:`BundleVerification.messages`); ``str()`` gives the first few."""

    def __init__(self, root: Path, problems: list[str]) -> None:
        self.root, self.problems = root, problems
        head = "; ".join(problems[:3]) + (f"; and {len(problems) - 3} more"
                                          if len(problems) > 3 else "")
        super().__init__(f"{root}: signed bundle refused: {head}")


def check_signed_bundle(root: Path, keys: dict[str, Ed25519PublicKey], *,
                        external_files: dict[str, Any] | None = None) -> BundleVerification:
    """Verify the signed bundle at ``root`` with any of ``keys``; never raises for the
    bundle's content.

    What is checked, in order: ``ATTESTATION_FILE`` is a regular file holding a DSSE envelope
    signed by a trusted key over an in-toto Statement v1 (on failure nothing else is checked);
    every subject is a regular file with the signed SHA-256 and the tag manifest is one;
    the tag manifest lists the payload manifest; every entry of both manifests is a safe
    relative path to a regular file (not a symlink) with that SHA-256, payload entries under
    ``data/`` and tag entries outside it; and every path under ``root`` -- in every
    directory, ``.git``, ``node_modules``, ``__pycache__``, ``.venv`` included, symlinks and
    FIFOs too -- is the envelope, a manifest or a listed file (else it is in ``unsigned``).

    A signed payload file that is absent is not a problem when the bundle's
    ``external-artifacts.json`` (:data:`evidence.manifest.EXTERNAL_ARTIFACTS_FILE`) or the
    caller's ``external_files`` (bundle-relative path -> an object with ``sha256``, e.g.
    :class:`evidence.manifest.ExternalFile` from a Git LFS pointer) record it with the signed
    SHA-256 and it is not a JSON document: it is listed in ``external``."""
    root = Path(root)
    res = BundleVerification(root)
    present, unlistable = _walk_everything(root)
    external: dict[str, Any] = dict(external_files or {})
    if EXTERNAL_ARTIFACTS_FILE in present:
        found, bad = read_external_map(root / EXTERNAL_ARTIFACTS_FILE)
        res.problems += bad
        res.external_map = not bad
        external.update(found)
    if present.get(ATTESTATION_FILE, "file") != "file":
        res.problems.append(f"{ATTESTATION_FILE}: cannot read signed envelope: is "
                            f"{_KIND_TEXT[present[ATTESTATION_FILE]]}, not a regular file")
        return res
    try:
        envelope = safejson.loads(read_small_text(root / ATTESTATION_FILE))
    except OSError as exc:
        res.problems.append(f"{ATTESTATION_FILE}: cannot read signed envelope: "
                            f"{exc.strerror or exc}")
        return res
    except ValueError as exc:  # not JSON, too deep, not UTF-8, not a regular file, too large
        res.problems.append(f"{ATTESTATION_FILE}: cannot read signed envelope: {exc}")
        return res
    try:
        stmt, res.key_id = _verify_envelope(envelope, keys)
    except ValueError as exc:
        res.problems.append(f"{ATTESTATION_FILE}: {exc}")
        return res
    pred = stmt.get("predicate")
    res.predicate = pred if isinstance(pred, dict) else {}
    problems = res.problems
    hashes: dict[str, str] = {}

    def digest_of(rel: str, what: str) -> str | None:
        kind = present.get(rel)
        if kind is None:
            problems.append(f"{what}: file missing")
            return None
        if kind != "file":
            problems.append(f"{what}: is {_KIND_TEXT[kind]}, not a regular file; not opened")
            return None
        if rel not in hashes:
            try:
                hashes[rel] = sha256_file(root / rel)
            except OSError as exc:
                problems.append(f"{what}: cannot read: {exc.strerror or exc}")
                return None
        return hashes[rel]

    names = set()
    for sub in stmt["subject"]:
        name = sub.get("name", "") if isinstance(sub, dict) else ""
        name = name if isinstance(name, str) else ""
        digest = sub.get("digest") if isinstance(sub, dict) else None
        want = digest.get("sha256") if isinstance(digest, dict) else None
        names.add(name)
        if not name or name.startswith("/") or ".." in name.split("/"):
            problems.append(f"subject {name!r}: file missing")
            continue
        got = digest_of(name, f"subject {name!r}" if name not in present else f"subject {name}")
        if got is not None and got != want:
            problems.append(f"subject {name}: SHA-256 differs from the signed digest "
                            "(edited after signing)")
    if TAG_MANIFEST not in names:
        problems.append(f"the signed subjects do not include {TAG_MANIFEST}")
    for manifest in (TAG_MANIFEST, PAYLOAD_MANIFEST):
        kind = present.get(manifest)
        if kind != "file":
            problems.append(f"{manifest}: " + ("missing" if kind is None else
                                               f"is {_KIND_TEXT[kind]}, not a regular file"))
            continue
        try:
            entries, bad = _read_manifest(root / manifest)
        except (OSError, ValueError) as exc:
            problems.append(f"{manifest}: cannot read: {getattr(exc, 'strerror', None) or exc}")
            continue
        problems += bad
        payload = manifest == PAYLOAD_MANIFEST
        for rel, digest in entries.items():
            if payload != rel.startswith("data/"):
                problems.append(f"{manifest}: {rel}: " + (
                    "a payload manifest lists files under data/ only" if payload else
                    "a tag manifest lists files outside data/ only"))
                continue
            ext = external.get(rel) if payload and rel not in present else None
            if ext is not None and not rel.endswith(".json"):
                if str(getattr(ext, "sha256", "")).lower() == digest:
                    res.external.append(rel)
                else:
                    problems.append(f"{manifest}: {rel}: kept outside the bundle with a "
                                    "SHA-256 other than the signed one")
                continue
            got = digest_of(rel, f"{manifest}: {rel}")
            if got is not None and got != digest:
                problems.append(f"{manifest}: {rel}: SHA-256 mismatch (edited after signing)")
        if payload:
            res.payload = entries
        else:
            res.tags = entries
            if PAYLOAD_MANIFEST not in entries:
                problems.append(f"{TAG_MANIFEST} does not list {PAYLOAD_MANIFEST}")
    for rel in unlistable:
        problems.append(f"{rel}: cannot list or stat this path; the bundle cannot be checked "
                        "whole")
    covered = res.covered()
    res.unsigned = sorted(rel for rel in present if rel not in covered)
    return res


def verified_documents(root: Path, keys: dict[str, Ed25519PublicKey]) -> list[str]:
    """The JSON documents (receipts, media reports, statuses, ...) a reader may take from
    the signed bundle at ``root``: bundle-relative POSIX paths listed in its signed payload
    manifest, sorted.  Never walks the tree for documents.

    Raises :class:`BundleRefused` with every reason when :func:`check_signed_bundle` finds a
    problem or a file the signature does not cover; then nothing in the bundle may be read."""
    res = check_signed_bundle(root, keys)
    if not res.ok:
        raise BundleRefused(Path(root), res.messages())
    return res.documents()


def verify_bundle(root: Path, keys: dict[str, Ed25519PublicKey]) -> list[str]:
    """Check a signed bundle; returns problems (empty when the bundle verifies).

    :func:`check_signed_bundle`'s problems, then one line per file not covered by the signed
    manifests (the first :data:`MAX_LISTED_UNSIGNED`, then a count)."""
    return check_signed_bundle(root, keys).messages()


PRIVATE_KEY_MARKERS = (b"PRIVATE KEY-----", b"\x30\x2e\x02\x01\x00\x30\x05\x06\x03\x2b\x65\x70")
"""Private-key material: the PEM armour of every private key type (RFC 7468 section 10
``-----BEGIN PRIVATE KEY-----``, ``... RSA PRIVATE KEY-----``, ``... OPENSSH PRIVATE
KEY-----``), and the DER prefix of an ed25519 PKCS#8 key (RFC 8410 section 7: SEQUENCE,
version 0, algorithm id-Ed25519 1.3.101.112)."""


def files_with_private_keys(root: Path, *, limit: int = 20) -> list[str]:
    """Bundle-relative paths (at most ``limit``) of regular files under ``root`` holding
    :data:`PRIVATE_KEY_MARKERS`, read in 1 MiB chunks (a marker across two chunks is still
    found).  A runner never bundles a key: such a bundle is refused whatever its signature
    says (a leaked signing key signs anything)."""
    overlap = max(len(m) for m in PRIVATE_KEY_MARKERS) - 1
    found: list[str] = []
    for dirpath, _dirs, names in os.walk(root, followlinks=False):
        for name in sorted(names):
            p = Path(dirpath, name)
            if p.is_symlink() or not p.is_file():
                continue
            tail = b""
            with open(p, "rb") as fh:
                while chunk := fh.read(1 << 20):
                    window = tail + chunk
                    if any(m in window for m in PRIVATE_KEY_MARKERS):
                        found.append(p.relative_to(root).as_posix())
                        break
                    tail = window[-overlap:]
            if len(found) >= limit:
                return found
    return found


def find_signed_bundles(directory: Path) -> list[Path]:
    """Directories under ``directory`` (itself included) that hold ``ATTESTATION_FILE``,
    sorted; ``.git`` is not searched and symlinks are not followed."""
    roots = []
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        if ATTESTATION_FILE in filenames or os.path.islink(os.path.join(dirpath,
                                                                          ATTESTATION_FILE)):
            roots.append(Path(dirpath))
    return sorted(roots)


def signature_findings(directory: Path, keys: dict[str, Ed25519PublicKey],
                       results: list[BundleVerification] | None = None, *,
                       external_files: dict[str, Any] | None = None) -> list[Any]:
    """Verify every signed bundle under ``directory`` (:func:`find_signed_bundles`) with
    :func:`check_signed_bundle`; returns :class:`~evidence.models.Finding` s:
    ``SIGNATURE_INVALID`` (P0) per problem, ``UNSIGNED_FILE`` (P0) per file not covered by
    the signed manifests (the first :data:`MAX_LISTED_UNSIGNED` per bundle, then one finding
    with the count), ``SIGNATURE_MISSING`` (P0) when no signed bundle exists,
    ``SIGNATURE_VERIFIED`` (P3, informational) per bundle that verifies.  Paths are relative
    to ``directory``.  ``results``, when given, receives each bundle's verification;
    ``external_files`` (``directory``-relative path -> recorded ``sha256``) is handed to
    :func:`check_signed_bundle` for the files of each bundle."""
    from evidence.models import Finding

    directory = Path(directory)
    roots = find_signed_bundles(directory)
    if not roots:
        return [Finding(rule="SIGNATURE_MISSING", severity="P0", path=".",
                        message=f"no signed bundle ({ATTESTATION_FILE}) found",
                        resolution="run `campaign-bot screen` with a signing key, or check "
                        "without --trusted-keys")]
    out: list[Any] = []
    fix = "a signed bundle is never edited; re-run the screen or restore the signed files"
    for root in roots:
        rel = root.relative_to(directory).as_posix()
        pre = "" if rel == "." else f"{rel}/"
        where = f"{pre}{ATTESTATION_FILE}"
        mine = {k[len(pre):]: v for k, v in (external_files or {}).items()
                if k.startswith(pre)}
        res = check_signed_bundle(root, keys, external_files=mine)
        if results is not None:
            results.append(res)
        for prob in res.problems:
            out.append(Finding(rule="SIGNATURE_INVALID", severity="P0", path=where,
                               message=prob, resolution=fix))
        for f in res.unsigned[:MAX_LISTED_UNSIGNED]:
            out.append(Finding(rule="UNSIGNED_FILE", severity="P0", path=f"{pre}{f}",
                               message=UNSIGNED_MESSAGE, resolution="remove it, or re-run "
                               "the screen so that the runner signs what the bundle holds"))
        if len(res.unsigned) > MAX_LISTED_UNSIGNED:
            n = len(res.unsigned) - MAX_LISTED_UNSIGNED
            out.append(Finding(rule="UNSIGNED_FILE", severity="P0", path=where,
                               message=f"and {n} more files not covered by the signed "
                               "manifests", resolution=fix))
        if res.ok:
            kept = (f"; {len(res.external)} signed payload file(s) kept outside the bundle "
                    "(external, digest recorded, not verifiable here)" if res.external else "")
            out.append(Finding(rule="SIGNATURE_VERIFIED", severity="P3", path=where,
                               message="signature by a trusted key; all subjects, manifests "
                               "and listed files verify, and every file present is covered"
                               + kept))
    return out
