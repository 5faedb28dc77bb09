"""Real traces and a real two-rank probe: two CPU processes over gloo (torch.distributed)
profile a region with torch.profiler and probe an operator together
(``tests/support/gloo_probe_trace.py``).  The summaries are checked against an independent
reference: ``json.load`` of the same files and a plain-Python interval union."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.operator_probe import OperatorProbe
from evidence.trace_summary import COMM_PATTERN, summarize

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def gloo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gloo")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = subprocess.run([sys.executable, str(ROOT / "tests" / "support" /
                                              "gloo_probe_trace.py"), str(out), str(port)],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert res.returncode == 0, res.stderr[-3000:]
    return out


def _union(iv: list[tuple[int, int]]) -> int:
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(iv):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s  # type: ignore[operator]
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    if cur_e is not None:
        total += cur_e - cur_s  # type: ignore[operator]
    return total


def _reference(path: Path) -> dict:
    import re
    from decimal import Decimal

    evs = json.loads(path.read_text(), parse_float=Decimal)["traceEvents"]
    ns = lambda v: int((Decimal(v) * 1000).to_integral_value())  # noqa: E731
    comm_re = re.compile(COMM_PATTERN, re.I)
    ops = [(e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in evs
           if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    region = [(ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in evs
              if e.get("ph") == "X" and e["name"] == "main-denoise"]
    lo, hi = min(s for s, _ in region), max(e for _, e in region)
    clip = lambda iv: [(max(s, lo), min(e, hi)) for s, e in iv if min(e, hi) > max(s, lo)]  # noqa: E731
    comp = clip([(s, e) for n, s, e in ops if not comm_re.search(n)])
    comm = clip([(s, e) for n, s, e in ops if comm_re.search(n)])
    sums: dict[str, int] = {}
    for n, s, e in ops:
        sums[n] = sums.get(n, 0) + (e - s)
    return {"span": hi - lo, "busy": _union(comp + comm), "compute": _union(comp),
            "sums": sums}


def test_torch_profiler_traces_per_rank_match_the_reference(gloo_run: Path) -> None:
    traces = [gloo_run / "rank1.json", gloo_run / "rank0.json"]  # order does not set rank
    doc = summarize(traces, region="^main-denoise$", kernel_cats=["cpu_op"], top=50)
    assert [(r.rank, r.rank_source) for r in doc.ranks] == [(0, "distributedInfo"),
                                                            (1, "distributedInfo")]
    for r in doc.ranks:
        ref = _reference(Path(r.path))
        assert r.region_span_ns == ref["span"] and r.window_source == "host region"
        assert r.device_busy_ns == ref["busy"]
        assert r.compute_busy_ns == ref["compute"]
        assert r.communication_outside_compute_ns == ref["busy"] - ref["compute"] > 0
        assert r.no_device_ns == ref["span"] - ref["busy"]
        assert {k.name: k.total_ns for k in r.kernels} == ref["sums"]
        comm = {k.name for k in r.kernels if k.communication}
        assert "c10d::allreduce_" in comm and "aten::mm" not in comm


def test_two_rank_probe_gathers_every_rank(gloo_run: Path) -> None:
    doc = OperatorProbe.model_validate_json((gloo_run / "probe.json").read_text(), strict=True)
    assert doc.device_count == 2 and doc.version == 2
    # the ranks agree on the number of measured calls: the largest any wants (3 and 4)
    assert doc.repeats == 4 and [c.rank for c in doc.comparisons] == [0, 1]
    assert sorted((t.rank, t.arm) for t in doc.timings) == [
        (0, "candidate"), (0, "control"), (1, "candidate"), (1, "control")]
    ex = {e.rank: e for e in doc.exactness}
    assert ex[0].bit_exact and not ex[1].bit_exact and ex[1].finite
    assert doc.nonexact_ranks() == [1]
