"""SSIM and PSNR exactly in FFmpeg's ``ssim`` and ``psnr`` filter convention, with numpy.

Why this convention: the SSIM/PSNR thresholds the campaigns adopt (SSIM >= 0.97, PSNR >= 34 dB)
come from vLLM-Omni's MiniMax-H3 accuracy tests, which run ``ffmpeg -lavfi ssim / psnr`` on
the decoded 8-bit YUV planes.  RGB figures on the same pair run 3 to 5 dB lower and must
never be judged against these thresholds.

SSIM (``libavfilter/vf_ssim.c``, after x264):

* per plane, 4x4 block sums of ``a``, ``b``, ``a*a + b*b`` and ``a*b`` over the plane cropped
  to ``(h >> 2) * 4`` x ``(w >> 2) * 4`` (integers, exact);
* windows are 8x8 pixels on a 4-pixel grid: the sum of 2x2 neighbouring blocks, giving
  ``((h >> 2) - 1) * ((w >> 2) - 1)`` windows;
* per window ``ssim_end1`` with ``C1 = int(.01**2 * 255**2 * 64 + .5) = 416`` and
  ``C2 = int(.03**2 * 255**2 * 64 * 63 + .5) = 235963``, the integer numerators and
  denominators rounded to float32 before multiplying, exactly as the C code does;
* the plane's SSIM is the mean over windows; a frame's "All" is the plane values weighted by
  plane size (``(4Y + U + V) / 6`` for 4:2:0); the clip's values are means over frames.

PSNR (``libavfilter/vf_psnr.c``):

* per plane ``mse = sse / (w * h)`` over the whole plane, the frame's pooled MSE is the
  size-weighted mean of the plane MSEs;
* per plane over the clip ``10 log10(255^2 / mean_frames(mse_plane))``; "average" is
  ``10 log10(255^2 / mean_frames(pooled mse))``; a zero MSE gives ``inf`` (identical inputs).

This is the exact reference implementation (``ssim_backend="numpy"``); ``compare`` by default
runs FFmpeg's own filters inside PyAV (:mod:`evidence.media.lavfi`), and the tests check the
two against each other and against the ffmpeg binary.  The Debian ffmpeg 5.1 binary's x86
SIMD ``ssim_end_line`` deviates from its C code where ``(plane_width >> 2) % 4 == 2``; this
module follows the C code (as PyAV's FFmpeg 8 does).

Inputs are 8-bit planar YUV planes as numpy ``uint8`` arrays of shape ``(height, width)``; any
row stride is fine (views of decoder buffers are accepted without copying).  Each frame costs
a few passes over the planes in 16/32-bit integers; memory is a few plane-sized buffers, flat
in clip length.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field

import numpy as np

SSIM_C1 = int(0.01 * 0.01 * 255 * 255 * 64 + 0.5)
SSIM_C2 = int(0.03 * 0.03 * 255 * 255 * 64 * 63 + 0.5)
MAX_VALUE = 255
PLANE_NAMES = ("y", "u", "v")


class BlockSummer:
    """4x4 block sums with preallocated work buffers for one plane shape.

    Reusing the buffers matters: allocating fresh plane-sized temporaries for every frame
    makes the allocator map and fault in new pages each time, several times slower than the
    arithmetic itself.
    """

    def __init__(self, shape: tuple[int, int]) -> None:
        self.shape = shape
        h4, w4 = shape[0] >> 2, shape[1] >> 2
        self.h4, self.w4 = h4, w4
        hh, ww = h4 * 4, w4 * 4
        self.a16 = np.empty((hh, ww), np.uint16)
        self.b16 = np.empty((hh, ww), np.uint16)
        self.prod = np.empty((hh, ww), np.uint16)
        self.acc16 = np.empty((h4, ww), np.uint16)
        self.acc32 = np.empty((h4, ww), np.uint32)
        self.hs32 = np.empty((h4, w4), np.uint32)
        # float64 holds every sum exactly (all stay far below 2**53) and vectorises better
        # than int64 in the window arithmetic.
        self.out = np.empty((4, h4, w4), np.float64)
        self.win = _WindowWork(h4, w4)

    def _vsum(self, x: np.ndarray, acc: np.ndarray, first: bool) -> None:
        v = x.reshape(self.h4, 4, self.w4 * 4)
        if first:
            np.add(v[:, 0], v[:, 1], out=acc, dtype=acc.dtype)
        else:
            acc += v[:, 0]
            acc += v[:, 1]
        acc += v[:, 2]
        acc += v[:, 3]

    def _hsum(self, acc: np.ndarray, dst: np.ndarray) -> None:
        x = acc.reshape(self.h4, self.w4, 4)
        np.add(x[..., 0], x[..., 1], out=self.hs32, dtype=np.uint32)
        self.hs32 += x[..., 2]
        self.hs32 += x[..., 3]
        dst[...] = self.hs32

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Block sums of ``a``, ``b``, ``a^2 + b^2`` and ``a*b``; see :func:`block_sums`.

        The returned array is this object's buffer, overwritten by the next call.
        """
        if a.shape != self.shape or b.shape != self.shape:
            raise ValueError(f"plane shape {a.shape}/{b.shape}, expected {self.shape}")
        if a.dtype != np.uint8 or b.dtype != np.uint8:
            raise ValueError(f"planes must be uint8, got {a.dtype} and {b.dtype}")
        h4, w4 = self.h4, self.w4
        if h4 == 0 or w4 == 0:
            return self.out
        hh, ww = h4 * 4, w4 * 4
        a16, b16, prod = self.a16, self.b16, self.prod
        np.copyto(a16, a[:hh, :ww], casting="unsafe")
        np.copyto(b16, b[:hh, :ww], casting="unsafe")
        # Every product of two 8-bit values fits 16 bits (255 * 255 = 65025), so the squares
        # and the cross product are exact in uint16; sums of 4 fit 16 bits for plain values
        # (4 * 255) but need 32 bits for products.
        self._vsum(a16, self.acc16, True)
        self._hsum(self.acc16, self.out[0])
        self._vsum(b16, self.acc16, True)
        self._hsum(self.acc16, self.out[1])
        np.multiply(a16, a16, out=prod)
        self._vsum(prod, self.acc32, True)
        np.multiply(b16, b16, out=prod)
        self._vsum(prod, self.acc32, False)
        self._hsum(self.acc32, self.out[2])
        np.multiply(a16, b16, out=prod)
        self._vsum(prod, self.acc32, True)
        self._hsum(self.acc32, self.out[3])
        return self.out


