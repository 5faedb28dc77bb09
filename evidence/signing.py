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
tag files.  :func:`verify_bundle` checks the chain signature -> subjects (tag manifest) ->
tag files -> payload manifest -> every payload file, and that no payload file is unlisted.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

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
    signature by a trusted key, not a Statement v1)."""
    if not isinstance(envelope, dict):
        raise ValueError(f"malformed DSSE envelope: a JSON {type(envelope).__name__}, "
                         "expected an object")
    try:
        ptype = envelope["payloadType"]
        body = base64.b64decode(envelope["payload"], validate=True)
        sigs = envelope["signatures"]
    except KeyError as exc:
        raise ValueError(f"malformed DSSE envelope: no {exc} field") from None
    except (TypeError, ValueError) as exc:
        raise ValueError(f"malformed DSSE envelope: {exc}") from exc
    if ptype != PAYLOAD_TYPE:
        raise ValueError(f"payloadType is {ptype!r}, expected {PAYLOAD_TYPE!r}")
    msg = pae(ptype, body)
    good = False
    for s in sigs if isinstance(sigs, list) else []:
        if not isinstance(s, dict):
            continue
        try:
            sig = base64.b64decode(s["sig"], validate=True)
        except (KeyError, TypeError, ValueError):
            continue
        kid = s.get("keyid")
        cands = [keys[kid]] if isinstance(kid, str) and kid in keys else list(keys.values())
        for k in cands:
            try:
                k.verify(sig, msg)
                good = True
                break
            except InvalidSignature:
                continue
        if good:
            break
    if not good:
        raise ValueError("no signature by a trusted key verifies this envelope")
    try:
        stmt = json.loads(body)
    except RecursionError:
        raise ValueError("payload is not JSON: nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError, huge integers
        raise ValueError(f"payload is not JSON: {exc}") from None
    if not isinstance(stmt, dict) or stmt.get("_type") != STATEMENT_TYPE:
        raise ValueError(f"payload is not an in-toto Statement v1 ({STATEMENT_TYPE})")
    if not isinstance(stmt.get("subject"), list) or not stmt["subject"]:
        raise ValueError("statement has no subjects")
    return stmt


def sha256_file(path: Path) -> str:
    """SHA-256 hex of a file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def _read_manifest(path: Path) -> tuple[dict[str, str], list[str]]:
    entries: dict[str, str] = {}
    problems: list[str] = []
    for n, line in enumerate(read_small_text(path).splitlines(), 1):
        if not line.strip():
            continue
        digest, _, rel = line.partition(" ")
        rel = rel.strip().replace("%0D", "\r").replace("%0A", "\n").replace("%25", "%")
        if len(digest) != 64 or not rel or rel.startswith("/"):
            problems.append(f"{path.name}:{n}: not '<sha256>  <path>'")
            continue
        entries[rel] = digest.lower()
    return entries, problems


