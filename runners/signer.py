"""Write a bundle's BagIt manifests and sign it (DSSE envelope, in-toto Statement v1,
ed25519).  Verification lives in :mod:`evidence.signing`.

Key handling: the runner's private key is a PEM (PKCS#8) ed25519 key, named by
``--signing-key`` or ``$CAMPAIGN_BOT_SIGNING_KEY``.  Make one with ``campaign-bot keygen`` or
``openssl genpkey -algorithm ed25519 -out runner.key``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evidence.signing import (
    ATTESTATION_FILE,
    PAYLOAD_MANIFEST,
    PAYLOAD_TYPE,
    PREDICATE_TYPE,
    STATEMENT_TYPE,
    TAG_MANIFEST,
    KeyFileError,
    key_id,
    pae,
    sha256_file,
)

SIGNING_KEY_ENV = "CAMPAIGN_BOT_SIGNING_KEY"


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """Load an unencrypted PEM ed25519 private key.  Raises KeyFileError naming the file."""
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as exc:
        raise KeyFileError(f"{path}: cannot load a PEM private key: {exc}") from exc
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyFileError(f"{path}: not an ed25519 private key")
    return key


def generate_key(private_path: Path) -> Path:
    """Write a new ed25519 private key (PEM PKCS#8, mode 0600) and its public key beside it
    (``<name>.pub``, PEM SubjectPublicKeyInfo).  Returns the public key path.  Refuses to
    overwrite an existing file (FileExistsError)."""
    pub_path = private_path.with_name(private_path.name + ".pub")
    for p in (private_path, pub_path):
        if p.exists():
            raise FileExistsError(f"{p} exists; not overwriting a key")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(pem)
    pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                        serialization.PublicFormat.SubjectPublicKeyInfo)
    pub_path.write_bytes(f"# {key_id(key.public_key())}\n".encode() + pub)
    return pub_path


def _write_bag_fallback(root: Path, info: dict[str, str]) -> None:
    """BagIt 1.0 (RFC 8493) with SHA-256 manifests, used when ``evidence.manifest``'s writer
    is not installed."""
    data = root / "data"
    files = sorted(f for f in data.rglob("*") if f.is_file())
    lines, total = [], 0
    for f in files:
        rel = f.relative_to(root).as_posix()
        rel = rel.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
        lines.append(f"{sha256_file(f)}  {rel}")
        total += f.stat().st_size
    (root / "bagit.txt").write_text("BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n")
    (root / PAYLOAD_MANIFEST).write_text("".join(ln + "\n" for ln in lines))
    meta = {"Bagging-Date": datetime.now(UTC).date().isoformat(),
            "Payload-Oxum": f"{total}.{len(files)}", **info}
    (root / "bag-info.txt").write_text("".join(f"{k}: {v}\n" for k, v in meta.items()))
    tags = ["bagit.txt", "bag-info.txt", PAYLOAD_MANIFEST]
    (root / TAG_MANIFEST).write_text("".join(f"{sha256_file(root / t)}  {t}\n" for t in tags))


def write_bag(root: Path, info: dict[str, str]) -> str:
    """Turn ``root`` (payload under ``root/data``) into a BagIt bag; returns which writer
    was used: ``evidence.manifest`` (when present) or ``runners fallback``."""
    try:
        from evidence.manifest import write_bag as evidence_write_bag  # type: ignore
    except ImportError:
        _write_bag_fallback(root, info)
        return "runners fallback"
    evidence_write_bag(root, info=info)
    return "evidence.manifest"


def sign_bundle(root: Path, key: Ed25519PrivateKey, predicate: dict[str, Any]) -> Path:
    """Sign the bag at ``root``: an in-toto Statement v1 whose subjects are the tag manifest
    and the payload manifest (each with its SHA-256), wrapped in a DSSE envelope signed with
    ``key``; written to ``root/ATTESTATION_FILE`` and returned."""
    subjects = []
    for name in (TAG_MANIFEST, PAYLOAD_MANIFEST):
        subjects.append({"name": name, "digest": {"sha256": sha256_file(root / name)}})
    stmt = {"_type": STATEMENT_TYPE, "subject": subjects, "predicateType": PREDICATE_TYPE,
            "predicate": predicate}
    body = json.dumps(stmt, sort_keys=True, separators=(",", ":")).encode()
    sig = key.sign(pae(PAYLOAD_TYPE, body))
    env = {"payload": base64.b64encode(body).decode(), "payloadType": PAYLOAD_TYPE,
           "signatures": [{"keyid": key_id(key.public_key()),
                           "sig": base64.b64encode(sig).decode()}]}
    out = root / ATTESTATION_FILE
    out.write_text(json.dumps(env, indent=2) + "\n")
    return out


def digest_text(text: str) -> str:
    """SHA-256 hex of UTF-8 text."""
    return hashlib.sha256(text.encode()).hexdigest()
