"""The README's set-up commands and .ci/run agree, and the CLI plug-ins load."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]


EXTRACT = ROOT / ".ci" / "readme_test_command.py"
START, END = "<!-- ci:test-command -->", "<!-- /ci:test-command -->"


def _extract(readme: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(EXTRACT), str(readme)], capture_output=True,
                          text=True, timeout=60)


def test_ci_runs_the_readme_test_command() -> None:
    """.ci/run takes its command from the README's markers, and that is set-up command 2."""
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)\n\s*```", readme, re.S)
    test_cmd = [b.strip() for b in blocks if "pytest" in b]
    assert test_cmd, "README has no test command"
    out = _extract(ROOT / "README.md")
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == test_cmd[0]
    ci = (ROOT / ".ci" / "run").read_text()
    assert 'python3 "$clone/.ci/readme_test_command.py" "$clone/README.md"' in ci
    assert 'bash -euo pipefail -c "$cmd"' in ci


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace(START + "\n", ""), "no <!-- ci:test-command --> line"),
    (lambda t: t.replace(END + "\n", ""), "no <!-- /ci:test-command --> line"),
    (lambda t: t.replace(START, "").replace(END, ""), "no <!-- ci:test-command --> and"),
    (lambda t: t.replace(START, "X").replace(END, START).replace("X", END), "comes before"),
    (lambda t: t + "\n" + START + "\n", "must appear once each"),
    (lambda t: t.replace(START + "\n", START + "\n```sh\nrm -rf /\n```\n"),
     "exactly one ```sh"),
    (lambda t: t.replace(START + "\n", START + "\nrun this:\n"), "only the ```sh block"),
], ids=["no-start", "no-end", "no-markers", "reversed", "twice", "two-blocks", "prose"])
def test_readme_command_extraction_fails_loudly(tmp_path: Path, edit: Any, message: str) -> None:
    """A README whose markers are missing or malformed stops CI with a message naming it."""
    text = (ROOT / "README.md").read_text()
    assert text.count(START) == 1 and text.count(END) == 1
    broken = tmp_path / "README.md"
    broken.write_text(edit(text))
    out = _extract(broken)
    assert out.returncode == 2
    assert out.stdout == ""
    assert str(broken) in out.stderr and message in out.stderr, out.stderr


def test_readme_command_extraction_keeps_a_multi_line_block(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n  {START}\n  ```sh\n  a &&\n    b\n  ```\n  {END}\n")
    out = _extract(readme)
    assert (out.returncode, out.stdout) == (0, "a &&\n  b\n")


def test_cli_lists_every_schema() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "from evidence.cli import main; main()", "schema", "nope"],
        capture_output=True,
        text=True,
    )
    assert out.returncode == 2
    assert "receipt" in out.stderr
