"""The house plan as tests: which package may import which, no import cycle in ``bot/``, no
module-level mutable state in ``bot/``, and one name for the screen workflow file.

Imports are read from the source with :mod:`ast` (every ``import`` statement counts, at module
level, inside functions and under ``TYPE_CHECKING`` alike: a lazy import is still a
dependency).  ``from X import n`` depends on module ``X.n`` when that is a module, else on
``X``.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import importlib
import logging
import re
import subprocess
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bot", "evidence", "runners")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _sources(package: str) -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))
            if "migrations" not in p.relative_to(ROOT).parts}


MODULES: dict[str, Path] = {m: p for pkg in PACKAGES for m, p in _sources(pkg).items()}


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> Iterator[tuple[str, int]]:
    """``(imported module, line)`` for every import in ``path`` of a module in ``modules``."""
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".")
                if path.name != "__init__.py":
                    base = base[:-1]
                base = base[:len(base) - (node.level - 1)]
                mod = ".".join([*base, node.module] if node.module else base)
            else:
                mod = node.module or ""
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod
                       for a in node.names]
        for t in targets:
            while t and t not in modules:
                t = t.rpartition(".")[0]
            if t and t != name:
                yield t, node.lineno


def graph(modules: dict[str, Path]) -> dict[str, dict[str, int]]:
    """``module -> {imported module: first line}`` within ``modules``."""
    out: dict[str, dict[str, int]] = {}
    for name, path in modules.items():
        edges: dict[str, int] = {}
        for target, line in imports_of(name, path, modules):
            edges.setdefault(target, line)
        out[name] = edges
    return out


GRAPH = graph(MODULES)


def _violations(source: str, forbidden: str, allow: tuple[str, ...] = ()) -> list[str]:
    """``file:line: a imports b`` for modules under ``source`` importing under ``forbidden``."""
    out = []
    for mod, edges in GRAPH.items():
        if not (mod == source or mod.startswith(source + ".")) or mod in allow:
            continue
        for target, line in edges.items():
            if target == forbidden or target.startswith(forbidden + "."):
                out.append(f"{MODULES[mod].relative_to(ROOT)}:{line}: {mod} imports {target}")
    return out


@pytest.mark.parametrize("source,forbidden", [
    ("evidence", "bot"), ("evidence", "runners"), ("runners", "bot"), ("bot", "runners"),
], ids=["evidence-bot", "evidence-runners", "runners-bot", "bot-runners"])
def test_packages_depend_one_way(source: str, forbidden: str) -> None:
    assert _violations(source, forbidden) == []


def _feature(mod: str) -> str | None:
    parts = mod.split(".")
    return ".".join(parts[:3]) if len(parts) >= 3 and parts[:2] == ["bot", "features"] else None


def test_features_do_not_import_each_other() -> None:
    found = []
    for mod, edges in GRAPH.items():
        mine = _feature(mod)
        for target, line in edges.items():
            theirs = _feature(target)
            if mine and theirs and theirs != mine:
                found.append(f"{MODULES[mod].relative_to(ROOT)}:{line}: {mod} imports {target}")
    assert found == []


COMPOSITION = ("bot.app", "bot.cli", "bot.worker_process")
"""The composition root and its entry points (CLI, worker process): the only modules that
import features."""
SECTIONS = re.compile(r"^bot\.features\.\w+\.settings$")
"""``bot.settings`` composes the features' settings sections (and only those)."""


def test_the_core_does_not_import_features_or_the_root() -> None:
    found = []
    for mod, edges in GRAPH.items():
        if not mod.startswith("bot.") or _feature(mod) or mod in COMPOSITION \
                or mod == "bot.features":
            continue
        for target, line in edges.items():
            if target in COMPOSITION or (_feature(target) and not (
                    mod == "bot.settings" and SECTIONS.match(target))):
                found.append(f"{MODULES[mod].relative_to(ROOT)}:{line}: {mod} imports {target}")
    assert found == []


