"""The upstream contract layer: vLLM-Omni's own server code, run on CPU with a fake engine.

The screen runner's request/response contract is checked against the real ``vllm serve MODEL
--omni`` of the pinned vLLM-Omni release (``launch_fake_engine.py`` replaces only
``build_async_omni``, which starts the engine and its workers), installed into a separate
virtual environment by ``install-contract-venv.sh`` from ``requirements-contract.txt``.

The pinned pair (``vllm-omni==X`` and ``vllm==X``) is written once, in
``requirements-contract.txt``; :func:`pinned_versions` reads it from there.  The upstream
parser's option table, ``serve-flags.json``, records the version it was taken from, and the
stand-in server (``runners.standin``) refuses every flag that is not in it.

This package imports only the standard library, so the launcher can run under the contract
environment's interpreter.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REQUIREMENTS = HERE / "requirements-contract.txt"
LAUNCHER = HERE / "launch_fake_engine.py"
FLAGS_FILE = HERE / "serve-flags.json"
INSTALL_SCRIPT = HERE / "install-contract-venv.sh"
VENV_ENV = "CAMPAIGN_BOT_UPSTREAM_VENV"
"""Environment variable naming the contract environment's directory."""
REQUIRE_ENV = "CAMPAIGN_BOT_REQUIRE_UPSTREAM"
"""Set to ``1`` to make upstream contract tests fail (not skip) when the environment is
absent."""


def default_venv(root: Path = HERE.parents[1]) -> Path:
    """Where the contract environment is unless ``$CAMPAIGN_BOT_UPSTREAM_VENV`` says: in a
    source checkout (``root`` holds pyproject.toml), ``.venv-upstream`` at its root; in an
    installed package (``root`` is site-packages), ``campaign-bot/venv-upstream`` under the
    user's cache folder (``$XDG_CACHE_HOME``, else ``~/.cache``), never inside
    site-packages.  The install script picks the same folder."""
    if (root / "pyproject.toml").is_file():
        return root / ".venv-upstream"
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "campaign-bot" / "venv-upstream"


DEFAULT_VENV = default_venv()
"""The contract environment's default folder (:func:`default_venv`)."""

LIST_MARK = "CAMPAIGN_BOT_SERVE_FLAGS "
CHECK_MARK = "CAMPAIGN_BOT_CHECK_FLAGS "
_PIN = re.compile(r"^(vllm|vllm-omni)==([^\s;#]+)", re.M)


def pinned_versions(path: Path = REQUIREMENTS) -> dict[str, str]:
    """``{"vllm": "0.30.0", "vllm-omni": "0.30.0"}`` from the requirements file.  Raises
    ValueError naming the file when either pin is missing."""
    pins = dict(_PIN.findall(path.read_text(encoding="utf-8")))
    missing = {"vllm", "vllm-omni"} - set(pins)
    if missing:
        raise ValueError(f"{path}: no '=='-pin for {', '.join(sorted(missing))}")
    return pins


def venv_dir() -> Path:
    """The contract environment's directory: ``$CAMPAIGN_BOT_UPSTREAM_VENV`` or
    :data:`DEFAULT_VENV`."""
    env = os.environ.get(VENV_ENV)
    return Path(env) if env else DEFAULT_VENV


def venv_python(venv: Path | None = None) -> Path | None:
    """The contract environment's interpreter when it exists and holds vLLM-Omni, else
    None."""
    venv = venv or venv_dir()
    py = venv / "bin" / "python"
    if not py.exists():
        return None
    if not any(venv.glob("lib/python3*/site-packages/vllm_omni/__init__.py")):
        return None
    return py


def server_cmd(python: Path) -> str:
    """The ``CAMPAIGN_BOT_SERVER_CMD`` prefix that runs upstream's ``vllm serve`` with the
    fake engine (the runner appends ``MODEL --omni FLAGS --host H --port P``)."""
    return f"{shlex.quote(str(python))} {shlex.quote(str(LAUNCHER))} serve"


# ------------------------------------------------------------------------------- flag table


@dataclass(frozen=True)
class FlagTable:
    """Upstream's ``vllm serve --omni`` options: ``actions`` maps each option string to its
    argparse ``nargs`` (0 switch, 1 one value, an int, ``"?"``, ``"*"`` or ``"+"``);
    ``groups`` lists the option strings of one action together (``--usp`` and
    ``--ulysses-degree``)."""

    vllm_omni: str
    vllm: str
    actions: dict[str, Any]
    groups: list[list[str]]


