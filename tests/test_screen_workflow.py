"""The screen workflow (the template packaged in templates/repo/screen.yml, which `campaign-bot
init` writes, and its copies .github/workflows/screen.yml and examples/workflows/screen.yml):
actionlint clean, inputs only through env:, the PR head checked against the pinned SHA, runner
labels only from the dispatch, nothing specific to a runner host."""

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
TEMPLATE = ROOT / "templates" / "repo" / "screen.yml"
INPUTS = ("campaign", "candidate", "track", "pr", "head_sha", "request_id")


def _actionlint() -> str | None:
    local = Path(sys.executable).parent / "actionlint"
    return str(local) if local.exists() else shutil.which("actionlint")


def test_example_copy_is_identical() -> None:
    assert EXAMPLE.read_bytes() == WORKFLOW.read_bytes() == TEMPLATE.read_bytes()


def test_runner_labels_come_only_from_the_dispatch() -> None:
    """One rule for runner labels: the campaign's pool names them, the bot passes them as the
    runs_on input; no repository variable or fallback label list duplicates them."""
    text = WORKFLOW.read_text()
    assert "runs-on: ${{ fromJSON(inputs.runs_on) }}" in text
    assert "      runs_on:\n" in text
    assert "vars." not in text and "CAMPAIGN_BOT_POOL_LABELS" not in text.split("\n#")[-1]
    assert not re.search(r"\[\s*\"self-hosted\"", text)  # no hard-coded label list


def test_nothing_host_specific_is_passed() -> None:
    """The runner config on the host (/etc/campaign-bot/runner.toml) holds the signing key,
    LPIPS weights, devices, server command and output folder: the workflow names none."""
    body = "\n".join(line for line in WORKFLOW.read_text().splitlines()
                     if not line.lstrip().startswith("#"))
    for host_specific in ("/etc/", "SIGNING_KEY", "--signing-key", "--lpips", "--media-device",
                          "--device-tool", "--server-cmd", "SERVER_CMD", "--out "):
        assert host_specific not in body, host_specific
    assert '--bundle-name "$REQUEST_ID"' in body
    assert "path: ${{ steps.screen.outputs.bundle_dir }}" in body


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