def cycles(g: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in g:
        if v not in index:
            visit(v)
    return out


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_cycle(package: str) -> None:
    """Within each package; lazy and ``TYPE_CHECKING`` imports count (a cycle through them
    is still two modules that cannot be read one without the other)."""
    inside = {m: {t: ln for t, ln in e.items() if t.split(".")[0] == package}
              for m, e in GRAPH.items() if m.split(".")[0] == package}
    assert cycles(inside) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert cycles({"a": {"b": 1}, "b": {"c": 1}, "c": {"a": 1}, "d": {"a": 1}}) == [
        ["a", "b", "c"]]


# ---------------------------------------------------------------- module-level mutable state


def _module_level_names(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """Names bound by assignments at module level (also inside top-level ``if``/``try``)."""
    stack: list[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If | ast.Try):
            stack.extend(node.body + node.orelse + getattr(node, "finalbody", []))
            for h in getattr(node, "handlers", []):
                stack.extend(h.body)
            continue
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign | ast.AugAssign):
            targets = [node.target]
        for t in targets:
            for n in ast.walk(t):
                if isinstance(n, ast.Name):
                    yield n.id, node.lineno


def _immutable(v: object) -> bool:
    if v is None or isinstance(v, int | float | complex | str | bytes | bool | range
                               | re.Pattern | Path | enum.Enum | type | typing.TypeVar
                               | types.FunctionType | types.BuiltinFunctionType
                               | types.ModuleType | logging.Logger):
        return True
    if isinstance(v, tuple | frozenset):
        return all(_immutable(x) for x in v)
    if isinstance(v, types.MappingProxyType):  # a read-only view of a private dict
        return all(_immutable(k) and _immutable(x) for k, x in v.items())
    if isinstance(v, sqlalchemy.Table | sqlalchemy.MetaData):
        return True  # a schema declaration, like the ORM classes (types) of the other tables
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return bool(v.__dataclass_params__.frozen)  # type: ignore[attr-defined]
    # typing constructs: Callable[...], unions, aliases
    return type(v).__module__ in ("typing", "types", "collections.abc") or isinstance(
        v, types.GenericAlias | types.UnionType)


def mutable_module_state(module: str, path: Path) -> list[str]:
    """``file:line: name (type)`` for module-level names of ``module`` bound to mutable
    objects (dicts, lists, sets, instances of ordinary classes...), and every ``global``
    statement.  ``__all__`` is exempt."""
    tree = ast.parse(path.read_text(), str(path))
    rel = path.relative_to(ROOT)
    found = [f"{rel}:{n.lineno}: global {', '.join(n.names)}" for n in ast.walk(tree)
             if isinstance(n, ast.Global)]
    mod = importlib.import_module(module)
    for name, line in _module_level_names(tree):
        if name == "__all__" or not hasattr(mod, name):
            continue
        value = getattr(mod, name)
        if not _immutable(value):
            found.append(f"{rel}:{line}: {name} ({type(value).__name__})")
    return found


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("bot")))
def test_no_module_level_mutable_state_in_bot(module: str) -> None:
    assert mutable_module_state(module, MODULES[module]) == []


def test_no_global_statement_in_evidence_or_runners() -> None:
    """``evidence/`` and ``runners/`` are pipelines called with what they need; state that
    lives as long as the process (a cache, a hand-over) is an object or
    :func:`functools.cache`, never a rebound module name."""
    found = [f"{MODULES[m].relative_to(ROOT)}:{n.lineno}: global {', '.join(n.names)}"
             for m in sorted(MODULES) if m.split(".")[0] in ("evidence", "runners")
             for n in ast.walk(ast.parse(MODULES[m].read_text())) if isinstance(n, ast.Global)]
    assert found == []


def test_the_state_finder_finds_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    src = ("import re\nREGISTRY = {}\nHANDLERS: list = []\nRX = re.compile('x')\n"
           "NAMES = ('a', 'b')\n\ndef f():\n    global REGISTRY\n")
    (tmp_path / "stateful_example.py").write_text(src)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(__import__(__name__), "ROOT", tmp_path)
    found = mutable_module_state("stateful_example", tmp_path / "stateful_example.py")
    assert found == ["stateful_example.py:8: global REGISTRY",
                     "stateful_example.py:3: HANDLERS (list)",
                     "stateful_example.py:2: REGISTRY (dict)"]


# ------------------------------------------------------------------------- the screen workflow


