"""The built wheel, installed with no extras, works as deployed.

This is what ``deploy/Containerfile`` puts in the image and what ``docs/deploy.md`` installs on
the bot host: the wheel built from this checkout, installed with its base dependencies only,
into a new virtual environment that sees nothing of the test environment (no torch, no lpips,
no pytest, no Playwright).  The rest of the suite runs with the ``[dev,media]`` extras, so
without this module a command that imports an extra's package at start-up (as ``serve`` once
did with the chart library) passes every other test and dies on the host.

One module-scoped fixture builds and installs (about a minute on two cores, most of it pip
resolving the base dependencies from the index or its cache); the tests then run the
documented first steps there: ``serve`` to a healthy ``/healthz``, ``app-manifest``, ``init``,
``migrate``, ``check`` and ``report`` on the example, and every command's ``--help``.  A command
that needs an extra says which, in one line.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.webhook_helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"

COPY_IGNORE = shutil.ignore_patterns(
    ".git", ".venv", ".venv-*", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache",
    ".mypy_cache", ".ruff_cache", "site", "benchmarks")
"""What is not copied into the build folder: caches, environments and earlier builds (a wheel
is built from the source tree, which must not pick up a developer's leftovers)."""

EXTRA_PACKAGES = ("torch", "torchvision", "lpips", "pytest", "playwright", "hypothesis")
"""Packages that only an extra (``[media]``, ``[dev]``, ``[docs]``) installs."""


@dataclass
class BaseInstall:
    """A fresh virtual environment holding the built wheel without extras."""

    venv: Path
    wheel: Path

    @property
    def exe(self) -> Path:
        """The ``campaign-bot`` console script of the environment."""
        return self.venv / "bin" / "campaign-bot"

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    def env(self, **extra: str) -> dict[str, str]:
        """The process environment for a command: no ``CAMPAIGN_BOT_*`` or ``PYTHON*``
        variable of the test run leaks in, wide columns so that messages are whole lines."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CAMPAIGN_BOT_", "PYTHON", "VIRTUAL_ENV"))}
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["COLUMNS"] = "200"
        env.update(extra)
        return env

    def run(self, *args: str | Path, cwd: Path | None = None, timeout: float = 120,
            **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.exe), *map(str, args)], capture_output=True, text=True,
                              timeout=timeout, cwd=cwd, env=self.env(**env))


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> BaseInstall:
    """Build the wheel from a copy of this checkout and install it, without extras, into a
    new virtual environment (``pip install WHEEL``, as the Containerfile's runtime stage)."""
    work = tmp_path_factory.mktemp("base-install")
    src = work / "src"
    shutil.copytree(ROOT, src, ignore=COPY_IGNORE, symlinks=True)
    wheels = work / "wheels"
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--wheel-dir", str(wheels), str(src)],
        capture_output=True, text=True, timeout=600)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = wheels.glob("campaign_bot-*.whl")
    venv = work / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    inst = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
         "--quiet", str(wheel)], capture_output=True, text=True, timeout=900,
        env={k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))})
    assert inst.returncode == 0, inst.stdout[-3000:] + inst.stderr[-3000:]
    return BaseInstall(venv=venv, wheel=wheel)


def test_the_base_install_has_no_extra(base: BaseInstall) -> None:
    """The environment is really the base install: no package of an extra is importable, and
    the project is imported from the installed wheel, not this checkout."""
    probe = ("import importlib.util as u, json, evidence;"
             f"print(json.dumps([[n, u.find_spec(n) is not None] for n in {EXTRA_PACKAGES!r}]"
             " + [['evidence', evidence.__file__]]))")
    out = subprocess.run([str(base.python), "-c", probe], capture_output=True, text=True,
                         timeout=60, cwd=base.venv, env=base.env())
    assert out.returncode == 0, out.stderr
    found = dict(json.loads(out.stdout))
    assert not [n for n in EXTRA_PACKAGES if found[n]], found
    assert str(found["evidence"]).startswith(str(base.venv)), found["evidence"]


