"""Helpers shared by the media tests (imported as a plain module: pytest puts this folder on
``sys.path``)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

from evidence.media.synth import ClipSpec

BASE = ClipSpec(frames=24, width=128, height=96, fps=24, crf=18)
"""The small control clip: 24 frames of 128x96 at 24 fps, stereo 32 kHz AAC."""

_SSIM_RE = re.compile(r"SSIM Y:([\d.]+) \([^)]*\) U:([\d.]+) \([^)]*\) V:([\d.]+) \([^)]*\) "
                      r"All:([\d.]+)")
_PSNR_RE = re.compile(r"PSNR y:([\d.inf]+) u:([\d.inf]+) v:([\d.inf]+) average:([\d.inf]+) "
                      r"min:([\d.inf]+) max:([\d.inf]+)")


def ffmpeg_ssim_psnr(a: Path, b: Path, c_code: bool = False) -> dict[str, float]:
    """Run the Debian ffmpeg binary's ``ssim`` and ``psnr`` filters on a pair and parse the
    summary lines FFmpeg prints.  ``c_code``: ``-cpuflags 0``, FFmpeg's C code instead of its
    x86 SIMD code."""
    exe = shutil.which("ffmpeg")
    assert exe is not None
    flags = ["-cpuflags", "0"] if c_code else []
    proc = subprocess.run([exe, "-hide_banner", "-nostats", *flags, "-i", str(a), "-i", str(b),
                           "-lavfi", "ssim;[0:v][1:v]psnr", "-f", "null", "-"],
                          capture_output=True, text=True, timeout=300)
    s = _SSIM_RE.search(proc.stderr)
    p = _PSNR_RE.search(proc.stderr)
    assert s and p, proc.stderr[-2000:]
    keys_s = ("ssim_y", "ssim_u", "ssim_v", "ssim_all")
    keys_p = ("psnr_y", "psnr_u", "psnr_v", "psnr_avg", "psnr_min", "psnr_max")
    out = {k: float(v) for k, v in zip(keys_s, s.groups(), strict=True)}
    out.update({k: float(v) for k, v in zip(keys_p, p.groups(), strict=True)})
    return out


