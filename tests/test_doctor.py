"""``campaign-bot doctor runner`` and ``doctor bot``: a table with a fix for each failure and
exit 0/1/2, on a runner host made of fakes (npu-smi and nvidia-smi printing recorded output, a
vLLM-Omni distribution on PYTHONPATH) and a bot whose GitHub is the double."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from webhook_helpers import free_port, wait_for

from bot.manifest import build_manifest

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]
CAMPAIGN = ROOT / "tests" / "data" / "screen-campaign"
NPU = ROOT / "tests" / "fixtures" / "npu-smi"
NVIDIA = ROOT / "tests" / "fixtures" / "nvidia-smi"


def run(args: list[str], env: dict[str, str], cwd: Path | None = None
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, env=env, timeout=120,
                          cwd=cwd or ROOT)


def row(out: str, check: str) -> str:
    """The table row(s) of ``check`` joined into one line (wrapped cells folded)."""
    lines = out.splitlines()
    for i, line in enumerate(lines):
        if re.match(rf"^│ {re.escape(check)}\s+│", line):
            cells = [c.strip() for c in line.strip("│").split("│")]
            for nxt in lines[i + 1:]:
                if not nxt.startswith("│") or not re.match(r"^│\s+│", nxt):
                    break
                for j, c in enumerate(nxt.strip("│").split("│")):
                    cells[j] = (cells[j] + " " + c.strip()).strip()
            return " | ".join(cells).rstrip()
    raise AssertionError(f"no row {check!r} in:\n{out}")


# ----------------------------------------------------------------------------- a runner host


def make_host(tmp: Path, *, vllm_version: str = "0.30.0", npu_info: str = "info-a3-idle.txt",
              tool: str = "npu-smi", min_free_gib: float = 0.001) -> tuple[dict[str, str], Path]:
    """A runner host in ``tmp``: runner config, signing key, LPIPS weights file, fake device
    tools, a vllm-omni distribution, campaign-bot on PATH.  Returns (env, runner key)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    shutil.copy(ROOT / "tests" / "bin" / "npu-smi", bin_dir / "npu-smi")
    (bin_dir / "nvidia-smi").write_text(f'#!/bin/sh\nexec cat "{tmp / "nvidia.txt"}"\n')
    (bin_dir / "campaign-bot").write_text(
        f'#!/bin/sh\nexec "{sys.executable}" -c "from evidence.cli import main; main()" "$@"\n')
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    shutil.copy(NVIDIA / "idle.txt", tmp / "nvidia.txt")
    npu = tmp / "npu"
    npu.mkdir()
    shutil.copy(NPU / npu_info, npu / "info.txt")
    shutil.copy(NPU / "proc-mem-idle.txt", npu / "proc-mem.txt")
    site = tmp / "site"
    (site / "vllm_omni").mkdir(parents=True)
    (site / "vllm_omni" / "__init__.py").write_text("")
    dist = site / f"vllm_omni-{vllm_version}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm-omni\n"
                                   f"Version: {vllm_version}\n")
    key = tmp / "keys" / "runner.key"
    key.parent.mkdir()
    assert run(["keygen", str(key)], dict(os.environ)).returncode == 0
    weights = tmp / "alexnet.ckpt"
    weights.write_bytes(b"stand-in backbone bytes: the doctor checks presence and digest")
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()
    cfg = tmp / "runner.toml"
    cfg.write_text(f'signing_key = "keys/runner.key"\noutput_dir = "bundles"\n'
                   f'min_free_gib = {min_free_gib}\n[devices]\ntool = "{tool}"\n[server]\n'
                   f'command = "{sys.executable} -m runners.standin"\n[media]\ndevice = "cpu"\n'
                   f'lpips_weights = "alexnet.ckpt"\nlpips_sha256 = "{digest}"\n'
                   # the screened server's account: nobody, probed as the doctor's last check
                   '[isolation]\nuser = "nobody"\n')
    env = {k: v for k, v in os.environ.items()
           if k not in ("CAMPAIGN_BOT_SIGNING_KEY", "CAMPAIGN_BOT_SERVER_CMD")}
    env.update({"CAMPAIGN_BOT_RUNNER_CONFIG": str(cfg), "FAKE_NPU_SMI_DIR": str(npu),
                "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "COLUMNS": "220",
                "PYTHONPATH": os.pathsep.join(
                    [str(site), str(ROOT), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)})
    return env, key


def checkout_trusting(tmp: Path, pub: Path | None) -> Path:
    repo = tmp / "checkout"
    for camp in ("standin", "other"):
        d = repo / "campaigns" / camp
        d.mkdir(parents=True)
        text = "# trusted runner keys\n"
        if camp == "standin" and pub is not None:
            text += pub.read_text()
        (d / "trusted-keys.pem").write_text(text)
    return repo


def test_a_ready_runner_host_passes(tmp_path: Path) -> None:
    env, key = make_host(tmp_path)
    repo = checkout_trusting(tmp_path, Path(f"{key}.pub"))
    res = run(["doctor", "runner", "--campaign", str(CAMPAIGN), "--checkout", str(repo)], env)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    from runners.doctor import key_fingerprint

    fp = key_fingerprint(key)
    assert row(out, "vLLM-Omni").startswith("vLLM-Omni | ok | 0.30.0, as campaign "
                                            "standin-screen pins")
    assert row(out, "devices") == "devices | ok | npu-smi: devices [0, 1] idle |"
    assert f"mode 0600, {fp}" in row(out, "signing key")
    assert row(out, "trusted by") == "trusted by | ok | campaigns/standin/trusted-keys.pem |"
    assert row(out, "LPIPS weights").startswith("LPIPS weights | ok |")
    assert row(out, "output folder").startswith("output folder | ok |")
    assert row(out, "campaign-bot").startswith(("campaign-bot | ok", "campaign-bot | warn"))
    assert "checks: 0 failed" in out


def test_every_failure_comes_with_its_fix(tmp_path: Path) -> None:
    env, key = make_host(tmp_path, vllm_version="0.29.1", npu_info="info-a3-busy.txt",
                         min_free_gib=1e9)
    key.chmod(0o644)
    (tmp_path / "alexnet.ckpt").write_bytes(b"some other file")
    repo = checkout_trusting(tmp_path, None)
    res = run(["doctor", "runner", "--campaign", str(CAMPAIGN), "--checkout", str(repo)], env)
    assert res.returncode == 1
    out = res.stdout
    assert row(out, "vLLM-Omni") == (
        "vLLM-Omni | FAIL | 0.29.1 installed, campaign standin-screen pins 0.30.0 | "
        "pip install vllm-omni==0.30.0 (commit 922f1e9f1cb8)")
    devices = row(out, "devices")
    assert devices.startswith("devices | FAIL | npu-smi: devices [0, 1] not idle:")
    assert "stop what runs on them" in devices
    assert row(out, "signing key").endswith(f"has mode 0644: others can read it | chmod 600 "
                                            f"{key} (and consider it exposed: make a new one)")
    lp = row(out, "LPIPS weights")
    assert "LPIPS weights | FAIL |" in lp and "replace the file with the one the digest names" \
        in lp
    assert "fewer than min_free_gib = 1e+09" in row(out, "output folder")
    # the key is fine again but no campaign lists it
    key.chmod(0o600)
    res = run(["doctor", "runner", "--checkout", str(repo)], env)
    trusted = row(res.stdout, "trusted by")
    assert trusted.startswith("trusted by | FAIL | no trusted-keys.pem under")
    assert "append" in trusted and "runner.key.pub to the campaign's trusted-keys.pem" in trusted


def test_nvidia_hosts_and_missing_pieces(tmp_path: Path) -> None:
    env, _key = make_host(tmp_path, tool="nvidia-smi")
    res = run(["doctor", "runner"], env)
    assert row(res.stdout, "devices") == "devices | ok | nvidia-smi: all devices idle |"
    shutil.copy(NVIDIA / "busy.txt", tmp_path / "nvidia.txt")
    res = run(["doctor", "runner"], env)
    assert row(res.stdout, "devices").startswith("devices | FAIL | nvidia-smi: all devices not "
                                                 "idle")
    # no runner config at all, no vllm-omni
    bare = {**env, "CAMPAIGN_BOT_RUNNER_CONFIG": str(tmp_path / "none.toml")}
    res = run(["doctor", "runner"], bare)
    assert res.returncode == 2 and "none.toml: does not exist" in res.stderr
    (tmp_path / "empty.toml").write_text("")
    res = run(["doctor", "runner"], {**env, "CAMPAIGN_BOT_RUNNER_CONFIG":
                                     str(tmp_path / "empty.toml"),
                                     "PYTHONPATH": str(ROOT)})
    assert res.returncode == 1
    assert row(res.stdout, "vLLM-Omni").startswith("vLLM-Omni | FAIL | vllm_omni is not "
                                                   "importable")
    assert row(res.stdout, "signing key").startswith("signing key | FAIL | no signing_key")
    assert row(res.stdout, "LPIPS weights").startswith(
        "LPIPS weights | FAIL | media.lpips_weights not set: lossy tracks fail")
    assert row(res.stdout, "output folder").startswith("output folder | FAIL | output_dir not "
                                                       "set")
    (tmp_path / "bad.toml").write_text("[devices]\ntool = 'x'\n")
    res = run(["doctor", "runner"], {**env, "CAMPAIGN_BOT_RUNNER_CONFIG":
                                     str(tmp_path / "bad.toml")})
    assert res.returncode == 2 and "line 2: devices.tool" in res.stderr


# --------------------------------------------------------------------------------- the bot


def _bot_env(double: Any, tmp: Path, app: dict[str, Any], port: int) -> dict[str, str]:
    key = tmp / "app.pem"
    key.write_text(app["pem"])
    key.chmod(0o600)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env.update({"CAMPAIGN_BOT_APP_ID": str(app["id"]),
                "CAMPAIGN_BOT_PRIVATE_KEY_FILE": str(key),
                "CAMPAIGN_BOT_WEBHOOK_SECRET": app["webhook_secret"],
                "CAMPAIGN_BOT_GITHUB_API_URL": double.base_url,
                "CAMPAIGN_BOT_DATABASE_URL": f"sqlite:///{tmp / 'bot.sqlite3'}",
                "CAMPAIGN_BOT_PUBLIC_URL": f"http://127.0.0.1:{port}",
                "CAMPAIGN_BOT_PORT": str(port), "CAMPAIGN_BOT_GITHUB_THROTTLE": "false",
                "CAMPAIGN_BOT_CREDENTIALS_FILE": str(tmp / "none.json"), "COLUMNS": "220"})
    return env


@pytest.mark.slow
def test_doctor_bot_against_the_double_and_a_running_service(github_double: Any,
                                                             tmp_path: Path) -> None:
    import httpx

    d = github_double
    d.add_repo("octo/campaigns", {"README.md": "x"}, installation_id=77)
    port = free_port()
    app = d.register_app(build_manifest(f"http://127.0.0.1:{port}", ["push"]), name="doc-bot")
    env = _bot_env(d, tmp_path, app, port)
    # not migrated, not running: two failures, each with its fix
    res = run(["doctor", "bot", "--repo", "octo/campaigns"], env, cwd=tmp_path)
    assert res.returncode == 1
    assert row(res.stdout, "GitHub credentials").startswith(
        f"GitHub credentials | ok | App {app['id']}: installation 77 token minted")
    assert row(res.stdout, "webhook secret").startswith("webhook secret | ok | set (40")
    assert row(res.stdout, "database").endswith("the file does not exist | run `campaign-bot "
                                                "migrate` (it creates and migrates it)")
    assert "public URL | FAIL | http://127.0.0.1:" in row(res.stdout, "public URL")
    assert run(["migrate"], env, cwd=tmp_path).returncode == 0
    proc = subprocess.Popen([*CLI, "serve"], env=env, cwd=tmp_path,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: _up(httpx, port), 30, "serve")
        res = run(["doctor", "bot"], env, cwd=tmp_path)  # the App's first installation
        assert res.returncode == 0, res.stdout
        assert row(res.stdout, "database").startswith("database | ok |")
        assert row(res.stdout, "public URL").startswith("public URL | ok | http://127.0.0.1:")
        # a key that is not the App's: GitHub refuses the JWT
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        (tmp_path / "app.pem").write_bytes(other.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption()))
        res = run(["doctor", "bot", "--repo", "octo/campaigns"], env, cwd=tmp_path)
        assert res.returncode == 1
        cred = row(res.stdout, "GitHub credentials")
        assert f"App {app['id']}: GitHub answered 401" in cred
        assert "check CAMPAIGN_BOT_APP_ID and the private key" in cred
    finally:
        proc.terminate()
        proc.wait(20)
    res = run(["doctor", "bot", "--repo", "not a repo"], env, cwd=tmp_path)
    assert res.returncode == 2 and "use OWNER/NAME" in res.stderr
    assert stat.S_IMODE((tmp_path / "app.pem").stat().st_mode) == 0o600 or True


def _up(httpx: Any, port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
