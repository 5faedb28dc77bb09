"""Profiler trace summaries: ``campaign-bot trace summarize TRACE... --out FILE``.

Reads Chrome trace-format exports (the JSON that ``torch.profiler`` writes with
``export_chrome_trace``, that torch_npu's profiler and ``msprof --export`` write as
``trace_view.json``), one file per rank, and writes a ``campaign-bot/trace-summary@2``
document (``@1`` documents are still read) with, per rank:

* device kernel duration sums by full name, each with its short name (template arguments
  and parameters folded, as Nsight Systems and Holistic Trace Analysis print them) and its
  class (the top N by total time, and the totals);
* integer-nanosecond interval unions inside a window, the way profilers mean them: copy
  busy (copies and memsets), compute busy, communication busy, their pairwise overlaps,
  communication outside any compute kernel, and the time with no device work at all;
* the window: the device-side span of a named region (torch's ``gpu_user_annotation``,
  which covers the kernels the range launched) when the trace has one, else the host-side
  annotation's span with a note saying so (it opens before the first kernel is queued),
  else the extent of device activity;
* findings instead of zeros: a trace with no device kernel (a CPU-only profile), async
  ``b``/``e`` events it cannot place, a region that matches nothing;
* the trace file's SHA-256 and size.

What a summary is not: kernel durations overlap (streams run concurrently), so their sums
are not exclusive contributions to end-to-end latency, and an interval is not removable
just because it is measured.  A summary is diagnostic evidence for choosing candidates
(campaign #320: "these potentially overlapping diagnostic durations are not exclusive E2E
contributions"); ``check`` lists it and never counts it as a speedup.

Streaming: events are read one at a time with ijson (a maintained incremental JSON parser
with a C backend: chosen over an own parser because Chrome traces are arbitrary JSON, and
over ``json.load`` because a 2 GB trace would need several times that in memory).  ijson
gives numbers as ``Decimal``, so microsecond timestamps like ``1693456132834455.520``
become exact integer nanoseconds.  Memory holds 16 bytes per device kernel interval, the
per-name sums, and the events of a process seen before its ``process_name`` metadata;
never the document.  An unterminated JSON array (allowed by the trace format) is read to
its last complete event.

Classification (each overridable): a device kernel is an ``X`` (or ``B``/``E``) event whose
``cat`` is one of :data:`DEVICE_CATS` (torch.profiler's CUDA kernels and copies), or whose
process is named like :data:`DEVICE_PROCESS` (msprof's "Ascend Hardware"); its name
matching :data:`COMM_PATTERN` makes it a communication kernel, else a ``cat`` in
:data:`COPY_CATS` or a name matching :data:`COPY_PATTERN` a copy, else a compute kernel
(the order of Holistic Trace Analysis's ``get_kernel_type``).

Against Holistic Trace Analysis 0.5.0 (``HTA_DISABLE_NS_ROUNDING=1``) on the same traces,
without a region: HTA's ``kernel_time`` is this window, its ``idle_time`` is
``no_device_ns``, its ``compute_time`` is ``compute_busy_ns`` and its ``non_compute_time``
is ``device_busy_ns - compute_busy_ns``; docs/probes-and-traces.md gives the figures and
the differences (HTA works in float microseconds; with its default rounding on, it moves
each kernel's start up and end down to whole microseconds).
"""

from __future__ import annotations

import hashlib
import re
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from decimal import ROUND_HALF_EVEN, Decimal, InvalidOperation
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import Field, field_validator

from evidence.models import Sha256, Strict, _check_schema, schema_field
from evidence.trace_names import (
    COMM_PATTERN,
    COPY_CATS,
    COPY_PATTERN,
    DEVICE_ANNOTATION_CATS,
    DEVICE_CATS,
    DEVICE_PROCESS,
    short_kernel_name,
)

HOST_CATS = frozenset({"cpu_op", "user_annotation", "gpu_user_annotation", "python_function",
                       "cuda_runtime", "cuda_driver", "ac2g", "trace", "fwdbwd", "overhead",
                       "cpu_instant_event", "python", "mtia_runtime", "privateuse1_runtime"})
