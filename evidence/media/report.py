"""Showing and writing media reports: rich tables, and a JSON writer that never rewrites a
report made by another validator version."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from evidence import safejson
from evidence.media.errors import MediaInputError
from evidence.media.probe import ProbeResult, steps_words
from evidence.models import MediaReport

PASS = "[green]PASS[/]"
FAIL = "[red]FAIL[/]"


def _fmt(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return f"{v:.6f}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def _verdict(p: bool | None) -> str:
    return "-" if p is None else (PASS if p else FAIL)


def render_report(report: MediaReport, console: Console) -> None:
    """Print the structural table, the bit-exact table (lossless), every metric with its gate
    and PASS/FAIL, and the verdict with its reasons."""
    head = (f"[bold]media report[/] {report.validator_version}, mode {report.mode}, "
            f"device {report.device}, gates: {report.gates_source or '-'}")
    console.print(head)
    for arm in ("control", "candidate"):
        side = getattr(report, arm)
        console.print(f"{arm:<9} {escape(str(side.path))}  sha256 {side.sha256[:16]}...")
    t = Table(title="structural checks", show_lines=False)
    t.add_column("check")
    t.add_column("expected")
    t.add_column("control / candidate", overflow="fold")
    t.add_column("result")
    for c in report.structural:
        act = escape(c.actual or "")
        if c.detail:
            act += f"\n[dim]{escape(c.detail)}[/]"
        t.add_row(c.name, escape(c.expected or "-"), act, _verdict(c.passed))
    console.print(t)
    if report.bit_exact is not None:
        b = report.bit_exact
        bt = Table(title=f"bit-exact (decoder build: {b.decoder_build})")
        bt.add_column("item")
        bt.add_column("value", overflow="fold")
        bt.add_column("result")
        for s, eq in b.packets_equal.items():
            first = b.first_differing_packet.get(s)
            said = ("equal" if eq else "differ" if first is None
                    else f"differ from packet {first}")
            bt.add_row(f"packets {s}", said, _verdict(eq))
        bt.add_row("decoded YUV planes",
                   f"{b.frames_compared} frames compared, {b.differing_frames} differ, first "
                   f"differing frame {_fmt(b.first_differing_frame)}", _verdict(b.frames_equal))
        bt.add_row("decoded PCM (this build only)",
                   "equal" if b.pcm_equal else ("not compared" if b.pcm_equal is None
                                                 else "differs"), _verdict(b.pcm_equal))
        console.print(bt)
    if report.metrics:
        mt = Table(title="metrics")
        mt.add_column("metric", no_wrap=True)
        mt.add_column("value", justify="right", no_wrap=True)
        mt.add_column("gate")
        mt.add_column("worst frame / detail", overflow="fold")
        mt.add_column("src", justify="right")
        mt.add_column("result")
        sources: list[str] = []
        for m in report.metrics:
            thr = m.threshold
            shown = (f"[{thr[0]:g}, {thr[1]:g}]" if isinstance(thr, list)
                     else f"{thr:g}" if isinstance(thr, float) else str(thr))
            gate = "-" if m.op is None else f"{m.op} {shown}"
            d = m.detail
            extra = ""
            if "ssim_min" in d:
                extra = f"min {_fmt(d['ssim_min'])} @ frame {_fmt(d.get('ssim_min_frame'))}"
            elif "psnr_min_db" in d:
                extra = f"min {_fmt(d['psnr_min_db'])} dB @ frame {_fmt(d.get('psnr_min_frame'))}"
            elif "max_frame" in d:
                extra = (f"max {_fmt(d.get('max'))} @ frame {_fmt(d['max_frame'])}, "
                         f"{d['frames_scored']} frames, stride {d['frame_stride']}")
            if "not_measured" in d:
                extra = f"not measured: {d['not_measured']}"
            if "not_judged" in d:
                extra += f" ({d['not_judged']})"
            ref = ""
            if m.source:
                if m.source not in sources:
                    sources.append(m.source)
                ref = f"[{sources.index(m.source) + 1}]"
            mt.add_row(m.name, _fmt(m.value), gate, extra, ref, _verdict(m.passed))
        console.print(mt)
        for k, src in enumerate(sources, 1):
            console.print(f"  \\[{k}] {escape(str(src))}", highlight=False)
    if report.passed:
        console.print(f"[bold green]PASS[/] ({report.mode})")
    else:
        console.print(f"[bold red]FAIL[/] ({report.mode})")
        for r in report.reasons:
            console.print(f"  - {escape(str(r))}")


def render_probe(p: ProbeResult, console: Console) -> None:
    """Print what the structural checks see in one file."""
    t = Table(title=f"probe: {escape(str(p.path))}")
    t.add_column("field")
    t.add_column("value", overflow="fold")
    t.add_row("size", f"{p.size_bytes} bytes")
    t.add_row("sha256", p.sha256)
    t.add_row("container", p.container)
    t.add_row("duration (container)", _fmt(p.duration_s))
    t.add_row("decoder build", p.decoder_build)
    if p.video is None:
        t.add_row("video", "[red]no video stream[/]")
    else:
        v = p.video
        t.add_row("video codec", v.codec + (f" ({v.profile})" if v.profile else ""))
        t.add_row("resolution", f"{v.width}x{v.height} (decoded: {', '.join(v.decoded_sizes)})")
        t.add_row("pixel format", f"{_fmt(v.pix_fmt)} (decoded: "
                  f"{', '.join(v.decoded_pix_fmts) or '-'})")
        t.add_row("frame rate", f"declared avg {_fmt(v.avg_frame_rate)}, base "
                  f"{_fmt(v.base_frame_rate)}, from pts {v.frame_rate_from_pts or 'variable'}")
        t.add_row("frames", f"decoded {v.decoded_frames}, declared {_fmt(v.declared_frames)}")
        t.add_row("timestamps", f"time_base {_fmt(v.time_base)}, first pts {_fmt(v.first_pts)}, "
                  f"steps {steps_words(v.pts_steps)}, non-increasing {v.non_increasing_pts}, "
                  f"missing {v.missing_pts}")
        t.add_row("video duration (declared)", _fmt(v.declared_duration_s))
        if v.decode_error:
            t.add_row("video decode", f"[red]{escape(str(v.decode_error))}[/]")
    if p.audio is None:
        t.add_row("audio", "[red]no audio stream[/]")
    else:
        a = p.audio
        t.add_row("audio", f"{a.codec}, {a.sample_rate} Hz, {a.channels} ch"
                  + (f" ({a.layout})" if a.layout else "")
                  + f", decoded as {_fmt(a.decoded_format)}")
        t.add_row("audio length", f"declared {_fmt(a.declared_duration_s)} s, decoded "
                  f"{a.decoded_samples} samples = {a.decoded_duration_s:.6f} s")
        t.add_row("audio non-finite samples", str(a.nonfinite_samples))
        t.add_row("PCM sha256 (this build)", a.pcm_sha256)
        if a.decode_error:
            t.add_row("audio decode", f"[red]{escape(str(a.decode_error))}[/]")
    console.print(t)
    problems = p.problems()
    if problems:
        console.print("[bold red]problems[/]")
        for x in problems:
            console.print(f"  - {escape(str(x))}")
    else:
        console.print("[green]no problems seen[/]")


def report_json(report: MediaReport) -> str:
    """The report as JSON (by alias: ``schema``; infinities as ``"Infinity"``)."""
    return report.model_dump_json(by_alias=True, indent=2) + "\n"


def write_report(path: Path, report: MediaReport) -> None:
    """Write ``report`` to ``path`` as JSON.

    An existing media report written by a *different* validator version is never rewritten
    (frozen results are never edited; a new validator writes a new file, as campaign #293's
    frozen scope asks):
    :class:`MediaInputError` names both versions.  A file that is not a media report is not
    overwritten either.
    """
    path = Path(path)
    if path.exists():
        try:
            raw = safejson.loads(path.read_text(encoding="utf-8"))
            old = MediaReport.model_validate(raw)
        except (ValueError, ValidationError) as exc:  # not JSON (or too deep), not UTF-8
            raise MediaInputError(path, f"exists and is not a media report; refusing to "
                                  f"overwrite it ({type(exc).__name__})") from exc
        if old.validator_version != report.validator_version:
            raise MediaInputError(path, f"holds a report by validator {old.validator_version}; "
                                  f"a {report.validator_version} result is never written over "
                                  "it, choose another --out path")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(report_json(report), encoding="utf-8")
    tmp.replace(path)
