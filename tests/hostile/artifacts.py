"""Hostile screen artifacts: zips whoever controls a screen's workflow run (a fork's code runs
on the runner) could upload as the bundle, each with the words the bot's refusal must give.

The bot must end every one of them as a reported screen result, REFUSED with the reason, its
check run completed and its pool freed, never as an exception out of the result handler
(``tests/test_trust_boundary_e2e.py`` uploads each through the GitHub double to a running
``campaign-bot serve``).  Signed cases start from the clean bundle of :mod:`hostile.corpus`,
signed with the key the campaign trusts.  To look at them::

    python tests/hostile/artifacts.py OUT_DIR     # writes OUT_DIR/<case id>.zip and the key
"""

from __future__ import annotations

import io
import json
import shutil
import stat
import sys
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # run as a script
    sys.path.insert(0, str(HERE.parent))

from evidence.manifest import write_bag  # noqa: E402
from hostile.corpus import RECEIPTS, clean_bundle, forged_receipt  # noqa: E402
from runners.signer import generate_key, load_private_key, sign_bundle  # noqa: E402

DEEP = 100_000
"""Nesting of the deep JSON cases (levels): far past Python's recursion limit."""


def zip_entries(entries: list[tuple[str, bytes]], links: dict[str, str] | None = None) -> bytes:
    """A zip holding ``entries`` as given (names unchecked) and ``links`` as symlink entries."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in entries:
            zf.writestr(name, data)
        for name, target in (links or {}).items():
            info = zipfile.ZipInfo(name)
            info.create_system = 3
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, target)
    return buf.getvalue()


def zip_tree(root: Path, extra: list[tuple[str, bytes]] | None = None) -> bytes:
    """Every file under ``root`` (relative names, as ``actions/upload-artifact`` stores them)
    plus ``extra`` entries."""
    files = [(p.relative_to(root).as_posix(), p.read_bytes())
             for p in sorted(root.rglob("*")) if p.is_file()]
    return zip_entries([*files, *(extra or [])])


def _signed(work: Path, key: Path, change: Callable[[Path], None] | None = None) -> Path:
    """The clean bundle in ``work/bundle``; ``change`` is applied before signing (so the
    signature covers it)."""
    d = work / "bundle"
    if d.exists():
        shutil.rmtree(d)
    clean_bundle(d, None)
    if change is not None:
        change(d)
        write_bag(d, info={"External-Identifier": "hostile-corpus"})
    sign_bundle(d, load_private_key(key), {"screen": "s1"})
    return d


def _deep_receipt(d: Path) -> None:
    p = d / RECEIPTS[0]
    obj = json.loads(p.read_text())
    text = json.dumps(obj)
    p.write_text(text[:-1] + ', "note": ' + "[" * DEEP + "]" * DEEP + "}")


def _big_receipt(d: Path) -> None:
    p = d / RECEIPTS[0]
    obj = json.loads(p.read_text())
    obj["note"] = "x" * (9 << 20)
    p.write_text(json.dumps(obj))


def forged_node_modules(work: Path, key: Path, n: int = 12) -> bytes:
    """A genuinely signed bundle plus ``n`` forged receipts under ``node_modules/`` (a
    directory tree walkers skip)."""
    d = _signed(work, key)
    return zip_tree(d, [(f"node_modules/forged-{i:02d}.json", forged_receipt(10 + i).encode())
                        for i in range(n)])


def deep_envelope(work: Path, key: Path) -> bytes:
    """A signed bundle whose DSSE envelope is replaced by arrays nested 100,000 levels."""
    d = _signed(work, key)
    (d / "attestation.dsse.json").write_text("[" * DEEP + "]" * DEEP)
    return zip_tree(d)


@dataclass(frozen=True)
class ArtifactCase:
    """One hostile artifact: ``build(work_dir, signing_key) -> zip bytes``; the refusal must
    contain ``words``."""

    id: str
    what: str
    build: Callable[[Path, Path], bytes]
    words: str


CASES: list[ArtifactCase] = [
    ArtifactCase("file-and-directory", "a file 'data' and an entry 'data/x'",
                 lambda w, k: zip_entries([("data", b"x"), ("data/x", b"y")]),
                 "is a file and also the directory of"),
    ArtifactCase("name-component-over-255-bytes", "an entry whose file name is 300 bytes",
                 lambda w, k: zip_entries([("data/" + "a" * 300 + ".json", b"{}")]),
                 "component over 255 bytes"),
    ArtifactCase("path-40-levels", "an entry 40 directories down",
                 lambda w, k: zip_entries([("/".join(["d"] * 40) + "/x.json", b"{}")]),
                 "levels deep, over the 32 cap"),
    ArtifactCase("symlink-entry", "a symlink entry pointing at /etc/passwd",
                 lambda w, k: zip_entries([("a.json", b"{}")], links={"l": "/etc/passwd"}),
                 "symbolic link in archive"),
    ArtifactCase("not-a-zip", "bytes that start like a zip and are not one",
                 lambda w, k: b"PK\x03\x04" + b"\x00" * 64, "not a zip archive"),
    ArtifactCase("envelope-nested-100k", "the signature envelope nested 100,000 levels",
                 deep_envelope, "cannot read signed envelope: JSON nested too deeply"),
    ArtifactCase("unsigned-json-nested-100k",
                 "a signed bundle plus an unsigned .json nested 100,000 levels",
                 lambda w, k: zip_tree(_signed(w, k), [("data/deep.json",
                                                        ("[" * DEEP + "]" * DEEP).encode())]),
                 "data/deep.json: not covered by the signed manifests"),
    ArtifactCase("signed-receipt-nested-100k",
                 "a receipt nested 100,000 levels that the runner signed",
                 lambda w, k: zip_tree(_signed(w, k, _deep_receipt)),
                 f"{RECEIPTS[0]}: not readable JSON: JSON nested too deeply"),
    ArtifactCase("signed-receipt-9-mib", "a 9 MiB receipt that the runner signed",
                 lambda w, k: zip_tree(_signed(w, k, _big_receipt)),
                 "over the 8388608-byte document limit"),
    ArtifactCase("forged-receipts-in-node-modules",
                 "12 forged receipts under node_modules/ of a signed bundle",
                 forged_node_modules, "node_modules/forged-00.json: not covered by the signed"),
]


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: artifacts.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    (out / "keys").mkdir(parents=True)
    key = out / "keys" / "runner.key"
    generate_key(key)
    for case in CASES:
        (out / f"{case.id}.zip").write_bytes(case.build(out / "work", key))
        print(f"{case.id}: {case.what} -> refused: ...{case.words}...")
    print(f"trusted keys: {key}.pub")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
