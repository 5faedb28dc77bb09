"""Operator probes and trace summaries held to a real GPU (written for one NVIDIA H200).

For each operator pair, from tiny (launch-bound) to large (compute-bound), bf16, the default
run (``--rounds N``, N > 0) interleaves in one process N rounds of the probe at its defaults
and ``triton.testing.do_bench`` (ABBA and BAAB runs, 256 MB flush), each after the same
``--prewarm-s`` of both arms, while ``nvidia-smi`` samples the SM clock, power and power-cap
state in a process of its own; it writes ``DIR/probe_h200_interleaved.json`` (``--compact IN
OUT`` drops its per-call samples).  ``--rounds 0`` is the single-pass run with the probe's
variants:

* ``runners.probe.run_probe`` with the default timer (CUDA events, L2 flush, 0.5 s budget per
  arm) twice (run-to-run drift), once with ``--graph`` and once with the ``probe@1`` host
  timer (``timer="host"``: ``perf_counter_ns`` around a synchronized call);
* ``triton.testing.do_bench`` (CUDA events, 256 MB L2 flush, median) on each arm alone, the
  independent reference;
* the agreement: probe ratio / do_bench ratio and probe median / do_bench median.

Then two real ``torch.profiler`` traces (CPU + CUDA activities): every pair's arms in a
``record_function`` region each, and a two-stream trace (a host-to-device copy of pinned
memory on a side stream under matmuls on the default stream, a device-to-host copy after,
inside a region whose host-side annotation starts 2 ms before its first kernel).  Each trace
is summarised by ``evidence.trace_summary`` and checked against an independent union computed
here from ``json.load`` (plain Python), and, with ``--analyse``, against Holistic Trace
Analysis when it is installed.

Usage::

    python benchmarks/probe_h200.py --out DIR --rounds 6 --prewarm-s 1.0 --skip-traces
    python benchmarks/probe_h200.py --out DIR --rounds 0  # single pass, variants, traces
    python benchmarks/probe_h200.py --analyse DIR        # anywhere: summaries, union, HTA
    python benchmarks/probe_h200.py --out DIR --device cpu --quick   # a dry run on the CPU

Writes ``DIR/probe_h200.json`` (every figure), ``DIR/trace_pairs.json`` and
``DIR/trace_two_stream.json`` (Chrome traces) and, with ``--analyse``,
``DIR/trace_analysis.json``.  Figures are in docs/probes-and-traces.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


# ------------------------------------------------------------------------ operator pairs


def pairs(device: str, quick: bool) -> list[dict[str, Any]]:
    """The operator pairs: id, shapes, control and candidate callables, inputs."""
    import torch
    import torch.nn.functional as F

    dt = torch.bfloat16 if device.startswith("cuda") else torch.float32
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape: int, scale: float = 1.0) -> torch.Tensor:
        return (torch.randn(*shape, generator=g) * scale).to(dt)

    s = 4 if quick else 1  # shrink every shape on a CPU dry run

    def rms_hand(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w

    def rms_fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), w, 1e-6)

    def gelu_hand(x: torch.Tensor) -> torch.Tensor:
        return 0.5 * x * (1 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x.pow(3))))

    def gelu_fused(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")

    def softmax_hand(x: torch.Tensor) -> torch.Tensor:
        e = torch.exp(x - x.amax(-1, keepdim=True))
        return e / e.sum(-1, keepdim=True)

    def softmax_fused(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, -1)

    def qkv_separate(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor,
                     wv: torch.Tensor) -> torch.Tensor:
        return torch.cat([x @ wq, x @ wk, x @ wv], dim=-1)

    def qkv_fused(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                  wqkv: torch.Tensor) -> torch.Tensor:
        return x @ wqkv

    def qkv_three(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                  wqkv: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x @ wq, x @ wk, x @ wv

    def qkv_one(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                wqkv: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple((x @ wqkv).split(wq.shape[-1], dim=-1))

    def qkv_separate5(x: torch.Tensor, wq: torch.Tensor, wk: torch.Tensor, wv: torch.Tensor,
                      wqkv: torch.Tensor) -> torch.Tensor:
        return qkv_separate(x, wq, wk, wv)

    def attn_math(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        a = torch.softmax((q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5, -1)
        return a @ v

    def attn_sdpa(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)

    def mm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x @ w

    def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w.t())

    h = 3072 // s
    out = [
        dict(id="rmsnorm-tiny", what="RMSNorm by hand vs F.rms_norm, x [1,16,3072]",
             control=rms_hand, candidate=rms_fused, inputs=[rnd(1, 16, h), rnd(h)]),
        dict(id="softmax-small", what="softmax by hand vs torch.softmax, x [4,1024,1024]",
             control=softmax_hand, candidate=softmax_fused,
             inputs=[rnd(4, 1024 // s, 1024 // s)]),
        dict(id="gelu-medium", what="tanh GELU by hand vs F.gelu(approximate='tanh'), "
             "x [1,4096,12288]", control=gelu_hand, candidate=gelu_fused,
             inputs=[rnd(1, 4096 // s, 12288 // s)]),
        dict(id="qkv-fused", what="QKV: three matmuls (q, k, v) vs one matmul on the fused "
             "(pre-concatenated) weight split into q, k, v views, x [1,4096,3072], "
             "W 3x[3072,3072]", control=qkv_three, candidate=qkv_one,
             inputs=qkv_inputs(rnd, h, s)),
        dict(id="qkv-cat", what="QKV: three matmuls + cat vs one matmul on the fused "
             "(pre-concatenated) weight, x [1,4096,3072], W 3x[3072,3072]",
             control=qkv_separate5, candidate=qkv_fused, inputs=qkv_inputs(rnd, h, s)),
        dict(id="rmsnorm-large", what="RMSNorm by hand vs F.rms_norm, x [16,4096,3072]",
             control=rms_hand, candidate=rms_fused,
             inputs=[rnd(16 // s, 4096 // s, h), rnd(h)]),
        dict(id="attention-large", what="attention: softmax(QK^T)V by hand vs "
             "F.scaled_dot_product_attention, q/k/v [1,24,4096,128]", control=attn_math,
             candidate=attn_sdpa, inputs=[rnd(1, 24 // s, 4096 // s, 128 // s)
                                          for _ in range(3)]),
        dict(id="matmul-large", what="x @ w vs F.linear(x, w.t()), 8192x8192x8192",
             control=mm, candidate=linear,
             inputs=[rnd(8192 // s, 8192 // s), rnd(8192 // s, 8192 // s,
                                                          scale=(8192 // s) ** -0.5)]),
    ]
    return out


def qkv_inputs(rnd: Callable[..., Any], h: int, s: int) -> list[Any]:
    import torch

    w = [rnd(h, h, scale=h ** -0.5) for _ in range(3)]
    return [rnd(1, 4096 // s, h), *w, torch.cat(w, dim=-1)]


# ------------------------------------------------------------------------------ timing


def sm_clock_mhz() -> int | None:
    """The SM clock now (MHz), through NVML; None without it."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        return int(pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM))
    except Exception:  # noqa: BLE001 - no NVML: no clock figure
        return None


