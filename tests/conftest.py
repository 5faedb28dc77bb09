"""Shared fixtures: the shared folder beside the repository, and the bundled example."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"


@pytest.fixture
def shared_dir() -> Path:
    """``../shared`` beside the repository root (DESIGN.md, seeds, fixtures)."""
    return Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """A private copy of the bundled example campaign, safe to break."""
    dst = tmp_path / "campaign"
    shutil.copytree(EXAMPLE, dst)
    return dst
