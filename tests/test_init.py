"""``campaign-bot init``: the repository files of this version, idempotent, never overwriting a
changed file without --force, a campaign skeleton whose blanks are exactly what `campaign-bot
check` refuses, and --check for a workflow that drifted from this version's template."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from scaffold_helpers import fill

from bot.repo_config import RepoConfig, parse
from bot.scaffold import blanks, init_repository, workflow_template

ROOT = Path(__file__).resolve().parents[1]
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]
DATA = ROOT / "tests" / "data" / "screen-campaign"
FILES = [".github/campaign-bot.toml", ".github/workflows/screen.yml",
         "campaigns/h3/campaign.toml", "campaigns/h3/trusted-keys.pem"]


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd or ROOT, env=env)


def row(out: str, file: str, action: str) -> bool:
    """True when the init table has ``file`` with ``action``."""
    return re.search(rf"{re.escape(file)}\s*│ {action}\s", out) is not None


def _keys(model: type, prefix: str = "") -> set[str]:
    out = set()
    for name, f in model.model_fields.items():  # type: ignore[attr-defined]
        ann = f.annotation
        if isinstance(ann, type) and hasattr(ann, "model_fields"):
            out.add(prefix + name)
            out |= _keys(ann, f"{prefix}{name}.")
        else:
            out.add(prefix + name)
    return out


def test_init_writes_the_files_of_this_version(tmp_path: Path) -> None:
    res = cli("init", str(tmp_path), "--campaign", "h3")
    assert res.returncode == 0, res.stderr
    for f in FILES:
        assert row(res.stdout, f, "created"), res.stdout
        assert (tmp_path / f).is_file()
    assert (tmp_path / ".github/workflows/screen.yml").read_bytes() == workflow_template() \
        == (ROOT / ".github/workflows/screen.yml").read_bytes()
    pem = (tmp_path / "campaigns/h3/trusted-keys.pem").read_text()
    assert "BEGIN PUBLIC KEY" not in pem.replace('"-----BEGIN PUBLIC KEY-----"', "")
    assert "campaign-bot keygen" in pem and "doctor runner" in pem


def test_the_repository_config_shows_every_key_with_a_comment(tmp_path: Path) -> None:
    init_repository(tmp_path, "h3")
    text = (tmp_path / ".github/campaign-bot.toml").read_text()
    cfg, problems = parse(text)
    assert problems == [] and cfg == RepoConfig()  # every value at its default
    data = tomllib.loads(text)
    present = {k for k, v in data.items()} | {f"{k}.{kk}" for k, v in data.items()
                                              if isinstance(v, dict) for kk in v}
    assert present == _keys(RepoConfig)
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^[a-z_]+ = ", line):
            assert lines[i - 1].startswith("#"), f"no comment above {line!r}"


def test_init_is_idempotent_and_keeps_changed_files(tmp_path: Path) -> None:
    first = init_repository(tmp_path, "h3", runner_labels=["self-hosted", "x4"])
    assert set(first.actions.values()) == {"created"}
    again = init_repository(tmp_path, "h3", runner_labels=["self-hosted", "x4"])
    assert set(again.actions.values()) == {"unchanged"}
    cfg = tmp_path / ".github/campaign-bot.toml"
    cfg.write_text(cfg.read_text().replace("allowed = []", 'allowed = ["alice"]'))
    wf = tmp_path / ".github/workflows/screen.yml"
    wf.write_text(wf.read_text() + "# local note\n")
    res = cli("init", str(tmp_path), "--campaign", "h3", "--runner-labels", "self-hosted,x4")
    assert res.returncode == 0
    assert row(res.stdout, ".github/campaign-bot.toml", "kept")
    assert "kept .github/workflows/screen.yml: it differs from this version's file" in \
        res.stdout and "init --check` shows the difference" in res.stdout
    assert 'allowed = ["alice"]' in cfg.read_text() and wf.read_text().endswith("note\n")
    forced = init_repository(tmp_path, "h3", runner_labels=["self-hosted", "x4"], force=True)
    assert forced.actions[".github/workflows/screen.yml"] == "overwritten"
    assert wf.read_bytes() == workflow_template()


def test_init_refuses_bad_names_and_symlinks(tmp_path: Path) -> None:
    res = cli("init", str(tmp_path), "--campaign", "../escape")
    assert res.returncode == 2 and "--campaign '../escape': use 1-100 of" in res.stderr
    res = cli("init", str(tmp_path))
    assert res.returncode == 2 and "--campaign NAME is required" in res.stderr
    assert "--force to replace only the screen workflow" in res.stderr
    (tmp_path / ".github").mkdir()
    outside = tmp_path.parent / f"{tmp_path.name}-outside.toml"
    (tmp_path / ".github/campaign-bot.toml").symlink_to(outside)
    res = cli("init", str(tmp_path), "--campaign", "h3")
    assert res.returncode == 2 and "is a symlink or leads outside" in res.stderr
    assert not outside.exists()


def test_the_skeleton_passes_check_once_its_named_blanks_are_filled(tmp_path: Path) -> None:
    res = cli("init", str(tmp_path), "--campaign", "h3")
    camp = tmp_path / "campaigns" / "h3"
    named = blanks((camp / "campaign.toml").read_text())
    for b in named:  # the output names every blank, with its line
        assert f"line {b.line:>3}  {b.key}: " in res.stdout
    assert len(named) == 24
    # unfilled: check fails, and only on fields named as blanks
    rep = json.loads(cli("check", str(camp), "--json").stdout)
    invalid = [f for f in rep["findings"] if f["rule"] == "SCHEMA_INVALID"
               and not (f["field"] is None and "more SCHEMA_INVALID" in f["message"])]
    assert invalid and rep["exit_code"] == 1
    for f in invalid:
        assert any(f["field"] == b.key or f["field"].startswith(b.key + ".")
                   or re.sub(r"\.\d+\.", ".", f["field"]) == b.key for b in named), f
    fill(camp)
    assert blanks((camp / "campaign.toml").read_text()) == []
    # the skeleton's trusted-keys.pem holds no key yet: the bot would refuse every bundle
    rep = json.loads(cli("check", str(camp), "--json").stdout)
    assert [(f["rule"], f["severity"]) for f in rep["findings"] if f["severity"] != "P3"] \
        == [("TRUSTED_KEYS_UNUSABLE", "P1")]
    assert cli("keygen", str(tmp_path / "runner.key")).returncode == 0
    with (camp / "trusted-keys.pem").open("a") as fh:
        fh.write((tmp_path / "runner.key.pub").read_text())
    res = cli("check", str(camp))
    assert res.returncode == 0, res.stdout
    again = cli("init", str(tmp_path), "--campaign", "h3")
    assert "campaign.toml has no blanks left" in again.stdout
    assert row(again.stdout, "campaigns/h3/campaign.toml", "kept")


def test_check_reports_drift_from_this_versions_template(tmp_path: Path) -> None:
    init_repository(tmp_path, "h3")
    res = cli("init", str(tmp_path), "--check")
    assert res.returncode == 0 and "is this version's template" in res.stdout
    wf = tmp_path / ".github/workflows/screen.yml"
    old = workflow_template().decode().replace(
        "${{ fromJSON(inputs.runs_on) }}",
        "${{ fromJSON(vars.CAMPAIGN_BOT_POOL_LABELS || '[\"self-hosted\"]') }}").replace(
        "      runs_on:\n", "      runs_onx:\n")
    wf.write_text(old)
    cfg = tmp_path / ".github/campaign-bot.toml"
    cfg.write_text(cfg.read_text() + '\n[pools.x4]\nrunner_labels = ["self-hosted"]\n')
    res = cli("init", str(tmp_path), "--check")
    out = " ".join(res.stdout.split())
    assert res.returncode == 1
    assert "differs from this version's template" in out
    assert "reads the CAMPAIGN_BOT_POOL_LABELS repository variable" in out
    assert "it has no runs_on input" in out
    assert "+ runs-on: ${{ fromJSON(inputs.runs_on) }}" in out
    assert "config: .github/campaign-bot.toml line" in out and "`pools`: is no longer read" in out
    wf.unlink()
    res = cli("init", str(tmp_path), "--check")
    assert res.returncode == 1 and ".github/workflows/screen.yml is missing" in res.stdout
    res = cli("init", str(tmp_path / "nope"), "--check")
    assert res.returncode == 2


def test_force_replaces_only_the_workflow_and_never_user_files(tmp_path: Path) -> None:
    init_repository(tmp_path, "h3")
    wf = tmp_path / ".github/workflows/screen.yml"
    wf.write_text(wf.read_text() + "# drifted\n")
    camp = tmp_path / "campaigns/h3/campaign.toml"
    camp.write_text(camp.read_text().replace('title = ""', 'title = "mine"') + "# filled\n")
    keys = tmp_path / "campaigns/h3/trusted-keys.pem"
    keys.write_text(keys.read_text() + "-----BEGIN PUBLIC KEY-----\nAAAA\n"
                    "-----END PUBLIC KEY-----\n")
    cfg = tmp_path / ".github/campaign-bot.toml"
    cfg.write_text(cfg.read_text().replace("allowed = []", 'allowed = ["alice"]'))
    user = {p: p.read_bytes() for p in (camp, keys, cfg)}
    # the command --check prints is the command that works
    check = cli("init", str(tmp_path), "--check")
    assert check.returncode == 1
    assert f"`campaign-bot init {tmp_path} --force`" in " ".join(check.stdout.split())
    res = cli("init", str(tmp_path), "--force")
    assert res.returncode == 0, res.stderr
    assert row(res.stdout, ".github/workflows/screen.yml", "overwritten"), res.stdout
    assert wf.read_bytes() == workflow_template()
    assert {p: p.read_bytes() for p in user} == user
    assert cli("init", str(tmp_path), "--check").returncode == 0
    # with --campaign, --force still keeps every user-owned file
    wf.write_text(wf.read_text() + "# drifted\n")
    res = cli("init", str(tmp_path), "--campaign", "h3", "--force")
    assert res.returncode == 0, res.stderr
    assert row(res.stdout, ".github/workflows/screen.yml", "overwritten"), res.stdout
    for rel in (".github/campaign-bot.toml", "campaigns/h3/campaign.toml",
                "campaigns/h3/trusted-keys.pem"):
        assert row(res.stdout, rel, "kept"), res.stdout
    assert "init never overwrites it, even with --force" in res.stdout
    assert {p: p.read_bytes() for p in user} == user
    # a missing user file is still created under --force
    keys.unlink()
    res = cli("init", str(tmp_path), "--campaign", "h3", "--force")
    assert row(res.stdout, "campaigns/h3/trusted-keys.pem", "created") and keys.is_file()


def test_force_without_campaign_writes_the_configured_workflow(tmp_path: Path) -> None:
    (tmp_path / ".github").mkdir()
    (tmp_path / ".github/campaign-bot.toml").write_text('[screen]\nworkflow = "gpu.yml"\n')
    res = cli("init", str(tmp_path), "--force")
    assert res.returncode == 0, res.stderr
    assert (tmp_path / ".github/workflows/gpu.yml").read_bytes() == workflow_template()
    assert not (tmp_path / ".github/workflows/screen.yml").exists()
    assert not (tmp_path / "campaigns").exists()
    res = cli("init", str(tmp_path / "nope"), "--force")
    assert res.returncode == 2 and "not a directory" in res.stderr


REQUIRED_BLANKS = {"title": '""', "engine.version": '""', "checkpoint.name": '""',
                   "pool.device_model": '""', "pool.device_ids": "[]", "serving.model": '""'}


def test_check_refuses_a_skeleton_whose_required_blanks_are_left_empty(tmp_path: Path) -> None:
    """Every ``""``/``[]`` blank of a required field is a finding naming the field and its
    line; the file is said to be invalid, not absent."""
    cli("init", str(tmp_path), "--campaign", "h3")
    camp = tmp_path / "campaigns" / "h3"
    lines = {b.key: b.line for b in blanks((camp / "campaign.toml").read_text())}
    fill(camp, REQUIRED_BLANKS)
    res = cli("check", str(camp), "--json")
    rep = json.loads(res.stdout)
    assert res.returncode == 1 and rep["exit_code"] == 1
    invalid = {f["field"]: f for f in rep["findings"] if f["rule"] == "SCHEMA_INVALID"}
    assert set(invalid) == set(REQUIRED_BLANKS), invalid
    for key, f in invalid.items():
        assert f["path"] == "campaign.toml" and f["line"] == lines[key], f
        assert f["message"].startswith(f"{key}: is empty: a value is required"), f
    for f in rep["findings"]:
        assert "no campaign.toml" not in f["message"], f
    out = " ".join(cli("check", str(camp)).stdout.split())
    assert out.startswith("campaign (campaign.toml invalid) (") and \
        "documents: campaign.toml invalid, " in out, out


def test_init_outside_a_git_checkout_says_where_the_files_belong(tmp_path: Path) -> None:
    outside = tmp_path / "plain"
    res = cli("init", str(outside), "--campaign", "h3")
    assert res.returncode == 0, res.stderr
    assert "is not inside a git checkout" in res.stdout, res.stdout
    # the check command it suggests works from where init was run
    assert f"campaign-bot check {outside.as_posix()}/campaigns/h3" in res.stdout, res.stdout
    checkout = tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(checkout)], check=True, timeout=60)
    (checkout / "sub").mkdir()
    res = cli("init", str(checkout / "sub"), "--campaign", "h3")
    assert res.returncode == 0, res.stderr
    assert "git checkout" not in res.stdout, res.stdout


def test_check_of_a_fresh_skeleton_lists_its_blanks_from_the_top(tmp_path: Path) -> None:
    """More blanks than the per-file cap of findings: the ones shown are the first lines of
    campaign.toml (title, requesters, ...), in order, and the cap says how many more."""
    res = cli("init", str(tmp_path), "--campaign", "h3")
    assert res.returncode == 0, res.stderr
    rep = cli("check", str(tmp_path / "campaigns" / "h3"), "--json")
    doc = json.loads(rep.stdout)
    lines = [f["line"] for f in doc["findings"] if f["rule"] == "SCHEMA_INVALID"
             and f["line"] is not None]
    text = (tmp_path / "campaigns" / "h3" / "campaign.toml").read_text().splitlines()
    requesters = next(i for i, t in enumerate(text, 1) if t.startswith("requesters"))
    assert requesters in lines
    assert lines == sorted(lines)


def test_re_running_init_lists_only_the_blanks_still_empty(tmp_path: Path) -> None:
    """A user fills values in place and keeps the ``# FILL`` comments; re-running init lists
    only what is still empty (it listed every blank again: the list followed the markers)."""
    cli("init", str(tmp_path), "--campaign", "h3")
    toml = tmp_path / "campaigns" / "h3" / "campaign.toml"
    text = toml.read_text()
    before = blanks(text)
    text = re.sub(r'^title = ""', 'title = "H3 on 2x910B1"', text, flags=re.M)
    text = re.sub(r"^requesters = \[\]", 'requesters = ["amy"]', text, flags=re.M)
    text = re.sub(r'^(reference_video = \{ path = "ref.mp4", sha256 = )""',
                  r'\g<1>"' + "a" * 64 + '"', text, flags=re.M)
    toml.write_text(text)
    assert "# FILL" in toml.read_text().splitlines()[before[0].line - 1]  # the comment stays
    left = [b.key for b in blanks(toml.read_text())]
    assert left == [b.key for b in before
                    if b.key not in ("title", "requesters", "inputs.reference_video")]
    again = cli("init", str(tmp_path), "--campaign", "h3")
    assert "  title: " not in again.stdout and "requesters:" not in again.stdout
    assert "inputs.reference_video" not in again.stdout
    assert "inputs.reference_audio" in again.stdout


def test_init_inputs_pins_the_files_sha256(tmp_path: Path) -> None:
    """``init --inputs FILE...`` copies each file beside campaign.toml and pins its SHA-256 in
    the [inputs] entry with its name; those blanks are gone from the list, and a file that
    matches no entry is refused by name, with nothing written."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "prompt.txt").write_text("A short scene.\n")
    (src / "ref.mp4").write_bytes(b"\x00video")
    repo = tmp_path / "repo"
    res = cli("init", str(repo), "--campaign", "h3", "--inputs", str(src / "prompt.txt"),
              "--inputs", str(src / "ref.mp4"))
    assert res.returncode == 0, res.stderr
    camp = repo / "campaigns" / "h3"
    scope = tomllib.loads((camp / "campaign.toml").read_text())
    for key, name in (("prompt_file", "prompt.txt"), ("reference_video", "ref.mp4")):
        digest = hashlib.sha256((src / name).read_bytes()).hexdigest()
        assert scope["inputs"][key]["sha256"] == digest
        assert (camp / name).read_bytes() == (src / name).read_bytes()
    left = [b.key for b in blanks((camp / "campaign.toml").read_text())]
    assert "inputs.reference_audio" in left
    assert "inputs.prompt_file" not in left and "inputs.reference_video" not in left
    assert "inputs.prompt_file" not in res.stdout.split("Fill these blanks")[1]
    (src / "other.bin").write_bytes(b"x")
    before = (camp / "campaign.toml").read_bytes()
    bad = cli("init", str(repo), "--campaign", "h3", "--inputs", str(src / "other.bin"))
    assert bad.returncode == 2
    assert bad.stderr.startswith(f"error: --inputs {src / 'other.bin'}: no [inputs] entry")
    assert "prompt.txt, ref.mp4, ref.wav" in bad.stderr
    assert (camp / "campaign.toml").read_bytes() == before


