"""The Library of Congress BagIt conformance suite (tests/fixtures/bagit-conformance-suite,
public domain) through ``campaign-bot check``, as its own test-harness runs a validator:
every bag under ``valid/`` exits 0, every bag under ``invalid/`` and ``linux-only/`` exits 1
for the reason the bag was made for, every bag under ``warning/`` exits 0 with a P3 note;
``windows-only/`` is skipped on POSIX (as the harness does)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evidence.cli import app
from evidence.manifest import verify_tree, write_bag

SUITE = Path(__file__).resolve().parent / "fixtures" / "bagit-conformance-suite"

INTENDED: dict[str, str] = {
    # invalid bag -> the rule of the finding that must fail it
    "v0.97/invalid/baginfo-missing-encoding": "BAG_DECLARATION",
    "v0.97/invalid/bom-in-bagit.txt": "BAG_DECLARATION",
    "v0.97/invalid/corrupt-data-file": "MANIFEST_MISMATCH",
    "v0.97/invalid/corrupt-tag-file": "MANIFEST_MISMATCH",
    "v0.97/invalid/extra-file-in-bag": "MANIFEST_EXTRA_FILE",
    "v0.97/invalid/invalid-version-number": "BAG_DECLARATION",
    "v0.97/invalid/missing-baginfo": "MANIFEST_MISSING_FILE",
    "v0.97/invalid/missing-bagit.txt": "BAG_DECLARATION",
    "v0.97/invalid/out-of-scope-file-paths-using-dot-notation": "UNSAFE_PATH",
    "v0.97/invalid/out-of-scope-file-paths-using-dot-notation-for-fetch": "UNSAFE_PATH",
    "v0.97/invalid/same-filename-listed-twice-with-different-hashes": "MANIFEST_DUPLICATE",
    "v0.97/linux-only/out-of-scope-file-paths-using-absolute-path": "UNSAFE_PATH",
    "v0.97/linux-only/out-of-scope-file-paths-using-absolute-path-for-fetch": "UNSAFE_PATH",
    "v0.97/linux-only/out-of-scope-file-paths-using-shortcut": "UNSAFE_PATH",
    "v0.97/linux-only/out-of-scope-file-paths-using-shortcut-for-fetch": "UNSAFE_PATH",
    "v0.97/linux-only/out-of-scope-file-paths-using-shortcut-username": "UNSAFE_PATH",
    "v0.97/linux-only/out-of-scope-file-paths-using-shortcut-username-for-fetch":
        "UNSAFE_PATH",
    "v1.0/invalid/bagit-with-invalid-whitespace": "BAG_DECLARATION",
    "v1.0/invalid/notAllManifestsListAllFiles": "MANIFEST_EXTRA_FILE",
    "v1.0/invalid/same-filename-listed-twice-with-different-hashes": "MANIFEST_DUPLICATE",
    "v1.0/invalid/same-filename-listed-twice-with-the-same-hash": "MANIFEST_DUPLICATE",
}

WARNED: dict[str, str] = {
    # warning bag -> the rule of its P3 note
    "v0.97/warning/duplicate-file-with-different-case": "MANIFEST_NAME_VARIANT",
    "v0.97/warning/made-with-md5sum-tools": "MANIFEST_BINARY_MARKER",
    "v0.97/warning/relative-path": "MANIFEST_DOT_SLASH",
    "v0.97/warning/same-filename-listed-twice-with-different-normalization":
        "MANIFEST_NAME_VARIANT",
    "v0.97/warning/same-filename-listed-twice-with-the-same-hash": "MANIFEST_DUPLICATE",
    "v0.97/warning/special-system-files": "SYSTEM_FILE_MISSING",
}


def bags(category: str) -> list[str]:
    """Suite-relative directories of the bags in ``category`` (valid, invalid, ...)."""
    return sorted(p.relative_to(SUITE).as_posix() for p in SUITE.glob(f"v*/{category}/*")
                  if p.is_dir())


VALID = bags("valid")
INVALID = bags("invalid") + bags("linux-only")
WARNING = bags("warning")


def check(bag: str) -> tuple[int, list[dict]]:
    res = CliRunner().invoke(app, ["check", str(SUITE / bag), "--json"])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    return res.exit_code, json.loads(res.stdout)["findings"]


def test_the_suite_is_all_there() -> None:
    """27 valid, 21 invalid (15 + 6 Linux-only) and 6 warning bags, each with an expected
    reason here: a bag added to the suite must be added to this test."""
    assert (len(VALID), len(INVALID), len(WARNING)) == (27, 21, 6)
    assert set(INVALID) == set(INTENDED) and set(WARNING) == set(WARNED)


@pytest.mark.parametrize("bag", VALID)
def test_valid_bag_passes(bag: str) -> None:
    code, findings = check(bag)
    assert [(f["rule"], f["path"], f["message"]) for f in findings
            if f["severity"] != "P3"] == []
    assert code == 0


@pytest.mark.parametrize("bag", INVALID)
def test_invalid_bag_fails_for_its_reason(bag: str) -> None:
    code, findings = check(bag)
    failing = {f["rule"] for f in findings if f["severity"] in ("P0", "P1", "P2")}
    assert INTENDED[bag] in failing, findings
    assert code == 1


@pytest.mark.parametrize("bag", WARNING)
def test_warning_bag_passes_with_a_note(bag: str) -> None:
    code, findings = check(bag)
    assert [(f["rule"], f["message"]) for f in findings if f["severity"] != "P3"] == []
    assert WARNED[bag] in {f["rule"] for f in findings}
    assert code == 0


def test_every_algorithm_is_verified_and_weak_ones_noted() -> None:
    """sha512 (v1.0), sha224, md5 manifests are each hashed and compared, not skipped."""
    for bag, alg, weak in (("v1.0/valid/basicBag", "sha512", False),
                           ("v0.97/valid/uncommon-metadata-separators", "sha224", False),
                           ("v0.97/valid/basic-bag", "md5", True)):
        res = verify_tree(SUITE / bag)
        payload = next(m for m in res.manifests if m.path == f"manifest-{alg}.txt")
        assert payload.entries == payload.verified > 0, payload
        notes = {f.rule for f in res.findings}
        assert ("MANIFEST_WEAK_ALGORITHM" in notes) == weak


def test_every_line_end_is_read() -> None:
    """LF, CRLF (v0.93 basic-bag) and UTF-16 tag files give the same verified entries."""
    for bag in ("v0.97/valid/basic-bag", "v0.93/valid/basic-bag",
                "v0.97/valid/UTF-16-encoded-tag-files"):
        res = verify_tree(SUITE / bag)
        assert res.errors == 0 and res.hashes_ok == res.hashes_checked >= 5, bag


def test_a_bag_inside_a_payload_is_payload() -> None:
    res = verify_tree(SUITE / "v0.97" / "valid" / "bag-in-a-bag")
    assert {m.path for m in res.manifests} == {"manifest-md5.txt", "tagmanifest-md5.txt"}


def test_bags_we_write_stay_sha256_with_lf(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "r.json").write_text("{}\n")
    write_bag(tmp_path)
    manifests = sorted(p.name for p in tmp_path.glob("*manifest-*.txt"))
    assert manifests == ["manifest-sha256.txt", "tagmanifest-sha256.txt"]
    for p in tmp_path.glob("*.txt"):
        assert b"\r" not in p.read_bytes(), p.name
    assert verify_tree(tmp_path).findings == []


@pytest.mark.skipif(os.name != "posix", reason="the suite's POSIX cases")
def test_windows_only_bags_exist_but_are_skipped_on_posix() -> None:
    assert len(bags("windows-only")) == 6
