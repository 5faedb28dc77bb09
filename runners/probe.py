"""Operator probes on the device: time a control and a candidate callable on actual shapes,
compare their outputs, and write a ``campaign-bot/probe@2`` document
(:mod:`evidence.operator_probe`).

Python API: :func:`run_probe`.  Command line (a ``campaign_bot.cli`` plug-in)::

    campaign-bot probe run --control MOD:FN --candidate MOD:FN --inputs MOD:FN
        --probe-id ID --revision REV --out FILE [--device cpu|cuda[:N]|npu[:N]]
        [--warmups 5] [--repeats 10] [--budget-s 1.0] [--max-repeats 2000]
        [--flush/--no-flush] [--flush-bytes N] [--graph] [--timer device|host]
        [--control-kernels NAME,...] [--candidate-kernels NAME,...] [--min-effect 0.05]
        [--control-op NAME] [--candidate-op NAME] [--campaign ID] [--candidate-name NAME]
        [--track ID] [--claims-lossless]

``MOD`` is an importable module or a ``.py`` file; ``--inputs`` names a function returning
the input tensors (a tensor, or a list/tuple of tensors), which are moved to ``--device``
and passed positionally to both callables.

Timing (``--timer device``, the default): on a CUDA GPU or an Ascend NPU every call is
bracketed by two of the device's own events (``torch.cuda.Event``/``torch.npu.Event`` with
``enable_timing=True``) recorded on the current stream, so a sample is the device time from
the call's first queued work to its last, not the host's launch latency or a synchronize;
the host latency of the same call (``perf_counter_ns`` from the call to its return, no
synchronize) is kept apart in ``host_samples_ms``.  Before every measured call a buffer of
``--flush-bytes`` (default: four times the L2, at least 256 MiB, as Triton's ``do_bench``)
is zeroed on the device, so no call reads the previous call's data from the L2; that work
lies outside the events, and it also lets the host run ahead of the device, so the events
see the device's work back to back.  Warmups of both arms come first and are kept apart;
their event times estimate the calls' cost, and measured calls per arm are
``--budget-s`` / (estimated cost of the cheaper arm's call), at least ``--repeats`` and
at most ``--max-repeats``.  Measured calls come in blocks of about ``--block-s`` of device time of
one arm, in ABBA order (:func:`block_order`), so a linear drift hits both arms alike; all
events are read after one synchronize at the end.  ``--graph`` captures
each arm once in a CUDA/NPU graph (after its warmups) and times replays of it.  On the CPU
the call is synchronous: ``perf_counter_ns`` around it is its time (no flush).
``--timer host`` is the ``probe@1`` timer (host time around a call with a synchronize
before and after), kept to measure what launch latency adds.

Under ``torch.distributed`` every rank probes its own device and the per-rank results are
gathered (``all_gather_object``), so each rank returns the same document; the ranks agree
on the number of measured calls first (the largest any rank wants), so arms that run
collectives stay in step.  Exactness is judged on the last measured outputs of each arm,
per rank.

Exit codes of the command: 0 written (whatever the probe found: a probe is an observation),
2 bad usage, torch missing (one line naming the extra), or an arm that raised.

The probe models (:mod:`evidence.operator_probe`, pydantic) and torch are imported by the
functions that use them, not at module level: ``campaign-bot --help`` imports this module
(the plug-in contract of :mod:`evidence.cli`).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import platform
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from evidence.operator_probe import (
        OperatorProbe,
        RankExactness,
        RankTiming,
        TensorSpec,
    )

HOST_SYNC_TIMER = ("time.perf_counter_ns around each call, with a device synchronize before "
                   "and after (none on the CPU); warmups of both arms first, measured calls "
                   "alternating control and candidate")
FLUSH_MIN_BYTES = 256 << 20
"""Smallest L2 flush buffer: Triton's ``do_bench`` zeroes 256 MB between calls."""
NPU_FLUSH_BYTES = 512 << 20
"""Flush buffer on an NPU, whose L2 size torch_npu does not report: more than twice the
L2 of the Ascend devices campaigns use; set ``flush_bytes`` for another device."""


MIN_EFFECT_DEFAULT = 0.05
"""Default ``min_effect``: :data:`evidence.operator_probe.MIN_EFFECT` (the same number, not
imported: this module imports the models lazily)."""


class ProbeError(RuntimeError):
    """A probe could not run: bad callable path, bad inputs, or an arm that raised."""


def _torch() -> Any:
    import torch

    return torch


def _kind(device: str) -> str:
    return device.split(":")[0]


def _backend(device: str) -> Any:
    """``torch.cuda`` or ``torch.npu`` for a device, None for the CPU."""
    torch = _torch()
    kind = _kind(device)
    if kind == "cuda":
        return torch.cuda
    if kind == "npu":
        import torch_npu  # noqa: F401  (registers torch.npu)

        return torch.npu
    return None


def _sync_fn(device: str) -> Callable[[], None]:
    mod = _backend(device)
    if mod is None:
        return lambda: None
    return lambda: mod.synchronize(device)


def device_name(device: str) -> str:
    """A human name for ``device``: the GPU/NPU model, or the CPU's processor string."""
    torch = _torch()
    kind = device.split(":")[0]
    try:
        if kind == "cuda":
            return str(torch.cuda.get_device_name(device))
        if kind == "npu":
            return str(torch.npu.get_device_name(device))
    except (RuntimeError, AttributeError, AssertionError):
        pass
    return f"cpu ({platform.processor() or platform.machine()})"


def _flatten(out: Any) -> list[Any]:
    torch = _torch()
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, list | tuple):
        return [t for o in out for t in _flatten(o)]
    raise ProbeError(f"an arm returned {type(out).__name__}; return a tensor or a list/tuple "
                     "of tensors")


