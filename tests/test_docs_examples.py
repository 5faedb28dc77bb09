"""The documentation's shell examples run, and say what they print.

A fenced ``sh`` block in README.md or docs/**/*.md is *runnable* when the line right above it
is a marker comment::

    <!-- runnable exit=1 expect="integrity: checked 24 hashes" expect="exit 1:" timeout=60 -->

``exit`` is the exit status of the block (that of its last command, as in an interactive
shell; default 0), every ``expect`` a piece of text its combined stdout and stderr must
contain, ``timeout`` the seconds it may take (default 60). Each block runs with ``bash`` from
the repository root, as a reader of a fresh clone would run it, with this interpreter's
``bin`` directory first on ``PATH`` (the ``campaign-bot`` console script and ``python`` of
the virtual environment) and ``TMPDIR`` set to a fresh folder, so ``tmp=$(mktemp -d)`` lands
there. A block must leave the repository as it found it: examples write only under
``mktemp -d`` folders, never to fixed names (a second run would collide with the first).

Blocks that need a live runner, GitHub or the network carry no marker; they are still checked
for fixed names in ``/tmp``.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
MARKER = re.compile(r"^<!-- runnable(?P<attrs>.*?)-->\s*$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+|~~~+)\s*(?P<info>[\w+-]*)")
KNOWN_ATTRS = {"exit", "expect", "timeout"}


@dataclass
class Block:
    """One fenced code block: where it is, its info string, its text, its marker (if any)."""

    path: Path
    line: int
    info: str
    text: str
    marker: str | None = None
    attrs: dict[str, list[str]] = field(default_factory=dict)

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def _blocks(path: Path) -> list[Block]:
    """Every fenced block of ``path`` with the runnable marker just above it, if any."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence = m.group("indent"), m.group("fence")
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        prev = lines[start - 1].strip() if start > 0 else ""
        blk = Block(path, start + 1, m.group("info"), "\n".join(body) + "\n")
        mm = MARKER.match(prev)
        if mm:
            blk.marker = prev
            for tok in shlex.split(mm.group("attrs")):
                key, _, value = tok.partition("=")
                blk.attrs.setdefault(key, []).append(value)
        out.append(blk)
        i += 1
    return out


ALL_BLOCKS = [b for p in DOC_FILES for b in _blocks(p)]
RUNNABLE = [b for b in ALL_BLOCKS if b.marker]


def test_markers_are_well_formed() -> None:
    """Every marker sits right above an ``sh`` block and uses known attributes only; a marker
    anywhere else would silently test nothing."""
    problems = []
    marked_lines = {(b.path, b.line - 1) for b in RUNNABLE}
    for path in DOC_FILES:
        for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if MARKER.match(text.strip()) and (path, n) not in marked_lines:
                problems.append(f"{path.relative_to(ROOT)}:{n}: marker not followed by a block")
    for b in RUNNABLE:
        if b.info != "sh":
            problems.append(f"{b.where}: runnable block is ```{b.info}, not ```sh")
        unknown = set(b.attrs) - KNOWN_ATTRS
        if unknown:
            problems.append(f"{b.where}: unknown marker attribute(s) {sorted(unknown)}")
        if len(b.attrs.get("exit", [])) > 1 or len(b.attrs.get("timeout", [])) > 1:
            problems.append(f"{b.where}: exit and timeout may be given once")
        if not b.attrs.get("expect"):
            problems.append(f"{b.where}: a runnable block needs at least one expect=")
    assert problems == []


def test_the_readme_and_each_guide_have_runnable_examples() -> None:
    have = {b.path.relative_to(ROOT).as_posix() for b in RUNNABLE}
    want = {"README.md", "docs/evidence-guide.md", "docs/runner-guide.md", "docs/deploy.md",
            "docs/media-gates.md"}
    assert want <= have, f"no runnable example in {sorted(want - have)}"


def test_no_shell_example_writes_fixed_names_in_tmp() -> None:
    """Walk-throughs use ``tmp=$(mktemp -d)``: fixed names in /tmp collide on a second try and
    between users."""
    bad = [b.where for b in ALL_BLOCKS if b.info in ("sh", "bash", "console", "shell", "")
           and re.search(r"(?<![\w$])/tmp/", b.text)]
    assert bad == []


def _git_status() -> str | None:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        return None
    res = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                         capture_output=True, text=True)
    return res.stdout if res.returncode == 0 else None


@pytest.mark.parametrize("block", RUNNABLE, ids=[b.where for b in RUNNABLE])
def test_runnable_block(block: Block, tmp_path: Path) -> None:
    bindir = Path(sys.executable).parent
    if not (bindir / "campaign-bot").exists():
        pytest.fail(f"no campaign-bot console script beside {sys.executable}: install the "
                    "package into this environment (pip install -e '.[dev]')")
    want_exit = int(block.attrs.get("exit", ["0"])[0])
    timeout = float(block.attrs.get("timeout", ["60"])[0])
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env.update(PATH=f"{bindir}{os.pathsep}{env.get('PATH', '')}", TMPDIR=str(tmp_path),
               NO_COLOR="1", TERM="dumb")
    script = tmp_path / "example.sh"
    script.write_text(block.text)
    before = _git_status()
    proc = subprocess.Popen(["bash", "--noprofile", "--norc", str(script)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        pytest.fail(f"{block.where}: still running after {timeout:g} s\n{out[-3000:]}")
    finally:
        try:  # servers the block started in the background, if it failed before stopping them
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    tail = out[-4000:]
    assert proc.returncode == want_exit, f"{block.where}: exit {proc.returncode}, the docs say " \
        f"{want_exit}\n{tail}"
    missing = [e for e in block.attrs["expect"] if e not in out]
    assert missing == [], f"{block.where}: output lacks {missing}\n{tail}"
    assert "Traceback (most recent call last)" not in out, f"{block.where}: traceback\n{tail}"
    after = _git_status()
    assert before == after, f"{block.where}: the example changed the repository:\n" \
        f"before:\n{before}\nafter:\n{after}"
