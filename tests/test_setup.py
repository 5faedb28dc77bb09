"""The README's set-up commands and .ci/run agree, and the CLI plug-ins load."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ci_runs_the_readme_test_command() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)\n\s*```", readme, re.S)
    test_cmd = [b.strip() for b in blocks if "pytest" in b]
    assert test_cmd, "README has no test command"
    ci = (ROOT / ".ci" / "run").read_text()
    assert test_cmd[0] in ci.splitlines()


def test_cli_lists_every_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from evidence.cli import main; main()", "schema", "nope"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "receipt" in out.stderr
