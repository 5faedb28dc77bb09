"""Operator probes (``campaign-bot/probe@1``): timing on the CPU with torch, exactness, the
document's validation, ``check`` listing them apart from verdicts, and the two probe rules."""

from __future__ import annotations

import json
import shutil
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import torch
import typer
from pydantic import ValidationError
from typer.testing import CliRunner

from evidence.check import check_campaign
from evidence.operator_probe import OperatorProbe
from runners.probe import compare_outputs, register, run_probe

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"

_APP = typer.Typer()
register(_APP)


@_APP.callback()
def _root() -> None:
    """Test root."""


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(64, 96, generator=g), torch.randn(96, 32, generator=g)]


def _mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.mm(x, w)


def _mm_f64(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x.double() @ w.double()).float()


def test_run_probe_times_both_arms_with_warmups_apart() -> None:
    doc = run_probe(_mm, torch.matmul, _inputs(), probe_id="matmul", revision="abc1234",
                    control_op="torch.mm", candidate_op="torch.matmul", warmups=2,
                    repeats=5, input_names=["x", "w"])
    assert doc.device_count == 1 and doc.device.startswith("cpu")
    assert [(s.name, s.shape, s.dtype) for s in doc.inputs] == [
        ("x", [64, 96], "float32"), ("w", [96, 32], "float32")]
    assert [(s.shape, s.dtype) for s in doc.outputs] == [([64, 32], "float32")]
    for t in doc.timings:
        assert len(t.warmups_ms) == 2 and len(t.samples_ms) == 5
        assert all(v > 0 for v in t.samples_ms)
    (ex,) = doc.exactness
    assert ex.bit_exact and ex.finite and ex.max_abs_diff == 0.0 and ex.elements == 64 * 32
    back = OperatorProbe.model_validate_json(doc.model_dump_json(by_alias=True), strict=True)
    assert back == doc


def test_nonexact_candidate_is_measured_not_hidden() -> None:
    doc = run_probe(_mm, _mm_f64, _inputs(), probe_id="f64", revision="abc1234",
                    control_op="mm fp32", candidate_op="mm fp64 accumulate", warmups=0,
                    repeats=2)
    (ex,) = doc.exactness
    assert not ex.bit_exact and ex.finite
    assert ex.max_abs_diff is not None and 0 < ex.max_abs_diff < 1e-3
    assert ex.max_rel_diff is not None and ex.max_rel_diff < 1e-5
    assert doc.nonexact_ranks() == [0]


def test_compare_outputs_edge_cases() -> None:
    a = torch.tensor([1.0, float("nan")])
    assert not compare_outputs(0, a, a.clone()).finite
    shp = compare_outputs(0, torch.zeros(2, 3), torch.zeros(3, 2))
    assert not shp.bit_exact and "shapes" in (shp.detail or "")
    bf = compare_outputs(0, torch.ones(4, dtype=torch.bfloat16), torch.ones(4))
    assert not bf.bit_exact and bf.max_abs_diff == 0.0 and "dtypes" in (bf.detail or "")
    neg0 = compare_outputs(0, torch.tensor([0.0]), torch.tensor([-0.0]))
    assert not neg0.bit_exact and neg0.max_abs_diff == 0.0  # equal values, other bits
    n = compare_outputs(1, [torch.ones(2), torch.ones(3)], (torch.ones(2),))
    assert not n.bit_exact and n.rank == 1


def _probe(**kw: Any) -> dict[str, Any]:
    d: dict[str, Any] = {
        "schema": "campaign-bot/probe@1", "probe_id": "fused-proj", "revision": "0be853d4",
        "control": {"operator": "attention-output projection + SUM"},
        "candidate": {"operator": "BF16 fused projection/SUM"},
        "inputs": [{"name": "x", "shape": [1, 4096, 3072], "dtype": "bfloat16"}],
        "device": "Ascend910B1", "device_count": 2, "warmups": 1, "repeats": 3,
        "timer": "test", "created_at": datetime(2026, 11, 20, tzinfo=UTC).isoformat(),
        "timings": [{"rank": r, "arm": arm, "warmups_ms": [50.0],
                     "samples_ms": [ms] * 3}
                    for r in (0, 1) for arm, ms in (("control", 35.431), ("candidate", 29.126))],
        "exactness": [{"rank": r, "bit_exact": False, "max_abs_diff": 0.0078125,
                       "max_rel_diff": 0.001, "finite": True, "elements": 12582912}
                      for r in (0, 1)],
    }
    d.update(kw)
    return d