@lru_cache(maxsize=1)
def load_flag_table(path: Path = FLAGS_FILE) -> FlagTable:
    """Read ``serve-flags.json`` (written from ``launch_fake_engine.py --list-flags``).
    Raises ValueError naming the file on a malformed table."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
        groups = [list(a["options"]) for a in doc["actions"]]
        actions = {opt: a["nargs"] for a in doc["actions"] for opt in a["options"]}
        return FlagTable(str(doc["vllm_omni"]), str(doc["vllm"]), actions, groups)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a vLLM-Omni flag table: {exc}") from exc


# ------------------------------------------------------------------------------ flag check


@dataclass
class ArmFlags:
    """One arm's command line as upstream's parser saw it: ``exit`` 0 accepted, 2 refused
    (argparse's message in ``message``), another value when parsing itself failed."""

    arm: str
    argv: list[str]
    exit: int
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.exit == 0


@dataclass
class FlagCheck:
    """Result of :func:`check_flag_lines`: the interpreter used, the vLLM-Omni version it
    holds, and one :class:`ArmFlags` per arm."""

    python: str
    vllm_omni: str | None
    arms: list[ArmFlags] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(a.ok for a in self.arms)


class FlagCheckUnavailable(RuntimeError):
    """No interpreter with vLLM-Omni importable, or the check could not run."""


def find_omni_python(python: Path | None = None) -> Path:
    """The interpreter to run upstream's parser with: ``python`` when given, else the
    contract environment's, else the current interpreter when it can import ``vllm_omni``.
    Raises FlagCheckUnavailable naming what was tried."""
    import importlib.util
    import sys

    if python is not None:
        if not Path(python).exists():
            raise FlagCheckUnavailable(f"--python {python}: does not exist")
        return Path(python)
    py = venv_python()
    if py is not None:
        return py
    if importlib.util.find_spec("vllm_omni") is not None:
        return Path(sys.executable)
    raise FlagCheckUnavailable(
        f"vLLM-Omni is not importable here and the contract environment {venv_dir()} is "
        f"absent; build it with {_script_shown()} or pass --python with an interpreter "
        "that has vLLM-Omni")


def _script_shown() -> str:
    """The install script as a user can run it from here: relative in a source checkout
    that is the current folder, else its absolute path."""
    try:
        return str(INSTALL_SCRIPT.relative_to(Path.cwd()))
    except ValueError:
        return str(INSTALL_SCRIPT)


def check_flag_lines(arms: list[tuple[str, list[str]]], *, python: Path | None = None,
                     timeout_s: float = 300.0) -> FlagCheck:
    """Parse each arm's server argv (``[..., "serve", MODEL, "--omni", flags...]``; the part
    from ``serve`` on is used) with upstream's ``vllm serve --omni`` parser in one
    subprocess.  Raises FlagCheckUnavailable when no interpreter has vLLM-Omni or the
    subprocess gives no answer within ``timeout_s`` seconds."""
    py = find_omni_python(python)
    commands = []
    for _, argv in arms:
        i = argv.index("serve") if "serve" in argv else 0
        commands.append(argv[i:] if argv[i:i + 1] == ["serve"] else ["serve", *argv[i:]])
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fh:
        json.dump({"commands": commands}, fh)
    try:
        res = subprocess.run([str(py), str(LAUNCHER), "--check-flags", fh.name],
                             capture_output=True, text=True, timeout=timeout_s,
                             env={**os.environ, "VLLM_LOGGING_COLOR": "0"})
    except subprocess.TimeoutExpired as exc:
        raise FlagCheckUnavailable(f"{py}: the flag check took over {timeout_s:g} s") from exc
    finally:
        os.unlink(fh.name)
    line = next((x for x in res.stdout.splitlines() if x.startswith(CHECK_MARK)), None)
    if line is None:
        tail = (res.stderr or res.stdout).strip().splitlines()[-3:]
        raise FlagCheckUnavailable(f"{py}: upstream's parser did not run (exit "
                                   f"{res.returncode}): {' | '.join(tail)}")
    doc = json.loads(line[len(CHECK_MARK):])
    out = FlagCheck(str(py), doc.get("vllm_omni"))
    for (arm, _), cmd, r in zip(arms, commands, doc["results"], strict=True):
        msg = [x for x in str(r["stderr"]).splitlines() if "error:" in x]
        out.arms.append(ArmFlags(arm, cmd, int(r["exit"]),
                                 msg[-1].strip() if msg else str(r["stderr"]).strip()[-500:]))
    return out
