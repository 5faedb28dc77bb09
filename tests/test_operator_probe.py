"""Operator probes (``campaign-bot/probe@2``, ``probe@1`` still read): timing on the CPU with
torch (the paths that need no device: the CPU timer, the host-sync timer, repeats by budget,
ABBA blocks, the launch-bound rule, the hold, the ratio's interval and finding), exactness,
the document's validation, ``check`` listing them apart from verdicts, and the two probe
rules."""

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
from evidence.operator_probe import (
    MIN_EFFECT,
    OperatorProbe,
    compare_samples,
    interval_method,
    launch_bound,
    quartiles,
    split_blocks,
)
from runners.probe import (
    MIN_BLOCKS_WANTED,
    MIN_EFFECT_DEFAULT,
    ProbeError,
    ProbeSettings,
    block_order,
    compare_outputs,
    hold_for,
    register,
    repeats_for,
    run_probe,
    split_names,
)

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
                    control_op="torch.mm", candidate_op="torch.matmul",
                    settings=ProbeSettings(warmups=2, repeats=5, budget_s=None),
                    input_names=["x", "w"], control_kernels=["gemm"])
    assert doc.schema_ == "campaign-bot/probe@2" and doc.version == 2
    assert doc.device_count == 1 and doc.device.startswith("cpu")
    assert doc.timing is not None and doc.timing.method == "host"
    assert not doc.timing.cache_flush and doc.timing.launch_floor_ms is None
    assert doc.versions["torch"] == torch.__version__ and "python" in doc.versions
    assert doc.control.kernels == ["gemm"]
    (cmp_,) = doc.comparisons
    assert cmp_.ratio == pytest.approx(doc.medians_ms("candidate")[0]
                                       / doc.medians_ms("control")[0])
    assert cmp_.low is not None and cmp_.high is not None and cmp_.low <= cmp_.high
    assert cmp_.launch_bound == []  # the CPU has no launch floor
    assert [(s.name, s.shape, s.dtype) for s in doc.inputs] == [
        ("x", [64, 96], "float32"), ("w", [96, 32], "float32")]
    assert [(s.shape, s.dtype) for s in doc.outputs] == [([64, 32], "float32")]
    for t in doc.timings:
        assert len(t.warmups_ms) == 2 and len(t.samples_ms) == 5
        assert all(v > 0 for v in t.samples_ms)
        assert t.host_samples_ms == []  # on the CPU the sample is the host time itself
        q1, q3 = t.iqr_ms
        assert t.min_ms <= q1 <= t.median_ms <= q3
    (ex,) = doc.exactness
    assert ex.bit_exact and ex.finite and ex.max_abs_diff == 0.0 and ex.elements == 64 * 32
    back = OperatorProbe.model_validate_json(doc.model_dump_json(by_alias=True), strict=True)
    assert back == doc


def test_nonexact_candidate_is_measured_not_hidden() -> None:
    doc = run_probe(_mm, _mm_f64, _inputs(), probe_id="f64", revision="abc1234",
                    control_op="mm fp32", candidate_op="mm fp64 accumulate",
                    settings=ProbeSettings(warmups=0, repeats=2))
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
        "--out", str(out), "--warmups", "1", "--repeats", "3", "--budget-s", "0",
        "--track", "5s-lossless", "--control-kernels", "gemm,cat", "--candidate-kernels",
        "gemm"], terminal_width=200)
    assert r.exit_code == 0, r.output
    doc = OperatorProbe.model_validate_json(out.read_text(), strict=True)
    assert doc.control.operator == "separate" and doc.track == "5s-lossless"
    assert doc.repeats == 3 and doc.control.kernels == ["gemm", "cat"]
    assert doc.candidate.kernels == ["gemm"]
    assert "operator observation, not a model gain" in r.output
    assert "median" in r.output and "IQR" in r.output and "interval" in r.output
    assert " us" in r.output or " ms" in r.output  # units adapt
    flush = CliRunner().invoke(_APP, [
        "probe", "run", "--control", f"{mod}:separate", "--candidate", f"{mod}:combined",
        "--inputs", f"{mod}:inputs", "--probe-id", "x", "--revision", "r", "--out",
        str(tmp_path / "f.json"), "--flush"])
    assert flush.exit_code == 2 and "need a CUDA GPU or an NPU" in flush.output
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


# ------------------------------------------------------------- timing paths without a device


