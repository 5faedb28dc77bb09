"""The example campaign through ``campaign-bot check``: verdicts, screening and findings as
docs/evidence-guide.md states them; ``--base``, ``--claims`` and the status/manifest
resolution paths."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from evidence.cli import app

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"
STATUS = "results/status.json"
RECEIPT = "bundles/screen-resident-layers-24-5s/data/receipts/s1-candidate.json"


def _readme_table(name: str) -> list[list[str]]:
    text = (ROOT / "docs" / "evidence-guide.md").read_text()
    m = re.search(rf"<!-- example-{name}:start -->\n(.*?)<!-- example-{name}:end -->", text, re.S)
    assert m, f"docs/evidence-guide.md lacks the example-{name} table"
    rows = [r.strip().strip("|").split("|") for r in m.group(1).strip().split("\n")[2:]]
    return [[c.strip() for c in r] for r in rows]


def _check(d: Path, *extra: str) -> tuple[int, dict, str]:
    res = CliRunner().invoke(app, ["check", str(d), "--json", *extra])
    assert "Traceback" not in res.output
    return res.exit_code, (json.loads(res.stdout) if res.exit_code != 2 else {}), res.output


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "campaign"
    shutil.copytree(EXAMPLE, dst)
    return dst


def test_example_matches_readme() -> None:
    code, rep, _ = _check(EXAMPLE)
    assert code == 1
    verdicts = [[v["track"], v["candidate"] or "(control only)", v["verdict"],
                 ", ".join(dict.fromkeys(r["code"] for r in v["reasons"]))]
                for v in rep["verdicts"]]
    assert verdicts == _readme_table("verdicts")
    screening = [[s["screen_id"], s["candidate"], s["decision"]] for s in rep["screening"]]
    assert screening == [r[:3] for r in _readme_table("screening")]
    review = [f for f in rep["findings"] if f["rule"] in {
        "STALE_STATUS", "LIFECYCLE_FAILED", "REQUEST_FAILED", "PROTOCOL_SHORTFALL",
        "INPUTS_DIFFER", "LOSSLESS_UNPROVEN"}]
    findings = [[f["severity"], f["rule"], f"{f['path']}:{f['line']}", f["field"]]
                for f in review]
    assert findings == _readme_table("findings")
    assert all(f["resolution"] for f in review)


def test_example_seed_numbers() -> None:
    _, rep, _ = _check(EXAMPLE)
    rl = next(v for v in rep["verdicts"] if v["candidate"] == "resident-layers-24")
    assert (rl["m"], rl["n"], rl["u"]) == (1, 1, None)
    assert rl["ratio"] == pytest.approx(365.884 / 173.211)
    assert rl["best_confidence"] == pytest.approx(0.5)
    assert rl["more_pairs_needed"] == 2
    s = next(s for s in rep["screening"] if s["candidate"] == "resident-layers-24")
    assert s["first_pair_ratio"] == pytest.approx(2.1124, abs=1e-4)
    assert s["label"] == "screening decision (not a verdict)"


def test_human_output_has_the_tables() -> None:
    res = CliRunner().invoke(app, ["check", str(EXAMPLE), "--details"])
    assert res.exit_code == 1
    for title in ("verdicts per track and candidate", "screening decisions (not verdicts)",
                  "findings", "tail: underpowered", "sessions per screen, track and arm",
                  "manifests"):
        assert title in res.output
    assert "SUPPORTED" not in res.output
    summary = CliRunner().invoke(app, ["check", str(EXAMPLE)])
    assert summary.exit_code == 1
    assert "deciding reason" in summary.output and "SUPPORTED" not in summary.output
    assert "screening decisions (not verdicts)" not in summary.output


def _rehash_status(d: Path) -> None:
    integ = d / "plan" / "preflight-integrity.json"
    obj = json.loads(integ.read_text())
    obj["files"][STATUS] = hashlib.sha256((d / STATUS).read_bytes()).hexdigest()
    integ.write_text(json.dumps(obj, indent=2) + "\n")


def test_stale_status_is_not_a_manifest_error() -> None:
    """plan/preflight-integrity.json hashes the old status: it verifies, no manifest finding."""
    _, rep, _ = _check(EXAMPLE)
    stale = [f for f in rep["findings"] if f["rule"] == "STALE_STATUS"]
    assert stale and all(f["path"] == STATUS for f in stale)
    assert not [f for f in rep["findings"] if f["rule"].startswith("MANIFEST")]
    assert "frozen" in stale[0]["resolution"] and "manifest" in stale[0]["resolution"]
    text = (EXAMPLE / STATUS).read_text().split("\n")
    assert '"execution": "queued"' in text[stale[0]["line"] - 1]


@pytest.mark.parametrize("fix", ["frozen", "refreshed"])
def test_stale_status_resolutions(example_copy: Path, fix: str) -> None:
    p = example_copy / STATUS
    obj = json.loads(p.read_text())
    if fix == "frozen":
        obj |= {"frozen": True, "superseded_by": RECEIPT}
    else:
        obj |= {"execution": "running",
                "samples": {"5s-lossless": 5, "15s-lossless": 1, "5s-lossy": 0,
                            "15s-lossy": 0}}
    p.write_text(json.dumps(obj, indent=2) + "\n")
    _rehash_status(example_copy)
    _, rep, _ = _check(example_copy)
    assert not [f for f in rep["findings"] if f["rule"] == "STALE_STATUS"]
    assert not [f for f in rep["findings"] if f["rule"].startswith("MANIFEST")]


def _git(d: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(d), "-c", "user.email=t@example.com", "-c", "user.name=t",
                    *args], check=True, capture_output=True)


def test_frozen_receipt_changed(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    camp = repo / "campaigns" / "h3"
    shutil.copytree(EXAMPLE, camp)
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "evidence")
    code, rep, _ = _check(camp, "--base", "HEAD")
    assert not [f for f in rep["findings"] if f["rule"] == "FROZEN_RECEIPT_CHANGED"]
    # edit one frozen receipt in place, delete another, add a new versioned one
    p = camp / RECEIPT
    p.write_text(p.read_text().replace("365.884", "265.884"))
    gone = "bundles/baseline-15s/data/receipts/s0-control.json"
    (camp / gone).unlink()
    _git(repo, "tag", "base")
    (camp / "results" / "note.json").write_text("{}\n")
    code, rep, _ = _check(camp, "--base", "base")
    hits = {f["path"]: f for f in rep["findings"] if f["rule"] == "FROZEN_RECEIPT_CHANGED"}
    assert set(hits) == {RECEIPT, gone}
    assert all(f["severity"] == "P1" for f in hits.values())
    line = hits[RECEIPT]["line"]
    assert "265.884" in p.read_text().split("\n")[line - 1]
    assert "deleted" in hits[gone]["message"] and code == 1


def test_bad_base_ref_and_claims_usage(example_copy: Path, tmp_path: Path) -> None:
    code, _, out = _check(example_copy, "--base", "no-such-ref")
    assert code == 2 and "--base" in out
    code, _, out = _check(example_copy, "--claims", str(tmp_path / "missing.md"))
    assert code == 2 and "--claims" in out


def test_claims_option(tmp_path: Path) -> None:
    body = tmp_path / "pr-body.md"
    body.write_text(
        "The resident-layer screen was rejected after its first pair:\n"
        "173.211 s control versus 365.884 s candidate (2.11x).\n"
        "Combined with the queue change this gives 41.5% lower latency.\n")
    code, rep, _ = _check(EXAMPLE, "--claims", str(body))
    claims = [(c["line"], c["text"].strip(), bool(c["traced_to"])) for c in rep["claims"]]
    assert claims == [(2, "173.211 s", True), (2, "365.884 s", True), (2, "2.11x", True),
                      (3, "41.5%", False)]
    hit = [f for f in rep["findings"] if f["rule"] == "UNTRACEABLE_CLAIM"]
    assert [(f["path"], f["line"]) for f in hit] == [(str(body), 3)]
    res = CliRunner().invoke(app, ["check", str(EXAMPLE), "--claims", str(body)])
    assert "claims traced" in res.output and "untraceable" in res.output


@pytest.mark.parametrize(("damage", "scoped"), [
    (lambda p: p.write_text(p.read_text().replace('"client_wall_s": 365.884',
                                                  '"client_wall_s": "365.884"')), True),
    (lambda p: p.write_bytes(p.read_bytes()[:200]), False),
], ids=["schema-invalid-attributed-to-its-screen", "truncated-json-taints-every-verdict"])
def test_unreadable_receipt_is_never_dropped_silently(example_copy: Path, damage,  # noqa: ANN001
                                                      scoped: bool) -> None:
    damage(example_copy / RECEIPT)
    _, rep, _ = _check(example_copy)
    hit = {(v["track"], v["candidate"]) for v in rep["verdicts"]
           if "RECEIPT_UNREADABLE" in [r["code"] for r in v["reasons"]]}
    rl = ("5s-lossless", "resident-layers-24")
    if scoped:  # the JSON still names screen, track and candidate: that row alone
        assert hit == {rl}
        v = next(v for v in rep["verdicts"] if (v["track"], v["candidate"]) == rl)
        assert v["verdict"] == "INCONCLUSIVE" and (v["m"], v["n"]) == (1, 0)
    else:  # nothing can be attributed: every row with sessions carries it
        assert hit == {("5s-lossless", "tp2-sp2"), ("15s-lossless", None)}


def test_review_api_and_prior_noise_flag() -> None:
    from evidence.bundle import load_campaign
    from evidence.review import review

    verdicts, findings = review(load_campaign(EXAMPLE))
    assert [v.verdict for v in verdicts] == ["INCONCLUSIVE"] * 5
    assert {f.rule for f in findings} >= {"STALE_STATUS", "LIFECYCLE_FAILED"}
    code, rep, _ = _check(EXAMPLE, "--prior-noise")
    assert code == 1  # the example holds no 10 control-vs-control differences: no mode shown
    assert all(v["prior_noise"] is None for v in rep["verdicts"])