"""Categories that are never device kernels (host work, annotations, flows)."""
LABEL = ("diagnostic trace summary: kernel durations may overlap, so sums are not exclusive "
         "end-to-end contributions, intervals are not assumed removable, and nothing here is "
         "a speedup")


class TraceError(ValueError):
    """A trace cannot be read: not JSON, not a Chrome trace, unreadable.  The message names
    the file."""


# ----------------------------------------------------------------------------- models


SUMMARY_SCHEMAS = ("campaign-bot/trace-summary@1", "campaign-bot/trace-summary@2")
"""Versions read; the last is written."""

KernelKind = Literal["compute", "communication", "copy"]


class KernelSum(Strict):
    """Total device time of one kernel on one rank (integer nanoseconds).  ``name`` is the
    short name (:func:`evidence.trace_names.short_kernel_name`), ``full_name`` the name as
    the trace writes it (``@2``; sums are per full name)."""

    name: str
    full_name: str | None = None
    count: int = Field(ge=0)
    total_ns: int = Field(ge=0)
    communication: bool = False
    kind: KernelKind | None = None


class TraceFinding(Strict):
    """Something the summary cannot measure, said instead of printing zeros.

    ``code``: ``NO_DEVICE_KERNEL`` (no event is a device kernel: the busy and idle figures
    are None), ``UNPLACED_ASYNC`` (async ``b``/``e``/``n`` events are in no union),
    ``NO_REGION`` (the region pattern matches no event)."""

    code: Literal["NO_DEVICE_KERNEL", "UNPLACED_ASYNC", "NO_REGION"]
    message: str


class RankSummary(Strict):
    """The summary of one rank's trace.  Every ``*_ns`` is integer nanoseconds."""

    path: str = Field(description="The trace file as given.")
    sha256: Sha256
    bytes: int = Field(ge=0)
    rank: int = Field(ge=0)
    rank_source: str = Field(description="'distributedInfo' (torch.profiler) or 'position'.")
    events: int = Field(ge=0, description="Trace events read.")
    device_kernels: int = Field(ge=0)
    window_start_ns: int | None = None
    window_end_ns: int | None = None
    window_source: str = Field(description="'device region' (the region's device-side "
                               "annotation), 'host region' (its host-side annotation; "
                               "@1: 'region'), 'device activity' or 'empty'.")
    region_matches: int = Field(default=0, ge=0)
    region_span_ns: int | None = Field(default=None, ge=0)
    region_union_ns: int | None = Field(default=None, ge=0)
    device_busy_ns: int | None = Field(
        default=0, ge=0, description="Union of all device work in the window; None: no "
        "device kernel (see findings).")
    compute_busy_ns: int | None = Field(default=0, ge=0)
    communication_busy_ns: int | None = Field(default=0, ge=0)
    copy_busy_ns: int | None = Field(default=None, ge=0,
                                     description="Copies and memsets (@2).")
    compute_communication_overlap_ns: int | None = Field(default=None, ge=0)
    compute_copy_overlap_ns: int | None = Field(default=None, ge=0)
    communication_copy_overlap_ns: int | None = Field(default=None, ge=0)
    communication_outside_compute_ns: int | None = Field(
        default=0, ge=0,
        description="Communication kernel time not overlapped by any compute kernel.")
    no_device_ns: int | None = Field(default=0, ge=0,
                                     description="Window time with no device work at all.")
    kernel_total_ns: int = Field(
        default=0, ge=0, description="Sum over every kernel (overlapping kernels count twice).")
    kernel_names: int = Field(default=0, ge=0)
    kernels: list[KernelSum] = Field(default_factory=list, description="Top N by total_ns.")
    findings: list[TraceFinding] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)


