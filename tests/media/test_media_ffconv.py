"""SSIM/PSNR in FFmpeg's convention: the vectorised code against a direct transcription of
``vf_ssim.c`` / ``vf_psnr.c`` (loops over windows), and against the ffmpeg binary."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evidence.media.ffconv import (
    SSIM_C1,
    SSIM_C2,
    SsimPsnrAccumulator,
    block_sums,
    plane_sse,
    ssim_from_blocks,
)


def _ssim_end1_c(s1: int, s2: int, ss: int, s12: int) -> float:
    """``ssim_end1`` of vf_ssim.c, with C's int arithmetic and float32 rounding."""
    f = np.float32
    vars_ = ss * 64 - s1 * s1 - s2 * s2
    covar = s12 * 64 - s1 * s2
    num = f(2 * s1 * s2 + SSIM_C1) * f(2 * covar + SSIM_C2)
    den = f(s1 * s1 + s2 * s2 + SSIM_C1) * f(vars_ + SSIM_C2)
    return float(f(num / den))


def _ssim_plane_loops(a: np.ndarray, b: np.ndarray) -> float:
    a = a.astype(np.int64)
    b = b.astype(np.int64)
    h4, w4 = a.shape[0] >> 2, a.shape[1] >> 2
    total = 0.0
    for y in range(h4 - 1):
        for x in range(w4 - 1):
            wa = a[4 * y : 4 * y + 8, 4 * x : 4 * x + 8]
            wb = b[4 * y : 4 * y + 8, 4 * x : 4 * x + 8]
            total += _ssim_end1_c(int(wa.sum()), int(wb.sum()),
                                  int((wa * wa + wb * wb).sum()), int((wa * wb).sum()))
    return total / ((h4 - 1) * (w4 - 1))


def _pair(shape: tuple[int, int], noise: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.integers(0, 256, shape, dtype=np.uint8)
    b = np.clip(a.astype(np.int64) + rng.integers(-noise, noise + 1, shape), 0, 255)
    return a, b.astype(np.uint8)


@pytest.mark.parametrize("shape", [(8, 8), (16, 24), (37, 53), (96, 128), (90, 122)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
def test_block_sums_are_exact(shape: tuple[int, int]) -> None:
    a, b = _pair(shape, 40, 1)
    got = block_sums(a, b)
    h4, w4 = shape[0] >> 2, shape[1] >> 2
    ai = a[: h4 * 4, : w4 * 4].astype(np.int64).reshape(h4, 4, w4, 4)
    bi = b[: h4 * 4, : w4 * 4].astype(np.int64).reshape(h4, 4, w4, 4)
    want = np.stack([ai.sum((1, 3)), bi.sum((1, 3)), (ai * ai + bi * bi).sum((1, 3)),
                     (ai * bi).sum((1, 3))])
    assert np.array_equal(got, want)


def test_block_sums_extremes_do_not_overflow() -> None:
    a = np.full((64, 64), 255, np.uint8)
    b = np.full((64, 64), 255, np.uint8)
    got = block_sums(a, b)
    assert got[0, 0, 0] == 16 * 255
    assert got[2, 0, 0] == 16 * 2 * 255 * 255
    assert got[3, 0, 0] == 16 * 255 * 255


@pytest.mark.parametrize("shape,noise", [((16, 16), 3), ((37, 53), 20), ((48, 64), 90)],
                         ids=["16x16-n3", "37x53-n20", "48x64-n90"])
def test_ssim_matches_c_transcription(shape: tuple[int, int], noise: int) -> None:
    a, b = _pair(shape, noise, 7)
    assert ssim_from_blocks(block_sums(a, b)) == pytest.approx(_ssim_plane_loops(a, b),
                                                               abs=1e-6)


def test_ssim_of_too_small_plane_is_nan() -> None:
    a, b = _pair((4, 12), 3, 1)
    assert math.isnan(ssim_from_blocks(block_sums(a, b)))


@pytest.mark.parametrize("shape", [(16, 16), (37, 53), (5, 7)], ids=str)
def test_plane_sse_covers_ragged_edges(shape: tuple[int, int]) -> None:
    a, b = _pair(shape, 30, 3)
    d = a.astype(np.int64) - b.astype(np.int64)
    assert plane_sse(a, b, block_sums(a, b)) == int((d * d).sum())


def test_identical_frames_give_ssim_one_and_psnr_inf() -> None:
    a, _ = _pair((32, 48), 0, 5)
    u = a[::2, ::2].copy()
    acc = SsimPsnrAccumulator()
    acc.add(0, (a, u, u), (a.copy(), u.copy(), u.copy()))
    r = acc.result()
    assert r["ssim_all"] == pytest.approx(1.0, abs=1e-7)
    assert r["psnr_avg"] == math.inf and r["psnr_min"] == math.inf


def test_all_is_size_weighted_and_worst_frame_found() -> None:
    acc = SsimPsnrAccumulator()
    frames = []
    for i, noise in enumerate((2, 30, 5)):
        y = _pair((32, 32), noise, i)
        u = _pair((16, 16), noise, 10 + i)
        v = _pair((16, 16), noise, 20 + i)
        frames.append(acc.add(i, (y[0], u[0], v[0]), (y[1], u[1], v[1])))
    r = acc.result()
    f = frames[1]
    assert f.ssim_all == pytest.approx((4 * f.ssim[0] + f.ssim[1] + f.ssim[2]) / 6)
    assert r["ssim_min_frame"] == 1 and r["psnr_min_frame"] == 1
    mse_avg = sum(x.mse_all for x in frames) / 3
    assert r["psnr_avg"] == pytest.approx(10 * math.log10(255**2 / mse_avg))


def test_mismatched_planes_are_refused() -> None:
    a, b = _pair((16, 16), 3, 1)
    with pytest.raises(ValueError, match="equal shape"):
        block_sums(a, b[:, :12])
    with pytest.raises(ValueError, match="uint8"):
        block_sums(a.astype(np.uint16), b.astype(np.uint16))
