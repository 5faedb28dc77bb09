"""Shared fixtures: the shared folder, and the session-wide GitHub double."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from github_double import GitHubDouble, OpenAPISubset

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """``../shared`` beside the repository root (seeds, fixtures, design notes)."""
    return SHARED


@pytest.fixture(scope="session")
def _github_double_server() -> Iterator[GitHubDouble]:
    double = GitHubDouble(OpenAPISubset(SHARED / "fixtures" / "github" / "openapi-subset.json"))
    double.start()
    yield double
    double.stop()


@pytest.fixture
def github_double(_github_double_server: GitHubDouble) -> Iterator[GitHubDouble]:
    """The GitHub double, emptied for this test.  At teardown every response it gave is
    validated against openapi-subset.json; a non-conforming response fails the test."""
    double = _github_double_server
    double.reset()
    yield double
    problems = double.validation_problems()
    double.reset()
    assert not problems, "GitHub double drifted from openapi-subset.json:\n" + "\n".join(
        problems[:20]
    )
