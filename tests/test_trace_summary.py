"""``campaign-bot trace summarize`` on synthetic Chrome traces with known overlaps and unions
(torch.profiler's and msprof's shapes), the command line, and ``check`` listing summaries."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from evidence.check import check_campaign
from evidence.trace_cli import register
from evidence.trace_summary import TraceError, TraceSummary, summarize, summarize_trace

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"

_APP = typer.Typer()
register(_APP)


@_APP.callback()
def _root() -> None:
    """Test root."""


def _x(name: str, ts: float | str, dur: float, pid: int = 1, cat: str | None = "kernel",
       tid: int = 7) -> dict:
    ev = {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": pid, "tid": tid}
    if cat is not None:
        ev["cat"] = cat
    return ev


# Known layout (microseconds): region [0, 40); compute A [0, 10), B [5, 15); communication
# C [12, 20) (3 us under B), D [25, 30) (alone); a host op [30, 38) that is no device kernel.
TORCH_SHAPE = {
    "schemaVersion": 1,
    "distributedInfo": {"backend": "nccl", "rank": 3, "world_size": 4},
    "traceEvents": [
        _x("main-denoise", 1000.0, 40.0, pid=9, cat="user_annotation"),
        _x("MatMulV3", 1000.0, 10.0),
        _x("LaserAttention", 1005.0, 10.0, tid=8),
        _x("ncclDevKernel_AllGather_RING_LL", 1012.0, 8.0, tid=9),
        _x("All-to-All", 1025.0, 5.0),
        _x("aten::mm", 1030.0, 8.0, pid=9, cat="cpu_op"),
        {"ph": "M", "name": "process_name", "pid": 9, "args": {"name": "python3"}},
    ],
}


def _write(tmp: Path, name: str, doc: object) -> Path:
    p = tmp / name
    p.write_text(json.dumps(doc))
    return p


def test_known_overlaps_and_unions(tmp_path: Path) -> None:
    r = summarize_trace(_write(tmp_path, "t.json", TORCH_SHAPE), region="main-denoise")
    assert (r.rank, r.rank_source) == (3, "distributedInfo")
    assert (r.window_source, r.window_start_ns, r.window_end_ns) == ("host region",
                                                                     1_000_000, 1_040_000)
    assert any("no device-side annotation" in n for n in r.notes)
    assert r.region_span_ns == r.region_union_ns == 40_000
    assert r.device_kernels == 4
    assert r.compute_busy_ns == 15_000  # A and B overlap: [0, 15)
    assert r.communication_busy_ns == 13_000  # C 8 + D 5
    assert r.device_busy_ns == 25_000  # [0, 20) and [25, 30)
    assert r.communication_outside_compute_ns == 10_000  # C's last 5 + D's 5
    assert r.no_device_ns == 15_000  # 40 - 25: the host op does not count
    assert r.copy_busy_ns == 0 and r.compute_communication_overlap_ns == 3_000
    assert [(k.name, k.total_ns, k.communication) for k in r.kernels] == [
        ("LaserAttention", 10_000, False), ("MatMulV3", 10_000, False),
        ("ncclDevKernel_AllGather_RING_LL", 8_000, True), ("All-to-All", 5_000, True)]
    assert r.kernel_total_ns == 33_000


def test_msprof_shape_exact_nanoseconds_and_late_metadata(tmp_path: Path) -> None:
    """msprof's trace_view.json: a bare array, string microsecond timestamps, device tasks
    under the "Ascend Hardware" process whose metadata comes last, its own derived
    "Overlap Analysis" process ignored, and no closing bracket (allowed by the format)."""
    evs = [
        _x("MatMulV3", "1693456132834455.520", 2.0005, pid=2, cat=None),
        _x("hcom_allGather__123_0_1", "1693456132834456.521", 3.0, pid=2, cat=None),
        _x("Communication(Not Overlapped)", "1693456132834456.521", 3.0, pid=5, cat=None),
        {"ph": "M", "name": "process_name", "pid": 5, "args": {"name": "Overlap Analysis"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "Ascend Hardware"}},
    ]
    text = "[\n" + ",\n".join(json.dumps(e) for e in evs) + ",\n"
    p = tmp_path / "trace_view.json"
    p.write_text(text)
    r = summarize_trace(p, position=5)
    assert (r.rank, r.rank_source, r.device_kernels) == (5, "position", 2)
    assert r.window_start_ns == 1693456132834455520
    assert r.window_end_ns == 1693456132834456521 + 3000
    # MatMulV3 ends at ...457.5205 us -> ns ...457520.5 rounds half-even to ...457520
    assert r.compute_busy_ns == 2000  # 2.0005 us -> 2000.5 ns -> 2000 (half to even)
    assert r.communication_outside_compute_ns == 3000 - 999  # overlap 455.520+2.0005-456.521
    assert any("unterminated" in n for n in r.notes)
    assert r.sha256 == hashlib.sha256(text.encode()).hexdigest() and r.bytes == len(text)


def test_begin_end_pairs_and_region_union(tmp_path: Path) -> None:
    evs = [
        {"ph": "B", "name": "step", "ts": 0, "pid": 1, "tid": 1, "cat": "user_annotation"},
        {"ph": "E", "ts": 10, "pid": 1, "tid": 1},
        {"ph": "B", "name": "step", "ts": 20, "pid": 1, "tid": 1, "cat": "user_annotation"},
        {"ph": "E", "ts": 25, "pid": 1, "tid": 1},
        _x("k", 2, 3), _x("k", 21, 1),
        {"ph": "E", "ts": 99, "pid": 1, "tid": 2},  # an E without its B
    ]
    r = summarize_trace(_write(tmp_path, "be.json", {"traceEvents": evs}), region="^step$")
    assert (r.region_matches, r.region_span_ns, r.region_union_ns) == (2, 25_000, 15_000)
    assert r.no_device_ns == 25_000 - 4_000
    assert any("without its B" in n for n in r.notes)


@pytest.mark.parametrize(("content", "message"), [
    (b"", "not valid JSON"),
    (b"{\"traceEvents\": [1, 2", "not valid JSON"),
    (b"{\"schema\": \"campaign-bot/receipt@1\"}", "holds no trace events"),
    (b"\xff\xfe garbage", "not valid JSON"),
])
def test_bad_traces_name_the_file(tmp_path: Path, content: bytes, message: str) -> None:
    p = tmp_path / "bad.json"
    p.write_bytes(content)
    with pytest.raises(TraceError, match=message) as ei:
        summarize_trace(p)
    assert str(p) in str(ei.value)


def test_two_traces_one_rank_refused(tmp_path: Path) -> None:
    a = _write(tmp_path, "a.json", TORCH_SHAPE)
    with pytest.raises(ValueError, match="both hold rank 3"):
        summarize([a, a])


def _run(*args: object) -> tuple[int, str]:
    # COLUMNS as well: rich takes the width from it where it is set (pytest-xdist's workers
    # set 80), and the table's headers are asserted whole
    r = CliRunner().invoke(_APP, ["trace", *map(str, args)], terminal_width=200,
                           env={"COLUMNS": "200"})
    return r.exit_code, r.stdout + r.stderr


def test_cli_writes_a_valid_summary_with_digests(tmp_path: Path) -> None:
    t = _write(tmp_path, "rank3.json", TORCH_SHAPE)
    out = tmp_path / "out" / "summary.json"
    code, text = _run("summarize", t, "--out", out, "--region", "main-denoise", "--top", "2")
    assert code == 0, text
    doc = TraceSummary.model_validate_json(out.read_text(), strict=True)
    (r,) = doc.ranks
    assert r.sha256 == hashlib.sha256(t.read_bytes()).hexdigest()
    assert len(r.kernels) == 2 and r.kernel_names == 4
    assert "comm outside compute" in text and "not exclusive" in text
    assert "10.0 us" in text and "0.000" not in text  # units adapt in text
    assert isinstance(json.loads(out.read_text())["ranks"][0]["device_busy_ns"], int)
    code, text = _run("summarize", tmp_path / "missing.json", "--out", out)
    assert code == 2 and "missing.json" in text
    bad = tmp_path / "bad.json"
    bad.write_text("[{")
    code, text = _run("summarize", bad, "--out", out)
    assert code == 2 and "bad.json" in text and "Traceback" not in text
    code, text = _run("summarize", t, "--out", out, "--region", "(")
    assert code == 2 and "cannot summarize" in text


def test_check_lists_summaries_and_never_counts_them(tmp_path: Path) -> None:
    root = tmp_path / "c"
    shutil.copytree(EXAMPLE, root)
    before = check_campaign(root)
    t = _write(tmp_path, "rank3.json", TORCH_SHAPE)
    doc = summarize([t], region="main-denoise", campaign="h3-ref2va-4x910b1")
    (root / "results" / "trace-summary.json").write_text(
        doc.model_dump_json(by_alias=True, indent=2))
    after = check_campaign(root)
    assert after.documents["trace_summaries"] == 1
    (row,) = after.trace_summaries
    assert row.rank == 3 and row.communication_outside_compute_s == pytest.approx(1e-5)
    assert [v.model_dump() for v in after.verdicts] == [v.model_dump() for v in before.verdicts]
    assert [d.model_dump() for d in after.screening] == [d.model_dump()
                                                         for d in before.screening]
    assert after.exit_code == before.exit_code
    # an invalid summary is a SCHEMA_INVALID finding with field and line
    bad = json.loads(doc.model_dump_json(by_alias=True))
    bad["ranks"][0]["no_device_ns"] = -1
    (root / "results" / "trace-summary.json").write_text(json.dumps(bad, indent=2))
    hits = [f for f in check_campaign(root).findings if f.path == "results/trace-summary.json"]
    assert [(f.rule, f.field) for f in hits] == [("SCHEMA_INVALID", "ranks.0.no_device_ns")]
    assert hits[0].line is not None


# -------------------------------------------------- the way profilers mean them (@2)


def test_device_side_region_copies_and_short_names(tmp_path: Path) -> None:
    """torch.profiler's gpu_user_annotation sets the window; copies and memsets are their own
    class; template names are shortened with the full name kept."""
    full = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, "
            "1ul>)")
    evs = [
        _x("main-denoise", 0.0, 50.0, pid=9, cat="user_annotation"),  # host: opens early
        _x("main-denoise", 10.0, 30.0, cat="gpu_user_annotation", tid=99),
        _x(full, 10.0, 10.0),
        _x("Memcpy HtoD (Pinned -> Device)", 15.0, 20.0, cat="gpu_memcpy", tid=8),
        _x("Memset (Device)", 36.0, 2.0, cat="gpu_memset", tid=8),
    ]
    p = _write(tmp_path, "dev.json", {"traceEvents": evs})
    r = summarize_trace(p, region="^main-denoise$")
    assert (r.window_source, r.window_start_ns, r.window_end_ns) == ("device region", 10_000,
                                                                     40_000)
    assert r.compute_busy_ns == 10_000  # the copy is not compute
    assert r.copy_busy_ns == 22_000 and r.compute_copy_overlap_ns == 5_000
    assert r.device_busy_ns == 27_000 and r.no_device_ns == 3_000
    assert r.communication_busy_ns == 0 and r.communication_outside_compute_ns == 0
    (k,) = [k for k in r.kernels if k.full_name == full]
    assert k.name == "at::native::vectorized_elementwise_kernel" and k.kind == "compute"
    assert {k.name: k.kind for k in r.kernels}["Memset (Device)"] == "copy"
    host = summarize_trace(p, region="^main-denoise$", device_annotation=False)
    assert host.window_source == "host region" and host.no_device_ns == 50_000 - 27_000
    assert any("host span opens before its first kernel" in n for n in host.notes)


def test_cpu_only_trace_is_a_finding_not_zeros(tmp_path: Path) -> None:
    evs = [_x("aten::mm", 0.0, 5.0, cat="cpu_op"), _x("step", 0.0, 9.0, cat="user_annotation")]
    p = _write(tmp_path, "cpu.json", {"traceEvents": evs})
    r = summarize_trace(p)
    assert [f.code for f in r.findings] == ["NO_DEVICE_KERNEL"]
    assert r.device_busy_ns is None and r.no_device_ns is None and r.compute_busy_ns is None
    assert r.window_source == "empty"
    code, text = _run("summarize", p, "--out", tmp_path / "s.json")
    assert code == 0 and "NO_DEVICE_KERNEL" in text and "CPU-only profile" in text


def test_async_events_are_a_finding(tmp_path: Path) -> None:
    evs = [_x("k", 0.0, 4.0),
           {"ph": "b", "name": "nccl:all_reduce", "cat": "gpu", "id": 1, "ts": 1, "pid": 1,
            "tid": 1},
           {"ph": "e", "name": "nccl:all_reduce", "cat": "gpu", "id": 1, "ts": 3, "pid": 1,
            "tid": 2}]
    r = summarize_trace(_write(tmp_path, "async.json", {"traceEvents": evs}))
    (f,) = r.findings
    assert f.code == "UNPLACED_ASYNC" and "2 async" in f.message and "nccl:all_reduce" in f.message
    assert r.device_busy_ns == 4_000  # the placed kernel is still counted


def test_region_that_matches_nothing(tmp_path: Path) -> None:
    r = summarize_trace(_write(tmp_path, "t.json", TORCH_SHAPE), region="^nope$")
    assert [f.code for f in r.findings] == ["NO_REGION"]
    assert r.window_source == "device activity"


def test_v1_summary_documents_still_read(tmp_path: Path) -> None:
    doc = summarize([_write(tmp_path, "t.json", TORCH_SHAPE)], region="main-denoise")
    v1 = json.loads(doc.model_dump_json(by_alias=True))
    v1["schema"] = "campaign-bot/trace-summary@1"
    r = v1["ranks"][0]
    r["window_source"] = "region"
    for k in ("copy_busy_ns", "compute_communication_overlap_ns", "compute_copy_overlap_ns",
              "communication_copy_overlap_ns", "findings"):
        r.pop(k)
    for k in r["kernels"]:
        k.pop("full_name")
        k.pop("kind")
    back = TraceSummary.model_validate_json(json.dumps(v1), strict=True)
    assert back.schema_ == "campaign-bot/trace-summary@1"
    assert summarize([_write(tmp_path, "t.json", TORCH_SHAPE)]).schema_.endswith("@2")


# A real torch.profiler trace from one NVIDIA H200 (benchmarks/probe_h200.py, torch 2.11.0+
# cu130): a host-to-device copy of pinned memory on a side stream under 20 matmuls on the
# default stream, inside a record_function region whose host side opens 2 ms early.
H200_TRACE = ROOT / "tests" / "data" / "h200-trace" / "two_stream.json"


def _plain_union(iv: list[tuple[int, int]]) -> int:
    total, end = 0, None
    start = 0
    for s, e in sorted(iv):
        if end is None or s > end:
            total += 0 if end is None else end - start
            start, end = s, e
        else:
            end = max(end, e)
    return total + (0 if end is None else end - start)


def test_real_two_stream_trace_against_an_independent_union() -> None:
    from decimal import Decimal

    evs = json.loads(H200_TRACE.read_text(), parse_float=Decimal)["traceEvents"]
    ns = lambda v: int(Decimal(v) * 1000)  # noqa: E731 - ts/dur have at most 3 decimals
    xs = [(e["cat"], e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in evs
          if e.get("ph") == "X" and "dur" in e and "cat" in e]
    dev = [(s, e) for c, n, s, e in xs if c == "gpu_user_annotation"
           and n == "two-stream-region"]
    assert len(dev) == 2  # torch writes one per stream the range launched work on
    lo, hi = min(s for s, _ in dev), max(e for _, e in dev)
    host_lo, host_hi = next((s, e) for c, n, s, e in xs
                            if c == "user_annotation" and n == "two-stream-region")
    clip = lambda v: [(max(s, lo), min(e, hi)) for s, e in v if min(e, hi) > max(s, lo)]  # noqa: E731
    copy = clip([(s, e) for c, _, s, e in xs if c in ("gpu_memcpy", "gpu_memset")])
    comp = clip([(s, e) for c, _, s, e in xs if c == "kernel"])
    r = summarize_trace(H200_TRACE, region="^two-stream-region$")
    assert r.window_source == "device region" and (r.window_start_ns, r.window_end_ns) == (lo, hi)
    assert r.copy_busy_ns == _plain_union(copy) > 0
    assert r.compute_busy_ns == _plain_union(comp) > 0
    assert r.device_busy_ns == _plain_union(copy + comp)
    assert r.compute_copy_overlap_ns == (_plain_union(copy) + _plain_union(comp)
                                         - _plain_union(copy + comp)) > 0  # two streams
    assert r.no_device_ns == (hi - lo) - _plain_union(copy + comp)
    kinds = {k.name: k.kind for k in r.kernels}
    assert kinds["Memcpy HtoD (Pinned -> Device)"] == "copy"
    assert all(kind == "compute" for name, kind in kinds.items() if name.startswith("nvjet"))
    assert not r.findings
    # the host-side span opens before the first kernel: more "no device work"
    host = summarize_trace(H200_TRACE, region="^two-stream-region$", device_annotation=False)
    assert (host.window_start_ns, host.window_end_ns) == (host_lo, host_hi)
    assert host.no_device_ns is not None and r.no_device_ns is not None
    assert host.no_device_ns - r.no_device_ns >= 2_000_000  # the 2 ms host lead-in at least
