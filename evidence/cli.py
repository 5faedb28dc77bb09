"""The ``campaign-bot`` command line (typer + rich).

The foundation commands (``check``, ``schema``) live here; other packages add theirs through
the ``campaign_bot.cli`` entry-point group so that ``evidence`` never imports ``bot`` or
``runners``.

Exit codes, for every command: 0 clean, 1 problems found, 2 unreadable input or bad usage.
"""

from __future__ import annotations

import json
import sys
from importlib.metadata import entry_points
from typing import Annotated

import typer
from rich.console import Console

from evidence.models import SCHEMA_MODELS

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


@app.callback()
def _root() -> None:
    """Evidence, screens and status for ML inference performance campaigns."""


@app.command("schema")
def schema_cmd(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(SCHEMA_MODELS)}")],
) -> None:
    """Print the JSON Schema of one evidence document type."""
    model = SCHEMA_MODELS.get(name)
    if model is None:
        err.print(f"[red]unknown schema {name!r}[/]; valid: {', '.join(SCHEMA_MODELS)}")
        raise typer.Exit(EXIT_USAGE)
    sys.stdout.write(json.dumps(model.model_json_schema(by_alias=True), indent=2) + "\n")


def _load_plugins() -> None:
    for ep in entry_points(group="campaign_bot.cli"):
        ep.load()(app)


def main() -> None:
    """Console-script entry point."""
    _load_plugins()
    app()
