"""One error style for every command: ``error: ...`` on one line of stderr, never wrapped
into a pipe or a log (copy and paste work), never a traceback or a parser's dump."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]


def run(*args: str | Path, cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """The command into pipes, at the default width a pipe gets (80: no COLUMNS)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CAMPAIGN_BOT_") and k != "COLUMNS"}
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.startswith("error: "), res.stderr
    assert res.stderr.count("\n") == 1, res.stderr  # one line, however long
    assert "Traceback" not in res.stderr
    return res.stderr.strip()


def test_check_claims_names_a_missing_file(tmp_path: Path) -> None:
    long = tmp_path / ("a-claims-file-with-a-rather-long-name-" * 3 + ".md")
    line = one_error_line(run("check", EXAMPLE, "--claims", long))
    assert line == f"error: --claims {long}: no such file"  # was "not a file"
    assert len(line) > 80
    line = one_error_line(run("check", EXAMPLE, "--claims", tmp_path))
    assert line.endswith(": not a regular file")


def test_trace_summarize_of_a_non_json_file_is_one_line(tmp_path: Path) -> None:
    """README.md as a trace: one line naming the file (it printed ijson's lexer picture)."""
    line = one_error_line(run("trace", "summarize", ROOT / "README.md", "--out",
                              tmp_path / "t.json"))
    assert "README.md: not valid JSON (" in line and "right here" not in line


@pytest.mark.parametrize("args", [
    ["check", EXAMPLE, "--no-signatures", "--trusted-keys", "k.pem"],
    ["schema", "nosuch"],
], ids=["check-exclusive-options", "schema-unknown"])
def test_usage_errors_share_the_style(args: list[str | Path]) -> None:
    one_error_line(run(*args))
