"""Files kept outside the checked tree: a bundle's external-artifacts.json (written by the bot
when it commits a screen bundle without its large files) and the Git LFS pointers a git
reader did not fetch.  They are reported as external, never as verified and never as
missing, and only with the digest the signed manifest lists."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.check import check_campaign
from evidence.manifest import EXTERNAL_ARTIFACTS_FILE, ExternalFile, verify_tree
from evidence.signing import check_signed_bundle, load_trusted_keys
from runners.signer import generate_key, load_private_key, sign_bundle, write_bag

VIDEO = "data/outputs/candidate.mp4"
RECEIPT = "data/receipts/session-00.json"


@pytest.fixture
def signed(tmp_path: Path) -> tuple[Path, dict, bytes]:
    """A signed bundle whose video was then moved out, with its external-artifacts map."""
    key = tmp_path / "runner.key"
    generate_key(key)
    root = tmp_path / "bundle"
    (root / "data" / "outputs").mkdir(parents=True)
    (root / "data" / "receipts").mkdir(parents=True)
    video = os.urandom(4096)
    (root / VIDEO).write_bytes(video)
    (root / RECEIPT).write_text("{}\n")
    write_bag(root, {"Bag-Software-Agent": "campaign-bot test"})
    sign_bundle(root, load_private_key(key), {})
    (root / VIDEO).unlink()
    write_map(root, {VIDEO: hashlib.sha256(video).hexdigest()}, size=len(video))
    return root, load_trusted_keys(key.with_name("runner.key.pub")), video


def write_map(root: Path, entries: dict[str, str], size: int = 4096) -> None:
    (root / EXTERNAL_ARTIFACTS_FILE).write_text(json.dumps({
        "schema": "campaign-bot/integrity@1",
        "external": {p: {"sha256": d, "size": size, "external": True,
                         "url": "https://github.com/o/r/actions/runs/1"}
                     for p, d in entries.items()}}, indent=2))


def test_a_moved_out_file_is_external(signed: tuple[Path, dict, bytes]) -> None:
    root, keys, _ = signed
    res = check_signed_bundle(root, keys)
    assert res.ok and res.external == [VIDEO]
    vr = verify_tree(root)
    # the receipt and the three tag files hashed; the video is external
    assert (vr.missing, vr.mismatched, vr.extra, vr.hashes_checked) == (0, 0, 0, 4)
    (ext,) = vr.external
    assert ext.path == VIDEO and ext.status == (  # the map's line 4: the entry's key
        f"external ({EXTERNAL_ARTIFACTS_FILE} line 4; https://github.com/o/r/actions/runs/1), "
        "digest recorded, not verifiable here")
    rep = check_campaign(root, trusted_keys=keys)
    assert rep.external_digests == 1 and rep.hash_errors == 0
    assert not [f for f in rep.findings if f.severity in ("P0", "P1")], rep.findings


def test_a_map_with_another_digest_is_refused(signed: tuple[Path, dict, bytes]) -> None:
    root, keys, _ = signed
    write_map(root, {VIDEO: "0" * 64})
    res = check_signed_bundle(root, keys)
    assert not res.ok
    assert res.problems == [f"manifest-sha256.txt: {VIDEO}: kept outside the bundle with a "
                            "SHA-256 other than the signed one"]
    vr = verify_tree(root)
    assert vr.mismatched == 1
    assert [f.rule for f in vr.findings if f.severity == "P1"] == ["EXTERNAL_DIGEST_MISMATCH"]


def test_a_document_cannot_be_kept_outside(signed: tuple[Path, dict, bytes]) -> None:
    root, keys, video = signed
    receipt = (root / RECEIPT).read_bytes()
    (root / RECEIPT).unlink()
    write_map(root, {VIDEO: hashlib.sha256(video).hexdigest(),
                     RECEIPT: hashlib.sha256(receipt).hexdigest()})
    res = check_signed_bundle(root, keys)
    assert f"manifest-sha256.txt: {RECEIPT}: file missing" in res.problems
    vr = verify_tree(root)
    assert vr.missing == 1
    assert any(f.rule == "EXTERNAL_MAP_INVALID" and RECEIPT in f.message for f in vr.findings)


def test_a_present_file_is_verified_not_external(signed: tuple[Path, dict, bytes]) -> None:
    root, keys, video = signed
    (root / VIDEO).write_bytes(video)
    res = check_signed_bundle(root, keys)
    assert res.ok and res.external == []
    vr = verify_tree(root)
    assert vr.hashes_checked == 5 and vr.external == []
    (root / VIDEO).write_bytes(b"tampered")
    assert not check_signed_bundle(root, keys).ok  # present: checked against its signature


def test_an_unreadable_map_is_a_problem(signed: tuple[Path, dict, bytes]) -> None:
    root, keys, _ = signed
    (root / EXTERNAL_ARTIFACTS_FILE).write_text("{not json")
    res = check_signed_bundle(root, keys)
    assert not res.ok and res.problems[0].startswith(f"{EXTERNAL_ARTIFACTS_FILE}: cannot read")


def test_lfs_pointers_named_by_the_caller(tmp_path: Path) -> None:
    data = b"video bytes"
    (tmp_path / "SHA256SUMS").write_text(f"{hashlib.sha256(data).hexdigest()}  out.mp4\n")
    external = {"out.mp4": ExternalFile(hashlib.sha256(data).hexdigest(), len(data),
                                        "Git LFS pointer")}
    vr = verify_tree(tmp_path, external_files=external)
    assert (vr.missing, [x.path for x in vr.external]) == (0, ["out.mp4"])
    assert vr.external[0].status == ("external (Git LFS pointer), digest recorded, not "
                                     "verifiable here")
    wrong = {"out.mp4": ExternalFile("1" * 64, 3, "Git LFS pointer")}
    vr = verify_tree(tmp_path, external_files=wrong)
    assert vr.mismatched == 1 and vr.findings[0].rule == "EXTERNAL_DIGEST_MISMATCH"


def test_check_cli_lists_them_as_external(signed: tuple[Path, dict, bytes]) -> None:
    root, _, _ = signed
    res = subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()",
                          "check", str(root), "--json"], capture_output=True,
                         text=True, timeout=120)
    rep = json.loads(res.stdout)
    assert rep["external_digests"] == 1 and rep["hash_errors"] == 0
    assert rep["external"][0]["path"] == VIDEO