def test_host_sync_timer_and_budget_on_the_cpu() -> None:
    """``timer="host"`` is the probe@1 timer; a budget sets the repeats from the warmups'
    estimate, clamped to [repeats, max_repeats]."""
    doc = run_probe(_mm, torch.matmul, _inputs(), probe_id="h", revision="r", control_op="a",
                    candidate_op="b", settings=ProbeSettings(timer="host", warmups=2,
                                                             repeats=3, budget_s=10.0,
                                                             max_repeats=7))
    assert doc.timing is not None and doc.timing.method == "host-sync"
    assert doc.repeats == 7 and "synchronize" in doc.timer
    assert "launch latency" in (doc.notes or "")


def test_repeats_for_budget() -> None:
    s = ProbeSettings(repeats=10, budget_s=1.0, max_repeats=500)
    assert repeats_for([4.0, 8.0], s) == 250  # 1000 ms of the cheaper arm
    assert repeats_for([0.001, 0.001], s) == 500  # capped
    assert repeats_for([400.0, 800.0], s) == 10  # at least repeats
    assert repeats_for([None, 1.0], s) == 10  # no warmups, no estimate
    assert repeats_for([2.0, 3.0], ProbeSettings(repeats=4, budget_s=None)) == 4
    assert repeats_for([0.0, 0.0], s) == 500


def test_block_order_is_abba_and_exact() -> None:
    order = block_order(5, {"control": 2, "candidate": 3})
    assert order == ["control"] * 2 + ["candidate"] * 3 + ["candidate"] * 2 + ["control"] * 3
    assert block_order(3, {"control": 0, "candidate": 0}) == [
        "control", "candidate", "candidate", "control", "control", "candidate"]
    big = block_order(1000, {"control": 7, "candidate": 300})
    assert big.count("control") == big.count("candidate") == 1000


def test_hold_only_for_arms_the_host_cannot_keep_ahead_of() -> None:
    host = {"control": [0.08] * 9 + [0.5], "candidate": [0.01] * 10}
    hold = hold_for(host, {"control": 0.03, "candidate": 0.3})
    assert list(hold) == ["control"]  # 0.08 ms to issue 0.03 ms of device work
    assert hold["control"] == pytest.approx(1.25 * 0.08 + 0.01)  # 90th percentile, not max
    assert hold_for({"control": [50.0]}, {"control": 1.0}) == {"control": 2.0}  # capped
    assert hold_for({"control": []}, {"control": 1.0}) == {}


@pytest.mark.parametrize("bad", [
    {"warmups": -1}, {"repeats": 0}, {"repeats": 5, "max_repeats": 4},
    {"budget_s": float("nan")}, {"flush_bytes": 0}, {"min_effect": 1.0},
    {"timer": "wall"}, {"block_s": -1.0},
])
def test_bad_settings_are_refused(bad: dict) -> None:
    with pytest.raises(ProbeError):
        ProbeSettings(**bad).check()


@pytest.mark.parametrize("kw", [{"flush": True}, {"graph": True}])
def test_flush_and_graph_need_a_device(kw: dict) -> None:
    with pytest.raises(ProbeError, match="need a CUDA GPU or an NPU"):
        run_probe(_mm, torch.matmul, _inputs(), probe_id="x", revision="r", control_op="a",
                  candidate_op="b", settings=ProbeSettings(**kw))


def test_interval_containing_one_is_never_faster() -> None:
    import random

    rng = random.Random(3)
    control = [1.0 + rng.gauss(0, 0.1) for _ in range(20)]
    noisy = [0.96 + rng.gauss(0, 0.1) for _ in range(20)]  # wide spread
    ratio, lo, hi, finding = compare_samples(control, noisy)
    assert ratio < 0.96  # a 5 % "gain" by the medians alone
    assert lo is not None and hi is not None and lo < 1 < hi
    assert finding == "no material difference"
    tight = [0.9 + rng.gauss(0, 0.001) for _ in range(40)]
    ratio, lo, hi, finding = compare_samples([1.0 + rng.gauss(0, 0.001) for _ in range(40)],
                                             tight)
    assert hi is not None and hi < 1 and finding == "faster" and ratio == pytest.approx(0.9, 0.01)
    # a tight interval that excludes 1 but a difference under min_effect: not material
    near = compare_samples([1.0, 1.001, 0.999] * 20, [1.01, 1.011, 1.009] * 20)
    assert near[2] is not None and near[2] > 1 and near[3] == "no material difference"
    assert compare_samples([1.0, 1.001] * 20, [1.1, 1.101] * 20)[3] == "slower"
    assert compare_samples([1.0], [0.5]) == (0.5, None, None, "too few samples")
    assert compare_samples([2.0, 2.0], [1.0, 1.0]) == (0.5, 0.5, 0.5, "faster")
    with pytest.raises(ValueError):
        compare_samples([0.0, 0.0], [1.0, 1.0])
    with pytest.raises(ValueError):
        compare_samples([], [1.0])