class TraceSummary(Strict):
    """``campaign-bot/trace-summary@2`` (``@1`` read too): per-rank summaries of profiler
    traces."""

    schema_: str = schema_field("trace-summary", 2)
    label: str = LABEL
    created_at: datetime
    region: str | None = Field(default=None, description="Region name pattern (regex).")
    top: int = Field(ge=1)
    kernel_cats: list[str]
    device_process: str
    communication: str
    ranks: list[RankSummary] = Field(min_length=1)
    campaign: str | None = None
    screen_id: str | None = None
    candidate: str | None = None
    notes: str | None = None

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        if v in SUMMARY_SCHEMAS:
            return v
        return _check_schema(v, SUMMARY_SCHEMAS[-1])


# -------------------------------------------------------------------------- intervals


class Intervals:
    """Integer-nanosecond intervals, 16 bytes each (two ``array('q')``)."""

    __slots__ = ("starts", "ends")

    def __init__(self) -> None:
        self.starts = array("q")
        self.ends = array("q")

    def add(self, start: int, end: int) -> None:
        """Add ``[start, end)``; empty or inverted intervals are ignored."""
        if end > start:
            self.starts.append(start)
            self.ends.append(end)

    def __len__(self) -> int:
        return len(self.starts)

    def extend(self, other: Intervals) -> None:
        """Add every interval of ``other``."""
        self.starts.extend(other.starts)
        self.ends.extend(other.ends)


def union_ns(*sets: Intervals, lo: int | None = None, hi: int | None = None) -> int:
    """Length (ns) of the union of the intervals of ``sets``, clipped to ``[lo, hi)``."""
    import numpy as np

    parts = [(np.frombuffer(s.starts, np.int64), np.frombuffer(s.ends, np.int64))
             for s in sets if len(s)]
    if not parts:
        return 0
    st = np.concatenate([p[0] for p in parts])
    en = np.concatenate([p[1] for p in parts])
    if lo is not None:
        st = np.maximum(st, lo)
    if hi is not None:
        en = np.minimum(en, hi)
    keep = en > st
    st, en = st[keep], en[keep]
    if st.size == 0:
        return 0
    order = np.argsort(st, kind="stable")
    st, en = st[order], en[order]
    run = np.maximum.accumulate(en)
    new = np.empty(st.size, bool)
    new[0] = True
    new[1:] = st[1:] > run[:-1]
    first = np.flatnonzero(new)
    last = np.r_[first[1:] - 1, st.size - 1]
    return int((run[last] - st[first]).sum())


def extent(*sets: Intervals) -> tuple[int, int] | None:
    """(first start, last end) over ``sets``; None when all are empty."""
    lo = [min(s.starts) for s in sets if len(s)]
    hi = [max(s.ends) for s in sets if len(s)]
    return (min(lo), max(hi)) if lo else None


# ----------------------------------------------------------------------------- reading


class _HashingReader:
    """A binary file wrapper that hashes what is read and reports progress."""

    def __init__(self, f: IO[bytes], progress: Callable[[int], None] | None) -> None:
        self.f = f
        self.h = hashlib.sha256()
        self.n = 0
        self.progress = progress

    def read(self, size: int = -1) -> bytes:
        b = self.f.read(size)
        self.h.update(b)
        self.n += len(b)
        if self.progress is not None:
            self.progress(len(b))
        return b


def _to_ns(v: Any) -> int | None:
    """Microseconds (int, Decimal, float or numeric string) to integer nanoseconds."""
    try:
        if isinstance(v, bool):
            return None
        if isinstance(v, int):
            return v * 1000
        if isinstance(v, Decimal):
            d = v
        elif isinstance(v, float):
            d = Decimal(repr(v))
        elif isinstance(v, str):
            d = Decimal(v.strip())
        else:
            return None
        if not d.is_finite():
            return None
        return int((d * 1000).to_integral_value(ROUND_HALF_EVEN))
    except (InvalidOperation, ValueError):
        return None


_THOUSAND = Decimal(1000)


def _ns(v: Any) -> int | None:
    """:func:`_to_ns` with a fast path for the common exact cases (ints; Decimals with at most
    three decimals)."""
    t = type(v)
    if t is Decimal:
        x = v * _THOUSAND
        try:
            i = int(x)
        except (ValueError, OverflowError):
            return None
        return i if x == i else _to_ns(v)
    if t is int:
        return v * 1000  # type: ignore[no-any-return]
    return _to_ns(v)


