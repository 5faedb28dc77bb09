"""``campaign-bot check DIRECTORY`` starts hashing a bag's payload before typer parses the
command line (evidence.cli.main): the result must be exactly what a check without that head
start gives, tampering must still show, and nothing is hashed ahead for ``--trusted-keys``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evidence import launch
from evidence.manifest import write_bag

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("args", "directory"), [
    (["check", "bag"], "bag"),
    (["check", "--json", "bag", "--details"], "bag"),
    (["check", "--max-file-bytes", "10", "bag"], "bag"),
    (["check", "--max-file-bytes=10", "bag"], "bag"),
    (["check", "--base", "HEAD~1", "--claims", "c.md", "bag"], "bag"),
    (["--version", "check", "bag"], "bag"),
    (["check", "bag", "--trusted-keys", "k.pem"], None),
    (["check", "--trusted-keys=k.pem", "bag"], None),
    (["check", "--help"], None),
    (["check", "--", "bag"], None),
    (["check"], None),
    (["header", "bag"], None),
    (["--help"], None),
])
def test_the_directory_of_a_check_is_found_on_the_command_line(
        args: list[str], directory: str | None) -> None:
    got = launch.check_directory(args)
    assert got == (Path(directory) if directory else None)


def _bag(root: Path) -> Path:
    (root / "data").mkdir(parents=True)
    for i in range(4):
        (root / "data" / f"m{i}.bin").write_bytes(bytes([i]) * ((1 << 20) + i))
    (root / "data" / "note.json").write_text('{"a": 1}\n')
    write_bag(root)
    return root


LAUNCH = "from evidence.launch import main; main()"  # the console script
CLI = "from evidence.cli import main; main()"


def _check(*args: str, entry: str = LAUNCH) -> tuple[int, dict[str, object]]:
    res = subprocess.run([sys.executable, "-c", entry, "check", *args, "--json"],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert res.stdout, res.stderr
    doc = json.loads(res.stdout)
    doc.pop("seconds", None)
    return res.returncode, doc


def test_check_through_main_equals_check_campaign_and_still_sees_tampering(
        tmp_path: Path) -> None:
    from evidence.check import check_campaign

    bag = _bag(tmp_path / "bag")
    code, doc = _check(str(bag))
    assert _check(str(bag), entry=CLI) == (code, doc)
    direct = json.loads(check_campaign(bag).model_dump_json(by_alias=True))
    direct.pop("seconds", None)
    assert code == 0 and doc == direct
    assert doc["hashes_checked"] == doc["files_hashed"] and doc["hash_errors"] == 0

    with open(bag / "data" / "m2.bin", "r+b") as f:
        f.write(b"\xff")
    code, doc = _check(str(bag))
    assert code == 1
    assert [f["rule"] for f in doc["findings"]] == ["MANIFEST_MISMATCH"]  # type: ignore[index, union-attr]
    assert "data/m2.bin" in json.dumps(doc["findings"])


def test_the_console_script_keeps_exit_codes_and_output_of_other_commands(
        tmp_path: Path) -> None:
    bad = subprocess.run([sys.executable, "-c", LAUNCH, "check", str(tmp_path / "absent")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 2 and "absent" in bad.stderr
    usage = subprocess.run([sys.executable, "-c", LAUNCH, "schema", "nope"],
                           capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert usage.returncode == 2 and "nope" in usage.stderr
    schema = subprocess.run([sys.executable, "-c", LAUNCH, "schema", "receipt"],
                            capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert schema.returncode == 0 and json.loads(schema.stdout)["title"]