def _blocks(levels: list[float], per_block: int, seed: int) -> list[float]:
    """Calls in blocks at the given levels (a device's clock under power capping moves
    from block to block), within 0.1 % of their level inside a block."""
    import random

    rng = random.Random(seed)
    return [lv * (1 + rng.gauss(0, 0.001)) for lv in levels for _ in range(per_block)]


def test_block_interval_holds_the_drift_between_blocks() -> None:
    # block levels within +-3 % of 1.00 (control) and of 1.035 (candidate)
    control = _blocks([0.97, 1.03, 1.00, 0.98, 1.02, 1.00], 200, seed=1)
    candidate = _blocks([1.00, 1.06, 1.00, 1.05, 1.03, 1.04], 200, seed=2)
    r_calls, lo_calls, hi_calls, f_calls = compare_samples(control, candidate,
                                                           min_effect=0.02)
    r_blocks, lo, hi, f_blocks = compare_samples(control, candidate, min_effect=0.02,
                                                 block_calls=(200, 200))
    assert r_calls == r_blocks == pytest.approx(1.035, abs=0.002)  # the same medians
    assert lo_calls is not None and hi_calls is not None and lo is not None and hi is not None
    # calls of one block are not independent: by calls the interval excludes 1 and the
    # 3.5 % difference reads "slower"; by blocks the interval holds the drift and reaches 1
    assert f_calls == "slower" and lo_calls > 1
    assert lo < 1 < hi and f_blocks == "no material difference"
    assert (hi - lo) > 5 * (hi_calls - lo_calls)
    # deterministic: a probe's document is reproducible from its samples
    assert compare_samples(control, candidate, min_effect=0.02, block_calls=(200, 200)) == (
        r_blocks, lo, hi, f_blocks)
    # a steady 10 % gain stays "faster" by blocks
    steady = [x * 0.9 for x in control]
    assert compare_samples(control, steady, block_calls=(200, 200))[3] == "faster"


def test_block_interval_needs_three_blocks_per_arm() -> None:
    control = _blocks([0.98, 1.02], 50, seed=3)
    candidate = _blocks([1.01, 0.99], 50, seed=4)
    # two blocks per arm: the call-level interval, and the method says so
    assert compare_samples(control, candidate, block_calls=(50, 50)) == compare_samples(
        control, candidate)
    assert "over calls" in interval_method((50, 50), 100, 100)
    assert "blocks, then calls" in interval_method((25, 25), 100, 100)
    assert "4 control and 4 candidate blocks" in interval_method((25, 25), 100, 100)
    assert "over calls" in interval_method(None, 100, 100)


def test_split_blocks_follows_block_order() -> None:
    assert split_blocks([1.0, 2.0, 3.0, 4.0, 5.0], 2) == [[1.0, 2.0], [3.0, 4.0], [5.0]]
    assert split_blocks([1.0, 2.0], 0) == [[1.0], [2.0]]
    order = block_order(7, {"control": 3, "candidate": 2})
    calls = {"control": [], "candidate": []}  # type: dict[str, list[float]]
    for i, arm in enumerate(order):
        calls[arm].append(float(i))
    # every block of an arm is a run of consecutive positions in the order
    for arm, k in (("control", 3), ("candidate", 2)):
        for b in split_blocks(calls[arm], k):
            assert b == [b[0] + j for j in range(len(b))]