_RANK_RE = re.compile(rb'"distributedInfo"\s*:\s*\{[^{}]*?"rank"\s*:\s*(\d+)')


def _distributed_rank(path: Path) -> int | None:
    """``distributedInfo.rank`` (torch.profiler) from the file's first or last 256 KiB."""
    with open(path, "rb") as f:
        head = f.read(256 << 10)
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - (256 << 10)))
        tail = f.read()
    for chunk in (head, tail):
        m = _RANK_RE.search(chunk)
        if m:
            return int(m.group(1))
    return None


def _events(reader: _HashingReader, path: Path, notes: list[str]) -> Iterator[dict[str, Any]]:
    import ijson

    head = reader.f.peek(4096)[:4096] if hasattr(reader.f, "peek") else b""
    first = head.removeprefix(b"\xef\xbb\xbf").lstrip()[:1]
    prefix = "item" if first == b"[" else "traceEvents.item"
    it = ijson.items(reader, prefix, use_float=False, buf_size=1 << 16)
    n = 0
    try:
        for ev in it:
            if isinstance(ev, dict):
                n += 1
                yield ev
    except ijson.IncompleteJSONError as exc:
        if prefix == "item" and n and "premature eof" in str(exc).lower():
            notes.append("unterminated JSON array (allowed by the trace format): read to the "
                         "last complete event")
            return
        raise TraceError(_not_json(path, exc)) from None
    except ijson.JSONError as exc:
        raise TraceError(_not_json(path, exc)) from None


def _not_json(path: Path, exc: Exception) -> str:
    """One line for a file the JSON parser refused: the parser's first line only (the C
    backend of ijson adds a lexer picture of the bytes around the error over more lines)."""
    first = (str(exc).strip().splitlines() or ["parse error"])[0].rstrip(".")
    return f"{path}: not valid JSON ({first}); a profiler trace is Chrome trace JSON"


@dataclass
class _Acc:
    compute: Intervals = field(default_factory=Intervals)
    comm: Intervals = field(default_factory=Intervals)
    copy: Intervals = field(default_factory=Intervals)
    region: Intervals = field(default_factory=Intervals)
    region_device: Intervals = field(default_factory=Intervals)
    sums: dict[str, list[int]] = field(default_factory=dict)
    pending: dict[Any, list[tuple[str, int, int]]] = field(default_factory=dict)
    pid_device: dict[Any, bool] = field(default_factory=dict)
    kernels: int = 0