@pytest.mark.parametrize(("change", "field"), [
    ({"exactness": []}, "exactness"),
    ({"device_count": 3}, "timings"),
    ({"repeats": 4}, "timings"),
    ({"timings": [{"rank": 0, "arm": "control", "samples_ms": [-1.0]}] * 4}, "timings"),
    ({"schema": "campaign-bot/probe@2"}, "schema"),
])
def test_invalid_probe_documents(change: dict, field: str) -> None:
    with pytest.raises(ValidationError) as ei:
        OperatorProbe.model_validate(_probe(**change))
    assert field in str(ei.value)


def _campaign_with(tmp_path: Path, probe: dict[str, Any]) -> Path:
    root = tmp_path / "c"
    shutil.copytree(EXAMPLE, root)
    (root / "results" / "probe-fused-proj.json").write_text(json.dumps(probe, indent=2) + "\n")
    return root


def test_check_lists_probe_and_never_uses_it_for_a_verdict(tmp_path: Path) -> None:
    before = check_campaign(EXAMPLE)
    rep = check_campaign(_campaign_with(tmp_path, _probe()))
    assert rep.documents["probes"] == 1
    (row,) = rep.probes
    assert (row.probe_id, row.exact_ranks, row.nonexact_ranks) == ("fused-proj", 0, [0, 1])
    assert row.control_median_ms == 35.431 and row.candidate_median_ms == 29.126
    assert len(row.sha256) == 64
    assert [v.model_dump() for v in rep.verdicts] == [v.model_dump() for v in before.verdicts]
    assert not [f for f in rep.findings if f.rule.startswith("PROBE_")]  # no lossless claim
    from rich.console import Console

    con = Console(record=True, width=200)
    from evidence.check import render

    render(rep, con, details=True)
    shown = con.export_text()
    assert "operator probes" in shown and "never verdict inputs" in shown


@pytest.mark.parametrize("kw", [
    {"claims_lossless": True},
    {"track": "5s-lossless"},
    {"candidate_name": "resident-layers-24"},  # screened on 5s-lossless in the example
], ids=["claims-lossless", "lossless-track", "candidate-on-lossless-track"])
def test_nonexact_probe_for_lossless_is_p1(tmp_path: Path, kw: dict) -> None:
    rep = check_campaign(_campaign_with(tmp_path, _probe(**kw)))
    (f,) = [f for f in rep.findings if f.rule == "PROBE_NONEXACT_LOSSLESS"]
    assert f.severity == "P1" and f.path == "results/probe-fused-proj.json"
    assert f.line is not None and f.field == "exactness"
    assert "rank(s) 0, 1 of 2" in f.message


def test_exact_probe_for_lossless_is_fine(tmp_path: Path) -> None:
    exact = [{"rank": r, "bit_exact": True, "max_abs_diff": 0.0, "max_rel_diff": 0.0,
              "finite": True, "elements": 1} for r in (0, 1)]
    rep = check_campaign(_campaign_with(tmp_path, _probe(claims_lossless=True,
                                                         exactness=exact)))
    assert not [f for f in rep.findings if f.rule.startswith("PROBE_")]


CLAIMS = [
    # campaign #320's own words: operator observations, traced to the probe, no finding
    ("The fused projection probe: 35.431 ms -> 29.126 ms, but every rank was nonexact; these "
     "are operator observations, not model gains.", []),
    ("Fused projection gives a 17.8 % end-to-end gain (35.431 -> 29.126 ms).",
     ["PROBE_GAIN_AS_MODEL_GAIN"]),
    ("With the fused projection the model is 1.22x faster.", ["PROBE_GAIN_AS_MODEL_GAIN"]),
    ("Overall latency is 17.8 % lower.", ["PROBE_GAIN_AS_MODEL_GAIN"]),
    ("The operator took 29.126 ms.", []),
    ("Unrelated: 41.5 ms.", ["UNTRACEABLE_CLAIM"]),
]


