"""``campaign-bot trace summarize TRACE... --out FILE`` (a ``campaign_bot.cli`` plug-in; the
work is in :mod:`evidence.trace_summary`).  Exit codes: 0 written, 2 unreadable input or bad
usage.

The trace-summary models are imported by the command, not at module level (the plug-in
contract of :mod:`evidence.cli`)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from evidence.trace_names import COMM_PATTERN, COPY_PATTERN, DEVICE_CATS, DEVICE_PROCESS


def register(app: Any) -> None:
    """Add ``trace summarize`` to the ``campaign-bot`` typer app."""
    trace_app = typer.Typer(name="trace", help="Profiler trace summaries (diagnostic, never a "
                            "speedup).", no_args_is_help=True, add_completion=False,
                            pretty_exceptions_enable=False, rich_markup_mode=None)

    @trace_app.command("summarize")
    def summarize_cmd(
        traces: Annotated[list[Path], typer.Argument(help="Chrome trace JSON files, one per "
                                                     "rank.")],
        out: Annotated[Path, typer.Option(help="Write the trace-summary JSON here.")],
        region: Annotated[str | None, typer.Option(
            help="Regular expression naming the region whose span is the window, e.g. "
            "'main-denoise'.")] = None,
        top: Annotated[int, typer.Option(help="Kernels kept per rank.", min=1)] = 20,
        kernel_cat: Annotated[list[str] | None, typer.Option(
            help="Event category counted as a device kernel (repeat; default: kernel, "
            "gpu_memcpy, gpu_memset).")] = None,
        device_process: Annotated[str, typer.Option(
            help="Regular expression of process names whose events are device kernels.")
        ] = DEVICE_PROCESS,
        communication: Annotated[str, typer.Option(
            help="Regular expression of communication kernel names (case-insensitive).")
        ] = COMM_PATTERN,
        copy: Annotated[str, typer.Option(
            help="Regular expression of copy and memset task names (case-insensitive; "
            "gpu_memcpy/gpu_memset events are copies whatever their name).")] = COPY_PATTERN,
        host_region: Annotated[bool, typer.Option(
            "--host-region", help="Take the region's window from its host-side annotation "
            "even when the trace has the device-side one.")] = False,
        json_out: Annotated[bool, typer.Option("--json", help="Print the JSON document.")
                            ] = False,
    ) -> None:
        """Summarize profiler traces per rank: kernel sums, region span, copy, compute and
        communication busy and their overlaps, time with no device work.  Exit 0 written, 2
        unreadable input."""
        import sys

        from rich.console import Console
        from rich.markup import escape

        from evidence.console import print_error
        from evidence.trace_summary import TraceError, render_summary, summarize

        err = Console(stderr=True, soft_wrap=True)
        bar: Any = None
        try:
            total = sum(p.stat().st_size for p in traces)
        except OSError as exc:
            print_error(f"cannot read {exc.filename}: {exc.strerror or str(exc)}")
            raise typer.Exit(2) from None
        if err.is_terminal:
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                Progress,
                TransferSpeedColumn,
            )

            bar = Progress("reading traces", BarColumn(), DownloadColumn(),
                           TransferSpeedColumn(), console=err, transient=True)
            task = bar.add_task("read", total=total)
            bar.start()
        t0 = time.perf_counter()
        try:
            doc = summarize(traces, region=region, top=top,
                            kernel_cats=kernel_cat or list(DEVICE_CATS),
                            device_process=device_process, communication=communication,
                            copy=copy, device_annotation=not host_region,
                            progress=(lambda n: bar.advance(task, n)) if bar else None)
        except (TraceError, ValueError, re.error) as exc:
            print_error(f"cannot summarize: {exc}")
            raise typer.Exit(2) from None
        except OSError as exc:
            print_error(f"cannot read {exc.filename}: {exc.strerror or str(exc)}")
            raise typer.Exit(2) from None
        finally:
            if bar is not None:
                bar.stop()
        text = doc.model_dump_json(indent=2, by_alias=True) + "\n"
        try:
            from evidence.safejson import write_atomic

            write_atomic(out, text)
        except OSError as exc:
            print_error(f"cannot write {out}: {exc}")
            raise typer.Exit(2) from None
        if json_out:
            sys.stdout.write(text)
        else:
            from evidence.console import output_console

            con = output_console()
            render_summary(doc, con)
            mb = total / 1e6
            con.print(f"wrote {escape(str(out))} ({mb:.1f} MB read in "
                      f"{time.perf_counter() - t0:.2f} s)")
        raise typer.Exit(0)

    app.add_typer(trace_app, name="trace")
