"""Structural checks, versioned.

A media report names the validator version that produced it (``media-gates/N``).  A newer
version writes a new report; an older version's report is never rewritten (frozen
receipts are never edited, corrections come as new versioned validators: campaign #293 frozen
scope, "add a new validator version without changing the old frozen bundle").

Versions:

* ``media-gates/1``: the declared audio duration must equal the video length
  ``frames / fps`` seconds within 1 ms (362 frames at 24 fps: 15.083 s).  Kept so that
  frozen v1 results can be reproduced; it wrongly fails correct H3 outputs.
* ``media-gates/2`` (current): expected audio length follows the pinned model's 40 Hz
  audio-latent rule, ``round(frames / fps * 40) / 40`` seconds (vLLM-Omni 0.30.0 MiniMax-H3
  ``time_request.py``): 362 frames carry 15.075 s.  The rate comes from the scope's
  ``audio_latent_rate_hz`` gate when given.

Audio length passes when the stream's declared duration is within one sample of the
expected length, or when the decoded length exceeds the expected one by less than one AAC
frame (1024 samples) of padding.

Every check compares control and candidate with each other *and* with the expectation, so
one row shows both files.  Checks run before any metric: FFmpeg's own filters happily score
videos of different lengths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

from evidence.media.audio import (
    AAC_FRAME_SAMPLES,
    expected_audio_seconds_v1,
    expected_audio_seconds_v2,
)
from evidence.media.probe import AudioInfo, ProbeResult, steps_words
from evidence.models import MediaCheck

CURRENT_VALIDATOR = "media-gates/2"
EXPECTED_PIX_FMT = "yuv420p"
EXPECTED_AUDIO_CODEC = "aac"


@dataclass(frozen=True)
class Expected:
    """What a track's outputs must be; None means "as the control has it".

    ``frames``: decoded video frames; ``width``/``height`` pixels; ``fps`` frames per second;
    ``sample_rate`` Hz; ``channels``; ``audio``: whether an audio stream is required;
    ``audio_latent_hz``: the v2 audio rule's latent rate (40 for MiniMax-H3).
    """

    frames: int | None = None
    width: int | None = None
    height: int | None = None
    fps: Fraction | None = None
    sample_rate: int | None = None
    channels: int | None = None
    audio: bool = True
    audio_latent_hz: float = 40.0


@dataclass(frozen=True)
class Validator:
    """One validator version: its name, its expected-audio-length rule, and whether decoded
    AAC padding (< 1024 samples) is accepted in place of a matching declared duration."""

    version: str
    audio_rule: str
    expected_audio_s: Callable[[int, Fraction, float], float]
    declared_tolerance_s: float | None = None
    allow_decoded_padding: bool = True


VALIDATORS: dict[str, Validator] = {
    "media-gates/1": Validator(
        "media-gates/1", "declared audio duration = frames / fps seconds (within 1 ms)",
        lambda frames, fps, hz: expected_audio_seconds_v1(frames, fps),
        declared_tolerance_s=0.001, allow_decoded_padding=False),
    "media-gates/2": Validator(
        "media-gates/2", "round(frames / fps * latent_hz) / latent_hz seconds",
        expected_audio_seconds_v2),
}


def get_validator(version: str) -> Validator:
    """The validator called ``version``; raises ``KeyError`` naming the known versions."""
    try:
        return VALIDATORS[version]
    except KeyError:
        raise KeyError(f"unknown validator {version!r}; known: {', '.join(VALIDATORS)}") from None


def _both(c: object, k: object, missing: str = "not declared") -> str:
    """``control=C, candidate=K``; a None side reads ``missing``."""
    def w(v: object) -> str:
        return missing if v is None else str(v)
    return f"control={w(c)}, candidate={w(k)}"


def _layout(a: AudioInfo) -> str:
    return f"{a.channels} ({a.layout})" if a.layout else str(a.channels)


def _parse_rate(s: str | None) -> Fraction | None:
    if not s:
        return None
    try:
        return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None


def structural_checks(control: ProbeResult, candidate: ProbeResult, expected: Expected,
                      validator: Validator) -> list[MediaCheck]:
    """Run every structural check on a control/candidate pair; returns one
    :class:`MediaCheck` per property, failing when either side misses the expectation or
    the two sides disagree."""
    checks: list[MediaCheck] = []

    def add(name: str, ok: bool, exp: object, act: str, detail: str | None = None) -> None:
        checks.append(MediaCheck(name=name, passed=bool(ok),
                                 expected=None if exp is None else str(exp), actual=act,
                                 detail=detail))

    cv, kv = control.video, candidate.video
    add("video_stream", cv is not None and kv is not None, "present",
        _both("present" if cv else "missing", "present" if kv else "missing"))
    if cv is not None and kv is not None:
        errs = [e for e in (cv.decode_error, kv.decode_error) if e]
        add("video_decodes", not errs and cv.decoded_frames > 0 and kv.decoded_frames > 0,
            "every packet decodes", _both(cv.decode_error or "ok", kv.decode_error or "ok"))
        exp_frames = expected.frames if expected.frames is not None else cv.decoded_frames
        add("frame_count", cv.decoded_frames == exp_frames == kv.decoded_frames, exp_frames,
            _both(cv.decoded_frames, kv.decoded_frames),
            f"declared: {_both(cv.declared_frames, kv.declared_frames)}")
        exp_w = expected.width if expected.width is not None else cv.width
        exp_h = expected.height if expected.height is not None else cv.height
        sizes_c = set(cv.decoded_sizes) | {f"{cv.width}x{cv.height}"}
        sizes_k = set(kv.decoded_sizes) | {f"{kv.width}x{kv.height}"}
        want = f"{exp_w}x{exp_h}"
        add("resolution", sizes_c == {want} == sizes_k, want,
            _both(",".join(sorted(sizes_c)), ",".join(sorted(sizes_k))))
        fmts_c = set(cv.decoded_pix_fmts) | {cv.pix_fmt}
        fmts_k = set(kv.decoded_pix_fmts) | {kv.pix_fmt}
        add("pixel_format", fmts_c == {EXPECTED_PIX_FMT} == fmts_k, EXPECTED_PIX_FMT,
            _both(",".join(sorted(str(f) for f in fmts_c)),
                  ",".join(sorted(str(f) for f in fmts_k))),
            "SSIM/PSNR thresholds are defined on 8-bit YUV 4:2:0 planes")
        exp_fps = expected.fps if expected.fps is not None else _parse_rate(cv.avg_frame_rate)
        rc, rk = _parse_rate(cv.avg_frame_rate), _parse_rate(kv.avg_frame_rate)
        add("frame_rate_declared", exp_fps is not None and rc == exp_fps == rk,
            None if exp_fps is None else str(exp_fps),
            _both(cv.avg_frame_rate, kv.avg_frame_rate))
        pc, pk = _parse_rate(cv.frame_rate_from_pts), _parse_rate(kv.frame_rate_from_pts)
        add("frame_rate_pts", exp_fps is not None and pc == exp_fps == pk,
            None if exp_fps is None else str(exp_fps),
            _both(cv.frame_rate_from_pts or f"variable (steps {steps_words(cv.pts_steps)})",
                  kv.frame_rate_from_pts or f"variable (steps {steps_words(kv.pts_steps)})"),
            "1 / (pts step x time_base), every step equal")
        ts_ok = all(v.missing_pts == 0 and v.non_increasing_pts == 0 and len(v.pts_steps) <= 1
                    for v in (cv, kv))
        add("timestamps", ts_ok, "present, increasing, constant step",
            _both(f"missing {cv.missing_pts}, non-increasing {cv.non_increasing_pts}, "
                  f"steps {steps_words(cv.pts_steps)}",
                  f"missing {kv.missing_pts}, non-increasing {kv.non_increasing_pts}, "
                  f"steps {steps_words(kv.pts_steps)}"))
    ca, ka = control.audio, candidate.audio
    if not expected.audio and ca is None and ka is None:
        return checks
    add("audio_stream", ca is not None and ka is not None, "present",
        _both("present" if ca else "missing", "present" if ka else "missing"))
    if ca is None or ka is None:
        return checks
    add("audio_decodes", not ca.decode_error and not ka.decode_error and
        ca.decoded_samples > 0 and ka.decoded_samples > 0, "every packet decodes",
        _both(ca.decode_error or "ok", ka.decode_error or "ok"))
    add("audio_codec", ca.codec == EXPECTED_AUDIO_CODEC == ka.codec, EXPECTED_AUDIO_CODEC,
        _both(ca.codec, ka.codec))
    exp_rate = expected.sample_rate if expected.sample_rate is not None else ca.sample_rate
    add("audio_sample_rate", ca.sample_rate == exp_rate == ka.sample_rate, exp_rate,
        _both(ca.sample_rate, ka.sample_rate))
    exp_ch = expected.channels if expected.channels is not None else ca.channels
    add("audio_channels", ca.channels == exp_ch == ka.channels, exp_ch,
        _both(_layout(ca), _layout(ka)))
    add("audio_finite", ca.nonfinite_samples == 0 and ka.nonfinite_samples == 0,
        "0 non-finite samples", _both(ca.nonfinite_samples, ka.nonfinite_samples))
    # expected audio length
    frames = expected.frames
    if frames is None and cv is not None:
        frames = cv.decoded_frames
    fps = expected.fps
    if fps is None and cv is not None:
        fps = _parse_rate(cv.avg_frame_rate)
    if frames is None or not fps or not exp_rate:
        add("audio_duration", False, "known frame count and rate",
            "cannot derive the expected audio length", validator.audio_rule)
        return checks
    exp_s = validator.expected_audio_s(frames, fps, expected.audio_latent_hz)
    exp_n = round(exp_s * exp_rate)

    def duration_ok(a: object) -> tuple[bool, str]:
        assert hasattr(a, "decoded_samples")
        dec = a.decoded_samples  # type: ignore[attr-defined]
        decl = a.declared_duration_s  # type: ignore[attr-defined]
        tol = validator.declared_tolerance_s
        tol = 1.0 / exp_rate if tol is None else tol
        decl_ok = decl is not None and abs(decl - exp_s) <= tol
        pad = dec - exp_n
        pad_ok = validator.allow_decoded_padding and 0 <= pad < AAC_FRAME_SAMPLES
        said = "no declared duration" if decl is None else f"declared {round(decl, 6)} s"
        txt = f"{said}, decoded {dec} samples ({pad:+d} vs expected)"
        return decl_ok or pad_ok, txt

    okc, txtc = duration_ok(ca)
    okk, txtk = duration_ok(ka)
    rule = f"{validator.version}: {validator.audio_rule}"
    if validator.allow_decoded_padding:
        rule += f"; decoded padding < {AAC_FRAME_SAMPLES} samples allowed"
    add("audio_duration", okc and okk, f"{exp_s:g} s ({exp_n} samples)", _both(txtc, txtk),
        rule)
    return checks
