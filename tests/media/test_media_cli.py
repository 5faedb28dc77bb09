"""The ``campaign-bot media`` commands: tables, JSON, report files and exit codes 0/1/2."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from evidence.media.cli import register


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str


_APP = typer.Typer()
register(_APP)


@_APP.callback()
def _root() -> None:
    """Test root."""


def _run(*args: str | Path) -> Result:
    """Run ``campaign-bot media ARGS`` in-process (the console script adds exactly this
    group through the ``campaign_bot.cli`` entry point)."""
    r = CliRunner().invoke(_APP, ["media", *map(str, args)], terminal_width=200)
    return Result(r.exit_code, r.stdout, r.stderr)


def test_compare_identical_lossless_exit_0(clips: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    p = _run("compare", clips["control"], clips["copy"], "--mode", "lossless", "--out", out)
    assert p.returncode == 0, p.stderr
    assert "structural checks" in p.stdout and "bit-exact" in p.stdout and "PASS" in p.stdout
    doc = json.loads(out.read_text())
    assert doc["schema"] == "campaign-bot/media-report@1" and doc["passed"] is True


def test_compare_failing_gates_exit_1_json(clips: dict[str, Path]) -> None:
    p = _run("compare", clips["control"], clips["noisy"], "--json")
    assert p.returncode == 1, p.stderr
    doc = json.loads(p.stdout)
    assert doc["mode"] == "lossy" and doc["passed"] is False
    assert doc["gates_source"].startswith("defaults")


def test_gates_file_is_used(clips: dict[str, Path], tmp_path: Path) -> None:
    gates = tmp_path / "gates.toml"
    gates.write_text("""
