"""The GitHub Pages workflow template for the dashboard (templates/workflows/report-pages.yml):
actionlint clean, variables only through env:, least privilege, and its build step run for
real with bash against the example campaign."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from templates import TEMPLATE_DIR

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = TEMPLATE_DIR / "workflows" / "report-pages.yml"
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"


def _actionlint() -> str | None:
    local = Path(sys.executable).parent / "actionlint"
    return str(local) if local.exists() else shutil.which("actionlint")


def _step_run(text: str, name: str) -> str:
    """The ``run: |`` body of the step called ``name``, dedented."""
    m = re.search(rf"- name: {re.escape(name)}\n(?:\s+(?!run:)\S.*\n)*?(\s+)run: \|\n", text)
    assert m, name
    indent = len(m.group(1)) + 2
    body = []
    for line in text[m.end():].splitlines():
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            break
        body.append(line[indent:])
    return "\n".join(body)


def test_actionlint_is_clean() -> None:
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint not installed (pip install -e '.[dev]' ships it)")
    res = subprocess.run([exe, "-no-color", str(WORKFLOW)], capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr


def test_actionlint_catches_an_injected_expression(tmp_path: Path) -> None:
    """The lint is not vacuous: interpolating a commit message into run: is refused."""
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint not installed")
    bad = tmp_path / "report-pages.yml"
    bad.write_text(WORKFLOW.read_text().replace(
        "set -eu\n", "set -eu\n          echo ${{ github.event.head_commit.message }}\n", 1))
    res = subprocess.run([exe, "-no-color", str(bad)], capture_output=True, text=True)
    assert res.returncode != 0 and "potentially untrusted" in res.stdout


def test_publishes_with_the_pages_actions_and_least_privilege() -> None:
    text = WORKFLOW.read_text()
    assert "uses: actions/upload-pages-artifact@" in text
    assert "uses: actions/deploy-pages@" in text
    top = text.split("\njobs:")[0]
    assert "permissions:\n  contents: read\n" in top
    deploy = text.split("\n  deploy:")[1]
    assert "pages: write" in deploy and "id-token: write" in deploy
    assert "pages: write" not in text.split("\n  deploy:")[0]
    assert "persist-credentials: false" in text
    for name in ("Install campaign-bot with the report extra", "Build the static dashboard"):
        assert "${{" not in _step_run(text, name), name


def _build(tmp_path: Path, campaign: str) -> subprocess.CompletedProcess[str]:
    script = _step_run(WORKFLOW.read_text(), "Build the static dashboard")
    env = {**os.environ, "CAMPAIGN_DIR": campaign, "RUNNER_TEMP": str(tmp_path),
           "SOURCE_URL": "https://github.com/acme/campaigns/blob/0123456789abcdef",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "COLUMNS": "2000"}
    return subprocess.run(["bash", "-e", "-c", script], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=300)


def test_build_step_writes_the_site_and_warns_about_problems(tmp_path: Path) -> None:
    res = _build(tmp_path, str(EXAMPLE.relative_to(ROOT)))
    # campaign #320's example has P1 findings: published all the same, with a warning
    assert res.returncode == 0, res.stdout + res.stderr
    assert "::warning::the campaign evidence has problems" in res.stdout
    site = tmp_path / "site"
    assert (site / "index.html").is_file()
    findings = (site / "findings.html").read_text()
    assert ('href="https://github.com/acme/campaigns/blob/0123456789abcdef/'
            'examples/h3-ref2va-4x910b1/') in findings


def test_build_step_fails_on_an_unreadable_campaign_and_a_path_outside(tmp_path: Path) -> None:
    res = _build(tmp_path, "tests")  # no campaign.toml there: the step fails, nothing written
    assert res.returncode != 0 and "no campaign.toml" in res.stderr
    assert not (tmp_path / "site").exists()
    res = _build(tmp_path, "examples/../..")
    assert res.returncode == 2 and "must stay inside the repository" in res.stdout
