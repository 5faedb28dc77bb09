"""The screened server cannot forge, sign or reach the evidence: ``campaign-bot screen`` (a
real subprocess, as root here) runs the hostile server of ``tests/hostile/server.py`` with
``[isolation] user = "nobody"``, and everything it tries is blocked: the signing key, the
runner's ``/proc/<ppid>``, ``ptrace``, the bundle folder, the workflow's ``GITHUB_ENV`` and
``GITHUB_OUTPUT`` files, the runner's tokens and ``PYTHONPATH`` (with a ``sitecustomize.py``).
The same corpus without an [isolation] user shows what it does otherwise (the key is read and a
file lands in the signed bundle), so the test fails where the separation is missing.
A candidate ``env`` naming ``PYTHONPATH`` is refused before anything starts, and
``doctor runner`` reports the isolation."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "tests" / "data" / "screen-campaign"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]
SYSTEM_PYTHON = Path("/usr/bin/python3")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not SYSTEM_PYTHON.exists(),
    reason="switching the server's account needs root (CI runs as root) and /usr/bin/python3")


@pytest.fixture(scope="module")
def pub() -> Iterator[Path]:
    """A folder every account can traverse (tmp_path is root's, mode 0700): the hostile
    server, its MP4, the key's folder, the GitHub files and the bundles live here."""
    d = Path(tempfile.mkdtemp(prefix="campaign-bot-hostile-"))
    os.chmod(d, 0o755)
    shutil.copy(ROOT / "tests" / "hostile" / "server.py", d / "server.py")
    shutil.copy(CAMPAIGN / "ref.mp4", d / "reply.mp4")
    for f in ("server.py", "reply.mp4"):
        os.chmod(d / f, 0o644)
    (d / "keys").mkdir(mode=0o755)
    res = subprocess.run([*CLI, "keygen", str(d / "keys" / "runner.key")], capture_output=True,
                         text=True, cwd=ROOT)
    assert res.returncode == 0, res.stderr
    evil = d / "evil"
    evil.mkdir(mode=0o755)
    (evil / "sitecustomize.py").write_text(
        "import os\n"
        f"open({str(d)!r} + f'/sitecustomize-ran-as-{{os.getuid()}}', 'w').close()\n")
    os.chmod(evil / "sitecustomize.py", 0o644)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _screen(pub: Path, name: str, user: str | None) -> tuple[subprocess.CompletedProcess[str],
                                                               Path, list[dict[str, str]]]:
    work = pub / name
    work.mkdir(mode=0o755)
    out = work / "bundle"
    genv, gout = work / "github_env", work / "github_output"
    for f in (genv, gout):
        f.write_text("")
        os.chmod(f, 0o644)
    cfg = work / "runner.toml"
    cfg.write_text(f'signing_key = "{pub / "keys" / "runner.key"}"\n'
                   + (f'[isolation]\nuser = "{user}"\n' if user else ""))
    server = (f"{SYSTEM_PYTHON} {pub / 'server.py'} --key {pub / 'keys' / 'runner.key'} "
              f"--out {out} --mp4 {pub / 'reply.mp4'} --github-file {genv} --github-file {gout}")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env.update({
        "CAMPAIGN_BOT_RUNNER_CONFIG": str(cfg), "CAMPAIGN_BOT_SERVER_CMD": server,
        "GITHUB_TOKEN": "ghs_runnertoken", "ACTIONS_RUNTIME_TOKEN": "runtime-token",
        "GITHUB_ENV": str(genv), "GITHUB_OUTPUT": str(gout), "RUNNER_TEMP": str(work),
        "PYTHONPATH": str(pub / "evil"), "COLUMNS": "200"})
    res = subprocess.run(
        [*CLI, "screen", "--campaign", str(CAMPAIGN), "--candidate", "noop", "--track",
         "1s-lossless", "--out", str(out), "--sessions", "2", "--device-tool", "none",
         "--health-poll-s", "0.05"],
        capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)
    attempts = [json.loads(ln.split("HOSTILE ", 1)[1])
                for log in sorted((out / "data" / "logs").glob("*.log"))
                for ln in log.read_text().splitlines() if ln.startswith("HOSTILE ")]
    return res, out, attempts


def _verify(out: Path, pub: Path) -> list[dict[str, str]]:
    res = subprocess.run([*CLI, "check", str(out), "--trusted-keys",
                          str(pub / "keys" / "runner.key.pub"), "--json"],
                         capture_output=True, text=True, cwd=ROOT, timeout=120)
    return json.loads(res.stdout)["findings"]


def test_hostile_server_reaches_nothing_when_isolated(pub: Path) -> None:
    res, out, attempts = _screen(pub, "isolated", "nobody")
    assert res.returncode in (0, 1), res.stdout + res.stderr
    assert "server runs as nobody" in res.stdout
    by_attack: dict[str, list[str]] = {}
    for a in attempts:
        by_attack.setdefault(a["attack"], []).append(a["result"])
    assert len(by_attack["identity"]) == 2  # both sessions' servers ran the corpus
    nobody = pwd.getpwnam("nobody").pw_uid
    assert all(r == f"blocked: {nobody} 0000000000000000" for r in by_attack["identity"])
    expected = {"read signing key", "read runner cmdline", "read runner environ",
                "scan /proc for --signing-key", "ptrace the runner", "write a forged receipt",
                "write into the bundle", "append to github_env", "append to github_output",
                "inherited runner variables"}
    assert expected <= set(by_attack)
    for attack in expected:
        assert all(r.startswith("blocked: ") for r in by_attack[attack]), (attack, by_attack)
    # The key's bytes are nowhere in the bundle, nothing the server wrote was signed, the
    # workflow's files are untouched, and PYTHONPATH's sitecustomize never ran as the server.
    key = (pub / "keys" / "runner.key").read_bytes()
    body = key.split(b"-----")[2].strip()
    for f in out.rglob("*"):
        if f.is_file():
            assert body not in f.read_bytes(), f
    assert not (out / "data" / "injected.txt").exists()
    assert not (out / "data" / "receipts" / "forged.json").exists()
    assert (pub / "isolated" / "github_env").read_text() == ""
    assert "INJECTED" not in (pub / "isolated" / "github_output").read_text()
    assert not (pub / f"sitecustomize-ran-as-{nobody}").exists()
    findings = _verify(out, pub)
    assert "SIGNATURE_VERIFIED" in {f["rule"] for f in findings}
    summary = json.loads((out / "data" / "screen.json").read_text())
    assert summary["runner"]["server_account"] == "nobody"
    assert not list(Path(tempfile.gettempdir()).glob("campaign-bot-server-*")), \
        "the server's scratch folder was left behind"


def test_without_isolation_the_same_server_steals_the_key(pub: Path) -> None:
    """What the separation prevents: as the runner's own account the corpus reads the key
    and gets a file of its own signed into the bundle; tokens are still not inherited
    (the environment is allow-listed in every mode)."""
    res, out, attempts = _screen(pub, "unisolated", None)
    assert "could read the signing key" in res.stdout
    got = {a["attack"]: a["result"] for a in attempts}
    assert got["read signing key"].startswith("succeeded")
    assert got["write into the bundle"].startswith("succeeded")
    assert got["inherited runner variables"].startswith("blocked")
    manifest = (out / "manifest-sha256.txt").read_text()
    assert "data/injected.txt" in manifest


def test_candidate_env_naming_pythonpath_is_refused(tmp_path: Path) -> None:
    camp = tmp_path / "campaign"
    shutil.copytree(CAMPAIGN, camp)
    toml = camp / "campaign.toml"
    text = toml.read_text()
    assert 'name = "noop"' in text
    toml.write_text(text.replace('name = "noop"', 'name = "noop"\nenv = { PYTHONPATH = '
                                 '"evil", LD_PRELOAD = "x.so" }', 1))
    res = subprocess.run([*CLI, "screen", "--campaign", str(camp), "--candidate", "noop",
                          "--track", "1s-lossless", "--out", str(tmp_path / "b"),
                          "--dry-run"], capture_output=True, text=True, cwd=ROOT, timeout=60,
                         env={**os.environ, "COLUMNS": "400"})
    assert res.returncode == 2, res.stdout + res.stderr
    assert "field candidates.0.env" in res.stderr
    assert "PYTHONPATH changes how programs are loaded" in res.stderr
    assert "LD_PRELOAD" in res.stderr


def test_doctor_runner_checks_the_isolation(pub: Path) -> None:
    work = pub / "doctor"
    work.mkdir(mode=0o755)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env["COLUMNS"] = "250"
    results = {}
    for user in ("nobody", "root", None):
        cfg = work / f"runner-{user}.toml"
        cfg.write_text(f'signing_key = "{pub / "keys" / "runner.key"}"\n'
                       f'output_dir = "{work}"\n'
                       + (f'[isolation]\nuser = "{user}"\n' if user else ""))
        env["CAMPAIGN_BOT_RUNNER_CONFIG"] = str(cfg)
        res = subprocess.run([*CLI, "doctor", "runner"], capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=120)
        line = next(ln for ln in res.stdout.splitlines() if "server isolation" in ln)
        results[user] = line
    assert "server runs as nobody" in results["nobody"], results
    assert "is root" in results["root"], results
    assert "no [isolation] user" in results[None], results
    # A key others may read is caught by the probe as the server account too.
    os.chmod(pub / "keys" / "runner.key", 0o644)
    try:
        env["CAMPAIGN_BOT_RUNNER_CONFIG"] = str(work / "runner-nobody.toml")
        res = subprocess.run([*CLI, "doctor", "runner"], capture_output=True, text=True,
                             cwd=ROOT, env=env, timeout=120)
    finally:
        os.chmod(pub / "keys" / "runner.key", 0o600)
    line = next(ln for ln in res.stdout.splitlines() if "server isolation" in ln)
    assert "is readable" in line, res.stdout
