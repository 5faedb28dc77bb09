"""`campaign-bot media ...` commands (registered as a plug-in, see pyproject entry points)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the ``media`` command group to ``app``."""
    return None
