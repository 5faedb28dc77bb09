"""Bag text that once stopped ``campaign-bot check`` with a traceback or a usage error: a tag
file encoding that is not a text codec, numbers longer than Python converts, and a file name
that is not UTF-8 in ``--json`` output.  Each is a finding now, and the check goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.check import check_campaign
from evidence.manifest import write_bag

CLI = [sys.executable, "-c", "from evidence.launch import main; main()"]


def _bag(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    (root / "data" / "a.txt").write_text("a\n")
    write_bag(root)
    return root


@pytest.mark.parametrize("encoding", ["rot13", "base64", "zlib", "hex_codec"])
def test_a_tag_file_encoding_that_is_not_text_is_a_finding(tmp_path: Path,
                                                           encoding: str) -> None:
    bag = _bag(tmp_path / "bag")
    (bag / "bagit.txt").write_text(
        f"BagIt-Version: 1.0\nTag-File-Character-Encoding: {encoding}\n")
    rep = check_campaign(bag)
    assert any(f.rule == "BAG_DECLARATION" and f.line == 2 and "not a text encoding"
               in f.message for f in rep.findings), rep.findings
    assert rep.hashes_checked >= 1  # the payload was verified (bagit.txt itself differs)


def test_numbers_longer_than_python_converts_are_findings(tmp_path: Path) -> None:
    bag = _bag(tmp_path / "bag")
    (bag / "bagit.txt").write_text(
        f"BagIt-Version: {'9' * 5000}.0\nTag-File-Character-Encoding: UTF-8\n")
    info = bag / "bag-info.txt"
    info.write_text(info.read_text() + f"Payload-Oxum: {'1' * 5000}.1\n")
    rep = check_campaign(bag)
    rules = {(f.rule, f.path) for f in rep.findings}
    assert ("BAG_DECLARATION", "bagit.txt") in rules
    assert ("BAG_PAYLOAD_OXUM", "bag-info.txt") in rules
    assert rep.hashes_checked >= 1


def test_json_output_names_a_file_whose_name_is_not_utf8(tmp_path: Path) -> None:
    bag = _bag(tmp_path / "bag")
    os.rename(bytes(bag / "data" / "a.txt"), bytes(bag / "data") + b"/\xff\xfe.txt")
    res = subprocess.run([*CLI, "check", str(bag), "--json"], capture_output=True,
                         timeout=120)
    assert res.returncode == 1, res.stderr.decode(errors="replace")
    doc = json.loads(res.stdout)
    assert ("MANIFEST_EXTRA_FILE", "data/\\xff\\xfe.txt") in {
        (f["rule"], f["path"]) for f in doc["findings"]}
    assert b"Traceback" not in res.stderr