def tensor_spec(name: str, t: Any) -> TensorSpec:
    """The :class:`TensorSpec` of tensor ``t``."""
    from evidence.operator_probe import TensorSpec

    return TensorSpec(name=name, shape=list(t.shape), dtype=str(t.dtype).removeprefix("torch."))


def compare_outputs(rank: int, control: Any, candidate: Any) -> RankExactness:
    """Exactness of ``candidate`` against ``control`` (tensors or lists of tensors).

    Bit-exact: the same number of tensors, each with equal shape, dtype and bytes.  Max
    absolute difference in float64 over every element; relative: divided by the control's
    largest magnitude.  Non-finite values make ``finite`` False and the differences None.
    """
    from evidence.operator_probe import RankExactness

    torch = _torch()
    a, b = _flatten(control), _flatten(candidate)
    if len(a) != len(b):
        return RankExactness(rank=rank, bit_exact=False, finite=True, elements=0,
                             detail=f"{len(a)} control output(s), {len(b)} candidate output(s)")
    exact = True
    finite = True
    max_abs = 0.0
    scale = 0.0
    n = 0
    notes = []
    for i, (x, y) in enumerate(zip(a, b, strict=True)):
        x, y = x.detach(), y.detach()
        if x.shape != y.shape:
            return RankExactness(rank=rank, bit_exact=False, finite=True, elements=0,
                                 detail=f"output {i}: shapes {list(x.shape)} and "
                                 f"{list(y.shape)} differ")
        if x.dtype != y.dtype:
            exact = False
            notes.append(f"output {i}: dtypes {x.dtype} and {y.dtype}")
        elif exact:
            xb = x.contiguous().reshape(-1).view(torch.uint8)
            yb = y.contiguous().reshape(-1).view(torch.uint8)
            exact = bool(torch.equal(xb, yb))
        xd, yd = x.double().cpu(), y.double().cpu()
        if not (bool(torch.isfinite(xd).all()) and bool(torch.isfinite(yd).all())):
            finite = False
        elif xd.numel():
            max_abs = max(max_abs, float((xd - yd).abs().max()))
            scale = max(scale, float(xd.abs().max()))
        n += x.numel()
    if not finite:
        return RankExactness(rank=rank, bit_exact=exact, finite=False, elements=n,
                             detail="non-finite values in an output")
    rel = max_abs / scale if scale > 0 else (0.0 if max_abs == 0 else None)
    return RankExactness(rank=rank, bit_exact=exact, max_abs_diff=max_abs, max_rel_diff=rel,
                         finite=True, elements=n, detail="; ".join(notes) or None)


def _call(fn: Callable[..., Any], inputs: Sequence[Any], arm: str) -> Any:
    try:
        return fn(*inputs)
    except Exception as exc:  # noqa: BLE001 - reported with the arm's name
        raise ProbeError(f"the {arm} arm raised {type(exc).__name__}: {exc}") from exc


@dataclass
class ProbeSettings:
    """How :func:`measure_rank` times the arms (see the module docstring).

    ``timer``: ``device`` (the device's events; the CPU's ``perf_counter_ns``) or ``host``
    (the ``probe@1`` timer); ``warmups``: calls per arm before measuring; ``repeats``: the
    fewest measured calls per arm; ``budget_s``: measured device time aimed at per arm
    (None: exactly ``repeats``); ``max_repeats``: the most measured calls per arm;
    ``flush``: zero ``flush_bytes`` on the device before each call (None: on for a GPU or
    NPU, off on the CPU, where there is nothing to flush with); ``graph``: time replays of a
    CUDA/NPU graph of each arm; ``hold``: on CUDA, keep the device busy (a spin kernel)
    before each call for longer than the host takes to issue it, so the events time the
    call's work back to back, not the host's launch gaps; ``min_effect``, ``confidence``: of
    the comparison (:func:`evidence.operator_probe.compare_samples`); ``block_s``: device
    time of one block of consecutive calls of one arm (0: strict alternation, one call per
    block), blocks in ABBA order (see :func:`block_order`)."""

    timer: str = "device"
    warmups: int = 5
    repeats: int = 10
    budget_s: float | None = 1.0
    max_repeats: int = 2000
    flush: bool | None = None
    flush_bytes: int | None = None
    graph: bool = False
    hold: bool = True
    block_s: float = 0.125
    min_effect: float = MIN_EFFECT_DEFAULT
    confidence: float = 0.95

    def check(self) -> None:
        """Raise :class:`ProbeError` for counts or budgets out of range."""
        if self.timer not in ("device", "host"):
            raise ProbeError(f"timer must be 'device' or 'host', got {self.timer!r}")
        if self.warmups < 0 or self.repeats < 1:
            raise ProbeError(f"need warmups >= 0 and repeats >= 1, got {self.warmups} and "
                             f"{self.repeats}")
        if self.max_repeats < self.repeats:
            raise ProbeError(f"max_repeats {self.max_repeats} is below repeats "
                             f"{self.repeats}")
        if self.budget_s is not None and not (math.isfinite(self.budget_s)
                                              and self.budget_s >= 0):
            raise ProbeError(f"budget_s must be a finite number >= 0, got {self.budget_s}")
        if self.flush_bytes is not None and self.flush_bytes < 1:
            raise ProbeError(f"flush_bytes must be positive, got {self.flush_bytes}")
        if not (math.isfinite(self.block_s) and self.block_s >= 0):
            raise ProbeError(f"block_s must be a finite number >= 0, got {self.block_s}")
        if not 0 <= self.min_effect < 1 or not 0 < self.confidence < 1:
            raise ProbeError("min_effect must lie in [0, 1) and confidence in (0, 1)")


