"""STALE_STATUS for status files without our schema: the shapes campaign #320's draft PR #321
kept beside its first four-device receipt (``"execution": "queued"``,
``"four_device_samples": 0``, "No four-device execution result yet")."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from evidence.check import check_campaign
from evidence.untyped_status import is_untyped_status, marked_historical

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"

PR_321 = {
    "campaign": "h3-ref2va-4x910b1",
    "execution": "queued",
    "four_device_samples": 0,
    "note": "No four-device execution result yet.",
}


def _campaign(tmp_path: Path, status: dict | None, name: str = "status.json") -> Path:
    root = tmp_path / "c"
    shutil.copytree(EXAMPLE, root)
    (root / "results" / "status.json").unlink()
    if status is not None:
        (root / "results" / name).write_text(json.dumps(status, indent=2) + "\n")
    return root


def _stale(root: Path) -> list:
    return [f for f in check_campaign(root).findings if f.rule == "STALE_STATUS"]


def test_pr_321_shape_is_p2_at_each_contradicted_line(tmp_path: Path) -> None:
    hits = _stale(_campaign(tmp_path, PR_321))
    assert [(f.severity, f.path, f.line, f.field) for f in hits] == [
        ("P2", "results/status.json", 3, "execution"),
        ("P2", "results/status.json", 4, "four_device_samples"),
        ("P2", "results/status.json", 5, "note"),
    ]
    assert "holds a completed measured request" in hits[0].message
    assert "frozen" in (hits[0].resolution or "")


def test_nested_samples_per_track_and_other_state_keys(tmp_path: Path) -> None:
    status = {"state": "Not Started", "results": {"samples": {"5s-lossless": 2,
                                                              "15s-lossless": 1}}}
    hits = _stale(_campaign(tmp_path, status, "campaign-status.json"))
    assert [(f.line, f.field) for f in hits] == [(2, "state"), (5, "results.samples.5s-lossless")]
    assert "5 session(s) of track 5s-lossless" in hits[1].message


@pytest.mark.parametrize("status", [
    {**PR_321, "frozen": True},
    {**PR_321, "superseded_by": "results/baseline-5s-complete.json"},
    {**PR_321, "snapshot": "historical preflight snapshot"},
    {**PR_321, "campaign": "another-campaign"},
    {"execution": "completed", "four_device_samples": 5, "note": "baseline measured"},
], ids=["frozen", "superseded", "snapshot-marker", "other-campaign", "current"])
def test_historical_or_current_files_are_not_stale(tmp_path: Path, status: dict) -> None:
    assert _stale(_campaign(tmp_path, status)) == []


def test_no_completed_receipt_no_finding(tmp_path: Path) -> None:
    root = tmp_path / "c"
    (root / "results").mkdir(parents=True)
    (root / "results" / "status.json").write_text(json.dumps(PR_321))
    assert [f for f in check_campaign(root).findings if f.rule == "STALE_STATUS"] == []


def test_recognisers() -> None:
    assert is_untyped_status("results/status.json", PR_321)
    assert not is_untyped_status("results/status.json", {"schema": "campaign-bot/status@1"})
    assert not is_untyped_status("results/summary.json", PR_321)
    assert not is_untyped_status("results/status.json", [1, 2])
    assert marked_historical({"stage": "preflight"}) and not marked_historical(PR_321)
