"""``probe``: what the structural checks see in one media file.

The probe decodes the whole file (every video frame, all audio): a container header can
claim anything, so frame counts, timestamps and audio length are taken from the decode.
The same facts are gathered during ``compare``'s single streaming decode, so a comparison
never decodes a file twice.
"""

from __future__ import annotations

import hashlib
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
from pydantic import BaseModel, ConfigDict, Field

from evidence.media.audio import DecodedAudio, decode_audio
from evidence.media.decode import DecodeStats, open_container
from evidence.media.errors import MediaInputError


def decoder_build() -> str:
    """The decoder build in use, e.g. ``PyAV 18.1.0, libavcodec 62.28.102``; PCM hashes are
    comparable only between reports naming the same build."""
    ver = av.library_versions.get("libavcodec", ())
    return f"PyAV {av.__version__}, libavcodec {'.'.join(str(v) for v in ver)}"


def file_sha256(path: Path) -> str:
    """SHA-256 of a file's bytes, read in 1 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def steps_words(steps: dict[str, int]) -> str:
    """``pts_steps`` in words: ``512 (361 times), 1024 (once)``; ``none`` when empty."""
    if not steps:
        return "none"
    return ", ".join(f"{k} ({'once' if n == 1 else f'{n} times'})" for k, n in steps.items())


def _frac(x: Fraction | None) -> str | None:
    return None if x is None else f"{x.numerator}/{x.denominator}"


class VideoInfo(BaseModel):
    """The first video stream: declared header values and what the decode saw."""

    model_config = ConfigDict(extra="forbid")

    codec: str
    profile: str | None = None
    width: int
    height: int
    pix_fmt: str | None = Field(description="Declared pixel format.")
    decoded_pix_fmts: list[str] = Field(default_factory=list)
    decoded_sizes: list[str] = Field(default_factory=list, description="'WxH' seen decoded.")
    time_base: str | None = None
    avg_frame_rate: str | None = Field(default=None, description="Declared average rate.")
    base_frame_rate: str | None = Field(default=None, description="Declared r_frame_rate.")
    declared_frames: int | None = None
    decoded_frames: int
    first_pts: int | None = None
    pts_steps: dict[str, int] = Field(default_factory=dict,
                                      description="pts step (time_base units) -> count.")
    frame_rate_from_pts: str | None = Field(
        default=None, description="1 / (step * time_base) when every step is equal.")
    non_increasing_pts: int = 0
    missing_pts: int = 0
    declared_duration_s: float | None = None
    decode_error: str | None = None


class AudioInfo(BaseModel):
    """The first audio stream: declared header values and what the decode saw."""

    model_config = ConfigDict(extra="forbid")

    codec: str
    sample_rate: int
    channels: int
    layout: str
    frame_size: int | None = None
    decoded_format: str | None = None
    declared_duration_s: float | None = None
    decoded_samples: int
    decoded_duration_s: float
    nonfinite_samples: int = 0
    pcm_sha256: str = Field(description="SHA-256 of the decoded float32 planar PCM (this "
                            "decoder build only).")
    decode_error: str | None = None


class ProbeResult(BaseModel):
    """What the structural checks see in one file (``campaign-bot media probe FILE``)."""

    model_config = ConfigDict(extra="forbid")

    path: str
    size_bytes: int
    sha256: str
    container: str
    duration_s: float | None = None
    decoder_build: str
    video: VideoInfo | None = None
    audio: AudioInfo | None = None

    def problems(self) -> list[str]:
        """Problems visible without any expectation: no video or audio stream, decode
        errors, a decoded frame count that differs from the header's, non-finite audio,
        missing or non-increasing timestamps, a variable pts step.
        """
        out: list[str] = []
        v, a = self.video, self.audio
        if v is None:
            out.append("no video stream")
        else:
            if v.decode_error:
                out.append(v.decode_error)
            if v.decoded_frames == 0:
                out.append("no video frame decoded")
            elif v.declared_frames and v.declared_frames != v.decoded_frames:
                out.append(f"decoded {v.decoded_frames} video frames, the header declares "
                           f"{v.declared_frames}")
            if v.missing_pts:
                out.append(f"{v.missing_pts} video frame(s) without a timestamp")
            if v.non_increasing_pts:
                out.append(f"{v.non_increasing_pts} video timestamp(s) not increasing")
            if len(v.pts_steps) > 1:
                out.append(f"variable frame rate: pts steps {steps_words(v.pts_steps)}")
        if a is None:
            out.append("no audio stream")
        else:
            if a.decode_error:
                out.append(a.decode_error)
            if a.nonfinite_samples:
                out.append(f"{a.nonfinite_samples} non-finite audio sample(s)")
            if a.decoded_samples == 0:
                out.append("no audio sample decoded")
        return out


def read_header(path: Path) -> dict[str, Any]:
    """Container-level facts of ``path`` without decoding (cheap).

    Raises :class:`MediaInputError` when the file cannot be opened as a media container.
    """
    with open_container(path) as c:
        h: dict[str, Any] = {
            "container": c.format.name,
            "duration_s": (c.duration / 1_000_000) if c.duration else None,
            "video": None,
        }
        if c.streams.video:
            vs = c.streams.video[0]
            cc = vs.codec_context
            dur = None
            if vs.duration is not None and vs.time_base is not None:
                dur = float(vs.duration * vs.time_base)
            h["video"] = {
                "codec": cc.name,
                "profile": cc.profile,
                "width": cc.width,
                "height": cc.height,
                "pix_fmt": cc.pix_fmt,
                "time_base": vs.time_base,
                "avg_rate": vs.average_rate,
                "base_rate": vs.base_rate,
                "frames": vs.frames or None,
                "duration_s": dur,
            }
        return h


def build_probe(path: Path, header: dict[str, Any], stats: DecodeStats | None,
                audio: DecodedAudio | None, sha256: str | None = None) -> ProbeResult:
    """Assemble a :class:`ProbeResult` from a header, decode statistics and decoded audio."""
    path = Path(path)
    video = None
    hv = header.get("video")
    if hv is not None and stats is not None:
        tb = stats.time_base or hv["time_base"]
        rate_from_pts = None
        if len(stats.pts_steps) == 1 and tb:
            (step,) = stats.pts_steps
            if step > 0:
                rate_from_pts = _frac(1 / (Fraction(step) * tb))
        video = VideoInfo(
            codec=hv["codec"], profile=hv["profile"], width=hv["width"], height=hv["height"],
            pix_fmt=hv["pix_fmt"], decoded_pix_fmts=sorted(stats.pix_fmts),
            decoded_sizes=[f"{w}x{h}" for w, h in sorted(stats.sizes)],
            time_base=_frac(tb), avg_frame_rate=_frac(hv["avg_rate"]),
            base_frame_rate=_frac(hv["base_rate"]), declared_frames=hv["frames"],
            decoded_frames=stats.frames, first_pts=stats.first_pts,
            pts_steps={str(k): v for k, v in sorted(stats.pts_steps.items())},
            frame_rate_from_pts=rate_from_pts, non_increasing_pts=stats.non_increasing,
            missing_pts=stats.missing_pts, declared_duration_s=hv["duration_s"],
            decode_error=stats.error,
        )
    ainfo = None
    if audio is not None:
        ainfo = AudioInfo(
            codec=audio.codec, sample_rate=audio.sample_rate, channels=audio.channels,
            layout=audio.layout, frame_size=audio.frame_size,
            decoded_format=audio.source_format or None,
            declared_duration_s=audio.declared_duration_s,
            decoded_samples=int(audio.samples.shape[1]), decoded_duration_s=audio.duration_s,
            nonfinite_samples=audio.nonfinite, pcm_sha256=audio.pcm_sha256,
            decode_error=audio.error,
        )
    return ProbeResult(
        path=str(path), size_bytes=path.stat().st_size,
        sha256=sha256 or file_sha256(path), container=header["container"],
        duration_s=header["duration_s"], decoder_build=decoder_build(), video=video,
        audio=ainfo,
    )


def decode_video_stats(path: Path) -> DecodeStats:
    """Decode every frame of the first video stream and gather :class:`DecodeStats`.

    Raises :class:`MediaInputError` when there is no video stream.
    """
    stats = DecodeStats()
    with open_container(path) as c:
        if not c.streams.video:
            raise MediaInputError(path, "has no video stream")
        vs = c.streams.video[0]
        vs.thread_type = "AUTO"
        stats.time_base = vs.time_base
        try:
            for frame in c.decode(vs):
                stats.see(frame)
        except (av.FFmpegError, ValueError) as exc:
            stats.error = f"decode error after {stats.frames} frames: {exc}"
    return stats


def probe(path: Path) -> ProbeResult:
    """Decode ``path`` fully and report what the structural checks see.

    Returns a :class:`ProbeResult` (its :meth:`~ProbeResult.problems` lists what is wrong
    without any expectation).  Raises :class:`MediaInputError` when the file is missing,
    empty or not a readable media container.  A file without a video stream is probed too
    (``video`` is None).
    """
    path = Path(path)
    header = read_header(path)
    stats = decode_video_stats(path) if header["video"] is not None else None
    audio = decode_audio(path)
    return build_probe(path, header, stats, audio)
