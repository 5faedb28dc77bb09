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


def run_cli(*args: str | Path, env_extra: dict[str, str] | None = None,
            cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """``run`` with extra environment variables (COLUMNS still unset: a pipe's default)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CAMPAIGN_BOT_") and k != "COLUMNS"}
    env.update(env_extra or {})
    return subprocess.run([*CLI, *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          env=env, timeout=120)


def test_doctor_table_into_a_pipe_is_one_line_per_check(tmp_path: Path) -> None:
    """``doctor bot`` piped (a real pipe, no COLUMNS): every check is one table row on one
    line, its fix whole (rich folded cells mid-word at 80 columns into a pipe or a log)."""
    res = run_cli("doctor", "bot", env_extra={
        "CAMPAIGN_BOT_DATABASE_URL": f"sqlite:///{tmp_path}/none.db"}, cwd=tmp_path)
    assert res.returncode == 1, res.stdout + res.stderr
    rows = [ln for ln in res.stdout.splitlines() if ln.startswith("│")]
    assert [r.split("│")[1].strip() for r in rows] == [
        "GitHub credentials", "webhook secret", "database", "public URL"], res.stdout
    assert "start `campaign-bot serve` with CAMPAIGN_BOT_PUBLIC_URL set and open the setup " \
           "URL it prints, or set CAMPAIGN_BOT_APP_ID and CAMPAIGN_BOT_PRIVATE_KEY_FILE" \
           in rows[0]
    assert f"sqlite:///{tmp_path}/none.db: the file does not exist" in rows[2]
    assert max(map(len, rows)) > 80  # wider than a pipe's default: nothing was folded


def test_doctor_table_on_a_terminal_fits_it(tmp_path: Path) -> None:
    """On a terminal (a pseudo-terminal 80 columns wide) the same table fits the terminal:
    only output that is not a terminal is left unwrapped."""
    import pty
    import struct
    import termios
    from fcntl import ioctl

    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CAMPAIGN_BOT_") and k != "COLUMNS"}
    env["CAMPAIGN_BOT_DATABASE_URL"] = f"sqlite:///{tmp_path}/none.db"
    leader, follower = pty.openpty()
    ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    proc = subprocess.Popen([*CLI, "doctor", "bot"], stdout=follower, stderr=follower,
                            env=env, cwd=tmp_path)
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert proc.wait(60) == 1
    text = re_ansi(b"".join(chunks).decode())
    lines = [ln for ln in text.splitlines() if ln.startswith("│")]
    assert lines and max(map(len, lines)) <= 80, text


def re_ansi(text: str) -> str:
    """``text`` without ANSI escape sequences and carriage returns."""
    import re

    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text).replace("\r", "")


@pytest.mark.parametrize(("args", "expect"), [
    (["check"], "error: Missing argument 'directory'. (see `campaign-bot check --help`)"),
    (["check", EXAMPLE, "--bogus"], "error: No such option: --bogus"),
    (["nosuch"], "error: No such command 'nosuch'. (see `campaign-bot --help`)"),
    (["screen", EXAMPLE, "--sessions", "x"], "error: Invalid value for '--sessions'"),
], ids=["missing-argument", "unknown-option", "unknown-command", "bad-value"])
def test_click_usage_errors_share_the_style(args: list[str | Path], expect: str) -> None:
    """click's own usage errors: one ``error:`` line and exit 2, not its usage block."""
    line = one_error_line(run(*args))
    assert line.startswith(expect), line
    assert "Usage:" not in line


@pytest.mark.parametrize("args", [
    ["report", "/nonexistent/campaign", "--out", "/nonexistent/site"],
    ["header", "/nonexistent/campaign"],
    ["trace", "summarize", "/nonexistent/trace.json", "--out", "/nonexistent/t.json"],
    ["keygen", "/nonexistent/folder/key.pem"],
    ["runner", "check-flags", "/nonexistent/campaign"],
    ["mcp", "--url", "ftp://example.org"],
], ids=["report", "header", "trace", "keygen", "check-flags", "mcp"])
def test_every_plugin_reports_errors_in_the_style(args: list[str]) -> None:
    """The plug-ins' commands (bot, runners, dashboard, header, trace) print user errors
    through the same function: one ``error:`` line, exit 2."""
    one_error_line(run(*args))


def test_no_command_prints_errors_its_own_way() -> None:
    """Every error line goes through :func:`evidence.console.print_error`: no command module
    builds its own ``error:`` line (a sweep found six ways: rich markup with and without
    highlighting, ``typer.echo``, ``print``)."""
    import re

    own = re.compile(r"""(\[red\]error:|["']error: )""")
    offenders = []
    for pkg in ("bot", "evidence", "runners", "sandbox"):
        for path in sorted((ROOT / pkg).rglob("*.py")):
            if path == ROOT / "evidence" / "console.py":
                continue
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if own.search(line):
                    offenders.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)


def test_init_help_names_force_once() -> None:
    """``init --help`` named ``--force`` twice (its description and the option's own);
    the option is listed once, with what it replaces."""
    res = run("init", "--help")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("--force") == 1, res.stdout
