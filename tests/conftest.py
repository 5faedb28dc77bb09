"""Shared fixtures: the bundled example campaign and the session-wide GitHub double
(sandbox/github_double/README.md), which validates against the vendored
``sandbox/github_double/openapi-subset.json``."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.github_double import GitHubDouble, OpenAPISubset
from sandbox.github_double.server import default_openapi_path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"


def pytest_configure(config: pytest.Config) -> None:
    """Services started by tests (in process or as ``campaign-bot serve``) keep their git
    mirrors in a scratch folder of this pytest run, never ``campaign-bot-git`` in the checkout."""
    if "CAMPAIGN_BOT_GIT_CACHE_DIR" not in os.environ:
        os.environ["CAMPAIGN_BOT_GIT_CACHE_DIR"] = tempfile.mkdtemp(prefix="campaign-bot-git-")


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """A private copy of the bundled example campaign, safe to break."""
    dst = tmp_path / "campaign"
    shutil.copytree(EXAMPLE, dst)
    return dst


@pytest.fixture(scope="session")
def _github_double_server() -> Iterator[GitHubDouble]:
    double = GitHubDouble(OpenAPISubset(default_openapi_path()))
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
