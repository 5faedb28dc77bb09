"""Rows that ``campaign-bot check`` lists for diagnostic documents: operator probes
(``campaign-bot/probe@1``/``@2``) and profiler trace summaries
(``campaign-bot/trace-summary@1``/``@2``).

Both are evidence for choosing candidates, never inputs to a verdict and never a speedup:
the tables say so in their titles.  Each row carries the SHA-256 of the document's bytes, so
a reviewer can cite exactly the file that was listed.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

PROBES_TITLE = ("operator probes (medians of measured calls per rank; operator "
                "observations, never verdict inputs or model gains)")
TRACES_TITLE = ("trace summaries (diagnostic: overlapping kernel time, never a speedup)")


class ProbeRow(BaseModel):
    """One probe as ``check`` lists it."""

    model_config = ConfigDict(defer_build=True)

    path: str
    sha256: str
    probe_id: str
    control: str
    candidate: str
    device: str
    device_count: int
    revision: str
    control_median_ms: float = Field(description="Median over ranks of per-rank medians.")
    candidate_median_ms: float
    ratio: float | None = Field(default=None, description="candidate / control (operator).")
    exact_ranks: int
    nonexact_ranks: list[int] = Field(default_factory=list)
    max_abs_diff: float | None = None
    shapes: str = ""
    findings: list[str] = Field(default_factory=list,
                                description="probe@2: each rank's finding (faster, slower, "
                                "no material difference), launch-bound arms noted.")


class TraceRow(BaseModel):
    """One rank of one trace summary as ``check`` lists it (seconds)."""

    model_config = ConfigDict(defer_build=True)

    path: str
    sha256: str
    rank: int
    trace_sha256: str
    region: str | None = None
    region_span_s: float | None = None
    communication_outside_compute_s: float | None = Field(
        description="None when the trace has no device kernel (see its findings).")
    no_device_s: float | None = None
    top_kernel: str | None = None
    top_kernel_s: float | None = None


def _sha(root: Path, rel: str, text: str) -> str:
    try:
        return hashlib.sha256((root / rel).read_bytes()).hexdigest()
    except OSError:
        return hashlib.sha256(text.encode()).hexdigest()


def probe_rows(root: Path, docs: Sequence[Any]) -> list[ProbeRow]:
    """Rows for the loaded probe documents (``Doc[OperatorProbe]``)."""
    out = []
    for d in docs:
        p = d.model
        c = statistics.median(p.medians_ms("control").values())
        t = statistics.median(p.medians_ms("candidate").values())
        diffs = [e.max_abs_diff for e in p.exactness if e.max_abs_diff is not None]
        out.append(ProbeRow(
            path=d.path, sha256=_sha(root, d.path, d.text), probe_id=p.probe_id,
            control=p.control.operator, candidate=p.candidate.operator, device=p.device,
            device_count=p.device_count, revision=p.revision, control_median_ms=c,
            candidate_median_ms=t, ratio=t / c if c > 0 else None,
            exact_ranks=p.device_count - len(p.nonexact_ranks()),
            nonexact_ranks=p.nonexact_ranks(), max_abs_diff=max(diffs) if diffs else None,
            findings=[c.finding + (f" (launch-bound: {', '.join(c.launch_bound)})"
                                   if c.launch_bound else "") for c in p.comparisons],
            shapes="; ".join(f"{s.name} {'x'.join(map(str, s.shape))} {s.dtype}"
                             for s in p.inputs)))
    return out


def _s(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def trace_rows(root: Path, docs: Sequence[Any]) -> list[TraceRow]:
    """Rows (one per rank) for the loaded trace-summary documents."""
    out = []
    for d in docs:
        sha = _sha(root, d.path, d.text)
        for r in d.model.ranks:
            top = r.kernels[0] if r.kernels else None
            out.append(TraceRow(
                path=d.path, sha256=sha, rank=r.rank, trace_sha256=r.sha256,
                region=d.model.region,
                region_span_s=None if r.region_span_ns is None else r.region_span_ns / 1e9,
                communication_outside_compute_s=_s(r.communication_outside_compute_ns),
                no_device_s=_s(r.no_device_ns), top_kernel=top.name if top else None,
                top_kernel_s=top.total_ns / 1e9 if top else None))
    return out


def _f3(v: float | None) -> str:
    from evidence.durations import duration_text

    return duration_text(None if v is None else v * 1e9)


def render_rows(probes: Sequence[ProbeRow], traces: Sequence[TraceRow], console: Any) -> None:
    """Print the probes table and the trace summaries table with rich (nothing when empty)."""
    from rich.markup import escape
    from rich.table import Table

    if probes:
        t = Table(title=PROBES_TITLE, title_justify="left")
        from evidence.durations import ms_text

        for c in ("probe", "control", "candidate", "ratio", "finding", "exact ranks",
                  "max abs diff", "device", "shapes", "sha256"):
            t.add_column(c, overflow="fold",
                         justify="right" if c in ("ratio", "exact ranks") else "left")
        for p in probes:
            exact = f"{p.exact_ranks}/{p.device_count}"
            if p.nonexact_ranks:
                exact = f"[red]{exact}[/]"
            t.add_row(escape(f"{p.probe_id} ({p.path})"),
                      escape(f"{p.control} {ms_text(p.control_median_ms)}"),
                      escape(f"{p.candidate} {ms_text(p.candidate_median_ms)}"),
                      "—" if p.ratio is None else f"{p.ratio:.3f}x",
                      escape("; ".join(sorted(set(p.findings))) or "—"), exact,
                      "—" if p.max_abs_diff is None else f"{p.max_abs_diff:.3g}",
                      escape(f"{p.device_count}x {p.device} @{p.revision[:10]}"),
                      escape(p.shapes), p.sha256[:12])
        console.print(t)
    if traces:
        t = Table(title=TRACES_TITLE, title_justify="left")
        for c in ("summary", "rank", "region span", "comm outside compute", "no device kernel",
                  "top kernel", "trace sha256"):
            t.add_column(c, overflow="fold", justify="left" if c in (
                "summary", "top kernel", "trace sha256") else "right")
        for r in traces:
            span = _f3(r.region_span_s)
            top = "—" if r.top_kernel is None else f"{r.top_kernel} {_f3(r.top_kernel_s)}"
            t.add_row(escape(f"{r.path} ({r.sha256[:12]})"), str(r.rank), span,
                      _f3(r.communication_outside_compute_s), _f3(r.no_device_s),
                      escape(top), r.trace_sha256[:12])
        console.print(t)