def test_the_screen_workflow_has_one_name() -> None:
    from bot.features.screen.queue import Screen
    from bot.features.screen.runtime import ScreenOptions
    from bot.repo_config import SCREEN_WORKFLOW, RepoConfig

    shipped = [p for p in (ROOT / ".github" / "workflows" / "screen.yml",
                           ROOT / "examples" / "workflows" / "screen.yml") if p.is_file()]
    assert shipped, "no screen workflow is shipped"
    assert {p.name for p in shipped} == {SCREEN_WORKFLOW}
    assert RepoConfig().screen.workflow == SCREEN_WORKFLOW  # a repository without a config
    assert ScreenOptions().workflow == SCREEN_WORKFLOW
    assert Screen.__table__.c.workflow.default.arg == SCREEN_WORKFLOW
    # no other string in bot/'s code names a screen workflow file (docstrings may show it)
    literal = re.compile(r"^[\w.-]*screen[\w.-]*\.ya?ml$")
    hard_coded = []
    for path in (ROOT / "bot").rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                      if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef
                                    | ast.AsyncFunctionDef)
                      and n.body and isinstance(n.body[0], ast.Expr)}
        for n in ast.walk(tree):
            if isinstance(n, ast.Constant) and isinstance(n.value, str) \
                    and literal.match(n.value) and id(n) not in docstrings:
                hard_coded.append(f"{path.relative_to(ROOT)}:{n.lineno}: {n.value!r}")
    where = _line_of("bot/repo_config.py", "SCREEN_WORKFLOW =")
    assert hard_coded == [f"bot/repo_config.py:{where}: {SCREEN_WORKFLOW!r}"]


def _line_of(rel: str, text: str) -> int:
    return next(n for n, line in enumerate((ROOT / rel).read_text().splitlines(), 1)
                if text in line)


# ------------------------------------------------------------ the architecture page's lists


ARCHITECTURE = ROOT / "docs" / "architecture.md"


def tracked(directory: str) -> set[str]:
    """What ``git ls-files`` holds directly in ``directory``: modules by name (``store``,
    not ``__init__``) and folders as ``name/``."""
    files = subprocess.run(["git", "ls-files", "--", directory], cwd=ROOT, check=True,
                           capture_output=True, text=True).stdout.split()
    out = set()
    for f in files:
        rest = f[len(directory) + 1:]
        if "/" in rest:
            out.add(rest.split("/", 1)[0] + "/")
        elif rest.endswith(".py") and rest != "__init__.py":
            out.add(rest.removesuffix(".py"))
    return out


def _listed(text: str) -> set[str]:
    """Names in a ``a · b.py (what it does) · c/`` list: each piece's first word."""
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", "", text)
    words = (piece.split()[0].strip(";,:") for piece in text.split("·") if piece.split())
    return {w.removesuffix(".py") for w in words if w}


def documented_modules(page: str) -> dict[str, set[str]]:
    """``directory -> names`` as docs/architecture.md lists them: the parts table's module
    column for ``evidence`` and ``runners``, and the ``bot/`` house plan (top-level files,
    folders, and each folder's modules)."""
    out: dict[str, set[str]] = {}
    for row in page.splitlines():
        m = re.match(r"\| `(evidence|runners)/` \|[^|]*\|([^|]*)\|", row)
        if m:
            out[m.group(1)] = set(re.findall(r"`([^`]+)`", m.group(2)))
    block = page.split("```\nbot/app.py", 1)[1].split("```", 1)[0]
    sections: list[list[str]] = []
    for line in block.splitlines()[2:]:
        m = re.match(r"^ [├└] (\S+)\s*(.*)$", line)
        if m:
            sections.append([m.group(1), m.group(2)])
        elif sections:
            sections[-1][1] += " " + line.strip().lstrip("│").strip()
    top = {"app"}
    for head, rest in sections:
        if head.endswith("/"):
            top.add(head)
            out["bot/" + head.rstrip("/")] = _listed(rest)
        else:
            # a file, alone with what it does, or the first of a list (``a.py · b.py``)
            top |= _listed(head + " " + rest) if rest.startswith("·") else {
                head.removesuffix(".py")}
            top |= {w for w in _listed(rest) if w.endswith("/")} if rest.startswith(
                "·") else set()
    out["bot"] = top
    return out


def test_the_architecture_page_lists_every_module_and_only_those() -> None:
    """docs/architecture.md names every module of ``evidence/``, ``runners/`` and ``bot/``
    (and of ``bot/``'s folders) that git tracks, and nothing that is gone."""
    doc = documented_modules(ARCHITECTURE.read_text())
    drift = {}
    for directory, names in sorted(doc.items()):
        want = tracked(directory)
        if directory == "bot/features":  # features are folders: named without the slash
            want = {w.rstrip("/") for w in want}
        if names != want:
            drift[directory] = {"missing": sorted(want - names), "gone": sorted(names - want)}
    assert drift == {}
    assert {"evidence", "runners", "bot", "bot/inbox", "bot/github", "bot/commands",
            "bot/features"} <= set(doc)


def test_the_list_reader_reads_a_list() -> None:
    assert _listed("port.py (the one Protocol (async)) · pygithub.py · a/ · parser; the"
                   " package: specs") == {"port", "pygithub", "a/", "parser"}
