"""The default branch's ``campaign.toml`` decides the control: ``campaign-bot screen
--frozen-scope FILE --frozen-scope-blob SHA`` (what the screen workflow runs) refuses a pull
request that changes the control's serving flags, the protocol or the pool, and a frozen file
whose git blob is not the one the bot pinned; a PR that only adds a candidate runs, its
control from the frozen file, and the signed statement names that file's blob."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from evidence.hashing import git_blob_sha
from evidence.scope_binding import SCOPE_FILE

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "tests" / "data" / "screen-campaign"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]
FLAGS = 'flags = ["--omni", "--num-gpus=2", "--usp=2", "--ladder-s=2,0.3,0.3", "--max-frames=12"'


def _pr(tmp: Path, edit: tuple[str, str] | None = None, extra: str = "") -> Path:
    camp = tmp / "pr"
    shutil.copytree(CAMPAIGN, camp)
    toml = camp / "campaign.toml"
    text = toml.read_text()
    if edit is not None:
        assert edit[0] in text
        text = text.replace(edit[0], edit[1], 1)
    toml.write_text(text + extra)
    return camp


def _screen(camp: Path, tmp: Path, *extra: str, blob: str | None = None,
            candidate: str = "noop") -> subprocess.CompletedProcess[str]:
    frozen = CAMPAIGN / "campaign.toml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
    env.update(COLUMNS="400", CAMPAIGN_BOT_SERVER_CMD=f"{sys.executable} -m runners.standin")
    return subprocess.run(
        [*CLI, "screen", "--campaign", str(camp), "--candidate", candidate, "--track",
         "1s-lossless", "--out", str(tmp / "bundle"), "--frozen-scope", str(frozen),
         "--frozen-scope-blob", blob or git_blob_sha(frozen.read_bytes()), *extra],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)


def test_git_blob_sha_is_gits() -> None:
    data = (CAMPAIGN / "campaign.toml").read_bytes()
    got = subprocess.run(["git", "hash-object", "--stdin"], input=data, capture_output=True,
                         check=True).stdout.decode().strip()
    assert git_blob_sha(data) == got


@pytest.mark.parametrize(("edit", "section"), [
    ((FLAGS, FLAGS + ', "--gen-seconds=0.5"'), "serving"),
    (('order = "AB"', 'order = "BA"'), "protocol"),
], ids=["slow-control", "protocol"])
def test_a_pr_that_redefines_its_control_is_refused(tmp_path: Path, edit: tuple[str, str],
                                                    section: str) -> None:
    res = _screen(_pr(tmp_path, edit), tmp_path, "--dry-run")
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"the pull request changes {section}" in res.stderr
    assert not (tmp_path / "bundle").exists()


def test_the_control_redefinition_pull_request_is_refused(tmp_path: Path) -> None:
    """The attack as a pull request makes it: a slow-down flag on the control, a fast one on
    candidate noop (identical to control on the default branch); both are named."""
    camp = _pr(tmp_path, (FLAGS, FLAGS + ', "--gen-seconds=0.5"'))
    toml = camp / "campaign.toml"
    toml.write_text(toml.read_text().replace(
        'name = "noop"\n', 'name = "noop"\nadd_flags = ["--gen-seconds=0.01"]\n', 1))
    res = _screen(camp, tmp_path, "--dry-run")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "the pull request changes serving, candidate noop" in res.stderr
    assert not (tmp_path / "bundle").exists()


def test_a_frozen_file_that_is_not_the_pinned_blob_is_refused(tmp_path: Path) -> None:
    res = _screen(_pr(tmp_path), tmp_path, "--dry-run", blob="0" * 40)
    assert res.returncode == 2 and "changed since the dispatch" in res.stderr, res.stderr


def test_a_new_candidate_runs_against_the_frozen_control(tmp_path: Path) -> None:
    camp = _pr(tmp_path, extra='\n[[candidates]]\nname = "pr-fast"\nadd_flags = '
                              '["--gen-seconds=0.01"]\n')
    key = tmp_path / "runner.key"
    assert subprocess.run([*CLI, "keygen", str(key)], capture_output=True).returncode == 0
    res = _screen(camp, tmp_path, "--sessions", "2", "--device-tool", "none",
                  "--health-poll-s", "0.05", "--signing-key", str(key), candidate="pr-fast")
    assert res.returncode in (0, 1), res.stdout + res.stderr  # no idle gate: lifecycles fail
    env = json.loads((tmp_path / "bundle" / "attestation.dsse.json").read_text())
    pred = json.loads(base64.b64decode(env["payload"]))["predicate"]
    assert pred["scope_blob"] == git_blob_sha((CAMPAIGN / "campaign.toml").read_bytes())
    assert (pred["scope_frozen"], pred["candidate"]) == (True, "pr-fast")
    control = json.loads((tmp_path / "bundle" / "data" / "receipts" /
                          "session-00-control.json").read_text())
    assert "--gen-seconds" not in control["notes"]  # the control is the frozen one
    # the bundle keeps the file the control came from, and names the candidate's definition
    assert (tmp_path / "bundle" / SCOPE_FILE).read_bytes() == (CAMPAIGN / "campaign.toml"
                                                                ).read_bytes()
    assert pred["candidate_config"] == {"add_flags": ["--gen-seconds=0.01"],
                                        "remove_flags": [], "env": {}}