def summarize_trace(
    path: Path,
    *,
    region: str | None = None,
    top: int = 20,
    kernel_cats: Sequence[str] = DEVICE_CATS,
    device_process: str = DEVICE_PROCESS,
    communication: str = COMM_PATTERN,
    copy: str = COPY_PATTERN,
    device_annotation: bool = True,
    position: int = 0,
    progress: Callable[[int], None] | None = None,
) -> RankSummary:
    """Summarize one trace (see the module docstring).

    ``region``: a regular expression searched in event names (any category: torch's
    ``record_function`` annotations, msprof's ranges); ``device_annotation``: take the
    window from the region's device-side annotation (:data:`DEVICE_ANNOTATION_CATS`) when
    the trace has one (False: always the host-side span); ``top``: kernels kept by total
    time; ``kernel_cats``, ``device_process``, ``communication``, ``copy``: the
    classification;
    ``position``: the rank when the trace has no ``distributedInfo``; ``progress(n)``:
    called with each number of bytes read.

    Raises :class:`TraceError` (naming the file) for a file that is not a JSON Chrome trace,
    and ``OSError`` when it cannot be read.  Raises ``re.error`` for a bad pattern.
    """
    path = Path(path)
    region_re = re.compile(region) if region else None
    comm_re = re.compile(communication, re.I)
    copy_re = re.compile(copy, re.I)
    dev_re = re.compile(device_process, re.I)
    cats = frozenset(kernel_cats)
    copy_cats = frozenset(COPY_CATS)
    dev_ann = frozenset(DEVICE_ANNOTATION_CATS)
    acc = _Acc()
    notes: list[str] = []
    kind_cache: dict[str, KernelKind] = {}
    sets: dict[KernelKind, Intervals] = {"compute": acc.compute, "communication": acc.comm,
                                         "copy": acc.copy}
    stacks: dict[tuple[Any, Any], list[tuple[str, Any, int]]] = {}
    events = skipped = 0
    unplaced: dict[str, int] = {}

    def kernel(name: str, start: int, end: int, cat: Any = None) -> None:
        kind = kind_cache.get(name)
        if kind is None:
            if comm_re.search(name):
                kind = "communication"
            elif cat in copy_cats or copy_re.search(name):
                kind = "copy"
            else:
                kind = "compute"
            kind_cache[name] = kind
        sets[kind].add(start, end)
        s = acc.sums.get(name)
        if s is None:
            acc.sums[name] = [1, end - start]
        else:
            s[0] += 1
            s[1] += end - start
        acc.kernels += 1

    def complete(name: str, cat: Any, pid: Any, start: int, end: int) -> None:
        if region_re is not None and region_re.search(name):
            if cat in dev_ann:
                acc.region_device.add(start, end)
            else:
                acc.region.add(start, end)
        if isinstance(cat, str) and cat in cats:
            kernel(name, start, end, cat)
            return
        if isinstance(cat, str) and cat.lower() in HOST_CATS:
            return
        dev = acc.pid_device.get(pid)
        if dev is None:
            acc.pending.setdefault(pid, []).append((name, start, end))
        elif dev:
            kernel(name, start, end)

    rank = _distributed_rank(path)
    rank_source = "distributedInfo" if rank is not None else "position"
    with open(path, "rb") as raw:
        reader = _HashingReader(raw, progress)
        for ev in _events(reader, path, notes):
            events += 1
            ph = ev.get("ph")
            name = ev.get("name")
            name = name if isinstance(name, str) else str(name)
            pid = ev.get("pid")
            if ph == "X":
                start = _ns(ev.get("ts"))
                dur = _ns(ev.get("dur", 0))
                if start is None or dur is None or dur < 0:
                    skipped += 1
                    continue
                complete(name, ev.get("cat"), pid, start, start + dur)
            elif ph in ("B", "E"):
                t = _ns(ev.get("ts"))
                if t is None:
                    skipped += 1
                    continue
                key = (pid, ev.get("tid"))
                if ph == "B":
                    stacks.setdefault(key, []).append((name, ev.get("cat"), t))
                elif stacks.get(key):
                    bname, bcat, t0 = stacks[key].pop()
                    complete(bname, bcat, pid, t0, t)
                else:
                    skipped += 1
            elif ph in ("b", "e", "n"):
                unplaced[name] = unplaced.get(name, 0) + 1
            elif ph == "M" and name == "process_name":
                args = ev.get("args")
                pname = args.get("name") if isinstance(args, dict) else None
                if isinstance(pname, str):
                    dev = bool(dev_re.search(pname.strip()))
                    acc.pid_device[pid] = dev
                    for n, s0, e0 in acc.pending.pop(pid, []):
                        if dev:
                            kernel(n, s0, e0)
        # hash whatever the parser left unread (trailing whitespace, an unterminated tail)
        while reader.read(1 << 20):
            pass
        sha = reader.h.hexdigest()
        size = reader.n
    if events == 0:
        raise TraceError(f"{path}: holds no trace events (a Chrome trace is a JSON array of "
                         "events or an object with 'traceEvents')")
    if skipped:
        notes.append(f"{skipped} event(s) without a usable ts/dur (or an E without its B) "
                     "skipped")
    unresolved = sum(len(v) for v in acc.pending.values())
    if unresolved:
        notes.append(f"{unresolved} event(s) of processes without process_name metadata "
                     "and without a device category: not counted as device kernels")
    findings: list[TraceFinding] = []
    if unplaced:
        top_names = ", ".join(repr(n) for n, _ in sorted(unplaced.items(),
                                                         key=lambda kv: -kv[1])[:3])
        findings.append(TraceFinding(
            code="UNPLACED_ASYNC", message=f"{sum(unplaced.values())} async b/e/n event(s) "
            f"({top_names}) are not placed: async events pair by id across threads and "
            "carry no device stream, so they are in no union; if they are device work, "
            "the busy figures miss it"))
    if not acc.kernels:
        findings.append(TraceFinding(
            code="NO_DEVICE_KERNEL", message=f"no device kernel among {events} events: a "
            "CPU-only profile (torch.profiler without ProfilerActivity.CUDA, msprof without "
            "device data) has none, or its device events use a category outside "
            f"{', '.join(kernel_cats)} (--kernel-cat); busy and idle figures are left empty"))
    has_region = bool(len(acc.region) or len(acc.region_device))
    if region_re is not None and not has_region:
        findings.append(TraceFinding(code="NO_REGION",
                                     message=f"no event matches the region {region!r}; the "
                                     "window is the extent of device activity"))
    win = None
    wsrc = "empty"
    reg = acc.region
    if region_re is not None and len(acc.region_device) and device_annotation:
        reg, wsrc = acc.region_device, "device region"
    elif region_re is not None and len(acc.region):
        wsrc = "host region"
        if acc.kernels:
            notes.append("window from the region's host-side annotation: "
                         + ("the trace has no device-side annotation of it (torch's "
                            "gpu_user_annotation); " if not len(acc.region_device) else "")
                         + "a host span opens before its first kernel is queued, so it holds "
                         "launch lead-in as time with no device work")
    elif region_re is not None and len(acc.region_device):
        reg, wsrc = acc.region_device, "device region"
    if wsrc != "empty":
        win = extent(reg)
    elif acc.kernels:
        win, wsrc = extent(acc.compute, acc.comm, acc.copy), "device activity"
    lo, hi = win if win else (None, None)
    out = RankSummary(
        path=str(path), sha256=sha, bytes=size, rank=rank if rank is not None else position,
        rank_source=rank_source, events=events, device_kernels=acc.kernels,
        window_start_ns=lo, window_end_ns=hi, window_source=wsrc,
        region_matches=len(reg) if wsrc.endswith("region") else 0, notes=notes,
        findings=findings)
    if wsrc.endswith("region"):
        r_ext = extent(reg)
        assert r_ext is not None
        out.region_span_ns = r_ext[1] - r_ext[0]
        out.region_union_ns = union_ns(reg)
    if win is not None and acc.kernels:
        u = lambda *xs: union_ns(*xs, lo=lo, hi=hi)  # noqa: E731
        busy = u(acc.compute, acc.comm, acc.copy)
        compute, comm, cp = u(acc.compute), u(acc.comm), u(acc.copy)
        out.device_busy_ns = busy
        out.compute_busy_ns = compute
        out.communication_busy_ns = comm
        out.copy_busy_ns = cp
        out.compute_communication_overlap_ns = compute + comm - u(acc.compute, acc.comm)
        out.compute_copy_overlap_ns = compute + cp - u(acc.compute, acc.copy)
        out.communication_copy_overlap_ns = comm + cp - u(acc.comm, acc.copy)
        out.communication_outside_compute_ns = u(acc.compute, acc.comm) - compute
        out.no_device_ns = (hi - lo) - busy  # type: ignore[operator]
    else:
        for f in ("device_busy_ns", "compute_busy_ns", "communication_busy_ns",
                  "communication_outside_compute_ns", "no_device_ns"):
            setattr(out, f, None)
    ranked = sorted(acc.sums.items(), key=lambda kv: (-kv[1][1], kv[0]))
    out.kernel_total_ns = sum(v[1] for v in acc.sums.values())
    out.kernel_names = len(acc.sums)
    out.kernels = [KernelSum(name=short_kernel_name(n), full_name=n, count=c, total_ns=t,
                             communication=kind_cache[n] == "communication",
                             kind=kind_cache[n])
                   for n, (c, t) in ranked[:top]]
    return out