def reference_bench(control: Callable[[], Any], candidate: Callable[[], Any],
                    device: str) -> dict[str, Any] | None:
    """``triton.testing.do_bench`` medians, ABBA (control, candidate, candidate, control;
    rep 250 ms each) so drift over the four runs hits both arms alike, each run's median and
    the SM clock after it kept; and ``do_bench_cudagraph`` (launch gaps removed) once per
    arm.  None without a GPU."""
    if not device.startswith("cuda"):
        return None
    import torch
    from triton.testing import do_bench, do_bench_cudagraph

    runs: dict[str, list[float]] = {"control": [], "candidate": []}
    clocks = []
    fns = {"control": control, "candidate": candidate}
    with torch.inference_mode():
        for arm in ("control", "candidate", "candidate", "control"):
            runs[arm].append(float(do_bench(fns[arm], warmup=50, rep=250,
                                            return_mode="median")))
            clocks.append(sm_clock_mhz())
    graph: dict[str, float | None] = {}
    for arm, fn in fns.items():
        try:
            with torch.cuda.stream(torch.cuda.Stream()):
                graph[arm] = float(do_bench_cudagraph(fn, rep=250, return_mode="median"))
        except Exception as exc:  # noqa: BLE001 - reported, not fatal
            graph[arm] = None
            print(f"do_bench_cudagraph {arm}: {type(exc).__name__}: {exc}")
    c = statistics.median(runs["control"])
    k = statistics.median(runs["candidate"])
    return {"control_ms": c, "candidate_ms": k, "ratio": k / c, "runs": runs,
            "first_pass_ratio": runs["candidate"][0] / runs["control"][0],
            "sm_clock_mhz": clocks, "cudagraph": graph,
            "cudagraph_ratio": (graph["candidate"] / graph["control"]
                                if graph.get("control") and graph.get("candidate") else None)}


