"""The screen workflow (.github/workflows/screen.yml and its copy under examples/): actionlint
clean, inputs only through env:, the PR head checked against the pinned SHA."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "screen.yml"
EXAMPLE = ROOT / "examples" / "workflows" / "screen.yml"
INPUTS = ("campaign", "candidate", "track", "pr", "head_sha", "request_id")


def _actionlint() -> str | None:
    local = Path(sys.executable).parent / "actionlint"
    return str(local) if local.exists() else shutil.which("actionlint")


def test_example_copy_is_identical() -> None:
    assert EXAMPLE.read_bytes() == WORKFLOW.read_bytes()


def test_actionlint_is_clean() -> None:
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint not installed (pip install -e '.[dev]' ships it)")
    res = subprocess.run([exe, "-no-color", str(WORKFLOW), str(EXAMPLE)], capture_output=True,
                         text=True, cwd=ROOT)
    assert res.returncode == 0, res.stdout + res.stderr


def test_actionlint_catches_an_injected_input(tmp_path: Path) -> None:
    """The lint is not vacuous: a workflow that interpolates into run: is refused."""
    exe = _actionlint()
    if exe is None:
        pytest.skip("actionlint not installed")
    bad = tmp_path / ".github" / "workflows" / "bad.yml"
    bad.parent.mkdir(parents=True)
    bad.write_text(WORKFLOW.read_text().replace(
        'runs-on: ${{ fromJSON(', 'runs-on: ${{ fromJSON(').replace(
        "set -eu\n          actual=", "set -eu\n          echo ${{ github.event.pull_request"
        ".title }}\n          actual="))
    res = subprocess.run([exe, "-no-color", str(bad)], capture_output=True, text=True)
    assert res.returncode != 0 and "potentially untrusted" in res.stdout


def _run_blocks(text: str) -> list[str]:
    blocks, cur, indent = [], None, 0
    for line in text.splitlines():
        m = re.match(r"^(\s*)(- )?run: \|\s*$", line)
        if m:
            cur, indent = [], len(m.group(1)) + (2 if m.group(2) else 0)
            blocks.append(cur)
            continue
        if cur is not None:
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                cur = None
            else:
                cur.append(line)
    return ["\n".join(b) for b in blocks]


def test_inputs_reach_scripts_only_through_env() -> None:
    text = WORKFLOW.read_text()
    runs = _run_blocks(text)
    assert len(runs) == 3
    for body in runs:
        assert "${{" not in body, body
    for name in INPUTS:
        assert re.search(rf"^\s+[A-Z_]+: \$\{{\{{ inputs\.{name} \}}\}}$", text, re.M), name
        assert f"      {name}:\n" in text  # declared as a workflow_dispatch input


def test_head_sha_is_verified_and_screen_runs() -> None:
    text = WORKFLOW.read_text()
    assert "ref: ${{ inputs.head_sha }}" in text  # the approved commit, wherever the PR is now
    assert 'if [ "$actual" != "$HEAD_SHA" ]' in text
    assert "campaign-bot screen --campaign \"$CAMPAIGN\"" in text
    assert "run-name:" in text and "inputs.request_id" in text.split("run-name:")[1].split(
        "\n")[0]
    assert "actions/upload-artifact@" in text and "if: always()" in text