MIN_BLOCKS_WANTED = 4
"""Fewest ABBA blocks per arm the probe aims at: a block holds at most this fraction of an
arm's calls, however short ``block_s`` makes it, so the comparison's interval can resample
blocks (:func:`evidence.operator_probe.compare_samples`)."""
HOLD_MAX_MS = 2.0
"""Longest spin before a call (ms): a call whose issue takes longer is host-bound whatever
the device does, and the launch-bound note says so."""
HOST_SAMPLES = 50
"""Host-latency samples per arm, each issued with the device idle (after a synchronize), so
a full launch queue never makes the host wait."""


@dataclass
class RankMeasure:
    """What :func:`measure_rank` measured on this process's device."""

    timings: list[RankTiming]
    exactness: RankExactness
    method: str
    flush_bytes: int | None
    launch_floor_ms: float | None
    hold_ms: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    block_calls: dict[str, int] = field(default_factory=dict)


def repeats_for(estimates_ms: Sequence[float | None], s: ProbeSettings) -> int:
    """Measured calls per arm: ``budget_s`` over the estimated cost of one call of the
    cheaper arm (ms), rounded up and clamped to ``[repeats, max_repeats]``, so each arm runs
    for at least the budget (capped) of device time; ``repeats`` when there is no budget or
    no estimate (no warmups).  Each arm, not the pair: on an H200 under power capping a
    0.3 ms arm paired with a 2 ms one ran for 65 ms in all and never reached the clocks it
    settles at when repeated, 8 % faster than ``do_bench`` (docs/probes-and-traces.md)."""
    if s.budget_s is None or any(e is None for e in estimates_ms):
        return s.repeats
    cheapest = min(e for e in estimates_ms if e is not None)
    if cheapest <= 0:
        return s.max_repeats
    want = math.ceil(s.budget_s * 1000 / cheapest)
    return max(s.repeats, min(s.max_repeats, want))


def block_order(n: int, per_block: dict[str, int]) -> list[str]:
    """The arm of each measured call: blocks of ``per_block[arm]`` consecutive calls, in
    ABBA order (control, candidate, candidate, control, ...), until each arm has ``n``
    calls.  ABBA cancels a linear drift (clocks settling, heat) between the arms, and a
    block lets each arm reach the steady state it has when it repeats (one call per block
    makes each arm run in the state the other left).  ``per_block`` values below 1 count
    as 1."""
    left = {"control": n, "candidate": n}
    out: list[str] = []
    i = 0
    while any(left.values()):
        pair = ("control", "candidate") if i % 2 == 0 else ("candidate", "control")
        for arm in pair:
            k = min(left[arm], max(1, per_block.get(arm, 1)))
            out += [arm] * k
            left[arm] -= k
        i += 1
    return out