def verify_bundle(root: Path, keys: dict[str, Ed25519PublicKey]) -> list[str]:
    """Check a signed bundle; returns problems (empty when the bundle verifies).

    Checks: the envelope ``ATTESTATION_FILE`` verifies with a trusted key; every subject's
    file exists with that SHA-256 and the tag manifest is a subject; every tag manifest entry
    matches; every payload manifest entry matches its file; no file under ``data/`` is
    missing from the payload manifest."""
    problems: list[str] = []
    env_path = root / ATTESTATION_FILE
    try:
        envelope = json.loads(read_small_text(env_path))
    except OSError as exc:
        return [f"{ATTESTATION_FILE}: cannot read signed envelope: {exc.strerror or exc}"]
    except RecursionError:
        return [f"{ATTESTATION_FILE}: cannot read signed envelope: JSON nested too deeply"]
    except ValueError as exc:  # JSONDecodeError, not UTF-8, not a regular file, too large
        return [f"{ATTESTATION_FILE}: cannot read signed envelope: {exc}"]
    try:
        stmt = verify_envelope(envelope, keys)
    except ValueError as exc:
        return [f"{ATTESTATION_FILE}: {exc}"]
    names = set()
    for sub in stmt["subject"]:
        name = sub.get("name", "") if isinstance(sub, dict) else ""
        name = name if isinstance(name, str) else ""
        digest = sub.get("digest") if isinstance(sub, dict) else None
        want = digest.get("sha256") if isinstance(digest, dict) else None
        names.add(name)
        path = root / name
        if (not name or name.startswith("/") or ".." in Path(name).parts
                or not path.is_file()):
            problems.append(f"subject {name!r}: file missing")
        elif sha256_file(path) != want:
            problems.append(f"subject {name}: SHA-256 differs from the signed digest "
                            "(edited after signing)")
    if TAG_MANIFEST not in names:
        problems.append(f"the signed subjects do not include {TAG_MANIFEST}")
    for manifest in (TAG_MANIFEST, PAYLOAD_MANIFEST):
        mpath = root / manifest
        if not mpath.is_file():
            problems.append(f"{manifest}: missing")
            continue
        try:
            entries, bad = _read_manifest(mpath)
        except (OSError, ValueError) as exc:
            problems.append(f"{manifest}: cannot read: {getattr(exc, 'strerror', None) or exc}")
            continue
        problems += bad
        for rel, digest in entries.items():
            f = root / rel
            if ".." in Path(rel).parts or not f.is_file():
                problems.append(f"{manifest}: {rel}: file missing")
            elif sha256_file(f) != digest:
                problems.append(f"{manifest}: {rel}: SHA-256 mismatch (edited after signing)")
        if manifest == TAG_MANIFEST and PAYLOAD_MANIFEST not in entries:
            problems.append(f"{TAG_MANIFEST} does not list {PAYLOAD_MANIFEST}")
        if manifest == PAYLOAD_MANIFEST:
            listed = set(entries)
            for f in sorted((root / "data").rglob("*")):
                if f.is_file():
                    rel = f.relative_to(root).as_posix()
                    if rel not in listed:
                        problems.append(f"{rel}: payload file not in {PAYLOAD_MANIFEST} "
                                        "(added after signing)")
    return problems


def signature_findings(directory: Path, keys: dict[str, Ed25519PublicKey]) -> list[Any]:
    """Verify every signed bundle (a directory holding ``ATTESTATION_FILE``) under
    ``directory`` with :func:`verify_bundle`; returns :class:`~evidence.models.Finding` s:
    ``SIGNATURE_INVALID`` (P0) per problem, ``SIGNATURE_MISSING`` (P0) when no signed bundle
    exists, ``SIGNATURE_VERIFIED`` (P3, informational) per bundle that verifies."""
    from evidence.models import Finding

    directory = Path(directory)
    roots = sorted({p.parent for p in directory.rglob(ATTESTATION_FILE)
                    if ".git" not in p.parts})
    if not roots:
        return [Finding(rule="SIGNATURE_MISSING", severity="P0", path=".",
                        message=f"no signed bundle ({ATTESTATION_FILE}) found",
                        resolution="run `campaign-bot screen` with a signing key, or check "
                        "without --trusted-keys")]
    out: list[Any] = []
    for root in roots:
        rel = root.relative_to(directory).as_posix()
        where = f"{rel}/{ATTESTATION_FILE}" if rel != "." else ATTESTATION_FILE
        problems = verify_bundle(root, keys)
        for prob in problems:
            out.append(Finding(rule="SIGNATURE_INVALID", severity="P0", path=where,
                               message=prob, resolution="a signed bundle is never edited; "
                               "re-run the screen or restore the signed files"))
        if not problems:
            out.append(Finding(rule="SIGNATURE_VERIFIED", severity="P3", path=where,
                               message="signature by a trusted key and all subjects, "
                               "manifests and payload files verify"))
    return out
