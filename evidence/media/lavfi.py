"""SSIM/PSNR through FFmpeg's own ``ssim`` and ``psnr`` filters, run inside PyAV.

PyAV bundles libavfilter, so the very filters the thresholds were measured with (and the
same x86 SIMD code as an ``ffmpeg`` binary) can score the frame pairs that ``compare``
already decodes, at a fraction of numpy's CPU cost.  Per-frame values come back as frame
metadata, printed by FFmpeg with six decimals: SSIM per plane and "All" directly, plane MSE
recovered from the per-plane PSNR (``mse = 255^2 / 10^(psnr/10)``, relative error < 2e-7;
``inf`` means an MSE of 0).  Clip figures are then pooled exactly as the filters pool them
(:class:`~evidence.media.ffconv.SsimPsnrAccumulator`), so they agree with the binary's
summary to about 1e-6.

:mod:`evidence.media.ffconv` is the exact numpy reference; it follows FFmpeg's C code, which
differs from the SIMD code only where a plane's ``width >> 2`` is 2 modulo 4 (README).
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import av
import av.filter

from evidence.media.ffconv import MAX_VALUE, FrameScore

_PLANES = ("y", "u", "v")


class LavfiScorer:
    """Score frame pairs with libavfilter's ``ssim`` and ``psnr`` (one graph per comparison).

    ``push(index, control_frame, candidate_frame)`` then ``pull()`` returns the
    :class:`FrameScore` of every pair the graph has finished, in order; ``close()`` flushes.
    Frames are re-stamped with their pair index, so pairing is the caller's, not FFmpeg's
    timestamp matching.  Raises ``ValueError`` when the graph cannot be built.
    """

    def __init__(self, width: int, height: int, pix_fmt: str,
                 sizes: tuple[int, ...]) -> None:
        tb = Fraction(1, 1000)
        g = av.filter.Graph()
        try:
            # in0 -> ssim(main) -> psnr(main) -> sink; in1 -> split -> ssim(ref), psnr(ref).
            # The main frame leaves ssim with its metadata and psnr adds its own.
            ins = [g.add_buffer(width=width, height=height,
                                format=pix_fmt,  # type: ignore[arg-type]  # PyAV takes a name
                                time_base=tb, name=f"in{i}") for i in range(2)]
            split = g.add("split", "2")
            ssim, psnr = g.add("ssim"), g.add("psnr")
            sink = g.add("buffersink")
            ins[0].link_to(ssim, 0, 0)
            ins[1].link_to(split)
            split.link_to(ssim, 0, 1)
            split.link_to(psnr, 1, 1)
            ssim.link_to(psnr, 0, 0)
            psnr.link_to(sink)
            g.configure()
        except (av.FFmpegError, ValueError, TypeError) as exc:
            raise ValueError(f"cannot build the libavfilter ssim/psnr graph: {exc}") from exc
        self.graph, self.ins, self.sink = g, ins, sink
        self.tb = tb
        self.sizes = sizes

    def push(self, index: int, fa: Any, fb: Any) -> None:
        """Queue one pair (the frames are re-stamped with ``index``)."""
        for ctx, f in zip(self.ins, (fa, fb), strict=True):
            f.pts = index
            f.time_base = self.tb
            ctx.push(f)

    def pull(self) -> list[FrameScore]:
        """Scores of every pair the graph has finished since the last call."""
        out: list[FrameScore] = []
        while True:
            try:
                f = self.sink.pull()
            except (av.error.BlockingIOError, av.error.EOFError):
                return out
            meta = dict(f.metadata)
            out.append(score_from_meta(-1 if f.pts is None else int(f.pts), meta, meta,
                                       self.sizes))

    def close(self) -> list[FrameScore]:
        """Signal the end of both inputs; returns the remaining scores."""
        for ctx in self.ins:
            ctx.push(None)
        return self.pull()


def score_from_meta(index: int, ssim_meta: dict[str, str], psnr_meta: dict[str, str],
                    sizes: tuple[int, ...]) -> FrameScore:
    """Build a :class:`FrameScore` from the ``lavfi.ssim.*`` and ``lavfi.psnr.*`` metadata of
    one frame; ``sizes`` are the plane sizes in pixels (for the pooled MSE)."""
    ssim = tuple(float(ssim_meta[f"lavfi.ssim.{p.upper()}"]) for p in _PLANES[: len(sizes)])
    ssim_all = float(ssim_meta["lavfi.ssim.All"])
    mse: list[float] = []
    for p in _PLANES[: len(sizes)]:
        db = float(psnr_meta[f"lavfi.psnr.psnr.{p}"])
        mse.append(0.0 if math.isinf(db) else MAX_VALUE * MAX_VALUE / 10 ** (db / 10))
    total = float(sum(sizes))
    mse_all = sum(m * n / total for m, n in zip(mse, sizes, strict=True))
    return FrameScore(index, ssim, ssim_all, tuple(mse), mse_all)