def test_one_default_for_the_evidence_folders(tmp_path: Path) -> None:
    """init's skeleton, the campaign.toml default (its reference page is generated from it)
    and the folder where the bot commits screens agree (three defaults differed)."""
    from bot.repo_config import RepoConfig
    from evidence.models import DEFAULT_EVIDENCE_PATHS, CampaignScope

    init_repository(tmp_path, "h3")
    skeleton = tomllib.loads((tmp_path / "campaigns" / "h3" / "campaign.toml").read_text())
    assert skeleton["evidence_paths"] == list(DEFAULT_EVIDENCE_PATHS)
    assert CampaignScope.model_fields["evidence_paths"].default_factory() == \
        list(DEFAULT_EVIDENCE_PATHS)  # type: ignore[call-arg,misc]
    assert RepoConfig().screen.evidence_path in DEFAULT_EVIDENCE_PATHS
    guide = (Path(__file__).resolve().parents[1] / "docs" / "user-guide.md").read_text()
    assert "(default `results`, `receipts` and `screens`" in guide


def test_check_reports_pin_drift_of_each_action(tmp_path: Path) -> None:
    """A repository whose screen workflow runs an action by tag, or by another commit, is told
    which action and what this version pins (the template pins every action by commit)."""
    from bot.scaffold import action_pins

    init_repository(tmp_path, "h3")
    template = workflow_template().decode()
    pins = action_pins(template)
    assert set(pins) == {"actions/checkout", "actions/upload-artifact"}
    (co_sha, co_tag), (up_sha, _) = pins["actions/checkout"], pins["actions/upload-artifact"]
    other = "0" * 40
    drifted = (template.replace(f"actions/checkout@{co_sha} # {co_tag}", "actions/checkout@v5")
               .replace(f"actions/upload-artifact@{up_sha}",
                        f"actions/upload-artifact@{other}"))
    (tmp_path / ".github/workflows/screen.yml").write_text(drifted)
    res = cli("init", str(tmp_path), "--check")
    out = " ".join(res.stdout.split())
    assert res.returncode == 1
    assert (f"pin drift: actions/checkout is pinned to 'v5', a tag or branch its owner can move "
            f"to other code; this version pins commit {co_sha} ({co_tag})") in out
    assert f"pin drift: actions/upload-artifact is pinned to commit {other}" in out
