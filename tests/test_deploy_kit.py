"""The deploy kit (deploy/): the Containerfile, compose.yaml, the systemd unit and the Caddyfile
parse and say what they should (multi-stage, non-root, HEALTHCHECK on /healthz, PostgreSQL 15
with a volume, secrets as files, hardening), and every command they run is one that
docs/deploy.md runs and a test covers.  No container engine here: the container's own
commands (its CMD and its HEALTHCHECK) are run on this machine instead."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml
from webhook_helpers import free_port, wait_for

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
DOCS = ROOT / "docs" / "deploy.md"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]


def containerfile() -> list[tuple[str, str]]:
    """``(instruction, arguments)`` of deploy/Containerfile, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Containerfile").read_text())
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            ins, _, rest = line.partition(" ")
            out.append((ins.upper(), rest.strip()))
    return out


def unit() -> list[tuple[str, str, str]]:
    """``(section, key, value)`` of deploy/campaign-bot.service (systemd allows repeats)."""
    out, section = [], ""
    for line in (DEPLOY / "campaign-bot.service").read_text().splitlines():
        line = line.strip()
        if not line or line[0] in "#;":
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        k, _, v = line.partition("=")
        out.append((section, k.strip(), v.strip()))
    return out


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)
    assert isinstance(value, list) and all(isinstance(x, str) for x in value)
    return value


def test_the_containerfile_is_multi_stage_non_root_with_a_healthcheck() -> None:
    ins = containerfile()
    stages = [a for i, a in ins if i == "FROM"]
    assert len(stages) == 2 and stages[0].endswith(" AS build") and \
        stages[1].endswith(" AS runtime")
    runtime = ins[[i for i, _ in ins].index("FROM", 1):]
    users = [a for i, a in runtime if i == "USER"]
    # numeric, so that Kubernetes' runAsNonRoot can verify it; the user created with that id
    assert users == ["10001:10001"]
    assert any(i == "RUN" and "useradd --system --uid 10001 --gid 10001" in a for i, a in runtime)
    assert any(i == "COPY" and a.startswith("--from=build ") for i, a in runtime)
    (hc,) = [a for i, a in runtime if i == "HEALTHCHECK"]
    assert "--interval=" in hc and "/healthz" in hc
    (cmd,) = [a for i, a in runtime if i == "CMD"]
    assert _exec_form(cmd) == ["sh", "-c", "campaign-bot migrate && exec campaign-bot serve"]
    env = " ".join(a for i, a in runtime if i == "ENV")
    assert "CAMPAIGN_BOT_SECRETS_DIR=/run/secrets" in env
    assert "CAMPAIGN_BOT_CREDENTIALS_FILE=/var/lib/campaign-bot/app.json" in env
    # evidence is read through git: the runtime image has git, its mirrors in the state volume
    assert any(i == "RUN" and "apt-get install" in a and " git " in f"{a} " for i, a in runtime)
    assert "CAMPAIGN_BOT_GIT_CACHE_DIR=/var/lib/campaign-bot/git" in env
    ignored = (ROOT / ".dockerignore").read_text().split()
    assert {".venv", ".cache", ".git", "deploy/secrets"} <= set(ignored)


