"""Audio coverage on decoded samples: how much real audio a file carries, and whether it
covers the video.

An AAC or MP3 encoder works in whole frames (1024 samples for AAC-LC, 1152 for MP3), so the
decoder hands back the last frame whole: up to one frame of padding after the real audio.
The container says how long the real audio is (the MP4 sample table and edit list give the
stream duration), and FFmpeg reports it as the stream's duration.  The *valid* samples are
therefore the decoded samples trimmed to the declared stream duration; padding never counts
as audio.  (Measured with PyAV's AAC encoder at 32 kHz stereo: 29,600 samples of audio
decode to 29,696 samples, and the stream declares 0.925 s = 29,600 samples.)

Two rules use the valid samples:

* :func:`coverage_shortfall_s`: the generic rule (any model): the audio must not end before
  the video by more than one codec frame.  Audio that runs past the video is allowed: players
  stop at the end of the video.
* the model-specific exact rule in :mod:`evidence.media.validators` (``media-gates/3`` with a
  named ``audio_latent_rate_hz``): the valid samples must equal the expected count exactly.
"""

from __future__ import annotations

from fractions import Fraction

from evidence.media.audio import AAC_FRAME_SAMPLES


def valid_samples(decoded: int, declared_s: float | None, rate: int) -> int:
    """Decoded samples that are real audio: ``decoded`` trimmed to the declared stream
    duration ``declared_s`` (seconds) at ``rate`` Hz; ``decoded`` itself when the container
    declares no duration.  Never more than ``decoded`` (a header claiming more audio than
    decodes gets no credit for it)."""
    if declared_s is None or rate <= 0 or declared_s < 0:
        return decoded
    return min(decoded, round(declared_s * rate))


def codec_frame_samples(frame_size: int | None) -> int:
    """Samples in one codec frame: the stream's frame size when known (AAC-LC 1024, MP3
    1152), else 1024 (AAC-LC, the codec the gates expect)."""
    return frame_size if frame_size and frame_size > 0 else AAC_FRAME_SAMPLES


def video_span_s(frames: int, fps: Fraction | None, start_s: float | None = None) -> float | None:
    """End of the video in seconds: ``start_s + frames / fps``; None without a frame rate."""
    if not fps or frames < 0:
        return None
    return (start_s or 0.0) + float(frames / fps)


def coverage_shortfall_s(video_end_s: float, audio_start_s: float | None, samples: int,
                         rate: int) -> float:
    """Seconds by which the audio (``samples`` valid samples at ``rate`` Hz from
    ``audio_start_s``) ends before the video ends at ``video_end_s``; negative when the audio
    runs past the video.  Raises ValueError for a rate that is not positive."""
    if rate <= 0:
        raise ValueError(f"sample rate must be positive, got {rate}")
    return video_end_s - ((audio_start_s or 0.0) + samples / rate)


def coverage_ok(shortfall_s: float, frame_samples: int, rate: int) -> bool:
    """The generic rule: the audio may end at most one codec frame (``frame_samples`` at
    ``rate`` Hz) before the video, plus half a sample of rounding."""
    return shortfall_s <= (frame_samples + 0.5) / rate
