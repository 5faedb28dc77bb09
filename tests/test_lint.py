"""ruff and mypy run in CI (DESIGN.md style rule 12), through the README's test command."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "cmd",
    [
        pytest.param([sys.executable, "-m", "ruff", "check", "."], id="ruff"),
        pytest.param([sys.executable, "-m", "mypy"], id="mypy"),
    ],
)
def test_static_checks_pass(cmd: list[str]) -> None:
    if shutil.which(cmd[2], path=str(Path(sys.executable).parent)) is None:
        pytest.fail(f"{cmd[2]} is not installed: install the [dev] extra")
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
