"""Synthetic H.264 + AAC clips made with PyAV, for tests and benchmarks.

The clips look like the outputs the gates judge (yuv420p H.264, AAC audio, a fixed frame
rate) but are small and deterministic: a moving colour gradient with textured noise, and a
stereo tone.  ``perturb`` makes a *candidate* of the same clip: the same scene with a little
added noise (lossy) or a different encoder setting, so metrics land in a realistic range.

Nothing here is used to judge anything; it only makes inputs.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


@dataclass(frozen=True)
class ClipSpec:
    """What to generate.

    ``frames`` video frames of ``width`` x ``height`` at ``fps``; audio of
    ``audio_seconds`` (None: ``round(frames / fps * 40) / 40``, the v2 audio rule) at
    ``sample_rate`` Hz with ``channels`` channels (0 = no audio stream).  ``noise`` is the
    standard deviation (8-bit levels) of extra noise added to every frame (the candidate's
    perturbation); ``crf`` the x264 constant rate factor; ``seed`` fixes the texture.
    ``audio_gain`` scales the tone; ``nan_audio`` writes NaN samples as float PCM (AAC's
    encoder refuses NaN; for the bad-input tests); ``vfr`` gives every third frame a
    doubled pts step.  ``faststart`` writes the index (moov) before the media data, so a
    truncated copy still opens.
    """

    frames: int = 24
    width: int = 128
    height: int = 96
    fps: int = 24
    audio_seconds: float | None = None
    sample_rate: int = 32000
    channels: int = 2
    noise: float = 0.0
    crf: int = 18
    seed: int = 0
    audio_gain: float = 0.25
    nan_audio: bool = False
    vfr: bool = False
    preset: str = "ultrafast"
    faststart: bool = False


def _frame_image(i: int, spec: ClipSpec, texture: np.ndarray,
                 noise_bank: list[np.ndarray] | None) -> np.ndarray:
    h, w = spec.height, spec.width
    y = np.arange(h, dtype=np.float32)[:, None]
    x = np.arange(w, dtype=np.float32)[None, :]
    t = float(i)
    r = 128 + 100 * np.sin((x + 3 * t) / 23.0) * np.cos(y / 31.0)
    g = 128 + 100 * np.sin((y - 2 * t) / 17.0) + 0 * x
    b = 128 + 80 * np.cos((x + y + 5 * t) / 41.0)
    img = np.stack([r, g, b], axis=-1) + texture
    if noise_bank is not None:
        img = img + noise_bank[i % len(noise_bank)]
    return np.clip(img, 0, 255).astype(np.uint8)


def expected_audio_seconds(frames: int, fps: int = 24, latent_hz: float = 40.0) -> float:  # noqa: D401
    """The v2 audio rule: ``round(frames / fps * latent_hz) / latent_hz`` seconds.

    Source: vLLM-Omni 0.30.0 MiniMax-H3 ``time_request.py`` (40 Hz audio latents), e.g. 362
    frames at 24 fps carry 15.075 s of audio.
    """
    return round(frames / fps * latent_hz) / latent_hz


def make_clip(path: Path, spec: ClipSpec = ClipSpec()) -> Path:
    """Write an MP4 (H.264 yuv420p + AAC) described by ``spec`` to ``path``; returns ``path``.

    Raises ``av.FFmpegError`` if the encoders are missing from the PyAV build.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tex_rng = np.random.default_rng(spec.seed)
    texture = tex_rng.normal(0.0, 12.0, (spec.height, spec.width, 3)).astype(np.float32)
    noise_bank = None
    if spec.noise > 0:
        # a bank of 7 noise fields, cycled: cheap to make, and no frame repeats its neighbour
        nrng = np.random.default_rng(spec.seed + 1000)
        noise_bank = [nrng.normal(0.0, spec.noise, (spec.height, spec.width, 3))
                      .astype(np.float32) for _ in range(7)]
    opts = {"movflags": "faststart"} if spec.faststart else {}
    with av.open(str(path), "w", format="mp4", options=opts) as out:
        v = out.add_stream("libx264", rate=spec.fps)
        v.width, v.height, v.pix_fmt = spec.width, spec.height, "yuv420p"
        v.options = {"crf": str(spec.crf), "preset": spec.preset}
        v.codec_context.time_base = Fraction(1, spec.fps * (2 if spec.vfr else 1))
        a = None
        if spec.channels:
            # AAC's encoder refuses NaN input, so the NaN-audio clip stores float PCM instead
            a = out.add_stream("pcm_f32le" if spec.nan_audio else "aac", rate=spec.sample_rate)
            a.codec_context.layout = "stereo" if spec.channels == 2 else (
                "mono" if spec.channels == 1 else f"{spec.channels}c")
        pts = 0
        for i in range(spec.frames):
            frame = av.VideoFrame.from_ndarray(_frame_image(i, spec, texture, noise_bank),
                                               format="rgb24").reformat(format="yuv420p")
            if spec.vfr:
                frame.pts = pts
                pts += 4 if i % 3 == 2 else 2
                frame.time_base = Fraction(1, spec.fps * 2)
            for pkt in v.encode(frame):
                out.mux(pkt)
        for pkt in v.encode(None):
            out.mux(pkt)
        if a is not None:
            secs = spec.audio_seconds
            if secs is None:
                secs = expected_audio_seconds(spec.frames, spec.fps)
            n = int(round(secs * spec.sample_rate))
            t = np.arange(n, dtype=np.float64) / spec.sample_rate
            chans = [spec.audio_gain * np.sin(2 * np.pi * (220.0 * (c + 1)) * t
                                              + 0.3 * np.sin(2 * np.pi * 3 * t))
                     for c in range(spec.channels)]
            pcm = np.stack(chans).astype(np.float32)
            if spec.nan_audio:
                pcm[:, n // 3 : n // 3 + 4096] = np.nan
            step = 1024
            for s in range(0, n, step):
                chunk = np.ascontiguousarray(pcm[:, s : s + step])
                if spec.nan_audio:  # packed float for the PCM encoder
                    af = av.AudioFrame.from_ndarray(np.ascontiguousarray(chunk.T).reshape(1, -1),
                                                    format="flt",
                                                    layout=a.codec_context.layout.name)
                else:
                    af = av.AudioFrame.from_ndarray(chunk, format="fltp",
                                                    layout=a.codec_context.layout.name)
                af.sample_rate = spec.sample_rate
                af.pts = s
                af.time_base = Fraction(1, spec.sample_rate)
                for pkt in a.encode(af):
                    out.mux(pkt)
            for pkt in a.encode(None):
                out.mux(pkt)
    return path