@pytest.fixture
def served(base: BaseInstall,
           tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[str], Path]]:
    """``campaign-bot migrate && campaign-bot serve`` as the container's command runs them
    (receiver and worker, SQLite database file, a GitHub App's id and private key), until
    ``/healthz`` answers or 60 s pass.  Yields the base URL, the process and its log file."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = tmp_path / "app.pem"  # a GitHub App private key: RSA, PEM (as GitHub issues them)
    key.write_bytes(rsa.generate_private_key(public_exponent=65537, key_size=2048).private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption()))
    port = free_port()
    env = base.env(CAMPAIGN_BOT_WEBHOOK_SECRET="base-install-secret",
                   CAMPAIGN_BOT_APP_ID="123456", CAMPAIGN_BOT_PRIVATE_KEY_FILE=str(key),
                   CAMPAIGN_BOT_PORT=str(port),
                   CAMPAIGN_BOT_DATABASE_URL=f"sqlite:///{tmp_path / 'bot.db'}",
                   CAMPAIGN_BOT_GIT_CACHE_DIR=str(tmp_path / "git"))
    mig = subprocess.run([str(base.exe), "migrate"], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path, env=env)
    assert mig.returncode == 0, mig.stdout + mig.stderr
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([str(base.exe), "serve"], cwd=tmp_path, env=env, stdout=log,
                            stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            if proc.poll() is not None:
                pytest.fail(f"serve exited with {proc.returncode} on the base install:\n"
                            + (tmp_path / "serve.log").read_text()[-4000:])
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("serve did not answer /healthz within 60 s:\n"
                            + (tmp_path / "serve.log").read_text()[-4000:])
            time.sleep(0.2)
        yield url, proc, tmp_path / "serve.log"
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        log.close()


def test_serve_starts_healthy_and_stops_on_sigterm(
        served: tuple[str, subprocess.Popen[str], Path]) -> None:
    """Ready with the App's credentials (no warning), healthy, and a clean shutdown on
    SIGTERM (uvicorn ends by re-raising the signal it caught, so the exit is -15 or 0)."""
    url, proc, log = served
    r = httpx.get(f"{url}/healthz", timeout=5)
    assert r.status_code == 200 and r.json().get("status") == "ok", r.text
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(30) in (0, -signal.SIGTERM)
    text = log.read_text()
    assert "campaign-bot ready" in text and "Application shutdown complete" in text, text
    assert " WARNING " not in text and " ERROR " not in text and "Traceback" not in text, text


def test_app_manifest_init_check_and_report(base: BaseInstall, tmp_path: Path) -> None:
    """The deploy guide's first step and the README's first commands, on the base install."""
    man = base.run("app-manifest", "--url", "https://bot.example.org")
    assert man.returncode == 0, man.stderr
    manifest = json.loads(man.stdout)
    assert manifest["hook_attributes"]["url"].startswith("https://bot.example.org")

    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=60)
    init = base.run("init", repo, "--campaign", "h3-ref2va")
    assert init.returncode == 0, init.stdout + init.stderr
    assert (repo / ".github" / "campaign-bot.toml").is_file()
    assert (repo / "campaigns" / "h3-ref2va" / "campaign.toml").is_file()

    chk = base.run("check", EXAMPLE)
    assert chk.returncode == 1, chk.stdout + chk.stderr  # the example's real problems
    assert "integrity: checked 24 hashes in 11 manifests, 0 errors" in chk.stdout
    assert "Traceback" not in chk.stderr

    site = tmp_path / "site"
    rep = base.run("report", EXAMPLE, "--out", site)
    assert rep.returncode == 1, rep.stdout + rep.stderr  # written; the evidence has findings
    assert "<svg" in (site / "budget.html").read_text()  # a chart drawn by pygal


def _commands(base: BaseInstall) -> list[list[str]]:
    """Every command path of the installed ``campaign-bot`` (groups and their sub-commands),
    read from the installed click tree."""
    walk = (
        "import json\n"
        "from evidence.cli import command\n"
        "out = []\n"
        "def walk(cmd, path):\n"
        "    out.append(path)\n"
        "    for name, sub in sorted((getattr(cmd, 'commands', None) or {}).items()):\n"
        "        walk(sub, path + [name])\n"
        "walk(command(), [])\n"
        "print(json.dumps(out))\n")
    out = subprocess.run([str(base.python), "-c", walk], capture_output=True, text=True,
                         timeout=120, cwd=base.venv, env=base.env())
    assert out.returncode == 0, out.stderr
    assert "warning:" not in out.stderr, out.stderr  # every plug-in loads without extras
    return json.loads(out.stdout)


def test_every_command_shows_its_help(base: BaseInstall) -> None:
    """``--help`` of every command and group answers on the base install: no plug-in fails to
    load, and no command imports an extra's package before it runs."""
    paths = _commands(base)
    assert len(paths) > 20 and ["serve"] in paths and ["check"] in paths
    failed = []
    for path in paths:
        res = base.run(*path, "--help")
        if res.returncode != 0 or "Usage:" not in res.stdout or res.stderr.strip():
            failed.append((path, res.returncode, (res.stdout + res.stderr)[-600:]))
    assert not failed, failed


def test_the_sandbox_screens_on_the_base_install(base: BaseInstall, tmp_path: Path) -> None:
    """``campaign-bot sandbox`` as the README's first screen offers it: on the base install
    (no torch), a ``/screen`` comment posted through its page's endpoint gets the bot's result
    comment, a completed check run and evidence committed on the pull request's branch; SIGINT
    stops it with exit 0."""
    proc = subprocess.Popen([str(base.exe), "sandbox", "--port", "0", "--no-open", "--work",
                             str(tmp_path / "work")], cwd=tmp_path, env=base.env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        url = None
        for line in proc.stdout:
            if line.startswith("sandbox page: "):
                url = line.split(": ", 1)[1].strip()
                break
        assert url, "the sandbox did not print its page"
        r = httpx.post(f"{url}api/comment", json={"user": "maintainer", "number": 2,
                                                  "body": "/screen candidate noop"})
        assert r.status_code == 201, r.text
        end = time.monotonic() + 120
        state: dict = {}
        while time.monotonic() < end:
            state = httpx.get(f"{url}api/state").json()
            if any(c["status"] == "completed" and c["name"] == "campaign-bot/screen: noop"
                   for c in state["checks"]) and state["evidence"]:
                break
            time.sleep(0.5)
        bodies = [c["body"] for c in state["comments"]]
        assert any("campaign-bot:screen-result" in b and "**Verdict: " in b for b in bodies), \
            bodies
        assert any(p.endswith("/attestation.dsse.json") for p in state["evidence"]), state
        assert state["rest_problems"] == []
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, out
    assert "sandbox: stopped" in out
