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


def _help_commands() -> list[list[str]]:
    """Every command path of ``campaign-bot`` (groups and their sub-commands)."""
    from evidence.cli import command

    root = command()
    out: list[list[str]] = [[]]
    for name, cmd in sorted(root.commands.items()):
        out.append([name])
        for sub in sorted(getattr(cmd, "commands", None) or {}):
            out.append([name, sub])
    return out


def test_help_fits_80_columns_and_never_cuts_a_name() -> None:
    """At 80 columns every ``--help`` line fits and no option or variable name is cut with an
    ellipsis (rich's option table cut '--idle-timeout…' and '$CAMPAIGN_BOT_S…');
    ``screen --help`` is much shorter than the 157 lines it had."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env["COLUMNS"] = "80"
    lengths = {}
    for path in _help_commands():
        res = subprocess.run([*CLI, *path, "--help"], capture_output=True, text=True,
                             env=env, timeout=60)
        assert res.returncode == 0, (path, res.stderr)
        long = [ln for ln in res.stdout.splitlines() if len(ln) > 80]
        assert not long, (path, long)
        assert "…" not in res.stdout, (path, res.stdout)
        assert "\\[" not in res.stdout, path  # no markup escapes shown as text
        lengths[" ".join(path)] = res.stdout.count("\n")
    assert lengths["screen"] < 100, lengths["screen"]
    res = subprocess.run([*CLI, "screen", "--help"], capture_output=True, text=True,
                         env=env, timeout=60)
    assert "--idle-timeout-s" in res.stdout and "$CAMPAIGN_BOT_SERVER_CMD" in res.stdout
