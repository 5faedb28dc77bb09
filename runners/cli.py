"""`campaign-bot screen` (registered as a plug-in)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the runner's commands to ``app``."""
    return None
