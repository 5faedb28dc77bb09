"""The README's set-up commands and .ci/run agree, and the CLI plug-ins load."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    """The README's set-up command 2: the one ``sh`` block between the lines
    ``<!-- ci:test-command -->`` and ``<!-- /ci:test-command -->`` (CI takes it from there)."""
    readme = (ROOT / "README.md").read_text()
    m = re.search(r"^<!-- ci:test-command -->\n```sh\n(.+?)\n```\n<!-- /ci:test-command -->$",
                  readme, re.S | re.M)
    assert m, "README has no sh block wrapped in <!-- ci:test-command --> lines"
    cmd = m.group(1).strip()
    assert "\n" not in cmd and "pytest" in cmd, cmd
    return cmd


def test_ci_runs_the_readme_test_command() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    assert readme_test_command() in ci.splitlines()


def test_cli_lists_every_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from evidence.cli import main; main()", "schema", "nope"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "receipt" in out.stderr
