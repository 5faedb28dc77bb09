"""The release, as .github/workflows/release.yml makes it from a tag, built here the same way:
``python -m build`` with the pinned build tools (deploy/build-constraints.txt) gives the sdist
and, built from that sdist, the wheel; the wheel holds every packaged file of the tree and
exactly what a wheel built straight from the tree holds (the one tests/test_base_install.py
installs with no extras and runs), so the README's install works from the released wheel.
The workflow's changelog step runs on a real git history with version tags.

The build needs the package index (pip installs setuptools and wheel into build's isolated
environment), as the README's install does."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest
import yaml
from test_base_install import COPY_IGNORE

ROOT = Path(__file__).resolve().parents[1]
RELEASE = ROOT / ".github" / "workflows" / "release.yml"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
VERSION = PYPROJECT["project"]["version"]


def _build(src: Path, out: Path, *args: str) -> str:
    env = {**os.environ, "PIP_CONSTRAINT": str(src / "deploy" / "build-constraints.txt")}
    res = subprocess.run([sys.executable, "-m", "build", "--outdir", str(out), *args, str(src)],
                         capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return res.stdout + res.stderr


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """``dist/`` of ``python -m build`` on a copy of this checkout, and the build's output."""
    import shutil

    work = tmp_path_factory.mktemp("release")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=COPY_IGNORE, symlinks=True)
    return work / "dist", _build(src, work / "dist")


def _wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if ".dist-info/" not in n}


def test_build_gives_the_versioned_sdist_and_wheel_with_the_pinned_tools(
        built: tuple[Path, str]) -> None:
    dist, log = built
    assert sorted(p.name for p in dist.iterdir()) == [
        f"campaign_bot-{VERSION}-py3-none-any.whl", f"campaign_bot-{VERSION}.tar.gz"]
    pins = dict(ln.split("==") for ln in (ROOT / "deploy" / "build-constraints.txt")
                .read_text().splitlines() if ln and not ln.startswith("#"))
    assert f"setuptools=={pins['setuptools']}" in log and f"wheel=={pins['wheel']}" in log
    assert "is deprecated" not in log, log  # e.g. a license table instead of an SPDX string
    with tarfile.open(dist / f"campaign_bot-{VERSION}.tar.gz") as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    assert {"pyproject.toml", "README.md", "bot/app.py", "templates/repo/screen.yml"} <= names


def test_the_wheel_holds_every_packaged_file_of_the_tree(built: tuple[Path, str]) -> None:
    dist, _ = built
    names = _wheel_names(dist / f"campaign_bot-{VERSION}-py3-none-any.whl")
    expected = set()
    for package, patterns in PYPROJECT["tool"]["setuptools"]["package-data"].items():
        for pattern in patterns:
            expected |= {p.relative_to(ROOT).as_posix() for p in (ROOT / package).glob(pattern)
                         if p.is_file() and "__pycache__" not in p.parts}
    expected |= {p.relative_to(ROOT).as_posix() for pkg in ("bot", "evidence", "runners")
                 for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts}
    assert expected and expected <= names, sorted(expected - names)[:20]


def test_the_wheel_from_the_sdist_is_the_wheel_from_the_tree(built: tuple[Path, str],
                                                             tmp_path: Path) -> None:
    """What the release publishes (wheel from sdist) and what the base-install test runs
    (wheel from the tree) hold the same files."""
    import shutil

    dist, _ = built
    src = tmp_path / "src"
    shutil.copytree(ROOT, src, ignore=COPY_IGNORE, symlinks=True)
    _build(src, tmp_path / "direct", "--wheel")
    (direct,) = (tmp_path / "direct").glob("*.whl")
    assert _wheel_names(direct) == _wheel_names(
        dist / f"campaign_bot-{VERSION}-py3-none-any.whl")


def _step(name: str) -> str:
    doc = yaml.safe_load(RELEASE.read_text())
    for job in doc["jobs"].values():
        for step in job["steps"]:
            if step.get("name") == name:
                return str(step["run"])
    raise AssertionError(f"no step {name!r} in {RELEASE}")


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout


def test_the_changelog_step_lists_the_commits_since_the_previous_tag(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for msg, tag in (("First import", "v0.1.0"), ("Fix the webhook key", None),
                     ("Pin the actions", "v0.2.0")):
        (repo / "f").write_text(msg)
        _git(repo, "add", "f")
        _git(repo, "commit", "-q", "-m", msg)
        if tag:
            _git(repo, "tag", "-a", tag, "-m", tag)
    (repo / "dist").mkdir()
    script = _step("Write the changelog")
    for tag in ("v0.2.0", "v0.1.0"):
        subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=repo, check=True,
                       env={**os.environ, "TAG": tag}, timeout=60)
        text = (repo / "dist" / "CHANGELOG.md").read_text()
        assert text.startswith(f"## campaign-bot {tag}\n")
        if tag == "v0.2.0":
            assert "Changes since v0.1.0:" in text
            assert "- Fix the webhook key (" in text and "- Pin the actions (" in text
            assert "First import" not in text
        else:
            assert "First release." in text and "- First import (" in text