def test_compose_runs_the_bot_on_postgres_15_with_secrets_as_files() -> None:
    c = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    db, bot = c["services"]["db"], c["services"]["bot"]
    assert db["image"].endswith("postgres:15")
    assert any(v.endswith(":/var/lib/postgresql/data") for v in db["volumes"])
    assert db["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres_password"
    assert bot["depends_on"]["db"]["condition"] == "service_healthy"
    assert bot["build"] == {"context": "..", "dockerfile": "deploy/Containerfile"}
    (cmd,) = [a for i, a in containerfile() if i == "CMD"]
    assert bot["command"] == _exec_form(cmd)  # the same start in both
    assert "campaign_bot_database_url" in bot["secrets"]
    for name, spec in c["secrets"].items():
        assert set(spec) == {"file"} and spec["file"].startswith("./secrets/"), name
    # no secret value in the environment, only references
    for k in bot["environment"] | db["environment"]:
        if re.search(r"SECRET|PASSWORD|PRIVATE|TOKEN", k):
            assert k.endswith("_FILE"), k
    assert bot["read_only"] is True and bot["cap_drop"] == ["ALL"]
    assert "no-new-privileges:true" in bot["security_opt"]
    assert c["services"]["caddy"]["profiles"] == ["tls"]
    assert any("Caddyfile" in v for v in c["services"]["caddy"]["volumes"])


def test_the_systemd_unit_is_hardened_and_runs_migrate_then_serve(tmp_path: Path) -> None:
    u = unit()
    svc = {k: v for s, k, v in u if s == "Service"}
    assert svc["ExecStartPre"].endswith("/campaign-bot migrate")
    assert svc["ExecStart"].endswith("/campaign-bot serve")
    assert svc["User"] == "campaign-bot" and svc["Environment"]
    for key, want in {"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes",
                      "PrivateTmp": "yes", "PrivateDevices": "yes", "CapabilityBoundingSet": "",
                      "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6",
                      "UMask": "0077", "StateDirectory": "campaign-bot"}.items():
        assert svc.get(key) == want, key
    envs = [v for s, k, v in u if k == "Environment"]
    assert "CAMPAIGN_BOT_SECRETS_DIR=%d" in envs
    assert any(k == "LoadCredential" and v.startswith("campaign_bot_database_url:")
               for s, k, v in u)
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze not installed: the unit was parsed, not verified")
    shim = tmp_path / "campaign-bot"
    shim.write_text("#!/bin/sh\nexit 0\n")
    shim.chmod(0o755)
    copy = tmp_path / "campaign-bot.service"
    copy.write_text((DEPLOY / "campaign-bot.service").read_text().replace(
        "/opt/campaign-bot/venv/bin/campaign-bot", str(shim)))
    res = subprocess.run([exe, "verify", str(copy)], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0 and str(copy) not in res.stderr, res.stderr


def test_the_caddyfile_cuts_slow_clients_itself() -> None:
    """Behind the proxy the bot sees one address, so the proxy times slow clients out with the
    bot's own defaults.  What it forwards is tested by running it: tests/test_proxy_routes.py."""
    text = (DEPLOY / "Caddyfile").read_text()
    assert "read_header 10s" in text and "read_body 20s" in text


def kit_commands() -> set[str]:
    """Every ``campaign-bot SUBCOMMAND`` the kit runs: in the Containerfile's RUN, CMD and
    HEALTHCHECK, compose's commands and healthchecks, and the unit's Exec lines."""
    runs = [a for i, a in containerfile() if i in ("RUN", "CMD", "HEALTHCHECK")]
    c = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    for svc in c["services"].values():
        runs += [json.dumps(svc.get("command", "")), json.dumps(svc.get("healthcheck", {}))]
    runs += [v for _s, k, v in unit() if k.startswith("Exec")]
    return {m for r in runs for m in re.findall(r"campaign-bot (\w[\w-]*)", r)}


COVERED_BY = {
    "migrate": ("tests/test_doctor.py", "test_doctor_bot_against_the_double_and_a_running"),
    "serve": ("tests/app_setup_helpers.py", "serve_unconfigured"),
}
"""Command -> where a test runs it (file, test or helper name prefix)."""


def test_every_command_of_the_kit_is_documented_tested_and_real() -> None:
    cmds = kit_commands()
    assert cmds == {"migrate", "serve"}
    docs = DOCS.read_text()
    for c in cmds:
        res = subprocess.run([*CLI, c, "--help"], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, (c, res.stderr)
        assert re.search(rf"^\s*(\$ )?.*campaign-bot {c}\b", docs, re.M), f"docs lack {c}"
        file, test = COVERED_BY[c]
        src = (ROOT / file).read_text()
        assert f"def {test}" in src and f'"{c}"' in src, (c, file)


@pytest.mark.slow
def test_the_containers_command_and_healthcheck_run_here(tmp_path: Path) -> None:
    """The image's CMD (migrate, then serve) and its HEALTHCHECK command, run as written with
    campaign-bot on PATH: the check passes while the service runs, fails once it stopped."""
    ins = containerfile()
    (cmd,) = [a for i, a in ins if i == "CMD"]
    hc = [a for i, a in ins if i == "HEALTHCHECK"][0]
    check = _exec_form(hc[hc.index("CMD ") + 4:])
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "campaign-bot").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c "from evidence.cli import main; main()" "$@"\n')
    (bin_dir / "campaign-bot").chmod(0o755)
    (bin_dir / "python").symlink_to(sys.executable)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env.update({"PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "CAMPAIGN_BOT_PORT": str(port),
                "CAMPAIGN_BOT_SECRETS_DIR": str(tmp_path / "secrets"),
                "PYTHONPATH": str(ROOT)})
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "campaign_bot_webhook_secret").write_text("s" * 32 + "\n")
    (tmp_path / "secrets" / "campaign_bot_token").write_text("test-token\n")
    (tmp_path / "secrets" / "campaign_bot_database_url").write_text(
        f"sqlite:///{tmp_path / 'bot.sqlite3'}\n")
    proc = subprocess.Popen(_exec_form(cmd), env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: _up(port) or proc.poll() is not None, 40, "the container command")
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        res = subprocess.run(check, env=env, capture_output=True, timeout=30)
        assert res.returncode == 0, res.stderr
    finally:
        proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=30)[0].decode()
    assert "database at 0" in out  # migrate ran first, with the secret-file database URL
    res = subprocess.run(check, env=env, capture_output=True, timeout=30)
    assert res.returncode != 0
    assert shlex.split(cmd)  # the CMD is exec form JSON, parsed above


def _up(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def test_the_docs_permission_table_is_the_generated_one() -> None:
    """docs/deploy.md's table for registering the App by hand is what the code needs."""
    from bot.app import app_manifest
    from bot.manifest import permission_table
    from bot.settings import Settings

    table = permission_table(app_manifest(Settings(), "https://bot.example.org"))
    assert table in DOCS.read_text()


def test_every_command_the_docs_run_exists() -> None:
    from typer.main import get_command

    from evidence.cli import _load_plugins, app

    _load_plugins()
    root = get_command(app)
    known = set(root.commands)  # type: ignore[attr-defined]
    doctor = root.commands["doctor"]  # type: ignore[attr-defined]
    text = DOCS.read_text()
    code = re.findall(r"`(campaign-bot [^`\n]+)`", text)
    for block in re.findall(r"```(?:sh)?\n(.*?)```", text, re.S):
        code += [ln.strip() for ln in block.splitlines()
                 if ln.strip().startswith(("campaign-bot ", "/opt/campaign-bot/venv/bin/"))]
    used = [m for c in code
            for m in re.findall(r"campaign-bot ([a-z][\w-]*)(?: ([a-z][\w-]*))?", c)]
    assert len(used) > 10
    for sub, arg in used:
        assert sub in known, sub
        if sub == "doctor":
            assert arg in doctor.commands, arg  # type: ignore[attr-defined]
