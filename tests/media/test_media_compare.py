"""compare() and probe() on PyAV-generated clips: structural checks, versioned validators,
bad inputs, lossless, the FFmpeg cross-check, streaming memory, the report writer."""

from __future__ import annotations

import json
import math
import tracemalloc
from dataclasses import replace
from pathlib import Path

import pytest
from media_helpers import BASE, ffmpeg_ssim_psnr

from evidence.media import Expected, MediaInputError, compare, probe
from evidence.media.report import write_report
from evidence.media.synth import ClipSpec, make_clip
from evidence.models import MediaReport


def _check(report: MediaReport, name: str) -> bool:
    (c,) = [c for c in report.structural if c.name == name]
    return c.passed


def _metric(report: MediaReport, name: str):  # noqa: ANN202
    (m,) = [m for m in report.metrics if m.name == name]
    return m


def test_probe_sees_the_clip(clips: dict[str, Path]) -> None:
    p = probe(clips["control"])
    assert p.video is not None and p.audio is not None
    assert (p.video.width, p.video.height, p.video.decoded_frames) == (128, 96, 24)
    assert p.video.frame_rate_from_pts == "24/1" and p.video.pix_fmt == "yuv420p"
    assert (p.audio.codec, p.audio.sample_rate, p.audio.channels) == ("aac", 32000, 2)
    assert p.audio.declared_duration_s == pytest.approx(1.0)
    assert 32000 <= p.audio.decoded_samples < 32000 + 1024
    assert p.problems() == []


def test_lossy_pass_on_small_perturbation(clips: dict[str, Path]) -> None:
    r = compare(clips["control"], clips["noisy"], mode="lossy", expected_frames=24)
    assert all(c.passed for c in r.structural), r.reasons
    ssim = _metric(r, "ssim_all")
    assert 0.5 < ssim.value < 1.0 and ssim.op == ">=" and ssim.source
    assert _metric(r, "psnr_avg_db").value > 20
    assert _metric(r, "audio_spectral_cosine").passed is True
    assert _metric(r, "audio_rms_ratio").value == pytest.approx(1.0, abs=1e-6)
    # no LPIPS weights given: reported as not measured, and the report cannot pass
    lp = _metric(r, "lpips")
    assert lp.value is None and lp.passed is False and "not_measured" in lp.detail
    assert not r.passed and any("lpips" in x for x in r.reasons)
    assert r.validator_version == "media-gates/3"


def test_identical_files_psnr_inf_and_lossless_pass(clips: dict[str, Path]) -> None:
    r = compare(clips["control"], clips["copy"], mode="lossless")
    assert r.passed, r.reasons
    be = r.bit_exact
    assert be is not None and be.frames_equal and be.pcm_equal
    assert be.packets_equal == {"audio:0": True, "video:0": True}
    assert be.frames_compared == 24 and be.differing_frames == 0
    assert be.decoder_build and "libavcodec" in be.decoder_build
    assert be.video_sha256["control"] == be.video_sha256["candidate"]
    assert _metric(r, "psnr_avg_db").value == math.inf
    # inf survives the JSON round trip
    back = MediaReport.model_validate_json(r.model_dump_json(by_alias=True))
    assert _metric(back, "psnr_avg_db").value == math.inf


def test_lossless_fails_with_first_differing_frame(clips: dict[str, Path]) -> None:
    r = compare(clips["control"], clips["noisy"], mode="lossless")
    be = r.bit_exact
    assert be is not None and not r.passed
    assert be.frames_equal is False and be.first_differing_frame == 0
    assert be.differing_frames == 24 and be.packets_equal["video:0"] is False
    assert be.first_differing_packet["video:0"] == 0
    assert be.pcm_equal is True  # same audio, same decoder build
    assert any("decoded frames differ" in x for x in r.reasons)


def test_v1_and_v2_audio_rules_differ(clips: dict[str, Path]) -> None:
    # 25 frames at 24 fps: video 1.0417 s; the 40 Hz latent rule gives 1.05 s of audio
    v2 = compare(clips["f25"], clips["f25"], mode="lossless", validator="media-gates/2")
    v1 = compare(clips["f25"], clips["f25"], mode="lossless", validator="media-gates/1")
    assert _check(v2, "audio_duration") and v2.passed
    assert not _check(v1, "audio_duration") and not v1.passed
    assert v1.validator_version == "media-gates/1"
    v3 = compare(clips["f25"], clips["f25"], mode="lossless",
                 expected=Expected(audio_latent_hz=40.0))
    assert _check(v3, "audio_duration") and v3.passed


