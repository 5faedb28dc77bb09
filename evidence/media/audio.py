"""Audio: decode to planar float32 at the native rate, and the two audio gates.

Metrics (thresholds come from the campaign scope; the defaults and their source are in
:mod:`evidence.media.gates`):

* **multi-resolution spectral cosine**: for each resolution of auraloss's
  ``MultiResolutionSTFTLoss`` defaults (FFT 1024/2048/512, hop 120/240/50, window
  600/1200/240, Hann) and each channel, the cosine similarity of the two *linear* STFT
  magnitude arrays (flattened over frames and bins); the metric is the mean over resolutions
  and channels.  STFT as ``torch.stft(center=True, pad_mode="reflect")`` computes it: the
  periodic Hann window of ``win_length`` is zero-padded to ``n_fft`` in the middle, frames
  are ``1 + n // hop``.
* **RMS ratio**: ``RMS(candidate) / RMS(control)`` over all samples of all channels.

Edge cases, by definition here:

* both signals silent (zero norm): cosine 1.0 and RMS ratio 1.0 (identical silence);
* exactly one silent: cosine 0.0 (fails any positive gate); RMS ratio 0.0 when the
  candidate is silent, ``inf`` when the control is (both outside [0.5, 2.0]);
* the RMS range gate is inclusive at both ends: 0.5 and 2.0 pass;
* different sample counts: both metrics use the common length (the structural checks judge
  the lengths); different channel counts or sample rates: metrics are not computed;
* non-finite samples: metrics are not computed (a structural failure says why);
* a signal shorter than ``n_fft // 2 + 1`` samples cannot be reflect-padded: that
  resolution is skipped and the report says so.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

from evidence.media.decode import open_container

AURALOSS_RESOLUTIONS: tuple[tuple[int, int, int], ...] = (
    (1024, 120, 600),
    (2048, 240, 1200),
    (512, 50, 240),
)
"""(n_fft, hop, win_length): auraloss ``MultiResolutionSTFTLoss`` defaults (auraloss 0.4,
``auraloss/freq.py``: fft_sizes=[1024, 2048, 512], hop_sizes=[120, 240, 50],
win_lengths=[600, 1200, 240], window="hann_window")."""

AAC_FRAME_SAMPLES = 1024
"""Samples per AAC-LC frame: the most padding a decoded AAC stream may carry."""


@dataclass
class DecodedAudio:
    """A decoded audio stream: ``samples`` float32 of shape ``(channels, n)`` at
    ``sample_rate`` Hz, plus what the container declared about it."""

    samples: np.ndarray
    sample_rate: int
    channels: int
    layout: str
    codec: str
    declared_duration_s: float | None
    frame_size: int | None
    start_pts_s: float | None
    pcm_sha256: str
    source_format: str
    nonfinite: int = 0
    error: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def duration_s(self) -> float:
        """Decoded length in seconds."""
        return self.samples.shape[1] / self.sample_rate if self.sample_rate else 0.0


def decode_audio(path: Path) -> DecodedAudio | None:
    """Decode the first audio stream of ``path`` to planar float32 at its native rate.

    Returns None when the file has no audio stream.  Raises
    :class:`~evidence.media.errors.MediaInputError` for an unreadable file.  A decode error
    part-way is kept in ``error`` with what was decoded so far.  ``pcm_sha256`` hashes the
    float32 little-endian planar samples, channel after channel: it identifies the PCM of
    *this* decoder build only (AAC decoders differ between FFmpeg builds).
    """
    with open_container(path) as c:
        if not c.streams.audio:
            return None
        st = c.streams.audio[0]
        cc = st.codec_context
        rate = int(cc.sample_rate or st.rate or 0)
        layout = cc.layout.name if cc.layout is not None else ""
        channels = int(cc.channels)
        declared = None
        if st.duration is not None and st.time_base is not None:
            declared = float(st.duration * st.time_base)
        start = None
        if st.start_time is not None and st.time_base is not None:
            start = float(st.start_time * st.time_base)
        chunks: list[np.ndarray] = []
        resampler = None
        src_fmt = ""
        error = None
        try:
            for frame in c.decode(st):
                src_fmt = frame.format.name
                if frame.format.name != "fltp":
                    if resampler is None:
                        resampler = av.AudioResampler(format="fltp", layout=frame.layout.name,
                                                      rate=frame.sample_rate)
                    for rf in resampler.resample(frame):
                        chunks.append(rf.to_ndarray().astype(np.float32, copy=False))
                else:
                    chunks.append(frame.to_ndarray())
            if resampler is not None:
                for rf in resampler.resample(None):
                    chunks.append(rf.to_ndarray().astype(np.float32, copy=False))
        except (av.FFmpegError, ValueError) as exc:
            error = f"audio decode error: {exc}"
        if chunks:
            samples = np.ascontiguousarray(np.concatenate(chunks, axis=1), dtype=np.float32)
        else:
            samples = np.zeros((channels, 0), np.float32)
        h = hashlib.sha256()
        for ch in samples:
            h.update(ch.astype("<f4", copy=False).tobytes())
        nonfinite = int(samples.size - np.count_nonzero(np.isfinite(samples)))
        return DecodedAudio(
            samples=samples, sample_rate=rate, channels=channels, layout=layout,
            codec=cc.name, declared_duration_s=declared, frame_size=cc.frame_size or None,
            start_pts_s=start, pcm_sha256=h.hexdigest(), source_format=src_fmt,
            nonfinite=nonfinite, error=error,
        )


def _hann_periodic(n: int) -> np.ndarray:
    k = np.arange(n, dtype=np.float64)
    return 0.5 - 0.5 * np.cos(2 * np.pi * k / n)


def stft_magnitude(x: np.ndarray, n_fft: int, hop: int, win_length: int) -> np.ndarray:
    """Linear STFT magnitude of a 1-D signal, as ``torch.stft(x, n_fft, hop, win_length,
    hann_window(win_length), center=True, pad_mode="reflect").abs()``, transposed.

    Returns float32 of shape ``(1 + len(x) // hop, n_fft // 2 + 1)`` (frames, bins).
    Raises ``ValueError`` when ``len(x) <= n_fft // 2`` (reflect padding impossible).
    """
    import scipy.fft

    n = x.shape[0]
    pad = n_fft // 2
    if n <= pad:
        raise ValueError(f"signal of {n} samples is too short for n_fft={n_fft}")
    xp = np.pad(x.astype(np.float32, copy=False), pad, mode="reflect")
    win = np.zeros(n_fft, np.float32)
    left = (n_fft - win_length) // 2
    win[left : left + win_length] = _hann_periodic(win_length)
    frames = 1 + n // hop
    idx = np.lib.stride_tricks.sliding_window_view(xp, n_fft)[::hop][:frames]
    spec = scipy.fft.rfft(idx * win, axis=1, workers=-1)
    return np.abs(spec)


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.float64, copy=False)  # accumulate in double precision
    b = b.astype(np.float64, copy=False)
    na = math.sqrt(float(np.vdot(a, a)))
    nb = math.sqrt(float(np.vdot(b, b)))
    if na == 0.0 and nb == 0.0:
        return 1.0
    if na == 0.0 or nb == 0.0:
        return 0.0
    # magnitudes are non-negative, so the cosine lies in [0, 1]; clamp rounding excess
    return min(1.0, max(0.0, float(np.vdot(a, b)) / (na * nb)))


def spectral_cosine(control: np.ndarray, candidate: np.ndarray,
                    resolutions: tuple[tuple[int, int, int], ...] = AURALOSS_RESOLUTIONS
                    ) -> tuple[float, dict[str, Any]]:
    """Multi-resolution spectral cosine of two ``(channels, n)`` signals (see module doc).

    Returns ``(value, detail)`` where ``detail`` holds the per-resolution, per-channel
    cosines and any skipped resolution.  Raises ``ValueError`` on a channel-count mismatch
    or when every resolution had to be skipped.
    """
    if control.shape[0] != candidate.shape[0]:
        raise ValueError(f"channel counts differ: {control.shape[0]} and {candidate.shape[0]}")
    n = min(control.shape[1], candidate.shape[1])
    vals: list[float] = []
    per: dict[str, list[float]] = {}
    skipped: list[str] = []
    for n_fft, hop, win in resolutions:
        key = f"fft{n_fft}_hop{hop}_win{win}"
        if n <= n_fft // 2:
            skipped.append(key)
            continue
        per[key] = []
        for ch in range(control.shape[0]):
            c = _cosine(stft_magnitude(control[ch, :n], n_fft, hop, win),
                        stft_magnitude(candidate[ch, :n], n_fft, hop, win))
            per[key].append(c)
            vals.append(c)
    if not vals:
        raise ValueError(f"signal of {n} samples is too short for every STFT resolution")
    detail: dict[str, Any] = {"per_resolution_channel": per, "samples_compared": n}
    if skipped:
        detail["skipped_resolutions"] = skipped
    return float(np.mean(vals)), detail


def rms_ratio(control: np.ndarray, candidate: np.ndarray) -> float:
    """``RMS(candidate) / RMS(control)`` over all samples (common length); 1.0 when both are
    silent, ``inf`` when only the control is."""
    n = min(control.shape[-1], candidate.shape[-1])
    rc = math.sqrt(float(np.mean(np.square(control[..., :n], dtype=np.float64)))) if n else 0.0
    rk = math.sqrt(float(np.mean(np.square(candidate[..., :n], dtype=np.float64)))) if n else 0.0
    if rc == 0.0:
        return 1.0 if rk == 0.0 else math.inf
    return rk / rc


def expected_audio_seconds_v1(frames: int, fps: Fraction | float) -> float:
    """Validator v1's audio rule: ``frames / fps`` seconds (362 frames: 15.083 s)."""
    return frames / float(fps)


def expected_audio_seconds_v2(frames: int, fps: Fraction | float, latent_hz: float = 40.0
                              ) -> float:
    """Validator v2's audio rule: ``round(frames / fps * latent_hz) / latent_hz`` seconds.

    Source: vLLM-Omni 0.30.0 MiniMax-H3 ``time_request.py`` (40 Hz audio latents); 362 frames
    at 24 fps carry 15.075 s of audio.
    """
    return round(frames / float(fps) * latent_hz) / latent_hz
