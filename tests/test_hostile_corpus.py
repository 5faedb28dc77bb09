"""Every case of the hostile-bundle corpus (tests/hostile/corpus.py) through the CLI: the
documented exit code, a finding of the expected rule and severity naming the file, no
traceback, and no document read from a refused bundle."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hostile.corpus import CASES, HostileCase, build, clean_bundle
from typer.testing import CliRunner

from evidence.cli import app
from runners.signer import generate_key


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    key = tmp_path_factory.mktemp("keys") / "runner.key"
    return key, generate_key(key)


def check(d: Path, *args: str) -> tuple[int, dict]:
    res = CliRunner().invoke(app, ["check", str(d), "--json", *args])
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert "Traceback" not in res.output
    return res.exit_code, json.loads(res.stdout)


def test_the_clean_bundle_passes(tmp_path: Path, keys: tuple[Path, Path]) -> None:
    """The corpus's starting point is clean, so each case's finding is the case's doing."""
    key, pub = keys
    code, rep = check(clean_bundle(tmp_path / "b", key), "--trusted-keys", str(pub))
    assert [(f["rule"], f["severity"]) for f in rep["findings"]
            if f["severity"] != "P3"] == []
    assert "SIGNATURE_VERIFIED" in {f["rule"] for f in rep["findings"]}
    assert rep["documents"]["receipts"] == 2
    assert code == 0


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_hostile_bundle(tmp_path: Path, keys: tuple[Path, Path], case: HostileCase) -> None:
    key, pub = keys
    d = build(case, tmp_path / "b", key)
    args = ("--trusted-keys", str(pub)) if case.signed else ()
    code, rep = check(d, *args, *case.args)
    hits = [f for f in rep["findings"] if f["rule"] == case.rule and f["path"] == case.path]
    assert hits, [(f["rule"], f["path"], f["message"][:60]) for f in rep["findings"]]
    assert {f["severity"] for f in hits} == {case.severity}, hits
    if case.words is not None:
        assert any(case.words in f["message"] for f in hits), hits
    if case.receipts is not None:
        assert rep["documents"]["receipts"] == case.receipts
    assert code == rep["exit_code"] == case.exit_code
