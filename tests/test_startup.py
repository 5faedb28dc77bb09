"""Start-up: every command imports only what it needs (the plug-in contract of evidence/cli.py).

Each probe runs the real ``campaign-bot`` entry point in a fresh interpreter and reads its
``sys.modules`` after the command ran; timings are in benchmarks/startup.py, not here.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import textwrap
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import pytest
import typer

import evidence.cli as cli
from evidence import launch

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"

HEAVY = ("av", "numpy", "scipy", "torch", "torchvision", "lpips", "fastapi", "uvicorn",
         "sqlalchemy", "alembic", "apscheduler", "github", "pydantic_settings", "asyncio")
"""Top-level modules no ``--help`` and no plug-in registration may import."""

CHECK_HEAVY = ("av", "numpy", "scipy", "torch", "torchvision", "lpips", "fastapi", "uvicorn",
               "sqlalchemy", "alembic", "apscheduler", "github", "pydantic_settings", "asyncio",
               "cryptography")
"""Top-level modules ``check`` of the example may not import: its verdicts are exact counts
(evidence.stats), which need neither numpy nor scipy, and it has no trusted keys (signatures
need cryptography)."""

HELP_UNUSED = ("markdown_it", "pygments")
"""Top-level modules of typer's rich help formatter (Markdown help, pretty tracebacks):
``--help`` is click's plain text and imports neither."""

_PROBE = textwrap.dedent("""
    import json, sys
    out, args = sys.argv[1], json.loads(sys.argv[2])
    sys.argv = ["campaign-bot", *args]
    import pydantic._internal._model_construction as construction
    built = []
    complete = construction.complete_model_class
    def record(cls, *a, **k):
        built.append(cls.__name__)
        return complete(cls, *a, **k)
    construction.complete_model_class = record
    from evidence.cli import main
    code = 0
    try:
        main()
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    with open(out, "w") as f:
        json.dump({"code": code, "modules": sorted(sys.modules), "built_models": built}, f)
""")


