"""The hostile-bundle corpus: bundles an attacker (or a broken tool) could hand to
``campaign-bot check``, each built at test time from one clean bundle by one change, with
the finding it must give.

Every case starts from :func:`clean_bundle`: a BagIt bag (``write_bag``) holding a control
and a candidate receipt of one screen, signed like the screen runner signs
(``runners.signer.sign_bundle``; DSSE envelope, ed25519).  ``tests/test_hostile_corpus.py``
runs each case through the CLI.  To look at the bundles themselves::

    python tests/hostile/corpus.py OUT_DIR     # writes OUT_DIR/<case id>/ and OUT_DIR/keys/
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script
    sys.path.insert(0, str(HERE.parent))

from _evidence_factory import receipt  # noqa: E402

from evidence.manifest import write_bag  # noqa: E402
from runners.signer import generate_key, load_private_key, sign_bundle  # noqa: E402

RECEIPTS = ("data/receipts/s0-control.json", "data/receipts/s1-candidate.json")


def forged_receipt(slot: int = 9) -> str:
    """A valid receipt JSON text no runner signed: a control session with a fast wall time."""
    r = receipt("control", slot, 1.0, screen="s1", session_id=f"forged-{slot}")
    return r.model_dump_json(by_alias=True, indent=2) + "\n"


def clean_bundle(dest: Path, key: Path | None) -> Path:
    """Write the clean bundle at ``dest`` (signed with ``key`` when given); returns ``dest``."""
    for rel, (arm, slot) in zip(RECEIPTS, (("control", 0), ("candidate", 1)), strict=True):
        p = dest / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        r = receipt(arm, slot, 10.0 if arm == "control" else 7.0, screen="s1")
        p.write_text(r.model_dump_json(by_alias=True, indent=2) + "\n")
    write_bag(dest, info={"External-Identifier": "hostile-corpus"})
    if key is not None:
        sign_bundle(dest, load_private_key(key), {"screen": "s1"})
    return dest


def _put(rel: str, text: str | None = None) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        p = d / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(forged_receipt() if text is None else text)
    return make


def _symlink(rel: str, target: str) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, d / rel)
    return make


def _replace_with_link(d: Path) -> None:
    """A signed receipt replaced by a symlink to an identical copy outside the bundle."""
    p = d / RECEIPTS[0]
    outside = d.parent / f"{d.name}-outside.json"
    outside.write_bytes(p.read_bytes())
    p.unlink()
    os.symlink(outside, p)


def _reseal(change: Callable[[Path], None]) -> Callable[[Path], None]:
    """Apply ``change`` to an unsigned bundle, then re-seal its manifests (so the only
    problem left is the one ``change`` makes)."""
    def make(d: Path) -> None:
        change(d)
        write_bag(d, info={"External-Identifier": "hostile-corpus"})
    return make


def _deep_receipt(depth: int) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        p = d / RECEIPTS[0]
        obj = json.loads(p.read_text())
        obj["note"] = json.loads("[" * depth + "]" * depth)
        p.write_text(json.dumps(obj))
    return make


def _big_receipt(mib: int) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        p = d / RECEIPTS[0]
        obj = json.loads(p.read_text())
        req = obj["requests"][-1]
        n = (mib << 20) // len(json.dumps(req)) + 1
        obj["requests"] += [{**req, "index": req["index"] + 1 + i} for i in range(n)]
        p.write_text(json.dumps(obj))
    return make


def _bad_manifest_lines(n: int) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        with open(d / "manifest-sha256.txt", "a") as fh:
            fh.write("not a manifest line\n" * n)
    return make


@dataclass(frozen=True)
class HostileCase:
    """One corpus entry: ``change`` applied to :func:`clean_bundle`; ``check`` (with
    ``--trusted-keys`` when ``signed``) must exit ``exit_code`` with a ``rule`` finding of
    ``severity`` naming ``path`` (bundle-relative) and, when given, ``words`` in its
    message; ``receipts`` is how many receipts the check may read (None: not asserted)."""

    id: str
    what: str
    change: Callable[[Path], None]
    rule: str
    severity: str
    path: str
    signed: bool = True
    exit_code: int = 1
    words: str | None = None
    receipts: int | None = 0
    args: tuple[str, ...] = field(default=())


_FORGED = "forged receipt, valid JSON, that no runner signed"

CASES: list[HostileCase] = [
    *[HostileCase(f"forged-receipt-in-{d.strip('.').replace('_', '')}",
                  f"{_FORGED}, in {d}/ at the bundle root (a directory walkers skip)",
                  _put(f"{d}/forged.json"), "UNSIGNED_FILE", "P0", f"{d}/forged.json")
      for d in ("node_modules", ".git", "__pycache__", ".venv")],
    HostileCase("forged-receipt-in-payload-node-modules", f"{_FORGED}, in data/node_modules/",
                _put("data/node_modules/forged.json"), "UNSIGNED_FILE", "P0",
                "data/node_modules/forged.json"),
    HostileCase("forged-receipt-deep", f"{_FORGED}, three new directories down",
                _put("x/y/z/forged.json"), "UNSIGNED_FILE", "P0", "x/y/z/forged.json"),
    HostileCase("forged-receipt-beside-receipts", f"{_FORGED}, beside the signed receipts",
                _put("data/receipts/s9-control.json"), "UNSIGNED_FILE", "P0",
                "data/receipts/s9-control.json"),
    HostileCase("extra-md5-manifest", "a second payload manifest (MD5) added after signing",
                _put("manifest-md5.txt", ""), "UNSIGNED_FILE", "P0", "manifest-md5.txt"),
    HostileCase("symlink-at-root", "a symlink added at the bundle root",
                _symlink("alias.json", "data/receipts/s0-control.json"), "UNSIGNED_FILE",
                "P0", "alias.json"),
    HostileCase("symlinked-directory", "a symlinked directory added in the payload",
                _symlink("data/more", "receipts"), "UNSIGNED_FILE", "P0", "data/more"),
    HostileCase("signed-file-now-a-symlink",
                "a signed receipt replaced by a symlink to identical bytes outside",
                _replace_with_link, "SIGNATURE_INVALID", "P0", "attestation.dsse.json",
                words="is a symlink, not a regular file"),
    HostileCase("nested-envelope", "a copy of the envelope planted in a new sub-directory",
                lambda d: _put("sub/attestation.dsse.json",
                               (d / "attestation.dsse.json").read_text())(d),
                "UNSIGNED_FILE", "P0", "sub/attestation.dsse.json"),
    HostileCase("json-nested-100-levels", "a receipt holding arrays nested 100 levels",
                _reseal(_deep_receipt(100)), "JSON_INVALID", "P1", RECEIPTS[0],
                signed=False, words="101 levels", receipts=1),
    HostileCase("receipt-over-document-cap", "a 9 MiB receipt (document cap 8 MiB)",
                _reseal(_big_receipt(9)), "FILE_TOO_LARGE", "P1", RECEIPTS[0], signed=False,
                words="8388608-byte limit", receipts=1),
    HostileCase("manifest-5000-bad-lines", "5,000 malformed lines appended to the manifest",
                _bad_manifest_lines(5000), "MANIFEST_MALFORMED", "P1", "manifest-sha256.txt",
                signed=False, words="and 4980 more MANIFEST_MALFORMED findings", receipts=2),
]


def build(case: HostileCase, dest: Path, key: Path | None) -> Path:
    """The clean bundle at ``dest`` (signed when ``case.signed``) with ``case.change``."""
    clean_bundle(dest, key if case.signed else None)
    case.change(dest)
    return dest


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: corpus.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    (out / "keys").mkdir(parents=True)
    key = out / "keys" / "runner.key"
    generate_key(key)
    for case in CASES:
        build(case, out / case.id, key)
        print(f"{case.id}: {case.what} -> {case.rule} {case.severity} {case.path}")
    print(f"trusted keys: {key}.pub")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