def test_probe_records_its_blocks_and_uses_them() -> None:
    doc = run_probe(_mm, torch.matmul, _inputs(), probe_id="blocks", revision="r",
                    control_op="a", candidate_op="b",
                    settings=ProbeSettings(warmups=2, repeats=40, budget_s=None,
                                           block_s=10.0))
    assert doc.timing is not None
    bc = doc.timing.block_calls
    # block_s would put every call in one block; a block holds at most a quarter of them
    assert bc == {"control": 40 // MIN_BLOCKS_WANTED, "candidate": 40 // MIN_BLOCKS_WANTED}
    (cmp_,) = doc.comparisons
    assert "blocks, then calls" in cmp_.method and "4 control and 4 candidate" in cmp_.method
    c = next(t for t in doc.timings if t.arm == "control").samples_ms
    k = next(t for t in doc.timings if t.arm == "candidate").samples_ms
    assert compare_samples(c, k, block_calls=(bc["control"], bc["candidate"]))[:3] == (
        cmp_.ratio, cmp_.low, cmp_.high)
    assert doc.timing.min_effect == MIN_EFFECT == MIN_EFFECT_DEFAULT
    again = OperatorProbe.model_validate_json(doc.model_dump_json(by_alias=True))
    assert again.timing is not None and again.timing.block_calls == bc


def test_hold_is_decided_by_the_median_not_a_few_slow_samples() -> None:
    # a 0.33 ms arm issued in 0.03 ms, with 6 of 50 host samples slowed to 0.3 ms (host
    # jitter): its 90th percentile reaches half its device time, its median does not
    host = {"candidate": [0.03] * 44 + [0.3] * 6}
    assert hold_for(host, {"candidate": 0.33}) == {}
    # an arm the host truly cannot keep ahead of is still held
    assert list(hold_for({"control": [0.05] * 50}, {"control": 0.03})) == ["control"]


def test_launch_bound_rule() -> None:
    assert launch_bound(0.02, None, 0.007)  # under 4 launch floors
    assert not launch_bound(0.5, 0.05, 0.007)
    assert launch_bound(0.5, 0.6, 0.007)  # the host takes longer to issue than the device
    assert not launch_bound(0.02, None, None)  # nothing known (CPU, probe@1)
    assert quartiles([3.0]) == (3.0, 3.0)
    assert quartiles([1.0, 2.0, 3.0, 4.0, 5.0]) == (2.0, 4.0)


def test_split_names() -> None:
    assert split_names(["MatMulV3, Cast", "Cast", " ", "FlashAttentionScore"]) == [
        "MatMulV3", "Cast", "FlashAttentionScore"]
    assert split_names(None) == []


def _v2(**kw: Any) -> dict[str, Any]:
    d = _probe(schema="campaign-bot/probe@2",
               timing={"method": "cuda-events", "cache_flush": True, "flush_bytes": 1 << 28,
                       "min_repeats": 3},
               versions={"torch": "2.11.0+cu130", "cuda": "13.0", "driver": "580.159.04"},
               comparisons=[{"rank": r, "ratio": 29.126 / 35.431, "low": 0.8, "high": 0.84,
                             "confidence": 0.95, "method": "test", "finding": "faster"}
                            for r in (0, 1)])
    d.update(kw)
    return d


def test_probe_v2_and_v1_documents() -> None:
    v2 = OperatorProbe.model_validate(_v2())
    assert v2.version == 2 and v2.versions["driver"] == "580.159.04"
    v1 = OperatorProbe.model_validate(_probe())
    assert v1.version == 1 and v1.timing is None and v1.comparisons == []


@pytest.mark.parametrize(("change", "words"), [
    ({"timing": None}, "timing"),
    ({"comparisons": []}, "comparisons"),
    ({"comparisons": [{"rank": r, "ratio": 0.5, "confidence": 0.95, "method": "t",
                       "finding": "no material difference"} for r in (0, 1)]}, "ratio"),
    ({"comparisons": [{"rank": r, "ratio": 29.126 / 35.431, "low": 0.8, "high": 1.01,
                       "confidence": 0.95, "method": "t", "finding": "faster"}
                      for r in (0, 1)]}, "says faster"),
    ({"schema": "campaign-bot/probe@3"}, "unknown schema version"),
])
def test_invalid_v2_documents(change: dict, words: str) -> None:
    with pytest.raises(ValidationError, match=words):
        OperatorProbe.model_validate(_v2(**change))


def test_check_lists_a_v2_probe_with_its_findings(tmp_path: Path) -> None:
    rep = check_campaign(_campaign_with(tmp_path, _v2()))
    (row,) = rep.probes
    assert row.findings == ["faster", "faster"]
    assert not [f for f in rep.findings if f.path == "results/probe-fused-proj.json"]
    from rich.console import Console

    from evidence.check import render

    con = Console(record=True, width=250)
    render(rep, con, details=True)
    shown = con.export_text()
    assert "35.4 ms" in shown and "faster" in shown


def test_v1_document_with_v2_fields_is_refused() -> None:
    with pytest.raises(ValidationError, match="not part of probe@1"):
        OperatorProbe.model_validate(_probe(versions={"torch": "2.11"}))


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
