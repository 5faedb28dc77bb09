"""The ``campaign-bot`` command line (typer + rich).

The foundation commands (``check``, ``schema``) live here; other packages add theirs through
the ``campaign_bot.cli`` entry-point group so that ``evidence`` never imports ``bot`` or
``runners``.

Exit codes, for every command: 0 clean, 1 problems found, 2 unreadable input or bad usage.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from importlib.metadata import PackageNotFoundError, entry_points, version
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.markup import escape

from evidence.models import SCHEMA_MODELS


def _all_schemas() -> dict[str, Any]:
    from evidence.check import CheckReport

    return {**SCHEMA_MODELS, "check-report": CheckReport}

EXIT_OK = 0
EXIT_PROBLEMS = 1
EXIT_USAGE = 2

app = typer.Typer(
    name="campaign-bot",
    help="Evidence, screens and status for ML inference performance campaigns.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
err = Console(stderr=True)


def _version(value: bool) -> None:
    if value:
        try:
            v = version("campaign-bot")
        except PackageNotFoundError:  # run from a source tree that was never installed
            from evidence import __version__ as v
        sys.stdout.write(f"campaign-bot {v}\n")
        raise typer.Exit(EXIT_OK)


@app.callback()
def _root(
    show_version: Annotated[bool, typer.Option(
        "--version", help="Print the installed version and exit.", is_eager=True,
        callback=_version)] = False,
) -> None:
    """Evidence, screens and status for ML inference performance campaigns."""


@app.command("schema")
def schema_cmd(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(SCHEMA_MODELS)}, "
                                            "check-report")],
) -> None:
    """Print the JSON Schema of one evidence document type."""
    models = _all_schemas()
    model = models.get(name)
    if model is None:
        err.print(f"[red]unknown schema {escape(repr(name))}[/]; valid: {', '.join(models)}")
        raise typer.Exit(EXIT_USAGE)
    sys.stdout.write(schema_text(name) + "\n")


def schema_text(name: str) -> str:
    """The JSON Schema of document type ``name`` as committed under evidence/schemas/."""
    model = _all_schemas()[name]
    return json.dumps(model.model_json_schema(by_alias=True), indent=2)


class _LazyProgress:
    """A rich progress bar on stderr that appears only once hashing has run for 1 s."""

    def __init__(self, console: Console, delay_s: float = 1.0) -> None:
        self.console = console
        self.t0 = time.monotonic()
        self.delay = delay_s
        self.bar: Any = None
        self.task: Any = None
        self.lock = threading.Lock()

    def __call__(self, done: int, total: int) -> None:
        if self.bar is None:
            if time.monotonic() - self.t0 < self.delay:
                return
            with self.lock:
                if self.bar is None:
                    from rich.progress import (
                        BarColumn,
                        DownloadColumn,
                        Progress,
                        TimeRemainingColumn,
                        TransferSpeedColumn,
                    )

                    bar = Progress("hashing", BarColumn(), DownloadColumn(),
                                   TransferSpeedColumn(), TimeRemainingColumn(),
                                   console=self.console, transient=True)
                    self.task = bar.add_task("hashing", total=total)
                    bar.start()
                    self.bar = bar
        self.bar.update(self.task, completed=done)

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


@app.command("check")
def check_cmd(
    directory: Annotated[Path, typer.Argument(help="Campaign or bundle directory.")],
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document.")] = False,
    details: Annotated[bool, typer.Option(
        "--details", help="Print every table and every finding (default: a one-screen "
        "summary).")] = False,
    max_file_bytes: Annotated[int, typer.Option(
        help="Largest manifest or other file read whole (payload files are streamed).",
        min=1)] = 64 << 20,
    max_document_bytes: Annotated[int, typer.Option(
        help="Largest JSON or TOML file parsed whole (receipts, statuses, media reports, "
             "integrity maps): a larger campaign-bot document is a P1 finding.",
        min=1)] = 8 << 20,
    base: Annotated[str | None, typer.Option(
        "--base", metavar="REF",
        help="Git revision to compare frozen receipts with (FROZEN_RECEIPT_CHANGED).")] = None,
    claims: Annotated[Path | None, typer.Option(
        "--claims", metavar="FILE",
        help="Prose (PR description, status comment) whose numbers must trace to receipts "
             "or verdicts (UNTRACEABLE_CLAIM, SUMMED_GAINS).")] = None,
    prior_noise: Annotated[bool, typer.Option(
        "--prior-noise",
        help="Also show the labelled, model-based prior-noise decision where the campaign "
             "holds >= 10 historical control-vs-control differences.")] = False,
    trusted_keys: Annotated[Path | None, typer.Option(
        "--trusted-keys",
        help="File of trusted ed25519 public keys (PEM blocks): every signed bundle "
             "(attestation.dsse.json) under DIRECTORY must verify, every file in it must be "
             "covered by its signed manifests, and at least one must exist; documents are "
             "read from a signed bundle only as its signed manifests list them.")] = None,
) -> None:
    """Validate every document and verify every manifest under DIRECTORY in one pass, then
    give per-track verdicts, screening decisions and review findings.

    Prints a summary that fits an 80x24 terminal; --details prints everything, --json one
    JSON document.

    Exit 0 clean, 1 problems found (any P0-P2 finding), 2 unreadable directory or bad usage.
    """
    from evidence.check import check_campaign, render
    from evidence.findings import BaseRefError

    if claims is not None and not claims.is_file():
        err.print(f"[red]cannot read[/] --claims {escape(str(claims))}: not a file")
        raise typer.Exit(EXIT_USAGE)
    keys = None
    if trusted_keys is not None:
        from evidence.signing import KeyFileError, load_trusted_keys

        try:
            keys = load_trusted_keys(trusted_keys)
        except KeyFileError as e:
            err.print(f"[red]cannot use trusted keys:[/] {escape(str(e))}")
            raise typer.Exit(EXIT_USAGE) from None
    progress = _LazyProgress(err) if err.is_terminal else None
    try:
        rep = check_campaign(directory, max_file_bytes=max_file_bytes,
                             max_document_bytes=max_document_bytes, progress=progress,
                             base_ref=base, claims_file=claims, prior_noise=prior_noise,
                             trusted_keys=keys)
    except BaseRefError as e:
        if progress:
            progress.stop()
        err.print(f"[red]--base {escape(str(base))}:[/] {escape(str(e))}")
        raise typer.Exit(EXIT_USAGE) from None
    except (ValueError, UnicodeDecodeError) as e:
        if progress:
            progress.stop()
        err.print(f"[red]cannot check:[/] {escape(str(e))}")
        raise typer.Exit(EXIT_USAGE) from None
    except OSError as e:
        if progress:
            progress.stop()
        why = f"{directory}: {e.strerror}" if e.strerror else str(e)
        err.print(f"[red]cannot read[/] {escape(why)}")
        raise typer.Exit(EXIT_USAGE) from None
    if progress:
        progress.stop()
    if as_json:
        sys.stdout.write(rep.model_dump_json(indent=2, by_alias=True) + "\n")
    else:
        out = Console(highlight=False)
        if details and not out.is_terminal and "COLUMNS" not in os.environ:
            out.width = 160  # a file or pipe: wide tables, unless COLUMNS says otherwise
        render(rep, out, details=details)
    raise typer.Exit(rep.exit_code)


def _load_plugins() -> None:
    for ep in entry_points(group="campaign_bot.cli"):
        ep.load()(app)


def main() -> None:
    """Console-script entry point."""
    _load_plugins()
    app()