@pytest.mark.parametrize(("text", "rules"), CLAIMS, ids=[f"c{i}" for i in range(len(CLAIMS))])
def test_probe_gain_quoted_as_model_gain(tmp_path: Path, text: str, rules: list[str]) -> None:
    root = _campaign_with(tmp_path, _probe())
    body = tmp_path / "pr-body.md"
    body.write_text("Summary\n\n" + text + "\n")
    rep = check_campaign(root, claims_file=body)
    got = [f.rule for f in rep.findings if f.path == str(body)]
    assert got == rules, [(c.text, c.traced_to) for c in rep.claims]
    for f in rep.findings:
        if f.rule == "PROBE_GAIN_AS_MODEL_GAIN":
            assert f.severity == "P1" and f.line == 3 and "operator observation" in f.message
    if not rules:
        assert all("probe fused-proj" in (c.traced_to or "") for c in rep.claims)


def test_cli_probe_run(tmp_path: Path) -> None:
    mod = tmp_path / "ops.py"
    mod.write_text(
        "import torch\n"
        "def inputs():\n"
        "    g = torch.Generator().manual_seed(1)\n"
        "    return [torch.randn(8, 16, generator=g), torch.randn(16, 4, generator=g)]\n"
        "def separate(x, w):\n"
        "    return x @ w\n"
        "def combined(x, w):\n"
        "    return torch.cat([x @ w[:, :2], x @ w[:, 2:]], dim=1)\n"
        "def broken(x, w):\n"
        "    raise RuntimeError('kernel not available')\n")
    out = tmp_path / "probe.json"
    r = CliRunner().invoke(_APP, [
        "probe", "run", "--control", f"{mod}:separate", "--candidate", f"{mod}:combined",
        "--inputs", f"{mod}:inputs", "--probe-id", "qkv-combined", "--revision", "abc1234",
        "--out", str(out), "--warmups", "1", "--repeats", "3", "--track", "5s-lossless"],
        terminal_width=200)
    assert r.exit_code == 0, r.output
    doc = OperatorProbe.model_validate_json(out.read_text(), strict=True)
    assert doc.control.operator == "separate" and doc.track == "5s-lossless"
    assert "operator observation, not a model gain" in r.output
    bad = CliRunner().invoke(_APP, [
        "probe", "run", "--control", f"{mod}:separate", "--candidate", f"{mod}:broken",
        "--inputs", f"{mod}:inputs", "--probe-id", "x", "--revision", "r", "--out",
        str(tmp_path / "b.json")])
    assert bad.exit_code == 2 and "candidate arm raised RuntimeError" in bad.output
    assert not (tmp_path / "b.json").exists()
    missing = CliRunner().invoke(_APP, [
        "probe", "run", "--control", "no_such_module_xyz:f", "--candidate", f"{mod}:separate",
        "--inputs", f"{mod}:inputs", "--probe-id", "x", "--revision", "r", "--out",
        str(tmp_path / "c.json")])
    assert missing.exit_code == 2 and "no_such_module_xyz" in missing.output


def test_cli_probe_run_without_torch_says_which_extra(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Without torch (the base install), ``probe run`` names the extra to install in one
    line and exits 2, instead of a traceback."""
    mod = tmp_path / "plain_ops.py"
    mod.write_text("def inputs():\n    return [1.0]\ndef f(x):\n    return x\n")
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    r = CliRunner().invoke(_APP, [
        "probe", "run", "--control", f"{mod}:f", "--candidate", f"{mod}:f",
        "--inputs", f"{mod}:inputs", "--probe-id", "x", "--revision", "r", "--out",
        str(tmp_path / "p.json")], terminal_width=80)
    assert r.exit_code == 2, r.output
    assert r.output.startswith("error: cannot import torch: ") and "[media]" in r.output
    assert "Traceback" not in r.output and r.output.count("\n") == 1, r.output
