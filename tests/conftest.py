"""Shared test fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The project's shared folder (``../shared`` beside the repository root)."""
    return Path(__file__).resolve().parents[1].parent / "shared"