def block_sums(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """4x4 block sums of ``a``, ``b``, ``a^2 + b^2`` and ``a*b``.

    ``a``, ``b``: ``uint8`` arrays of equal shape ``(H, W)``.  Returns a new ``float64`` array
    of shape ``(4, H >> 2, W >> 2)`` (exact integers; the ragged right and bottom edges are
    left out, as FFmpeg does).  Raises ``ValueError`` on a shape or dtype mismatch.
    """
    if a.shape != b.shape:
        raise ValueError(f"planes must have equal shapes, got {a.shape} and {b.shape}")
    return BlockSummer(a.shape)(a, b).copy()


class _WindowWork:
    """Preallocated buffers for :func:`ssim_from_blocks` on one block grid."""

    def __init__(self, h4: int, w4: int) -> None:
        shape = (max(h4 - 1, 0), max(w4 - 1, 0))
        self.w = np.empty((4, *shape), np.float64)
        self.t = [np.empty(shape, np.float64) for _ in range(3)]
        self.f = [np.empty(shape, np.float32) for _ in range(3)]


def ssim_from_blocks(sums: np.ndarray, work: _WindowWork | None = None) -> float:
    """FFmpeg's plane SSIM from the block sums of :func:`block_sums`.

    ``sums``: ``(4, h4, w4)`` exact integer sums (any numeric dtype).  Returns the mean over
    8x8 windows on the 4-pixel grid; ``nan`` when the plane is smaller than 8x8 (FFmpeg
    divides by zero there too).  The integer terms are exact in float64 and are rounded to
    float32 before the products, exactly as ``ssim_end1`` in ``vf_ssim.c`` does.
    """
    h4, w4 = sums.shape[1], sums.shape[2]
    if h4 < 2 or w4 < 2:
        return math.nan
    if work is None:
        work = _WindowWork(h4, w4)
    w = work.w
    np.add(sums[:, :-1, :-1], sums[:, 1:, :-1], out=w)
    w += sums[:, :-1, 1:]
    w += sums[:, 1:, 1:]
    s1, s2, ss, s12 = w[0], w[1], w[2], w[3]
    s1s2, sq, t = work.t
    fa, fb, fc = work.f
    np.multiply(s1, s2, out=s1s2)
    np.multiply(s1, s1, out=sq)
    np.multiply(s2, s2, out=t)
    sq += t
    # numerator: (float)(2*s1*s2 + C1) * (float)(2*covar + C2), covar = s12*64 - s1*s2
    np.multiply(s1s2, 2, out=t)
    t += SSIM_C1
    np.copyto(fa, t, casting="unsafe")
    np.multiply(s12, 64, out=t)
    t -= s1s2
    t *= 2
    t += SSIM_C2
    np.copyto(fb, t, casting="unsafe")
    fa *= fb
    # denominator: (float)(s1^2 + s2^2 + C1) * (float)(vars + C2), vars = ss*64 - s1^2 - s2^2
    np.add(sq, SSIM_C1, out=t)
    np.copyto(fb, t, casting="unsafe")
    np.multiply(ss, 64, out=t)
    t -= sq
    t += SSIM_C2
    np.copyto(fc, t, casting="unsafe")
    fb *= fc
    fa /= fb
    return float(fa.sum(dtype=np.float64)) / ((h4 - 1) * (w4 - 1))


def plane_sse(a: np.ndarray, b: np.ndarray, sums: np.ndarray) -> int:
    """Sum of squared differences over the whole plane (exact integer).

    The cropped area comes from the block sums (``sum(a^2 + b^2) - 2 sum(a*b)``); the ragged
    right and bottom edges, when the size is not a multiple of 4, are added directly.
    """
    sse = int(sums[2].sum()) - 2 * int(sums[3].sum())  # exact: float64 sums < 2**53
    h4, w4 = sums.shape[1] * 4, sums.shape[2] * 4
    h, w = a.shape
    if w4 < w:
        d = a[:h4, w4:].astype(np.int32) - b[:h4, w4:].astype(np.int32)
        sse += int((d * d).sum())
    if h4 < h:
        d = a[h4:, :].astype(np.int32) - b[h4:, :].astype(np.int32)
        sse += int((d * d).sum())
    return sse


def psnr_db(mse: float, max_value: int = MAX_VALUE) -> float:
    """``10 log10(max^2 / mse)``; ``inf`` for a zero MSE (FFmpeg prints ``inf`` too)."""
    if mse <= 0:
        return math.inf
    return 10.0 * math.log10(max_value * max_value / mse)


@dataclass
class FrameScore:
    """One frame's figures: SSIM per plane and All, pooled MSE and PSNR (dB)."""

    index: int
    ssim: tuple[float, ...]
    ssim_all: float
    mse: tuple[float, ...]
    mse_all: float

    @property
    def psnr(self) -> float:
        """Frame PSNR from the pooled MSE (``inf`` when identical)."""
        return psnr_db(self.mse_all)


@dataclass
class SsimPsnrAccumulator:
    """Streaming SSIM/PSNR over frame pairs; memory does not grow with clip length.

    Call :meth:`add` once per frame pair with the planes (Y, U, V) of control and candidate,
    then :meth:`result`.  Plane weights are the plane sizes, as both filters use.  For
    parallel use, call :meth:`score` from worker threads (each keeps its own buffers) and
    :meth:`accumulate` the results in frame order.
    """

    frames: int = 0
    ssim_sum: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    ssim_all_sum: float = 0.0
    mse_sum: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    mse_all_sum: float = 0.0
    min_ssim: float = math.inf
    min_ssim_frame: int | None = None
    max_mse: float = -1.0
    max_mse_frame: int | None = None
    min_mse: float = math.inf
    _tls: threading.local = field(default_factory=threading.local, repr=False)

    def score(self, index: int, a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]
              ) -> FrameScore:
        """Score one frame pair without accumulating it."""
        if len(a) != len(b):
            raise ValueError("control and candidate have different plane counts")
        sizes = [p.shape[0] * p.shape[1] for p in a]
        total = float(sum(sizes))
        ssim: list[float] = []
        mse: list[float] = []
        for i, (pa, pb) in enumerate(zip(a, b, strict=True)):
            if pa.shape != pb.shape:
                raise ValueError(f"plane {i}: shapes differ, {pa.shape} and {pb.shape}")
            summers = getattr(self._tls, "summers", None)
            if summers is None:
                summers = self._tls.summers = {}
            summer = summers.get((i, pa.shape))
            if summer is None:
                summer = summers[(i, pa.shape)] = BlockSummer(pa.shape)
            sums = summer(pa, pb)
            ssim.append(ssim_from_blocks(sums, summer.win))
            mse.append(plane_sse(pa, pb, sums) / float(pa.shape[0] * pa.shape[1]))
        ssim_all = sum(s * n / total for s, n in zip(ssim, sizes, strict=True))
        mse_all = sum(m * n / total for m, n in zip(mse, sizes, strict=True))
        return FrameScore(index, tuple(ssim), ssim_all, tuple(mse), mse_all)

    def add(self, index: int, a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]
            ) -> FrameScore:
        """Score and accumulate one frame pair; returns that frame's :class:`FrameScore`."""
        fs = self.score(index, a, b)
        self.accumulate(fs)
        return fs

    def accumulate(self, fs: FrameScore) -> None:
        """Add one scored frame to the clip figures (call in frame order)."""
        index = fs.index
        if self.frames == 0:
            self.ssim_sum = [0.0] * len(fs.ssim)
            self.mse_sum = [0.0] * len(fs.mse)
        self.frames += 1
        for i, (s, m) in enumerate(zip(fs.ssim, fs.mse, strict=True)):
            self.ssim_sum[i] += s
            self.mse_sum[i] += m
        self.ssim_all_sum += fs.ssim_all
        self.mse_all_sum += fs.mse_all
        if fs.ssim_all < self.min_ssim:
            self.min_ssim, self.min_ssim_frame = fs.ssim_all, index
        if fs.mse_all > self.max_mse:
            self.max_mse, self.max_mse_frame = fs.mse_all, index
        self.min_mse = min(self.min_mse, fs.mse_all)

    def result(self) -> dict[str, float | int | None]:
        """Clip figures as FFmpeg prints them at the end of the run.

        Keys: ``ssim_y/u/v``, ``ssim_all`` (means over frames), ``ssim_min`` and
        ``ssim_min_frame`` (worst frame, 0-based), ``psnr_y/u/v``, ``psnr_avg`` (dB, FFmpeg's
        "average"), ``psnr_min`` and ``psnr_min_frame`` (worst frame), ``psnr_max``,
        ``frames``.  Raises ``ValueError`` when no frame was added.
        """
        n = self.frames
        if n == 0:
            raise ValueError("no frames compared")
        out: dict[str, float | int | None] = {"frames": n}
        for i in range(len(self.ssim_sum)):
            out[f"ssim_{PLANE_NAMES[i]}"] = self.ssim_sum[i] / n
            out[f"psnr_{PLANE_NAMES[i]}"] = psnr_db(self.mse_sum[i] / n)
        out["ssim_all"] = self.ssim_all_sum / n
        out["ssim_min"] = self.min_ssim
        out["ssim_min_frame"] = self.min_ssim_frame
        out["psnr_avg"] = psnr_db(self.mse_all_sum / n)
        out["psnr_min"] = psnr_db(self.max_mse)
        out["psnr_min_frame"] = self.max_mse_frame
        out["psnr_max"] = psnr_db(self.min_mse)
        return out