[quality_gates]
ssim_min = { threshold = 0.5, source = "test: loose" }
psnr_min_db = { threshold = 20.0, source = "test: loose" }
lpips_max = { threshold = 0.9, source = "test: loose" }
audio_spectral_cosine_min = { threshold = 0.5, source = "test: loose" }
audio_rms_ratio = { low = 0.5, high = 2.0, source = "test: loose" }
audio_latent_rate_hz = { threshold = 40.0, source = "test" }
""")
    p = _run("compare", clips["control"], clips["noisy"], "--gates", gates, "--json")
    doc = json.loads(p.stdout)
    ssim = [m for m in doc["metrics"] if m["name"] == "ssim_all"][0]
    assert ssim["threshold"] == 0.5 and ssim["passed"] is True and ssim["source"] == "test: loose"
    assert p.returncode == 1  # LPIPS is still not measured without weights


@pytest.mark.parametrize("args,msg", [
    (["--gates", "MISSING.toml"], "gates file not found"),
    (["--campaign", ".", "--gates", "x.toml"], "not both"),
    (["--track", "5s"], "--track needs --campaign"),
    (["--device", "tpu"], "unknown device"),
    (["--lpips-weights", "w.ckpt"], "together"),
    (["--validator", "media-gates/9"], "unknown validator"),
], ids=["missing-gates", "both-sources", "track-alone", "bad-device", "half-lpips",
        "bad-validator"])
def test_bad_usage_exit_2(clips: dict[str, Path], args: list[str], msg: str) -> None:
    p = _run("compare", clips["control"], clips["copy"], *args)
    assert p.returncode == 2
    assert msg in p.stderr
    assert "Traceback" not in p.stderr


def test_bad_gates_file_names_the_field(clips: dict[str, Path], tmp_path: Path) -> None:
    g = tmp_path / "g.json"
    g.write_text(json.dumps({"ssim_min": {"threshold": "high"}}))
    p = _run("compare", clips["control"], clips["copy"], "--gates", g)
    assert p.returncode == 2 and "ssim_min" in p.stderr and str(g) in p.stderr


@pytest.mark.parametrize("name", ["truncated", "empty", "not_mp4"])
def test_unreadable_input_exit_2(clips: dict[str, Path], name: str) -> None:
    p = _run("compare", clips["control"], clips[name])
    assert p.returncode == 2 and f"{name}.mp4" in p.stderr and "Traceback" not in p.stderr
    p = _run("probe", clips[name])
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_entry_point_registers_media(clips: dict[str, Path]) -> None:
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()", "media",
                        "probe", str(clips["control"])], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr


def test_mode_choice_is_checked(clips: dict[str, Path]) -> None:
    p = _run("compare", clips["control"], clips["copy"], "--mode", "exact")
    assert p.returncode == 2


def test_probe_exit_codes(clips: dict[str, Path]) -> None:
    ok = _run("probe", clips["control"])
    assert ok.returncode == 0 and "no problems seen" in ok.stdout
    bad = _run("probe", clips["no_audio"], "--json")
    assert bad.returncode == 1 and json.loads(bad.stdout)["audio"] is None


def test_out_never_overwrites_another_validator(clips: dict[str, Path], tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert _run("compare", clips["f25"], clips["f25"], "--mode", "lossless", "--validator",
                "media-gates/1", "--out", out).returncode == 1
    p = _run("compare", clips["f25"], clips["f25"], "--mode", "lossless", "--out", out)
    assert p.returncode == 2 and "media-gates/1" in p.stderr
    assert json.loads(out.read_text())["validator_version"] == "media-gates/1"


CAMPAIGN_TOML = """
id = "h3-test"
title = "test campaign"
image_digest = "sha256:{d}"
requesters = ["amy"]
[engine]
repo = "vllm-project/vllm-omni"
commit = "abcdef1"
[checkpoint]
name = "MiniMax-H3"
digest = "{d}"
[pool]
name = "pool"
device_model = "Ascend910B1"
device_count = 4
memory_gib_per_device = 64
[inputs]
prompt = "a cat"
reference_video = {{ sha256 = "{d}" }}
reference_audio = {{ sha256 = "{d}" }}
[workload]
width = 128
height = 96
fps = 24
seed = 1
num_inference_steps = 50
flow_shift = 5.0
[serving]
model = "MiniMaxAI/MiniMax-H3"
[[tracks]]
id = "1s-lossless"
duration_s = 1.0
expected_frames = 24
quality_mode = "lossless"
target_reduction = 0.3
[[tracks]]
id = "1s-wrong-count"
duration_s = 1.0
expected_frames = 30
quality_mode = "lossless"
target_reduction = 0.3
[protocol]
[quality_gates]
ssim_min = {{ threshold = 0.97, source = "campaign" }}
psnr_min_db = {{ threshold = 34.0, source = "campaign" }}
lpips_max = {{ threshold = 0.2, source = "campaign" }}
audio_spectral_cosine_min = {{ threshold = 0.8, source = "campaign" }}
audio_rms_ratio = {{ low = 0.5, high = 2.0, source = "campaign" }}
audio_latent_rate_hz = {{ threshold = 40.0, source = "campaign" }}
[budget]
candidate_directions = 3
wall_hours = 10
device_hours = 40
"""


def test_campaign_track_sets_mode_and_expectations(clips: dict[str, Path], tmp_path: Path
                                                   ) -> None:
    (tmp_path / "campaign.toml").write_text(CAMPAIGN_TOML.format(d="a" * 64))
    ok = _run("compare", clips["control"], clips["copy"], "--campaign", tmp_path, "--track",
              "1s-lossless", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    doc = json.loads(ok.stdout)
    assert doc["mode"] == "lossless" and doc["gates_source"].startswith("campaign")
    bad = _run("compare", clips["control"], clips["copy"], "--campaign", tmp_path, "--track",
               "1s-wrong-count", "--json")
    assert bad.returncode == 1
    (fc,) = [c for c in json.loads(bad.stdout)["structural"] if c["name"] == "frame_count"]
    assert fc["expected"] == "30" and fc["passed"] is False
    unknown = _run("compare", clips["control"], clips["copy"], "--campaign", tmp_path,
                   "--track", "nope")
    assert unknown.returncode == 2 and "1s-lossless" in unknown.stderr


def test_invalid_campaign_names_file_and_field(clips: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "campaign.toml").write_text('id = "x"\n')
    p = _run("compare", clips["control"], clips["copy"], "--campaign", tmp_path)
    assert p.returncode == 2 and "campaign.toml" in p.stderr and "title" in p.stderr
