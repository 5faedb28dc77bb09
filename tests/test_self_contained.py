"""The repository stands on its own: no tracked file reads a path outside the checkout.

Every fixture, schema and sample the tests, the GitHub double, the benchmarks and the examples
use lives under the repository (third-party data under ``tests/fixtures/``, each tree with a
SOURCE.md and its licence).  ``.ci/run`` proves it by running the suite in a clone that stands
alone in a new temporary folder; this test catches an escape before CI does and names the file
and line.

What counts as an escape:

- Python (parsed with :mod:`ast`, so docstrings and comments are ignored): a path built from
  ``__file__`` that climbs above the repository root (``Path(__file__).resolve().parents[1]
  .parent``, ``ROOT.parent``, ``os.path.dirname`` chains, ``/ ".."``), tracked through module
  and function level assignments; and any non-docstring string naming ``../shared`` or the
  workspace folder ``/work/``.
- Every other tracked text file (shell, YAML, TOML, Markdown, templates): ``../shared`` or
  ``/work/shared``.

``.ci/`` (which creates the clone) and this file (which names the patterns) are exempt.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[1]
SELF = "tests/test_self_contained.py"
EXEMPT_DIRS = (".ci/",)
TEXT_ESCAPE = re.compile(r"\.\./shared\b|/work/shared\b")
STRING_ESCAPE = re.compile(r"\.\./shared\b|(?<![\w.])/work/")
_PATH_METHODS = {"resolve", "absolute", "expanduser"}
_PATH_CTORS = {"Path", "PurePath", "PosixPath", "PurePosixPath"}


def _docstring_nodes(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are module, class or function docstrings."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                    and isinstance(body[0].value.value, str)):
                out.add(id(body[0].value))
    return out


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


class _Depth:
    """Depth below the repository root of path expressions derived from ``__file__``.

    A file ``tests/github_double/server.py`` has depth 3 (its parts); ``.parent`` and
    ``os.path.dirname`` subtract 1, ``.parents[k]`` subtracts k + 1, ``/ "a/.."`` adds and
    subtracts parts.  A depth below 0 is outside the repository.  Expressions not derived from
    ``__file__`` have no depth (None)."""

    def __init__(self, file_depth: int) -> None:
        self.file_depth = file_depth
        self.names: dict[str, int] = {}
        self.lowest: list[tuple[int, int]] = []  # (line, depth) of every evaluated node < 0

    def _join(self, node: ast.AST, base: int | None, parts: list[ast.expr]) -> int | None:
        """``base`` joined with string ``parts`` one component at a time, so that
        ``"../../x"`` from depth 1 counts as leaving the root even though it ends at depth 0.
        Non-constant parts count as one component down."""
        if base is None:
            return None
        for part in parts:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                for comp in PurePosixPath(part.value).parts:
                    if comp in (".", "/"):
                        continue
                    base += -1 if comp == ".." else 1
                    if base < 0:
                        self.lowest.append((getattr(node, "lineno", 0), base))
            else:
                base += 1
        return base

    def eval(self, node: ast.AST) -> int | None:
        d = self._eval(node)
        if d is not None and d < 0:
            self.lowest.append((getattr(node, "lineno", 0), d))
        return d

    def _eval(self, node: ast.AST) -> int | None:
        if isinstance(node, ast.Name):
            if node.id == "__file__":
                return self.file_depth
            return self.names.get(node.id)
        if isinstance(node, ast.Attribute):
            if node.attr == "parent":
                base = self.eval(node.value)
                return None if base is None else base - 1
            return None
        if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                and node.value.attr == "parents" and isinstance(node.slice, ast.Constant) \
                and isinstance(node.slice.value, int):
            base = self.eval(node.value.value)
            return None if base is None else base - (node.slice.value + 1)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            return self._join(node, self.eval(node.left), [node.right])
        if isinstance(node, ast.Call):
            func = _dotted(node.func)
            if func.split(".")[-1] in _PATH_CTORS or func in ("os.fspath", "str"):
                if len(node.args) == 1:
                    return self.eval(node.args[0])
                if node.args:
                    return self._join(node, self.eval(node.args[0]), node.args[1:])
                return None
            if isinstance(node.func, ast.Attribute) and node.func.attr in _PATH_METHODS:
                return self.eval(node.func.value)
            if func in ("os.path.dirname", "path.dirname", "dirname") and node.args:
                base = self.eval(node.args[0])
                return None if base is None else base - 1
            if func in ("os.path.abspath", "os.path.realpath", "os.path.normpath") and node.args:
                return self.eval(node.args[0])
            if func in ("os.path.join", "path.join") and node.args:
                return self._join(node, self.eval(node.args[0]), node.args[1:])
        return None


def python_escapes(rel: str, source: str) -> list[str]:
    """Escapes in one Python file ``rel`` (posix path relative to the root), as
    ``"rel:line: what"`` strings.  A file that does not parse is reported, not skipped."""
    try:
        tree = ast.parse(source, filename=rel)
    except SyntaxError as exc:
        return [f"{rel}:{exc.lineno}: does not parse ({exc.msg}), so it cannot be checked"]
    found: list[str] = []
    depth = _Depth(len(PurePosixPath(rel).parts))
    for node in ast.walk(tree):  # assignments first, so later uses of the names resolve
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            d = depth.eval(node.value)
            for t in targets:
                if isinstance(t, ast.Name) and d is not None:
                    depth.names[t.id] = d
    for node in ast.walk(tree):
        if isinstance(node, ast.expr):
            depth.eval(node)
    for line in sorted({ln for ln, _ in depth.lowest}):
        found.append(f"{rel}:{line}: path built from __file__ climbs above the repository root")
    docstrings = _docstring_nodes(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                and id(node) not in docstrings:
            m = STRING_ESCAPE.search(node.value)
            if m:
                found.append(f"{rel}:{node.lineno}: string names a path outside the repository: "
                             f"{m.group(0)!r}")
    return found


def text_escapes(rel: str, text: str) -> list[str]:
    """``../shared`` or ``/work/shared`` in a non-Python file, as ``"rel:line: ..."``."""
    return [f"{rel}:{i}: names {m.group(0)!r}, a folder outside the repository"
            for i, line in enumerate(text.splitlines(), 1)
            for m in [TEXT_ESCAPE.search(line)] if m]


def scan(root: Path, files: list[str]) -> list[str]:
    """Every escape in ``files`` (posix paths relative to ``root``); binary files skipped."""
    found: list[str] = []
    for rel in files:
        if rel == SELF or rel.startswith(EXEMPT_DIRS):
            continue
        data = (root / rel).read_bytes()
        if b"\0" in data:
            continue
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        found += python_escapes(rel, text) if rel.endswith(".py") else text_escapes(rel, text)
    return found


def tracked_files(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, timeout=60)
    if out.returncode != 0:
        pytest.fail("git ls-files failed: the self-containment check needs a git checkout "
                    f"({out.stderr.decode(errors='replace').strip()})")
    return [f for f in out.stdout.decode().split("\0") if f and (root / f).is_file()]


def test_no_tracked_file_reads_outside_the_repository() -> None:
    files = tracked_files(ROOT)
    py = [f for f in files if f.endswith(".py")]
    # the scan must see the files that used to read outside the checkout
    for must in ("tests/conftest.py", "sandbox/github_double/server.py", "tests/github_helpers.py",
                 "tests/webhook_helpers.py", "benchmarks/webhook_load.py", "README.md"):
        assert must in files, must
    assert len(py) > 50
    found = scan(ROOT, files)
    assert not found, "files that read outside the repository:\n" + "\n".join(found)


def test_vendored_fixtures_are_tracked_with_their_sources() -> None:
    files = set(tracked_files(ROOT))
    for tree, licence in (("github", "LICENSE.octokit-webhooks"),
                          ("bagit-conformance-suite", "LICENSE.md"), ("npu-smi", None)):
        assert f"tests/fixtures/{tree}/SOURCE.md" in files, tree
        if licence:
            assert f"tests/fixtures/{tree}/{licence}" in files, tree
    assert "sandbox/github_double/openapi-subset.json" in files
    assert "tests/fixtures/bagit-conformance-suite/v0.97/warning/special-system-files/data/" \
           "Thumbs.db" in files  # a *.db file: .gitignore must let it through


@pytest.mark.parametrize(("rel", "source", "line"), [
    ("tests/a.py", "from pathlib import Path\n"
     "X = Path(__file__).resolve().parents[1].parent / 'shared'\n", 2),
    ("tests/a.py", "from pathlib import Path\nROOT = Path(__file__).resolve().parents[1]\n"
     "SHARED = ROOT.parent / 'shared'\n", 3),
    ("tests/github_double/s.py", "from pathlib import Path\n\ndef f():\n"
     "    return Path(__file__).resolve().parents[2].parent / 'shared' / 'x.json'\n", 4),
    ("tests/a.py", "import os\nR = os.path.dirname(os.path.dirname(os.path.dirname("
     "os.path.abspath(__file__))))\n", 2),
    ("tests/a.py", "import os\nR = os.path.join(os.path.dirname(__file__), '..', '..', 'x')\n", 2),
    ("tests/a.py", "from pathlib import Path\nR = Path(__file__).parent / '../../x'\n", 2),
    ("tests/a.py", "from pathlib import Path\nR = Path(__file__).parents[2]\n", 2),
    ("bench.py", "open('../shared/fixtures/github/webhooks/ping/payload.json')\n", 1),
    ("bench.py", "P = '/work/shared/DESIGN.md'\n", 1),
    ("bench.py", "def f(:\n", 1),
], ids=["parents-parent", "root-parent", "in-function", "dirname-chain", "join-dotdot",
        "div-dotdot", "parents-too-far", "literal", "absolute", "unparsable"])
def test_the_scan_finds_escapes(rel: str, source: str, line: int) -> None:
    """Each way of reaching ``../shared`` that the repository once used (and a few more) is
    reported with its file and line."""
    found = python_escapes(rel, source)
    assert found and all(f.startswith(f"{rel}:{line}:") for f in found), found


@pytest.mark.parametrize("source", [
    "from pathlib import Path\nROOT = Path(__file__).resolve().parents[1]\n"
    "F = ROOT / 'tests' / 'fixtures' / 'github'\n",
    "from pathlib import Path\nF = Path(__file__).resolve().parent / 'fixtures' / 'x.json'\n",
    '"""Formats: ``../shared/VLLM_OMNI.md`` (a docstring cites, it does not read)."""\n',
    "BAD = ('../evil', \"'..' in archive path\")  # path-traversal test data\n",
    "import os\nR = os.path.join(os.path.dirname(__file__), '..', 'x')\n",
], ids=["root-fixtures", "beside", "docstring", "traversal-data", "join-inside"])
def test_the_scan_accepts_paths_inside(source: str) -> None:
    assert python_escapes("tests/a.py", source) == []


def test_the_scan_covers_other_text_files(tmp_path: Path) -> None:
    (tmp_path / "run.sh").write_text("cp ../shared/fixtures/x .\n")
    (tmp_path / "doc.md").write_text("ok\nsee `/work/shared/GITHUB.md`\n")
    (tmp_path / "ok.md").write_text("a shared folder is not a path\n")
    (tmp_path / "blob.bin").write_bytes(b"\0../shared")
    assert scan(tmp_path, ["run.sh", "doc.md", "ok.md", "blob.bin"]) == [
        "run.sh:1: names '../shared', a folder outside the repository",
        "doc.md:2: names '/work/shared', a folder outside the repository"]
