"""`campaign-bot serve`, `deliveries`, `replay` (registered as a plug-in)."""

from __future__ import annotations

import typer


def register(app: typer.Typer) -> None:
    """Add the bot's commands to ``app``."""
    return None
