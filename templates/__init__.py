"""Jinja2 templates for every comment and header the bot writes (shipped in the wheel)."""

from __future__ import annotations

from pathlib import Path

TEMPLATE_DIR = Path(__file__).resolve().parent
"""Directory holding the ``*.j2`` templates."""