def _run(args: list[str], tmp_path: Path) -> tuple[dict[str, Any], str]:
    out = tmp_path / "modules.json"
    res = subprocess.run([sys.executable, "-c", _PROBE, str(out), json.dumps(args)], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert out.exists(), res.stderr[-3000:]
    return json.loads(out.read_text()), res.stdout + res.stderr


def _top(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def _plugin_modules() -> list[str]:
    return sorted({ep.value.split(":")[0] for ep in entry_points(group=cli.PLUGIN_GROUP)})


def test_the_package_declares_plugins() -> None:
    """The probes below are only meaningful with the plug-ins installed (pip install -e .)."""
    assert _plugin_modules(), "no campaign_bot.cli entry points: install the package"


def test_help_imports_no_heavy_module_and_loads_every_plugin(tmp_path: Path) -> None:
    got, output = _run(["--help"], tmp_path)
    assert got["code"] == 0, output
    heavy = sorted(_top(got["modules"]) & set(HEAVY))
    assert not heavy, f"campaign-bot --help imported {heavy}"
    assert "evidence.models" not in got["modules"], "--help built the pydantic models"
    unused = sorted(_top(got["modules"]) & set(HELP_UNUSED))
    assert not unused, f"campaign-bot --help imported {unused}"
    missing = [m for m in _plugin_modules() if m not in got["modules"]]
    assert not missing, f"--help did not load the plug-ins {missing}"
    assert "warning" not in output, output


def test_check_of_the_example_imports_only_what_it_needs(tmp_path: Path) -> None:
    got, output = _run(["check", str(EXAMPLE), "--json"], tmp_path)
    assert got["code"] in (0, 1), output
    heavy = sorted(_top(got["modules"]) & set(CHECK_HEAVY))
    assert not heavy, f"campaign-bot check imported {heavy}"
    loaded = [m for m in _plugin_modules() if m in got["modules"]]
    assert not loaded, f"check loaded the plug-ins {loaded}; it is a core command"
    assert "evidence.check" in got["modules"]
    # --json prints with the json module: rich is for terminals and --help, which it does
    # not show (help texts are escaped for rich only when help is formatted).
    assert "rich" not in _top(got["modules"]), "check --json imported rich"
    unbuilt = [m for m in ("PriorNoiseResult", "Claim", "ProbeRow")
               if m in got["built_models"]]
    assert not unbuilt, f"check built the validators of models it never used: {unbuilt}"


def test_help_is_escaped_and_reflowed_when_shown(tmp_path: Path) -> None:
    """Help texts are prepared (plain, reflowed) only when help is formatted, and a docstring's
    hard line breaks do not reach the terminal."""
    res = subprocess.run([sys.executable, "-c", "from evidence.launch import main; main()",
                          "check", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "--details prints everything, --json one JSON document." in res.stdout, res.stdout
    assert "<bool>" not in res.stdout  # on/off flags take no value
    res = subprocess.run([sys.executable, "-c", "from evidence.launch import main; main()",
                          "runner", "check-flags", "-h"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "`vllm serve --omni`" in res.stdout and "``" not in res.stdout, res.stdout
    res = subprocess.run([sys.executable, "-c", "from evidence.launch import main; main()",
                          "serve", "--help"], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert res.returncode == 0, res.stderr
    assert "[default: CAMPAIGN_BOT_HOST or 127.0.0.1]" in res.stdout, res.stdout


def test_reflow_keeps_lists_and_paragraphs() -> None:
    text = "One\nsentence.\n\n- a list\n- kept\n\nTwo\nlines."
    assert cli.reflow(text) == "One sentence.\n\n- a list\n- kept\n\nTwo lines."


@pytest.mark.parametrize("module", _plugin_modules() or ["(none installed)"])
def test_each_plugin_registers_without_heavy_imports(module: str, tmp_path: Path) -> None:
    """Rule 2 of the plug-in contract, one plug-in module at a time."""
    if module == "(none installed)":
        pytest.fail("no campaign_bot.cli entry points: install the package")
    code = textwrap.dedent(f"""
        import json, sys
        from importlib.metadata import entry_points
        import typer
        app = typer.Typer()
        for ep in entry_points(group={cli.PLUGIN_GROUP!r}):
            if ep.value.split(":")[0] == {module!r}:
                ep.load()(app)
        print(json.dumps(sorted(sys.modules)))
    """)
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    mods = json.loads(res.stdout.splitlines()[-1])
    heavy = sorted(_top(mods) & set(HEAVY))
    assert not heavy, f"importing and registering {module} imported {heavy}"
    assert "evidence.models" not in mods, f"{module} imports the pydantic models at import"


def test_media_package_is_lazy_and_keeps_its_function_names(tmp_path: Path) -> None:
    code = textwrap.dedent("""
        import sys, types
        import evidence.media
        assert "av" not in sys.modules and "numpy" not in sys.modules, "eager media import"
        import evidence.media.probe, evidence.media.compare  # submodules first
        from evidence.media import MediaInputError, compare, probe
        assert callable(compare) and not isinstance(compare, types.ModuleType)
        assert callable(probe) and not isinstance(probe, types.ModuleType)
        assert compare is sys.modules["evidence.media.compare"].compare
        assert issubclass(MediaInputError, Exception)
        try:
            evidence.media.nothing_here
        except AttributeError as e:
            assert "nothing_here" in str(e)
        else:
            raise AssertionError("unknown attribute did not raise")
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0 and res.stdout.strip() == "ok", res.stderr[-3000:]


def test_schema_names_match_the_models() -> None:
    assert set(cli.SCHEMA_NAMES) == set(cli._all_schemas())


# ------------------------------------------------------------- plug-in loading robustness


class _EP:
    """An entry point stand-in: ``load()`` returns ``fn`` or raises ``error``."""

    def __init__(self, name: str, fn: Any = None, error: Exception | None = None) -> None:
        self.name, self.value, self.fn, self.error = name, f"fake.{name}:register", fn, error

    def load(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.fn


def _fresh(monkeypatch: pytest.MonkeyPatch, eps: list[_EP]) -> typer.Typer:
    app = typer.Typer()

    @app.command("check")
    def _check() -> None:
        """The core check."""

    @app.command("schema")
    def _schema() -> None:
        """The core schema."""

    monkeypatch.setattr(cli, "app", app)
    # a fresh once-per-process cache, the original put back after the test
    monkeypatch.setattr(cli, "_load_plugins", functools.cache(cli._load_plugins.__wrapped__))
    # pydantic's plug-in loader binds importlib.metadata.entry_points when first imported
    # (typer imports pydantic for its options): imported under this patch, it would keep
    # these fake entry points as pydantic plug-ins for every later test of the session.
    import pydantic.plugin._loader  # noqa: F401

    monkeypatch.setattr("importlib.metadata.entry_points", lambda group: eps)
    return app


def test_a_broken_plugin_warns_and_the_others_still_load(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def good(app: typer.Typer) -> None:
        app.command("hello")(lambda: None)

    def half_broken(app: typer.Typer) -> None:
        app.command("partial")(lambda: None)
        raise RuntimeError("settings missing\nsecond line")

    def steals(app: typer.Typer) -> None:
        app.command("check")(lambda: None)
        app.command("fine")(lambda: None)

    sub = typer.Typer()
    sub.command("x")(lambda: None)
    sub.command("y")(lambda: None)

    def group(app: typer.Typer) -> None:
        app.add_typer(sub, name="grp")

    def group_again(app: typer.Typer) -> None:
        app.add_typer(sub, name="grp")

    app = _fresh(monkeypatch, [
        _EP("a-missing", error=ModuleNotFoundError("No module named 'gone'")),
        _EP("b-half", half_broken), _EP("c-good", good), _EP("d-steals", steals),
        _EP("e-group", group), _EP("f-group-again", group_again)])
    problems = cli._load_plugins()
    names = cli._names(app)
    assert names == ["check", "schema", "hello", "fine", "grp"]
    assert len(problems) == 4, problems
    assert "'a-missing'" in problems[0] and "ModuleNotFoundError" in problems[0]
    assert "'b-half'" in problems[1] and "settings missing" in problems[1]
    assert "second line" not in problems[1]  # one line each
    assert "'d-steals'" in problems[2] and "'check' is already taken" in problems[2]
    assert "'f-group-again'" in problems[3] and "'grp'" in problems[3]
    assert cli._load_plugins() is problems  # once per process
    assert cli._names(app) == names


def test_plugins_share_a_command_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """``doctor runner`` (runners/) and ``doctor bot`` (bot/) land in one ``doctor`` group."""
    def runner(app: typer.Typer) -> None:
        cli.command_group(app, "doctor", cli.DOCTOR_HELP).command("runner")(lambda: None)

    def bot(app: typer.Typer) -> None:
        cli.command_group(app, "doctor", cli.DOCTOR_HELP).command("bot")(lambda: None)

    def bot_again(app: typer.Typer) -> None:
        cli.command_group(app, "doctor", cli.DOCTOR_HELP).command("bot")(lambda: None)

    app = _fresh(monkeypatch, [_EP("a-runner", runner), _EP("b-bot", bot),
                               _EP("c-bot-again", bot_again)])
    problems = cli._load_plugins()
    assert cli._names(app) == ["check", "schema", "doctor"]
    doctor = cli._group(app, "doctor")
    assert doctor is not None and cli._names(doctor) == ["runner", "bot"]
    assert len(problems) == 1 and "'c-bot-again'" in problems[0] and "'bot'" in problems[0]


def test_main_prints_plugin_problems_and_runs_the_rest(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _fresh(monkeypatch, [_EP("broken", error=ImportError("cannot import name 'x'"))])
    monkeypatch.setattr(sys, "argv", ["campaign-bot", "--help"])
    with pytest.raises(SystemExit) as exc:
        cli.main()
    assert exc.value.code == 0
    cap = capsys.readouterr()
    assert "warning:" in cap.err and "plug-in 'broken'" in cap.err
    assert "check" in cap.out


def test_core_commands_skip_plugin_loading(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    _fresh(monkeypatch, [_EP("spy", lambda app: calls.append("loaded"))])
    monkeypatch.setattr(sys, "argv", ["campaign-bot", "schema", "--help"])
    with pytest.raises(SystemExit):
        cli.main()
    assert calls == []
    monkeypatch.setattr(sys, "argv", ["campaign-bot", "--version"])
    with pytest.raises(SystemExit):
        cli.main()
    assert calls == ["loaded"]


@pytest.mark.parametrize(("args", "word"), [
    ([], None), (["--help"], None), (["check", "x"], "check"), (["--version", "serve"], "serve"),
    (["--", "check"], None)])
def test_command_word(args: list[str], word: str | None) -> None:
    assert launch.command_of(args) == word