def test_short_audio_fails_duration(clips: dict[str, Path]) -> None:
    r = compare(clips["control"], clips["audio_short"], mode="lossy")
    assert not _check(r, "audio_coverage") and not r.passed
    h3 = compare(clips["control"], clips["audio_short"], mode="lossy",
                 expected=Expected(audio_latent_hz=40.0))
    assert not _check(h3, "audio_duration") and not h3.passed


BAD_REPORTS = [
    ("no_audio", "audio_stream"),
    ("wide", "resolution"),
    ("short", "frame_count"),
    ("nan_audio", "audio_finite"),
    ("vfr", "frame_rate_pts"),
]


@pytest.mark.parametrize("name,check", BAD_REPORTS, ids=[b[0] for b in BAD_REPORTS])
def test_bad_candidates_fail_structurally(clips: dict[str, Path], name: str, check: str) -> None:
    r = compare(clips["control"], clips[name], mode="lossy", expected_frames=24)
    assert not r.passed
    assert not _check(r, check)
    assert any(check in x for x in r.reasons)


def test_vfr_also_fails_timestamps(clips: dict[str, Path]) -> None:
    r = compare(clips["vfr"], clips["vfr"], mode="lossless")
    assert not _check(r, "timestamps")


def test_mismatched_resolution_computes_no_metric(clips: dict[str, Path]) -> None:
    r = compare(clips["control"], clips["wide"], mode="lossy")
    assert not any(m.name.startswith(("ssim", "psnr")) for m in r.metrics)
    assert any("video metrics not computed" in x for x in r.reasons)


def test_frame_count_failure_leaves_metrics_unjudged(clips: dict[str, Path]) -> None:
    r = compare(clips["control"], clips["short"], mode="lossy")
    ssim = _metric(r, "ssim_all")
    assert ssim.detail.get("not_judged") == "structural checks failed"


@pytest.mark.parametrize("name,msg", [
    ("truncated", "not a readable media container"),
    ("empty", "empty"),
    ("not_mp4", "not a readable media container"),
], ids=["truncated", "zero-length", "renamed-text"])
def test_unreadable_inputs_raise_clear_errors(clips: dict[str, Path], name: str, msg: str
                                              ) -> None:
    with pytest.raises(MediaInputError, match=msg) as ei:
        compare(clips["control"], clips[name], mode="lossy")
    assert name in str(ei.value)
    with pytest.raises(MediaInputError, match=msg):
        probe(clips[name])


def test_truncated_file_with_index_fails_structurally(clips: dict[str, Path]) -> None:
    """A truncated MP4 whose index survived (faststart) opens, and then fails the checks."""
    r = compare(clips["faststart"], clips["truncated_faststart"], mode="lossy",
                expected_frames=24)
    assert not r.passed
    failed = {c.name for c in r.structural if not c.passed}
    assert "frame_count" in failed or "video_decodes" in failed, failed
    assert any("header declares 24" in x for x in probe(clips["truncated_faststart"]).problems())


def test_missing_file_is_an_input_error(tmp_path: Path, clips: dict[str, Path]) -> None:
    with pytest.raises(MediaInputError, match="file not found"):
        compare(clips["control"], tmp_path / "nope.mp4", mode="lossy")


def test_probe_lists_problems(clips: dict[str, Path]) -> None:
    assert "no audio stream" in probe(clips["no_audio"]).problems()
    assert any("non-finite" in x for x in probe(clips["nan_audio"]).problems())
    assert any("variable frame rate" in x for x in probe(clips["vfr"]).problems())


@pytest.mark.parametrize("backend", ["numpy", "lavfi"])
def test_matches_ffmpeg_filters_on_synthetic_pairs(clips: dict[str, Path], ffmpeg: str,
                                                   backend: str) -> None:
    for a, b in (("control", "noisy"), ("control", "very_noisy"), ("odd", "odd_noisy")):
        r = compare(clips[a], clips[b], mode="lossless", ssim_backend=backend)  # type: ignore[arg-type]
        assert backend in _metric(r, "ssim_all").detail["backend"].replace("libavfilter",
                                                                           "lavfi")
        ff = ffmpeg_ssim_psnr(clips[a], clips[b])
        ours = {m.name: m.value for m in r.metrics}
        for k in ("ssim_y", "ssim_u", "ssim_v"):
            assert ours[k] == pytest.approx(ff[k], abs=1e-5), (a, b, k)
        assert ours["ssim_all"] == pytest.approx(ff["ssim_all"], abs=1e-5)
        for k in ("y", "u", "v"):
            assert ours[f"psnr_{k}_db"] == pytest.approx(ff[f"psnr_{k}"], abs=1e-5)
        psnr = _metric(r, "psnr_avg_db")
        assert psnr.value == pytest.approx(ff["psnr_avg"], abs=1e-5)
        assert psnr.detail["psnr_min_db"] == pytest.approx(ff["psnr_min"], abs=1e-5)
        assert psnr.detail["psnr_max_db"] == pytest.approx(ff["psnr_max"], abs=1e-5)