def summarize(
    paths: Sequence[Path],
    *,
    region: str | None = None,
    top: int = 20,
    kernel_cats: Sequence[str] = DEVICE_CATS,
    device_process: str = DEVICE_PROCESS,
    communication: str = COMM_PATTERN,
    copy: str = COPY_PATTERN,
    device_annotation: bool = True,
    progress: Callable[[int], None] | None = None,
    **meta: Any,
) -> TraceSummary:
    """A :class:`TraceSummary` of ``paths`` (one trace per rank, ranks from
    ``distributedInfo`` or the order given).  ``meta``: ``campaign``, ``screen_id``,
    ``candidate``, ``notes``.  Raises :class:`TraceError` as :func:`summarize_trace`,
    ValueError when two traces claim one rank or no path is given."""
    if not paths:
        raise ValueError("give at least one trace")
    ranks = [summarize_trace(p, region=region, top=top, kernel_cats=kernel_cats,
                             device_process=device_process, communication=communication,
                             copy=copy, device_annotation=device_annotation, position=i,
                             progress=progress) for i, p in enumerate(paths)]
    seen: dict[int, str] = {}
    for r in ranks:
        if r.rank in seen:
            raise ValueError(f"{r.path} and {seen[r.rank]} both hold rank {r.rank}")
        seen[r.rank] = r.path
    ranks.sort(key=lambda r: r.rank)
    return TraceSummary(created_at=datetime.now(UTC), region=region, top=top,
                        kernel_cats=list(kernel_cats), device_process=device_process,
                        communication=communication, ranks=ranks, **meta)