def probe(p: dict[str, Any], device: str, **kw: Any) -> dict[str, Any]:
    from runners.probe import ProbeSettings, run_probe

    doc = run_probe(p["control"], p["candidate"], p["inputs"], probe_id=p["id"],
                    revision="benchmark", control_op="control", candidate_op="candidate",
                    device=device, settings=ProbeSettings(**kw))
    c, k = (next(t for t in doc.timings if t.arm == a) for a in ("control", "candidate"))
    (cmp_,) = doc.comparisons
    return {
        "method": doc.timing.method if doc.timing else None, "repeats": doc.repeats,
        "control_ms": c.median_ms, "candidate_ms": k.median_ms,
        "control_min_ms": c.min_ms, "candidate_min_ms": k.min_ms,
        "control_iqr_ms": list(c.iqr_ms), "candidate_iqr_ms": list(k.iqr_ms),
        "control_host_ms": c.host_median_ms, "candidate_host_ms": k.host_median_ms,
        "ratio": cmp_.ratio, "low": cmp_.low, "high": cmp_.high, "finding": cmp_.finding,
        "launch_bound": cmp_.launch_bound,
        "launch_floor_ms": doc.timing.launch_floor_ms if doc.timing else None,
        "hold_ms": doc.timing.hold_ms if doc.timing else None, "timer": doc.timer,
        "bit_exact": doc.exactness[0].bit_exact, "max_abs_diff": doc.exactness[0].max_abs_diff,
        "versions": doc.versions, "device": doc.device,
    }


def run_pairs(device: str, quick: bool, only: set[str]) -> list[dict[str, Any]]:
    import torch

    rows = []
    for p in pairs(device, quick):
        if only and p["id"] not in only:
            continue
        p["inputs"] = [t.to(device) for t in p["inputs"]]
        args = p["inputs"]
        t0 = time.perf_counter()
        row: dict[str, Any] = {"id": p["id"], "what": p["what"]}
        budget = 0.05 if quick else 0.5
        gpu = device.startswith("cuda")
        row["probe"] = [probe(p, device, budget_s=budget) for _ in range(2)]
        if gpu:
            row["probe_graph"] = probe(p, device, budget_s=budget, graph=True)
            row["probe_no_flush"] = probe(p, device, budget_s=budget, flush=False)
            row["probe_abab"] = probe(p, device, budget_s=budget, block_s=0)
            row["probe_block_20ms"] = probe(p, device, budget_s=budget, block_s=0.02)
            row["probe_block_250ms"] = probe(p, device, budget_s=budget, block_s=0.25)
        row["probe_host_timer"] = probe(p, device, timer="host", budget_s=None, repeats=50,
                                        flush=False)
        fc, fk = p["control"], p["candidate"]
        row["do_bench"] = db = reference_bench(lambda f=fc, a=args: f(*a),
                                               lambda f=fk, a=args: f(*a), device)
        if db is not None:
            dc, dk = db["control_ms"], db["candidate_ms"]
            agree = []
            for label, r in [("events", row["probe"][0]), ("events, 2nd run", row["probe"][1]),
                             ("events, graph", row["probe_graph"]),
                             ("events, no flush", row["probe_no_flush"]),
                             ("events, one call per block", row["probe_abab"]),
                             ("events, 20 ms blocks", row["probe_block_20ms"]),
                             ("events, 250 ms blocks", row["probe_block_250ms"]),
                             ("host timer (probe@1)", row["probe_host_timer"])]:
                agree.append({
                    "method": label,
                    "ratio_vs_do_bench": r["ratio"] / (dk / dc),
                    "control_median_vs_do_bench": r["control_ms"] / dc,
                    "candidate_median_vs_do_bench": r["candidate_ms"] / dk})
            row["agreement"] = agree
        row["seconds"] = time.perf_counter() - t0
        rows.append(row)
        first = row["probe"][0]
        db = row["do_bench"]
        print(f"{p['id']:16s} probe {first['control_ms']:.4f}/{first['candidate_ms']:.4f} ms "
              f"ratio {first['ratio']:.3f} [{first['low']:.3f},{first['high']:.3f}] "
              f"{first['finding']}{' LB' if first['launch_bound'] else ''}"
              + ("" if db is None else f" | do_bench {db['control_ms']:.4f}/"
                 f"{db['candidate_ms']:.4f} ratio {db['ratio']:.3f} runs {db['runs']} "
                 f"clocks {db['sm_clock_mhz']} cudagraph {db['cudagraph']}")
              + f" | host timer ratio {row['probe_host_timer']['ratio']:.3f}", flush=True)
        p["inputs"] = args = None
        if gpu:
            torch.cuda.empty_cache()
    return rows


# ------------------------------------------------------------------- interleaved rounds

THROTTLE_SW_POWER_CAP = 0x4
"""NVML's ``clocksEventReasonSwPowerCap`` bit (nvml.h): the clock is held down to stay under
the power limit."""


