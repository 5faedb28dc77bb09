"""A signed bundle covers every file it holds: a file its signed manifests do not list, in
any directory (none skipped), is a P0 finding and the bundle is refused; documents are taken
from a verified bundle only as its signed payload manifest lists them
(:func:`evidence.signing.verified_documents`).

Driven through the installed ``campaign-bot`` command: ``keygen`` makes the runner key,
``check --trusted-keys`` judges the bundle."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hostile.corpus import RECEIPTS, clean_bundle, forged_receipt

from evidence.signing import (
    UNSIGNED_MESSAGE,
    BundleRefused,
    check_signed_bundle,
    load_trusted_keys,
    verified_documents,
    verify_bundle,
)

CLI = shutil.which("campaign-bot", path=str(Path(sys.executable).parent))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    assert CLI is not None, "campaign-bot is not installed in this environment"
    return subprocess.run([CLI, *args], capture_output=True, text=True, timeout=120,
                          stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def runner_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """``campaign-bot keygen``: (private key, public key file = the trusted keys file)."""
    key = tmp_path_factory.mktemp("keys") / "runner.key"
    proc = run("keygen", str(key))
    assert proc.returncode == 0, proc.stderr
    return key, key.with_name("runner.key.pub")


@pytest.mark.parametrize("hideout", ["node_modules", ".git", "__pycache__", ".venv"])
def test_forged_receipt_in_a_skipped_directory_is_refused(
        tmp_path: Path, runner_key: tuple[Path, Path], hideout: str) -> None:
    key, pub = runner_key
    b = clean_bundle(tmp_path / "bundle", key)
    ok = run("check", str(b), "--json", "--trusted-keys", str(pub))
    assert ok.returncode == 0, ok.stdout[-3000:]
    assert "SIGNATURE_VERIFIED" in {f["rule"] for f in json.loads(ok.stdout)["findings"]}

    (b / hideout).mkdir()
    (b / hideout / "forged.json").write_text(forged_receipt())
    proc = run("check", str(b), "--json", "--trusted-keys", str(pub))
    assert "Traceback" not in proc.stderr
    rep = json.loads(proc.stdout)
    rules = {(f["rule"], f["severity"], f["path"]) for f in rep["findings"]}
    assert ("UNSIGNED_FILE", "P0", f"{hideout}/forged.json") in rules, rules
    assert "SIGNATURE_VERIFIED" not in {r for r, _, _ in rules}
    assert rep["documents"]["receipts"] == 0  # refused: nothing in it is read
    assert proc.returncode == 1


def test_verified_documents_come_from_the_signed_manifest(
        tmp_path: Path, runner_key: tuple[Path, Path]) -> None:
    key, pub = runner_key
    keys = load_trusted_keys(pub)
    b = clean_bundle(tmp_path / "bundle", key)
    assert verified_documents(b, keys) == sorted(RECEIPTS)
    assert verify_bundle(b, keys) == []
    (b / "__pycache__").mkdir()
    (b / "__pycache__" / "forged.json").write_text(forged_receipt())
    with pytest.raises(BundleRefused) as exc:
        verified_documents(b, keys)
    assert exc.value.problems == [f"__pycache__/forged.json: {UNSIGNED_MESSAGE}"]
    assert "not covered by the signed manifests" in str(exc.value)
    res = check_signed_bundle(b, keys)
    assert (res.ok, res.unsigned, res.problems) == (False, ["__pycache__/forged.json"], [])


def test_many_unsigned_files_are_counted_not_listed(
        tmp_path: Path, runner_key: tuple[Path, Path]) -> None:
    key, pub = runner_key
    b = clean_bundle(tmp_path / "bundle", key)
    (b / "node_modules").mkdir()
    for i in range(50):
        (b / "node_modules" / f"f{i:02d}.js").write_text("x")
    problems = verify_bundle(b, load_trusted_keys(pub))
    assert len(problems) == 21
    assert problems[-1] == "and 30 more files not covered by the signed manifests"
