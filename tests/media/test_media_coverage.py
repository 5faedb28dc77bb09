"""Audio coverage on decoded samples (``media-gates/3``): the H3 rule only where named, the
exact rule, and ``media probe`` flagging audio that ends before the video."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from media_helpers import BASE
from typer.testing import CliRunner

from evidence.media import Expected, compare, probe
from evidence.media.cli import register
from evidence.media.coverage import valid_samples
from evidence.media.synth import ClipSpec, expected_audio_seconds, make_clip

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "media"
TRAILER = FIXTURES / "trailer_bbb_tail.mp4"

_APP = typer.Typer()
register(_APP)


@_APP.callback()
def _root() -> None:
    """Test root."""


def _media(*args: str | Path) -> tuple[int, str]:
    r = CliRunner().invoke(_APP, ["media", *map(str, args)], terminal_width=200)
    return r.exit_code, r.stdout + r.stderr


def _check(report, name: str):  # noqa: ANN001, ANN202
    return next(c for c in report.structural if c.name == name)


@pytest.fixture(scope="module")
def clip_25fps_51(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real PyAV-written clip that is no H3 output: 51 frames at 25 fps (2.04 s) with 5.1
    AAC at 48 kHz as long as the video (the 40 Hz rule would want 2.05 s)."""
    d = tmp_path_factory.mktemp("c25")
    return make_clip(d / "c25_51.mp4", ClipSpec(frames=51, fps=25, width=64, height=48,
                                                 channels=6, sample_rate=48000,
                                                 audio_seconds=51 / 25))


def test_25fps_51_lossless_against_itself_passes_by_default(clip_25fps_51: Path,
                                                            tmp_path: Path) -> None:
    p = probe(clip_25fps_51)
    assert p.audio is not None and (p.audio.channels, p.audio.layout) == (6, "5.1")
    assert p.video is not None and p.video.avg_frame_rate == "25/1"
    code, out = _media("compare", clip_25fps_51, clip_25fps_51, "--mode", "lossless",
                       "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["validator_version"] == "media-gates/3" and doc["passed"]
    names = {c["name"] for c in doc["structural"]}
    assert "audio_coverage" in names and "audio_duration" not in names


def test_25fps_51_fails_only_where_gates_name_the_h3_rule(clip_25fps_51: Path,
                                                          tmp_path: Path) -> None:
    gates = tmp_path / "gates.toml"
    base = """ssim_min = { threshold = 0.97, source = "t" }
psnr_min_db = { threshold = 34.0, source = "t" }
lpips_max = { threshold = 0.2, source = "t" }
audio_spectral_cosine_min = { threshold = 0.8, source = "t" }
audio_rms_ratio = { low = 0.5, high = 2.0, source = "t" }
"""
    gates.write_text(base)
    code, out = _media("compare", clip_25fps_51, clip_25fps_51, "--mode", "lossless",
                       "--gates", gates, "--json")
    assert code == 0, out
    gates.write_text(base + 'audio_latent_rate_hz = { threshold = 40.0, source = "H3" }\n')
    code, out = _media("compare", clip_25fps_51, clip_25fps_51, "--mode", "lossless",
                       "--gates", gates, "--json")
    assert code == 1
    (dur,) = [c for c in json.loads(out)["structural"] if c["name"] == "audio_duration"]
    assert dur["passed"] is False and dur["expected"].startswith("2.05 s")


@pytest.mark.parametrize("frames", [22, 277, 532])
def test_one_latent_short_is_refused_exactly(frames: int, tmp_path: Path) -> None:
    """At 32 kHz stereo AAC, audio 25 ms (800 samples) short decodes to as many samples as
    the expected length or more (the last AAC frame is padded): v2 accepted it."""
    exp_s = expected_audio_seconds(frames)
    exact = make_clip(tmp_path / "exact.mp4", replace(BASE, frames=frames, width=32, height=32,
                                                      audio_seconds=exp_s))
    short = make_clip(tmp_path / "short.mp4", replace(BASE, frames=frames, width=32,
                                                      height=32, audio_seconds=exp_s - 0.025))
    ps = probe(short)
    assert ps.audio is not None and ps.audio.decoded_samples >= round(exp_s * 32000)
    h3 = Expected(frames=frames, audio_latent_hz=40.0)
    v2 = compare(exact, short, mode="lossy", expected=h3, validator="media-gates/2",
                 audio_metrics=False)
    assert _check(v2, "audio_duration").passed  # the old rule's fault, kept reproducible
    v3 = compare(exact, short, mode="lossy", expected=h3, audio_metrics=False)
    dur = _check(v3, "audio_duration")
    assert not dur.passed and "-800 vs expected" in (dur.actual or "")
    ok = compare(exact, exact, mode="lossless", expected=h3)
    assert _check(ok, "audio_duration").passed and ok.passed, ok.reasons


def test_valid_samples_trims_padding_to_the_declared_duration() -> None:
    assert valid_samples(29696, 0.9, 32000) == 28800
    assert valid_samples(29696, None, 32000) == 29696
    assert valid_samples(1000, 5.0, 32000) == 1000  # a header claiming more gets no credit


def test_probe_flags_the_real_trailer_whose_audio_ends_early() -> None:
    p = probe(TRAILER)
    msgs = [m for m in p.problems() if "before the video" in m]
    assert len(msgs) == 1 and msgs[0].startswith("audio ends 2.958 s before the video")
    code, out = _media("probe", TRAILER)
    assert code == 1 and "audio ends 2.958 s before the video" in out
    assert "no problems seen" not in out


def test_probe_accepts_codec_padding_and_h3_outputs(tmp_path: Path) -> None:
    # an H3-shaped output: 362 frames at 24 fps (15.083 s) carry 15.075 s of audio, 266
    # samples short at 32 kHz: within one AAC frame
    h3 = make_clip(tmp_path / "h3.mp4", replace(BASE, frames=362, width=32, height=32))
    assert probe(h3).problems() == []
    early = make_clip(tmp_path / "early.mp4", replace(BASE, audio_seconds=0.9))
    (msg,) = probe(early).problems()
    assert msg.startswith("audio ends 0.100 s before the video")