class GpuSampler:
    """``nvidia-smi`` in a process of its own (so it takes no Python GIL from the timed
    loop), sampling the SM clock, power draw, temperature and active clock-event
    (throttle) reasons every ``period_ms``; :meth:`segment` summarises the samples taken
    between two ``time.time()`` marks."""

    FIELDS = "timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active"

    def __init__(self, path: Path, period_ms: int = 20) -> None:
        import shutil
        import subprocess

        self.path = path
        self.proc = None
        exe = shutil.which("nvidia-smi")
        fields = self.FIELDS
        if exe and subprocess.run([exe, f"--query-gpu={fields}", "--format=csv"],
                                  capture_output=True).returncode != 0:
            fields = fields.replace("clocks_event_reasons", "clocks_throttle_reasons")  # older
        if exe:
            self.fh = path.open("w")
            self.proc = subprocess.Popen(
                [exe, f"--query-gpu={fields}", "--format=csv,noheader,nounits",
                 f"-lms={period_ms}"], stdout=self.fh, stderr=subprocess.STDOUT)
            time.sleep(0.5)

    def stop(self) -> list[tuple[float, int, float, int, int]]:
        """Stop sampling; the samples as (epoch s, SM MHz, W, deg C, reasons bitmask)."""
        from datetime import datetime

        if self.proc is None:
            return []
        self.proc.terminate()
        self.proc.wait(5)
        self.fh.close()
        out = []
        for line in self.path.read_text().splitlines():
            f = [x.strip() for x in line.split(",")]
            try:
                t = datetime.strptime(f[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
                out.append((t, int(f[1]), float(f[2]), int(f[3]), int(f[4], 16)))
            except (ValueError, IndexError):
                continue
        return out

    @staticmethod
    def segment(samples: list[tuple[float, int, float, int, int]], t0: float,
                t1: float) -> dict[str, Any] | None:
        """Median SM clock and power, top temperature and the share of samples held at
        the power cap between ``t0`` and ``t1`` (epoch seconds)."""
        got = [x for x in samples if t0 <= x[0] <= t1]
        if not got:
            return None
        return {"samples": len(got), "sm_mhz": statistics.median(x[1] for x in got),
                "sm_mhz_min": min(x[1] for x in got), "sm_mhz_max": max(x[1] for x in got),
                "power_w": statistics.median(x[2] for x in got),
                "temp_c_max": max(x[3] for x in got),
                "power_capped": sum(1 for x in got if x[4] & THROTTLE_SW_POWER_CAP) / len(got),
                "reasons": sorted({hex(x[4]) for x in got})}


def prewarm(fns: dict[str, Callable[[], Any]], seconds: float) -> None:
    """Run both arms, alternating, each call after the same 256 MiB flush the probe and
    ``do_bench`` use, for ``seconds`` of wall time, then synchronize: every measurement
    below starts from the same warm device."""
    import torch

    buf = torch.empty(64 << 20, dtype=torch.int32, device="cuda")
    end = time.perf_counter() + seconds
    with torch.inference_mode():
        while time.perf_counter() < end:
            for fn in fns.values():
                buf.zero_()
                fn()
            torch.cuda.synchronize()
    del buf


def do_bench_abba(fns: dict[str, Callable[[], Any]], rep_ms: int = 250, *,
                  candidate_first: bool = False) -> dict[str, Any]:
    """``triton.testing.do_bench`` medians of control, candidate, candidate, control (BAAB
    with ``candidate_first``; rep ``rep_ms`` each, default 25 ms warmup, 256 MB flush
    before each call): the two runs' medians per arm and the ratio of their medians.
    ABBA cancels a linear drift but not a first run that is faster than the rest (a device
    that has not yet settled at its power cap), so rounds alternate ABBA and BAAB."""
    import torch
    from triton.testing import do_bench

    runs: dict[str, list[float]] = {"control": [], "candidate": []}
    order = ("candidate", "control", "control", "candidate") if candidate_first else (
        "control", "candidate", "candidate", "control")
    with torch.inference_mode():
        for arm in order:
            runs[arm].append(float(do_bench(fns[arm], rep=rep_ms, return_mode="median")))
    c, k = statistics.median(runs["control"]), statistics.median(runs["candidate"])
    return {"control_ms": c, "candidate_ms": k, "ratio": k / c, "runs": runs,
            "order": list(order)}


def run_interleaved(device: str, rounds: int, only: set[str], sampler: GpuSampler | None,
                    prewarm_s: float = 1.0) -> list[dict[str, Any]]:
    """Per pair, ``rounds`` rounds of the probe at its defaults and ``do_bench_abba``, in
    one process, alternating which goes first (and ABBA with BAAB for ``do_bench``), each
    after the same :func:`prewarm` of ``prewarm_s``; the GPU's clock, power and power-cap
    state sampled over each measurement."""
    import torch

    from runners.probe import ProbeSettings, run_probe

    marks: list[tuple[str, str, int, float, float]] = []
    rows = []
    for p in pairs(device, False):
        if only and p["id"] not in only:
            continue
        args = [t.to(device) for t in p["inputs"]]
        fns: dict[str, Callable[[], Any]] = {
            arm: (lambda f=p[arm], a=args: f(*a)) for arm in ("control", "candidate")}
        row: dict[str, Any] = {"id": p["id"], "what": p["what"], "rounds": []}
        t_pair = time.perf_counter()
        for r in range(rounds):
            got: dict[str, Any] = {}
            for what in (("probe", "do_bench") if r % 2 == 0 else ("do_bench", "probe")):
                prewarm(fns, prewarm_s)
                t0 = time.time()
                if what == "probe":
                    doc = run_probe(p["control"], p["candidate"], args, probe_id=p["id"],
                                    revision="benchmark", control_op="control",
                                    candidate_op="candidate", device=device,
                                    settings=ProbeSettings())
                    got["probe"] = doc.model_dump(mode="json", by_alias=True)
                else:
                    got["do_bench"] = do_bench_abba(fns, candidate_first=r % 4 >= 2)
                marks.append((p["id"], what, r, t0, time.time()))
            got["first"] = "probe" if r % 2 == 0 else "do_bench"
            row["rounds"].append(got)
            pr, db = got["probe"], got["do_bench"]
            (cmp_,) = pr["comparisons"]
            print(f"{p['id']:16s} round {r} probe {cmp_['ratio']:.4f} [{cmp_['low']:.4f}, "
                  f"{cmp_['high']:.4f}] {cmp_['finding']} | do_bench {db['ratio']:.4f} "
                  f"runs {db['runs']}", flush=True)
        row["seconds"] = time.perf_counter() - t_pair
        rows.append(row)
        del args, fns
        torch.cuda.empty_cache()
    samples = sampler.stop() if sampler else []
    for row in rows:
        for r, got in enumerate(row["rounds"]):
            for pid, what, rr, t0, t1 in marks:
                if pid == row["id"] and rr == r:
                    got[f"{what}_gpu"] = GpuSampler.segment(samples, t0, t1)
    return rows


def agreement(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per pair: the probe's and ``do_bench``'s ratios and medians per round and over the
    rounds (median of the rounds), and how far apart they are."""
    out = []
    for row in rows:
        rs = row["rounds"]
        pr = [g["probe"]["comparisons"][0] for g in rs]
        med = {arm: [statistics.median(next(t["samples_ms"] for t in g["probe"]["timings"]
                                            if t["arm"] == arm)) for g in rs]
               for arm in ("control", "candidate")}
        db = [g["do_bench"] for g in rs]
        p_ratio = statistics.median(c["ratio"] for c in pr)
        d_ratio = statistics.median(d["ratio"] for d in db)
        d_med = {arm: statistics.median(x for d in db for x in d["runs"][arm])
                 for arm in ("control", "candidate")}
        p_med = {arm: statistics.median(v) for arm, v in med.items()}
        out.append({
            "id": row["id"],
            "probe_ratios": [c["ratio"] for c in pr],
            "probe_intervals": [(c["low"], c["high"]) for c in pr],
            "probe_findings": [c["finding"] for c in pr],
            "do_bench_ratios": [d["ratio"] for d in db],
            "per_round_ratio_vs_do_bench": [c["ratio"] / d["ratio"] for c, d in
                                            zip(pr, db, strict=True)],
            "probe_ratio": p_ratio, "do_bench_ratio": d_ratio,
            "ratio_vs_do_bench": p_ratio / d_ratio,
            "probe_median_ms": p_med, "do_bench_median_ms": d_med,
            "median_vs_do_bench": {a: p_med[a] / d_med[a] for a in p_med},
            "do_bench_run_spread": {a: max(x for d in db for x in d["runs"][a])
                                    / min(x for d in db for x in d["runs"][a]) - 1
                                    for a in ("control", "candidate")},
        })
    return out


def compact(doc: dict[str, Any]) -> dict[str, Any]:
    """An interleaved run's document without the per-call samples (for
    ``benchmarks/results/``): per round the probe's comparison, medians, quartiles, block
    medians and settings, ``do_bench``'s runs, and the GPU state over each."""
    from evidence.operator_probe import quartiles, split_blocks

    pairs_out = []
    for row in doc["pairs"]:
        rounds = []
        for g in row["rounds"]:
            pr = g["probe"]
            arms = {}
            for t in pr["timings"]:
                k = pr["timing"]["block_calls"].get(t["arm"], len(t["samples_ms"]))
                arms[t["arm"]] = {
                    "median_ms": statistics.median(t["samples_ms"]),
                    "min_ms": min(t["samples_ms"]), "iqr_ms": quartiles(t["samples_ms"]),
                    "host_median_ms": statistics.median(t["host_samples_ms"]),
                    "block_medians_ms": [statistics.median(b)
                                         for b in split_blocks(t["samples_ms"], k)]}
            rounds.append({"first": g["first"], "probe": {
                "comparison": pr["comparisons"][0], "repeats": pr["repeats"],
                "timing": pr["timing"], "versions": pr["versions"], "arms": arms},
                "do_bench": g["do_bench"], "probe_gpu": g.get("probe_gpu"),
                "do_bench_gpu": g.get("do_bench_gpu")})
        pairs_out.append({"id": row["id"], "what": row["what"], "rounds": rounds})
    return {k: v for k, v in doc.items() if k != "pairs"} | {"pairs": pairs_out}


# ------------------------------------------------------------------------------ traces


def trace_pairs(device: str, quick: bool, path: Path) -> None:
    """A torch.profiler trace with each pair's arms (3 calls each) in regions of their own."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.startswith("cuda")
                                     else [])
    ps = pairs(device, quick)
    for p in ps:
        p["inputs"] = [t.to(device) for t in p["inputs"]]
    with torch.inference_mode(), profile(activities=acts) as prof:
        for p in ps:
            for arm in ("control", "candidate"):
                with record_function(f"{p['id']}/{arm}"):
                    for _ in range(3):
                        p[arm](*p["inputs"])
        if device.startswith("cuda"):
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))


def trace_two_stream(device: str, quick: bool, path: Path) -> None:
    """Copies beside compute on two streams, in a region whose host annotation opens 2 ms
    before its first device work."""
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    gpu = device.startswith("cuda")
    n = (64 if quick else 256) << 20
    host = torch.empty(n // 2, dtype=torch.bfloat16, pin_memory=gpu)
    host.normal_()
    m = 1024 if quick else 4096
    a = torch.randn(m, m, device=device, dtype=torch.bfloat16 if gpu else torch.float32)
    side = torch.cuda.Stream() if gpu else None
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if gpu else [])
    with torch.inference_mode(), profile(activities=acts) as prof:
        with record_function("two-stream-region"):
            time.sleep(0.002)  # host-side lead-in: the region opens before any device work
            if gpu:
                with torch.cuda.stream(side):
                    dev = host.to(device, non_blocking=True)
            else:
                dev = host.clone()
            c = a
            for _ in range(20):
                c = torch.relu(c @ a)
            if gpu:
                torch.cuda.current_stream().wait_stream(side)
            back = dev[: n // 8].to("cpu")
            del back
            if gpu:
                torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))


# ---------------------------------------------------------------- independent reference


def _ns(v: Any) -> int:
    return int((Decimal(str(v)) * 1000).to_integral_value())


def _union(iv: list[tuple[int, int]]) -> int:
    total, cs, ce = 0, None, None
    for s, e in sorted(iv):
        if ce is None or s > ce:
            if ce is not None:
                total += ce - cs  # type: ignore[operator]
            cs, ce = s, e
        else:
            ce = max(ce, e)
    if ce is not None:
        total += ce - cs  # type: ignore[operator]
    return total


def reference(path: Path, region: str | None) -> dict[str, Any]:
    """Unions computed from ``json.load`` with plain Python: copy (``gpu_memcpy``,
    ``gpu_memset``), compute (other ``kernel`` events), the window (the device-side
    ``gpu_user_annotation`` of ``region`` when present, else the host one, else the extent
    of device work)."""
    import re

    evs = json.loads(path.read_text(), parse_float=Decimal)["traceEvents"]
    xs = [e for e in evs if e.get("ph") == "X" and "dur" in e]
    iv = lambda e: (_ns(e["ts"]), _ns(e["ts"]) + _ns(e["dur"]))  # noqa: E731
    copy = [iv(e) for e in xs if e.get("cat") in ("gpu_memcpy", "gpu_memset")]
    comp = [iv(e) for e in xs if e.get("cat") == "kernel"]
    src = "device activity"
    win = None
    if region:
        rx = re.compile(region)
        dev = [iv(e) for e in xs if e.get("cat") == "gpu_user_annotation"
               and rx.search(e["name"])]
        hst = [iv(e) for e in xs if e.get("cat") == "user_annotation" and rx.search(e["name"])]
        if dev:
            win, src = (min(s for s, _ in dev), max(e for _, e in dev)), "device region"
        elif hst:
            win, src = (min(s for s, _ in hst), max(e for _, e in hst)), "host region"
    if win is None:
        allk = copy + comp
        win = (min(s for s, _ in allk), max(e for _, e in allk)) if allk else (0, 0)
    lo, hi = win
    clip = lambda v: [(max(s, lo), min(e, hi)) for s, e in v if min(e, hi) > max(s, lo)]  # noqa: E731
    cp, cm = clip(copy), clip(comp)
    busy = _union(cp + cm)
    return {"window_source": src, "window_ns": hi - lo, "copy_busy_ns": _union(cp),
            "compute_busy_ns": _union(cm), "device_busy_ns": busy,
            "copy_compute_overlap_ns": _union(cp) + _union(cm) - busy,
            "no_device_ns": (hi - lo) - busy, "kernels": len(copy) + len(comp)}


def hta_figures(path: Path) -> dict[str, Any] | None:
    """Holistic Trace Analysis's temporal breakdown of one trace, nanosecond rounding off
    (``HTA_DISABLE_NS_ROUNDING=1``), in integer nanoseconds; None when HTA is not
    installed."""
    import os
    import shutil
    import tempfile

    os.environ["HTA_DISABLE_NS_ROUNDING"] = "1"
    try:
        from hta.trace_analysis import TraceAnalysis
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as d:
        shutil.copy(path, Path(d) / "rank0.json")
        ta = TraceAnalysis(trace_dir=d)
        tb = ta.get_temporal_breakdown(visualize=False)
        kb = ta.get_gpu_kernel_breakdown(visualize=False)[0]
    row = tb.iloc[0]
    return {"idle_ns": round(float(row["idle_time(us)"]) * 1000),
            "compute_ns": round(float(row["compute_time(us)"]) * 1000),
            "non_compute_ns": round(float(row["non_compute_time(us)"]) * 1000),
            "kernel_time_ns": round(float(row["kernel_time(us)"]) * 1000),
            "kernel_types": {str(r["kernel_type"]): round(float(r["sum"]) * 1000)
                             for _, r in kb.iterrows()}}


def analyse(out: Path) -> dict[str, Any]:
    """Summaries of both traces against the independent reference and HTA."""
    from evidence.trace_summary import summarize_trace

    res: dict[str, Any] = {}
    for name, region in (("trace_two_stream.json", "^two-stream-region$"),
                         ("trace_pairs.json", None)):
        path = out / name
        if not path.exists():
            continue
        r = summarize_trace(path, region=region)
        ref = reference(path, region)
        ours = {"window_source": r.window_source,
                "window_ns": (r.window_end_ns or 0) - (r.window_start_ns or 0),
                "copy_busy_ns": r.copy_busy_ns, "compute_busy_ns": r.compute_busy_ns,
                "device_busy_ns": r.device_busy_ns,
                "copy_compute_overlap_ns": r.compute_copy_overlap_ns,
                "no_device_ns": r.no_device_ns, "kernels": r.device_kernels}
        host = summarize_trace(path, region=region, device_annotation=False) if region \
            else None
        res[name] = {"summary": ours, "reference": ref,
                     "equal": {k: ours[k] == ref[k] for k in ref},
                     "host_region_window": None if host is None else {
                         "window_ns": (host.window_end_ns or 0) - (host.window_start_ns or 0),
                         "no_device_ns": host.no_device_ns},
                     "findings": [f.model_dump() for f in r.findings],
                     "top_kernels": [(k.name, k.count, k.total_ns) for k in r.kernels[:8]],
                     "hta": hta_figures(path)}
        if res[name]["hta"]:
            # HTA has no region: compare over the extent of device activity
            h = res[name]["hta"]
            w = summarize_trace(path)
            busy, comp = w.device_busy_ns or 0, w.compute_busy_ns or 0
            res[name]["vs_hta"] = {
                "kernel_time (window)": ((w.window_end_ns or 0) - (w.window_start_ns or 0),
                                         h["kernel_time_ns"]),
                "idle (no device work)": (w.no_device_ns, h["idle_ns"]),
                "compute": (comp, h["compute_ns"]),
                "non-compute (busy - compute)": (busy - comp, h["non_compute_ns"]),
                "memory kernels (copy busy)": (w.copy_busy_ns, h["kernel_types"].get("MEMORY"))}
    (out / "trace_analysis.json").write_text(json.dumps(res, indent=2) + "\n")
    return res


def _rel(a: float, b: float | None) -> str:
    return "—" if not b else f"{a / b:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--analyse", type=Path)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated pair ids (default: all)")
    ap.add_argument("--rounds", type=int, default=4,
                    help="interleaved rounds of the probe (defaults) and do_bench per pair "
                    "(0: the single-pass run with the probe's variants)")
    ap.add_argument("--skip-traces", action="store_true")
    ap.add_argument("--compact", nargs=2, type=Path, metavar=("IN", "OUT"),
                    help="write an interleaved run's JSON without its per-call samples")
    ap.add_argument("--prewarm-s", type=float, default=1.0,
                    help="both arms, alternating, before every measurement (seconds)")
    a = ap.parse_args()
    if a.analyse:
        print(json.dumps(analyse(a.analyse), indent=1))
        return 0
    if a.compact:
        src, dst = a.compact
        dst.write_text(json.dumps(compact(json.loads(src.read_text())), indent=1) + "\n")
        return 0
    if a.out is None:
        ap.error("--out or --analyse")
    import torch

    a.out.mkdir(parents=True, exist_ok=True)
    info: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                            "device": a.device}
    if a.device.startswith("cuda"):
        props = torch.cuda.get_device_properties(a.device)
        info.update(name=props.name, l2_bytes=getattr(props, "L2_cache_size", None),
                    sms=props.multi_processor_count)
        try:
            import triton

            info["triton"] = triton.__version__
        except ImportError:
            pass
    print(json.dumps(info), flush=True)
    t0 = time.perf_counter()
    only = set(filter(None, a.only.split(",")))
    if a.rounds and a.device.startswith("cuda"):
        sampler = GpuSampler(a.out / "gpu_samples.csv")
        rows = run_interleaved(a.device, a.rounds, only, sampler, a.prewarm_s)
        agree = agreement(rows)
        doc = {"info": info, "prewarm_s": a.prewarm_s, "pairs": rows, "agreement": agree,
               "seconds": time.perf_counter() - t0}
        (a.out / "probe_h200_interleaved.json").write_text(json.dumps(doc, indent=1) + "\n")
        print("\npair | probe ratios per round | do_bench ratios per round | probe/do_bench "
              "(median of rounds) | medians probe/do_bench (control, candidate) | "
              "do_bench run spread (control, candidate)")
        for g in agree:
            print(f"{g['id']} | {' '.join(f'{x:.3f}' for x in g['probe_ratios'])} "
                  f"{'/'.join(g['probe_findings'])} | "
                  f"{' '.join(f'{x:.3f}' for x in g['do_bench_ratios'])} | "
                  f"{g['ratio_vs_do_bench']:.3f} | {g['median_vs_do_bench']['control']:.3f}, "
                  f"{g['median_vs_do_bench']['candidate']:.3f} | "
                  f"{g['do_bench_run_spread']['control']:.3f}, "
                  f"{g['do_bench_run_spread']['candidate']:.3f}")
        if a.skip_traces:
            return 0
        trace_pairs(a.device, False, a.out / "trace_pairs.json")
        trace_two_stream(a.device, False, a.out / "trace_two_stream.json")
        res = analyse(a.out)
        for name, r in res.items():
            print(name, "equal to the independent union:", all(r["equal"].values()))
        print(f"total {time.perf_counter() - t0:.1f} s")
        return 0
    rows = run_pairs(a.device, a.quick, only)
    if not a.only:
        trace_pairs(a.device, a.quick, a.out / "trace_pairs.json")
        trace_two_stream(a.device, a.quick, a.out / "trace_two_stream.json")
    doc = {"info": info, "pairs": rows, "seconds": time.perf_counter() - t0}
    (a.out / "probe_h200.json").write_text(json.dumps(doc, indent=2) + "\n")
    try:
        res = analyse(a.out)
        for name, r in res.items():
            print(name, "equal to the independent union:", all(r["equal"].values()),
                  r["summary"])
    except Exception as exc:  # noqa: BLE001 - the timings are already written
        print(f"trace analysis failed: {type(exc).__name__}: {exc}")
    # the done-when table
    print("\npair | probe ratio [interval] finding | do_bench ratio | ratio/do_bench | "
          "median/do_bench (control, candidate) | graph-probe/do_bench_cudagraph medians | "
          "ratio/do_bench with blocks of 1 call, 20 ms, 250 ms | host-timer ratio")
    for r in rows:
        p, d = r["probe"][0], r["do_bench"]
        if d is None:
            continue
        print(f"{r['id']} | {p['ratio']:.3f} [{p['low']:.3f}, {p['high']:.3f}] {p['finding']}"
              f" | {d['ratio']:.3f} | {p['ratio'] / d['ratio']:.3f} | "
              f"{p['control_ms'] / d['control_ms']:.3f}, "
              f"{p['candidate_ms'] / d['candidate_ms']:.3f} | "
              f"{_rel(r['probe_graph']['control_ms'], d['cudagraph']['control'])}, "
              f"{_rel(r['probe_graph']['candidate_ms'], d['cudagraph']['candidate'])} | "
              f"{r['probe_abab']['ratio'] / d['ratio']:.3f}, "
              f"{r['probe_block_20ms']['ratio'] / d['ratio']:.3f}, "
              f"{r['probe_block_250ms']['ratio'] / d['ratio']:.3f} | "
              f"{r['probe_host_timer']['ratio']:.3f}")
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
