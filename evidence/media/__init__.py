"""Media gates: decode generated MP4s with PyAV and judge a candidate against the control.

Public API (the screen runner calls these):

* :func:`probe` ``(path) -> ProbeResult``: what the structural checks see in one file;
* :func:`compare` ``(control, candidate, *, mode, gates=None, device="cpu",
  expected_frames=None, lpips_weights=None, lpips_sha256=None, frame_stride=1,
  progress=False) -> MediaReport``.

The base install (no torch) does structural checks, bit-exact comparison, SSIM/PSNR in
FFmpeg's convention and the audio metrics; LPIPS needs the ``[media]`` extra, imported only
when LPIPS is computed.
"""

from __future__ import annotations

from evidence.media.compare import compare
from evidence.media.errors import MediaInputError
from evidence.media.gates import DEFAULT_GATES
from evidence.media.probe import ProbeResult, probe
from evidence.media.validators import CURRENT_VALIDATOR, VALIDATORS, Expected

__all__ = [
    "CURRENT_VALIDATOR",
    "DEFAULT_GATES",
    "VALIDATORS",
    "Expected",
    "MediaInputError",
    "ProbeResult",
    "compare",
    "probe",
]