def test_memory_is_flat_in_clip_length(tmp_path: Path) -> None:
    """Peak Python/numpy allocation while comparing does not grow with the frame count."""
    peaks = []
    for frames in (24, 96):
        spec = replace(BASE, frames=frames, width=256, height=144, channels=0)
        a = make_clip(tmp_path / f"a{frames}.mp4", spec)
        b = make_clip(tmp_path / f"b{frames}.mp4", replace(spec, noise=4.0))
        tracemalloc.start()
        compare(a, b, mode="lossless", expected=None)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    assert peaks[1] < 1.5 * peaks[0], peaks


def test_progress_bar_and_frame_callback(clips: dict[str, Path]) -> None:
    seen: list[int] = []
    r = compare(clips["control"], clips["copy"], mode="lossless", progress=True,
                on_frame=seen.append)
    assert seen == list(range(24)) and r.passed


def test_report_writer_never_rewrites_another_validator(clips: dict[str, Path],
                                                        tmp_path: Path) -> None:
    r2 = compare(clips["f25"], clips["f25"], mode="lossless")
    r1 = compare(clips["f25"], clips["f25"], mode="lossless", validator="media-gates/1")
    out = tmp_path / "report.json"
    write_report(out, r1)
    frozen = out.read_bytes()
    with pytest.raises(MediaInputError, match="media-gates/1"):
        write_report(out, r2)
    assert out.read_bytes() == frozen
    write_report(out, r1)  # same version may be written again
    assert json.loads(out.read_text())["validator_version"] == "media-gates/1"
    junk = tmp_path / "junk.json"
    junk.write_text("{}")
    with pytest.raises(MediaInputError, match="not a media report"):
        write_report(junk, r2)


def test_bad_arguments(clips: dict[str, Path]) -> None:
    with pytest.raises(ValueError, match="mode"):
        compare(clips["control"], clips["copy"], mode="exact")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="frame_stride"):
        compare(clips["control"], clips["copy"], mode="lossy", frame_stride=0)
    with pytest.raises(ValueError, match="lpips_weights"):
        compare(clips["control"], clips["copy"], mode="lossy", lpips_sha256="0" * 64)
    with pytest.raises(MediaInputError, match="unknown device"):
        compare(clips["control"], clips["copy"], mode="lossy", device="tpu")


def test_synth_rejects_nothing_silently(tmp_path: Path) -> None:
    p = make_clip(tmp_path / "mono.mp4", ClipSpec(frames=4, width=64, height=64, channels=1))
    assert probe(p).audio.channels == 1  # type: ignore[union-attr]


def _assert_matches(ours: MediaReport, ff: dict[str, float], planes: tuple[str, ...]) -> None:
    vals = {m.name: m.value for m in ours.metrics}
    for k in planes:
        assert vals[f"ssim_{k}"] == pytest.approx(ff[f"ssim_{k}"], abs=1e-5), k


def test_simd_width_quirk(clips: dict[str, Path], ffmpeg: str) -> None:
    """Where (plane width >> 2) % 4 == 2, FFmpeg's x86 ``ssim_end_line`` drops the last valid
    window of each row and adds one built from stale buffer contents; its C code does not,
    and neither do our numpy backend nor PyAV's bundled libavfilter (FFmpeg 8).  PSNR is
    unaffected."""
    a, b = clips["simd_bug"], clips["simd_bug_noisy"]
    ref = compare(a, b, mode="lossless", ssim_backend="numpy")
    c_code = ffmpeg_ssim_psnr(a, b, c_code=True)
    _assert_matches(ref, c_code, ("y", "u", "v", "all"))
    simd = ffmpeg_ssim_psnr(a, b)
    assert _metric(ref, "psnr_avg_db").value == pytest.approx(simd["psnr_avg"], abs=1e-5)
    assert abs(_metric(ref, "ssim_y").value - simd["ssim_y"]) > 1e-4  # the quirk is real
    fast = compare(a, b, mode="lossless", ssim_backend="lavfi")
    _assert_matches(fast, c_code, ("y", "u", "v", "all"))