def launch_floor_ms(device: str, launches: int = 100, rounds: int = 7) -> float | None:
    """Median host latency (ms) of issuing one trivial kernel (an in-place add on one
    element) on ``device``, from ``rounds`` bursts of ``launches`` launches without a
    synchronize between them; None on the CPU."""
    mod = _backend(device)
    if mod is None:
        return None
    torch = _torch()
    x = torch.zeros(1, device=device)
    for _ in range(20):
        x.add_(1)
    mod.synchronize(device)
    per = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        for _ in range(launches):
            x.add_(1)
        per.append((time.perf_counter_ns() - t0) / launches / 1e6)
        mod.synchronize(device)
    per.sort()
    return per[len(per) // 2]


def flush_size(device: str, requested: int | None) -> int:
    """Bytes of the L2 flush buffer: ``requested``, else four times the device's L2 (CUDA
    reports it) and at least :data:`FLUSH_MIN_BYTES`; :data:`NPU_FLUSH_BYTES` on an NPU."""
    if requested is not None:
        return requested
    if _kind(device) == "cuda":
        props = _torch().cuda.get_device_properties(device)
        return max(FLUSH_MIN_BYTES, 4 * int(getattr(props, "L2_cache_size", 0) or 0))
    return NPU_FLUSH_BYTES


def _graphed(fn: Callable[[], Any], mod: Any, arm: str) -> Callable[[], Any]:
    """``fn`` captured once in a CUDA/NPU graph: a callable that replays it and returns the
    captured (static) outputs.  Three eager calls on a side stream come first, as capture
    needs (PyTorch's CUDA graphs notes)."""
    graph_cls = getattr(mod, "CUDAGraph", None) or getattr(mod, "NPUGraph", None)
    if graph_cls is None or not hasattr(mod, "graph"):
        raise ProbeError("this torch build has no graph capture for the device")
    side = mod.Stream()
    side.wait_stream(mod.current_stream())
    with mod.stream(side):
        for _ in range(3):
            fn()
    mod.current_stream().wait_stream(side)
    g = graph_cls()
    try:
        with mod.graph(g):
            out = fn()
    except Exception as exc:  # noqa: BLE001 - reported with the arm's name
        raise ProbeError(f"the {arm} arm cannot be captured in a graph: "
                         f"{type(exc).__name__}: {exc}") from exc

    def replay() -> Any:
        g.replay()
        return out

    return replay


def hold_for(host_ms: dict[str, list[float]], device_ms: dict[str, float | None]
             ) -> dict[str, float]:
    """Spin (ms) to run before each call of the arms the host cannot keep ahead of: those
    whose median host latency is at least half their device time.  The spin is 1.25 times
    the 90th percentile of that latency plus 10 us, at most :data:`HOLD_MAX_MS`, so the host
    has issued the whole call before the device reaches it.  The median decides, not the
    90th percentile: on an H200 a few slow host samples (0.33 ms arm, three launches) once
    put a hold on one arm of a compute-bound pair, whose lower duty cycle let the device
    clock higher under its power cap and made that arm 8 % faster
    (docs/probes-and-traces.md).  Arms the host keeps ahead of get none for that reason."""
    out = {}
    for arm, h in host_ms.items():
        dev = device_ms.get(arm)
        if not h or dev is None:
            continue
        srt = sorted(h)
        if srt[(len(srt) - 1) // 2] >= 0.5 * dev:
            out[arm] = min(HOLD_MAX_MS, 1.25 * srt[int(0.9 * (len(srt) - 1))] + 0.01)
    return out


def sleep_cycles_per_ms(device: str) -> float | None:
    """Cycles of ``torch.cuda._sleep`` (a spin kernel PyTorch's own tests use) per
    millisecond on ``device``, timed with events; None where there is no such kernel (CPU,
    NPU)."""
    torch = _torch()
    if _kind(device) != "cuda" or not hasattr(torch.cuda, "_sleep"):
        return None
    cycles = 1_000_000
    got = []
    for _ in range(4):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        torch.cuda._sleep(cycles)
        b.record()
        b.synchronize()
        got.append(a.elapsed_time(b))
    ms = sorted(got[1:])[1]
    return cycles / ms if ms > 0 else None


class _Timer:
    """Times one call of an arm by the method chosen (see the module docstring)."""

    def __init__(self, device: str, method: str, flush_buf: Any) -> None:
        self.mod = _backend(device)
        self.device = device
        self.method = method
        self.buf = flush_buf
        self.sync = _sync_fn(device)
        self.hold_cycles: dict[str, int] = {}

    def issue_ms(self, fn: Callable[[], Any], n: int) -> list[float]:
        """Host latency of ``n`` calls, each issued with the device idle (ms)."""
        out = []
        for _ in range(n):
            self.sync()
            t0 = time.perf_counter_ns()
            fn()
            out.append((time.perf_counter_ns() - t0) / 1e6)
        self.sync()
        return out

    def call(self, fn: Callable[[], Any], hold_cycles: int = 0) -> tuple[Any, Any]:
        """Run ``fn`` once, after a spin of ``hold_cycles`` (CUDA): (device time in ms or an
        unread (start, end) event pair, output)."""
        if self.method == "host-sync":
            if self.buf is not None:
                self.buf.zero_()
            self.sync()
            t0 = time.perf_counter_ns()
            out = fn()
            self.sync()
            return (time.perf_counter_ns() - t0) / 1e6, out
        if self.method == "host":
            t0 = time.perf_counter_ns()
            out = fn()
            return (time.perf_counter_ns() - t0) / 1e6, out
        if self.buf is not None:
            self.buf.zero_()
        if hold_cycles:
            self.mod._sleep(hold_cycles)
        start = self.mod.Event(enable_timing=True)
        end = self.mod.Event(enable_timing=True)
        start.record()
        out = fn()
        end.record()
        return (start, end), out

    def read(self, got: list[Any]) -> list[float]:
        """Milliseconds of the samples of :meth:`call` (one synchronize, then the events)."""
        if self.method in ("host", "host-sync"):
            return [float(g) for g in got]
        self.sync()
        return [max(0.0, float(a.elapsed_time(b))) for a, b in got]


def measure_rank(control: Callable[..., Any], candidate: Callable[..., Any],
                 inputs: Sequence[Any], *, device: str, settings: ProbeSettings | None = None,
                 rank: int = 0, agree: Callable[[int], int] = lambda n: n) -> RankMeasure:
    """Time both arms on this process's device and compare their last outputs.

    ``agree(n)`` returns the number of measured calls, and of calls per block, that every
    rank uses (under ``torch.distributed``: the largest any rank wants).  Raises
    :class:`ProbeError` for bad settings, an arm that raises, or a graph/flush the device
    cannot do."""
    from evidence.operator_probe import RankTiming

    s = settings or ProbeSettings()
    s.check()
    torch = _torch()
    mod = _backend(device)
    if s.timer == "host":
        method = "host-sync"
    else:
        method = "host" if mod is None else f"{_kind(device)}-events"
    flush = s.flush if s.flush is not None else mod is not None
    if (flush or s.graph) and mod is None:
        raise ProbeError("a cache flush and graph capture need a CUDA GPU or an NPU device; "
                         "on the CPU use --no-flush and no --graph")
    notes: list[str] = []
    fns = {"control": control, "candidate": candidate}
    with torch.inference_mode():
        floor = launch_floor_ms(device) if mod is not None else None
        nbytes = flush_size(device, s.flush_bytes) if flush else None
        buf = torch.empty(nbytes // 4, dtype=torch.int32, device=device) if nbytes else None
        timer = _Timer(device, method, buf)
        calls: dict[str, Callable[[], Any]] = {}
        for arm, fn in fns.items():
            def eager(fn: Callable[..., Any] = fn, arm: str = arm) -> Any:
                return _call(fn, inputs, arm)

            calls[arm] = _graphed(eager, mod, arm) if s.graph else eager
        warm: dict[str, list[float]] = {}
        for arm, fn in calls.items():
            warm[arm] = timer.read([timer.call(fn)[0] for _ in range(s.warmups)])
        host: dict[str, list[float]] = {"control": [], "candidate": []}
        hold: dict[str, float] = {}
        if method.endswith("-events"):
            for arm, fn in calls.items():
                host[arm] = timer.issue_ms(fn, HOST_SAMPLES)
        est = [sorted(w)[len(w) // 2] if w else None for w in warm.values()]
        if method.endswith("-events"):
            hold = hold_for(host, dict(zip(calls, est, strict=True)))
            per_ms = sleep_cycles_per_ms(device) if s.hold and hold else None
            if per_ms:
                timer.hold_cycles = {arm: int(ms * per_ms) for arm, ms in hold.items()}
            else:
                if s.hold and hold:
                    notes.append("no spin kernel on this device to hold it while the host "
                                 "issues a call: launch-bound arms include launch gaps")
                hold = {}
        n = agree(repeats_for(est, s))
        got: dict[str, list[Any]] = {"control": [], "candidate": []}
        last: dict[str, Any] = {}
        # at most a quarter of the calls per block, so the interval has blocks to resample;
        # every rank runs the same ABBA order (arms that run collectives stay in step)
        per_block = {arm: agree(max(1, min(int(s.block_s * 1000 / e) if e else 1,
                                           math.ceil(n / MIN_BLOCKS_WANTED))))
                     for arm, e in zip(calls, est, strict=True)}
        for arm in block_order(n, per_block):
            d, last[arm] = timer.call(calls[arm], timer.hold_cycles.get(arm, 0))
            got[arm].append(d)
        meas = {arm: timer.read(g) for arm, g in got.items()}
    if method == "host-sync":
        notes.append("host timer: each sample includes launch latency and a synchronize")
    timings = [RankTiming(rank=rank, arm=arm, warmups_ms=warm[arm], samples_ms=meas[arm],
                          host_samples_ms=host[arm]) for arm in fns]
    return RankMeasure(timings=timings,
                       exactness=compare_outputs(rank, last["control"], last["candidate"]),
                       method=method, flush_bytes=nbytes, launch_floor_ms=floor,
                       hold_ms=hold, notes=notes, block_calls=per_block)


def _read_first(paths: Sequence[str], key: str) -> str | None:
    for p in paths:
        try:
            for line in Path(p).read_text(errors="replace").splitlines():
                k, sep, v = line.partition("=")
                if sep and k.strip().lower() == key and v.strip():
                    return v.strip()
        except OSError:
            continue
    return None


def runtime_versions(device: str) -> dict[str, str]:
    """The versions a probe records: python, torch, and for the device's kind CUDA (the
    runtime torch was built with), cuDNN, the NVIDIA driver (NVML through ``nvidia-ml-py``
    when installed, else the CUDA driver API version torch reports), or torch_npu, CANN
    (``version.cfg``/``ascend_toolkit_install.info`` under ``ASCEND_TOOLKIT_HOME``) and the
    Ascend driver (``/usr/local/Ascend/driver/version.info``).  A version that cannot be
    found is left out."""
    torch = _torch()
    out = {"python": platform.python_version(), "torch": str(torch.__version__)}
    kind = _kind(device)
    if kind == "cuda":
        if torch.version.cuda:
            out["cuda"] = str(torch.version.cuda)
        try:
            v = torch.backends.cudnn.version()
            if v:
                out["cudnn"] = str(v)
        except (RuntimeError, AttributeError):
            pass
        try:
            import pynvml

            pynvml.nvmlInit()
            d = pynvml.nvmlSystemGetDriverVersion()
            out["driver"] = d.decode() if isinstance(d, bytes) else str(d)
        except Exception:  # noqa: BLE001 - NVML missing or refused: fall back
            get = getattr(torch._C, "_cuda_getDriverVersion", None)
            if get is not None:
                v = int(get())
                out["cuda_driver_api"] = f"{v // 1000}.{v % 1000 // 10}"
    elif kind == "npu":
        try:
            import torch_npu

            out["torch_npu"] = str(torch_npu.__version__)
        except ImportError:
            pass
        home = os.environ.get("ASCEND_TOOLKIT_HOME") or os.environ.get("ASCEND_HOME_PATH") \
            or "/usr/local/Ascend/ascend-toolkit/latest"
        cann = _read_first([f"{home}/version.cfg", f"{home}/compiler/version.info",
                            f"{home}/ascend_toolkit_install.info"], "version")
        if cann:
            out["cann"] = cann
        drv = _read_first(["/usr/local/Ascend/driver/version.info"], "version")
        if drv:
            out["driver"] = drv
    return out


def _timer_text(m: RankMeasure, s: ProbeSettings) -> str:
    if m.method == "host-sync":
        return HOST_SYNC_TIMER
    graph = "; each arm captured in a graph and timed by replay" if s.graph else ""
    if m.method == "host":
        return ("time.perf_counter_ns around each call on the CPU (synchronous; no cache "
                f"flush){graph}; warmups of both arms first, measured calls in blocks of "
                f"about {s.block_s * 1000:g} ms of one arm, in ABBA order")
    flush = (f"a {m.flush_bytes / 2**20:.0f} MiB buffer zeroed on the device before each call"
             if m.flush_bytes else "no cache flush")
    hold = ("; before each call of " + " and ".join(
        f"{a} a {ms:.3f} ms spin kernel" for a, ms in m.hold_ms.items())
        + " (launch-bound: the host has issued the call before the device reaches it)"
        if m.hold_ms else "")
    return (f"{m.method.split('-')[0]} events (enable_timing) recorded around each call on the "
            f"current stream, read after one synchronize; {flush}{hold}{graph}; host latency "
            f"(perf_counter_ns, call to return) of {HOST_SAMPLES} calls per arm issued with the "
            "device idle, kept apart; warmups of both arms first, measured calls in "
            f"blocks of about {s.block_s * 1000:g} ms of one arm, in ABBA order")


def run_probe(
    control: Callable[..., Any],
    candidate: Callable[..., Any],
    inputs: Sequence[Any],
    *,
    probe_id: str,
    revision: str,
    control_op: str,
    candidate_op: str,
    device: str = "cpu",
    settings: ProbeSettings | None = None,
    input_names: Sequence[str] | None = None,
    control_kernels: Sequence[str] = (),
    candidate_kernels: Sequence[str] = (),
    **meta: Any,
) -> OperatorProbe:
    """Probe ``candidate`` against ``control`` on ``inputs`` (tensors, passed positionally
    to both) and return the validated ``probe@2`` :class:`OperatorProbe`.

    ``device``: ``cpu``, ``cuda[:N]`` or ``npu[:N]`` (the inputs are moved there);
    ``settings``: :class:`ProbeSettings` (timer, warmups, repeats, budget, flush, graph);
    ``control_kernels``/``candidate_kernels``: the device kernel names each arm launches
    (as a profiler names them), recorded to line the probe up with msprof or Nsight;
    ``meta``: ``campaign``, ``candidate_name``, ``track``, ``claims_lossless``, ``notes``,
    ``control_source``, ``candidate_source``.  Under an initialized ``torch.distributed``
    process group, every rank must call this together; each returns the same document
    covering every rank.

    Raises :class:`ProbeError` when an arm raises or returns no tensor, or the settings are
    out of range, and ``pydantic.ValidationError`` when the arguments make an invalid
    document.
    """
    from evidence.operator_probe import (
        RESAMPLES,
        OperatorArm,
        OperatorProbe,
        ProbeTiming,
        RankComparison,
        compare_samples,
        interval_method,
        launch_bound,
    )

    s = settings or ProbeSettings()
    torch = _torch()
    dist = torch.distributed
    ready = dist.is_available() and dist.is_initialized()
    rank = dist.get_rank() if ready else 0
    world = dist.get_world_size() if ready else 1
    moved = [t.to(device) for t in inputs]
    names = list(input_names or [f"input{i}" for i in range(len(moved))])
    if len(names) != len(moved):
        raise ProbeError(f"{len(names)} input name(s) for {len(moved)} input(s)")

    def agree(n: int) -> int:
        if not (ready and world > 1):
            return n
        wants: list[Any] = [None] * world
        dist.all_gather_object(wants, n)
        return max(int(w) for w in wants)

    m = measure_rank(control, candidate, moved, device=device, settings=s, rank=rank,
                     agree=agree)
    with torch.inference_mode():
        outs = _flatten(control(*moved))
    local = (m.timings, m.exactness, device_name(device), runtime_versions(device),
             m.launch_floor_ms, m.notes)
    gathered: list[Any] = [local]
    if ready and world > 1:
        gathered = [None] * world
        dist.all_gather_object(gathered, local)
    all_t = [t for g in gathered for t in g[0]]
    all_e = [g[1] for g in gathered]
    names_seen = sorted({g[2] for g in gathered})
    versions: dict[str, set[str]] = {}
    for g in gathered:
        for k, v in g[3].items():
            versions.setdefault(k, set()).add(v)
    floors = [g[4] for g in gathered if g[4] is not None]
    floor = sorted(floors)[len(floors) // 2] if floors else None
    comparisons = []
    for r in range(world):
        arms = {t.arm: t for t in all_t if t.rank == r}
        blocks = (m.block_calls["control"], m.block_calls["candidate"]) \
            if m.block_calls else None
        ratio, lo, hi, finding = compare_samples(
            arms["control"].samples_ms, arms["candidate"].samples_ms,
            confidence=s.confidence, min_effect=s.min_effect, block_calls=blocks)
        host_ok = m.method.endswith("-events")  # host latency apart from device time
        lb: list[Any] = [a for a in ("control", "candidate")
              if m.method != "host" and launch_bound(
                  arms[a].median_ms, arms[a].host_median_ms if host_ok else None, floor)]
        comparisons.append(RankComparison(
            rank=r, ratio=ratio, low=lo, high=hi, confidence=s.confidence,
            method=interval_method(blocks, len(arms["control"].samples_ms),
                                   len(arms["candidate"].samples_ms), RESAMPLES),
            finding=finding, launch_bound=lb))
    notes = sorted({n for g in gathered for n in g[5]})
    user_notes = meta.pop("notes", None)
    if user_notes:
        notes.insert(0, user_notes)
    csrc = meta.pop("control_source", None)
    ksrc = meta.pop("candidate_source", None)
    timing = ProbeTiming(method=m.method, cache_flush=m.flush_bytes is not None,  # type: ignore[arg-type]
                         flush_bytes=m.flush_bytes, graph=s.graph,
                         hold_ms=m.hold_ms, budget_s=s.budget_s,
                         min_repeats=s.repeats, max_repeats=s.max_repeats,
                         launch_floor_ms=floor, min_effect=s.min_effect,
                         block_calls=m.block_calls)
    return OperatorProbe(
        probe_id=probe_id, revision=revision,
        control=OperatorArm(operator=control_op, kernels=list(control_kernels), source=csrc),
        candidate=OperatorArm(operator=candidate_op, kernels=list(candidate_kernels),
                              source=ksrc),
        inputs=[tensor_spec(n, t) for n, t in zip(names, moved, strict=True)],
        outputs=[tensor_spec(f"output{i}", t) for i, t in enumerate(outs)],
        device=" / ".join(names_seen), device_count=world, warmups=s.warmups,
        repeats=len(all_t[0].samples_ms), timer=_timer_text(m, s), timings=all_t,
        exactness=all_e, created_at=datetime.now(UTC), timing=timing,
        versions={k: " / ".join(sorted(v)) for k, v in versions.items()},
        comparisons=comparisons, notes="; ".join(notes) or None, **meta)


def load_callable(spec: str) -> Callable[..., Any]:
    """``module:function`` or ``path/to/file.py:function`` to the function.  Raises
    :class:`ProbeError` naming what is missing."""
    mod_name, sep, fn_name = spec.rpartition(":")
    if not sep or not mod_name or not fn_name:
        raise ProbeError(f"{spec!r}: expected MODULE:FUNCTION or FILE.py:FUNCTION")
    try:
        if mod_name.endswith(".py"):
            path = Path(mod_name)
            if not path.is_file():
                raise ProbeError(f"{spec!r}: no such file {path}")
            sp = importlib.util.spec_from_file_location(f"_probe_{path.stem}", path)
            if sp is None or sp.loader is None:
                raise ProbeError(f"{spec!r}: cannot load {path}")
            mod = importlib.util.module_from_spec(sp)
            sp.loader.exec_module(mod)
        else:
            mod = importlib.import_module(mod_name)
    except ProbeError:
        raise
    except Exception as exc:  # noqa: BLE001 - the user's module: report, never a traceback
        raise ProbeError(f"{spec!r}: importing {mod_name} raised {type(exc).__name__}: "
                         f"{exc}") from exc
    fn = getattr(mod, fn_name, None)
    if not callable(fn):
        raise ProbeError(f"{spec!r}: {mod_name} has no callable {fn_name!r}")
    return fn  # type: ignore[no-any-return]


def register(app: Any) -> None:
    """Add ``probe run`` to the ``campaign-bot`` typer app."""
    probe_app = typer.Typer(name="probe", help="Operator probes: time a candidate operator "
                            "against control on actual shapes (never a model gain).",
                            no_args_is_help=True, add_completion=False,
                            pretty_exceptions_enable=False, rich_markup_mode=None)

    @probe_app.command("run")
    def run_cmd(
        control: Annotated[str, typer.Option(help="MODULE:FUNCTION or FILE.py:FUNCTION.")],
        candidate: Annotated[str, typer.Option(help="MODULE:FUNCTION or FILE.py:FUNCTION.")],
        inputs: Annotated[str, typer.Option(help="MODULE:FUNCTION returning the input "
                                            "tensor(s).")],
        probe_id: Annotated[str, typer.Option(help="Id of this probe, e.g. qkv-combined.")],
        revision: Annotated[str, typer.Option(help="Engine or code revision probed.")],
        out: Annotated[Path, typer.Option(help="Write the probe JSON here.")],
        device: Annotated[str, typer.Option(help="cpu, cuda[:N] or npu[:N].")] = "cpu",
        warmups: Annotated[int, typer.Option(min=0, help="Warmup calls per arm.")] = 5,
        repeats: Annotated[int, typer.Option(min=1, help="Fewest measured calls per arm.")
                           ] = 10,
        budget_s: Annotated[float, typer.Option(
            min=0, help="Measured device time to aim at per arm (seconds); 0: exactly "
            "--repeats calls.")] = 1.0,
        max_repeats: Annotated[int, typer.Option(min=1, help="Most measured calls per arm.")
                               ] = 2000,
        flush: Annotated[bool | None, typer.Option(
            "--flush/--no-flush", help="Zero a buffer on the device before each call so no "
            "call finds the last one's data in the L2 (default: on for a GPU/NPU, off on "
            "the CPU).", show_default=False)] = None,
        flush_bytes: Annotated[int | None, typer.Option(
            min=1, help="Flush buffer bytes (default: 4x the L2 and >= 256 MiB on CUDA, "
            "512 MiB on an NPU).")] = None,
        graph: Annotated[bool, typer.Option(
            "--graph", help="Capture each arm in a CUDA/NPU graph and time replays.")] = False,
        hold: Annotated[bool, typer.Option(
            "--hold/--no-hold", help="CUDA: spin the device before each call for longer than "
            "the host takes to issue it, so launch gaps stay out of device time.")] = True,
        block_s: Annotated[float, typer.Option(
            min=0, help="Device time of a block of consecutive calls of one arm (blocks in "
            "ABBA order); 0: strict alternation.")] = 0.125,
        timer: Annotated[str, typer.Option(
            help="device: the device's events (perf_counter on the CPU); host: host time "
            "around a synchronized call (the probe@1 timer).")] = "device",
        min_effect: Annotated[float, typer.Option(
            min=0, max=0.99, help="Ratios within this fraction of 1 are 'no material "
            "difference' (the smallest effect size of interest).")] = 0.05,
        control_kernels: Annotated[list[str] | None, typer.Option(
            help="Device kernel names control launches, as the profiler names them "
            "(repeat or comma-separate).")] = None,
        candidate_kernels: Annotated[list[str] | None, typer.Option(
            help="Device kernel names the candidate launches.")] = None,
        control_op: Annotated[str | None, typer.Option(help="Operator name (default: the "
                                                       "function's).")] = None,
        candidate_op: Annotated[str | None, typer.Option(help="Operator name.")] = None,
        campaign: Annotated[str | None, typer.Option(help="Campaign id.")] = None,
        candidate_name: Annotated[str | None, typer.Option(
            help="The campaign candidate this probe screens.")] = None,
        track: Annotated[str | None, typer.Option(help="Track the candidate targets.")] = None,
        claims_lossless: Annotated[bool, typer.Option(
            "--claims-lossless", help="Offer the candidate as lossless (exact).")] = False,
    ) -> None:
        """Time CANDIDATE against CONTROL on the inputs and write a probe document."""
        from pydantic import ValidationError

        from evidence.console import output_console, print_error

        try:
            settings = ProbeSettings(
                timer=timer, warmups=warmups, repeats=repeats, budget_s=budget_s or None,
                max_repeats=max_repeats, flush=flush, flush_bytes=flush_bytes, graph=graph,
                hold=hold, block_s=block_s, min_effect=min_effect)
            settings.check()
            fc, fk, fi = (load_callable(s) for s in (control, candidate, inputs))
            got = fi()
            tensors = got if isinstance(got, list | tuple) else [got]
            meta: dict[str, Any] = {
                k: v for k, v in (("campaign", campaign), ("candidate_name", candidate_name),
                                  ("track", track)) if v is not None}
            doc = run_probe(fc, fk, tensors, probe_id=probe_id, revision=revision,
                            control_op=control_op or control.rpartition(":")[2],
                            candidate_op=candidate_op or candidate.rpartition(":")[2],
                            device=device, settings=settings,
                            control_kernels=split_names(control_kernels),
                            candidate_kernels=split_names(candidate_kernels),
                            claims_lossless=claims_lossless, **meta)
        except (ProbeError, ValidationError) as exc:
            print_error(f"cannot probe: {exc}")
            raise typer.Exit(2) from None
        except ImportError as exc:  # torch (the [media] extra), or a module the arms import
            name = getattr(exc, "name", None) or str(exc)
            hint = (": probes time tensors with torch; install the [media] extra "
                    "(pip install 'campaign-bot[media]'), or [npu] as well on Ascend"
                    if str(name).split(".")[0] in ("torch", "torch_npu") else "")
            print_error(f"cannot import {name}{hint}")
            raise typer.Exit(2) from None
        except (RuntimeError, AttributeError, TypeError, ValueError) as exc:  # device, inputs
            print_error(f"cannot probe: {type(exc).__name__}: {exc}")
            raise typer.Exit(2) from None
        text = doc.model_dump_json(indent=2, by_alias=True) + "\n"
        try:
            from evidence.safejson import write_atomic

            write_atomic(out, text)
        except OSError as exc:
            print_error(f"cannot write {out}: {exc}")
            raise typer.Exit(2) from None
        con = output_console()
        render_probe(doc, con)
        raise typer.Exit(0)

    app.add_typer(probe_app, name="probe")


def split_names(values: Sequence[str] | None) -> list[str]:
    """Kernel names from repeated and/or comma-separated option values, blanks dropped,
    first occurrence kept."""
    out: list[str] = []
    for v in values or ():
        for n in v.split(","):
            n = n.strip()
            if n and n not in out:
                out.append(n)
    return out


def render_probe(doc: OperatorProbe, console: Any) -> None:
    """Print a probe with rich: per rank and arm the median, min, IQR and host latency
    (units adapt: ms, us), then per rank the ratio, its interval and the finding."""
    from rich.markup import escape
    from rich.table import Table

    from evidence.durations import ms_text

    timed = "device time" if doc.timing and doc.timing.method.endswith("-events") else (
        "host time")
    t = Table(title=f"probe {escape(doc.probe_id)}: {escape(doc.control.operator)} vs "
              f"{escape(doc.candidate.operator)} ({doc.device_count}x {escape(doc.device)}; "
              f"{timed}, {doc.repeats} calls per arm)", title_justify="left")
    for col in ("rank", "arm", "median", "min", "IQR", "host latency (median)"):
        t.add_column(col, justify="left" if col == "arm" else "right")
    for tm in sorted(doc.timings, key=lambda x: (x.rank, x.arm != "control")):
        q1, q3 = tm.iqr_ms
        t.add_row(str(tm.rank), tm.arm, ms_text(tm.median_ms), ms_text(tm.min_ms),
                  f"{ms_text(q1)} – {ms_text(q3)}", ms_text(tm.host_median_ms))
    console.print(t)
    c = Table(title="candidate / control (ratio of medians; below 1: less time)",
              title_justify="left")
    for col in ("rank", "ratio", "interval", "finding", "bit-exact", "max abs diff",
                "finite"):
        c.add_column(col, justify="left" if col == "finding" else "right")
    comps = {x.rank: x for x in doc.comparisons}
    c_med, k_med = doc.medians_ms("control"), doc.medians_ms("candidate")
    for e in sorted(doc.exactness, key=lambda e: e.rank):
        cmp_ = comps.get(e.rank)
        if cmp_ is None:  # probe@1
            cm, km = c_med[e.rank], k_med[e.rank]
            ratio, interval, finding = (f"{km / cm:.3f}x" if cm > 0 else "—"), "—", "—"
        else:
            ratio = f"{cmp_.ratio:.3f}x"
            interval = ("—" if cmp_.low is None or cmp_.high is None else
                        f"{cmp_.low:.3f}–{cmp_.high:.3f} ({cmp_.confidence:.0%})")
            finding = cmp_.finding
            if cmp_.launch_bound:
                finding += f"; launch-bound: {', '.join(cmp_.launch_bound)}"
        c.add_row(str(e.rank), ratio, interval, escape(finding),
                  "yes" if e.bit_exact else "[red]no[/]",
                  "—" if e.max_abs_diff is None else f"{e.max_abs_diff:.3g}",
                  "yes" if e.finite else "[red]no[/]")
    console.print(c)
    if any(x.launch_bound for x in doc.comparisons):
        console.print("launch-bound: the device finishes such a call within a few launch "
                      "latencies (or before the host has issued it); in a model its cost is "
                      "the launches, which device time does not show: try --graph or an "
                      "end-to-end screen")
    if doc.versions:
        console.print("versions: " + escape(", ".join(f"{k} {v}"
                                                      for k, v in doc.versions.items())))
    console.print("an operator observation, not a model gain: end-to-end gains come only from "
                  "a screen's receipts and verdict")