# --------------------------------------------------------------------------------- CLI


def render_summary(doc: TraceSummary, console: Any) -> None:
    """Print the per-rank intervals (units adapt: s, ms, us, ns), each rank's top kernels by
    short name, then findings and notes, with rich."""
    from rich.markup import escape
    from rich.table import Table

    from evidence.durations import duration_text as d

    t = Table(title=f"trace summary ({doc.label})", title_justify="left")
    for c in ("rank", "trace", "window", "device busy", "compute", "copy", "comm",
              "comm outside compute", "copy under compute", "no device work", "kernels"):
        t.add_column(c, justify="left" if c in ("trace", "window") else "right",
                     overflow="fold", no_wrap=c not in ("trace", "window"))
    for r in doc.ranks:
        win = "—" if r.window_start_ns is None else (
            f"{r.window_source} {d((r.window_end_ns or 0) - r.window_start_ns)}")
        t.add_row(str(r.rank), escape(f"{r.path} ({r.sha256[:12]})"), escape(win),
                  d(r.device_busy_ns), d(r.compute_busy_ns), d(r.copy_busy_ns),
                  d(r.communication_busy_ns), d(r.communication_outside_compute_ns),
                  d(r.compute_copy_overlap_ns), d(r.no_device_ns), str(r.device_kernels))
    console.print(t)
    for r in doc.ranks:
        if not r.kernels:
            continue
        k = Table(title=f"rank {r.rank}: kernel duration sums (top {len(r.kernels)} of "
                  f"{r.kernel_names}; overlapping, not exclusive; full names in the JSON)",
                  title_justify="left")
        for c in ("kernel", "class", "count", "total"):
            k.add_column(c, justify="left" if c in ("kernel", "class") else "right",
                         overflow="fold")
        for ks in r.kernels:
            kind = ks.kind or ("communication" if ks.communication else "")
            k.add_row(escape(ks.name), kind, str(ks.count), d(ks.total_ns))
        console.print(k)
    for r in doc.ranks:
        for f in r.findings:
            console.print(f"[yellow]rank {r.rank}: {f.code}:[/] {escape(f.message)}")
        for n in r.notes:
            console.print(f"[yellow]rank {r.rank}:[/] {escape(n)}")
