"""Audio metrics: the STFT against torch.stft, the documented edge cases, inclusive bounds."""

from __future__ import annotations

import math

import numpy as np
import pytest

from evidence.media.audio import (
    AURALOSS_RESOLUTIONS,
    expected_audio_seconds_v1,
    expected_audio_seconds_v2,
    rms_ratio,
    spectral_cosine,
    stft_magnitude,
)
from evidence.media.gates import DEFAULT_GATES

RATE = 32000


def _tone(seconds: float = 0.5, channels: int = 2, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    x = np.stack([np.sin(2 * np.pi * 440 * (c + 1) * t) for c in range(channels)])
    return (0.3 * x + 0.01 * rng.normal(size=x.shape)).astype(np.float32)


def test_v2_rule_gives_15_075_s_for_362_frames() -> None:
    assert expected_audio_seconds_v2(362, 24) == pytest.approx(15.075)
    assert expected_audio_seconds_v2(124, 24) == pytest.approx(5.175)
    assert expected_audio_seconds_v1(362, 24) == pytest.approx(15.0833333)


@pytest.mark.parametrize("res", AURALOSS_RESOLUTIONS, ids=lambda r: f"fft{r[0]}")
def test_stft_matches_torch(res: tuple[int, int, int]) -> None:
    torch = pytest.importorskip("torch")
    x = _tone(0.3)[0]
    n_fft, hop, win = res
    want = torch.stft(torch.from_numpy(x), n_fft, hop, win, torch.hann_window(win),
                      center=True, pad_mode="reflect", return_complex=True).abs().numpy().T
    got = stft_magnitude(x, n_fft, hop, win)
    assert got.shape == want.shape
    assert np.allclose(got, want, atol=1e-3 * float(want.max()))


def test_identical_and_scaled_signals() -> None:
    x = _tone()
    cos, detail = spectral_cosine(x, x.copy())
    assert cos == pytest.approx(1.0)
    assert set(detail["per_resolution_channel"]) == {"fft1024_hop120_win600",
                                                     "fft2048_hop240_win1200",
                                                     "fft512_hop50_win240"}
    # cosine ignores gain; the RMS ratio does not
    assert spectral_cosine(x, 3 * x)[0] == pytest.approx(1.0)
    assert rms_ratio(x, 3 * x) == pytest.approx(3.0)


def test_different_signals_score_low() -> None:
    a = _tone(seed=1)
    t = np.arange(a.shape[1]) / RATE
    b = np.stack([np.sin(2 * np.pi * 3000 * t)] * 2).astype(np.float32)
    assert spectral_cosine(a, b)[0] < 0.3


@pytest.mark.parametrize("ctrl,cand,cos,ratio", [
    ("silent", "silent", 1.0, 1.0),
    ("tone", "silent", 0.0, 0.0),
    ("silent", "tone", 0.0, math.inf),
], ids=["both-silent", "candidate-silent", "control-silent"])
def test_silence_edge_cases(ctrl: str, cand: str, cos: float, ratio: float) -> None:
    sig = {"silent": np.zeros((2, RATE // 2), np.float32), "tone": _tone()}
    assert spectral_cosine(sig[ctrl], sig[cand])[0] == cos
    assert rms_ratio(sig[ctrl], sig[cand]) == ratio


@pytest.mark.parametrize("gain,passes", [(0.5, True), (2.0, True), (0.25, False), (4.0, False)],
                         ids=["low-bound", "high-bound", "below", "above"])
def test_rms_gate_bounds_are_inclusive(gain: float, passes: bool) -> None:
    x = _tone()
    ratio = rms_ratio(x, gain * x)  # powers of two scale exactly
    assert ratio == gain
    g = DEFAULT_GATES.audio_rms_ratio
    assert (g.low <= ratio <= g.high) is passes


def test_uses_common_length_and_refuses_channel_mismatch() -> None:
    x = _tone()
    cos, detail = spectral_cosine(x, x[:, :-500])
    assert cos == pytest.approx(1.0, abs=1e-6) and detail["samples_compared"] == x.shape[1] - 500
    with pytest.raises(ValueError, match="channel counts differ"):
        spectral_cosine(x, x[:1])


def test_short_signal_skips_resolutions() -> None:
    x = _tone(0.02)  # 640 samples: too short for n_fft 2048 (needs > 1024)
    cos, detail = spectral_cosine(x, x)
    assert detail["skipped_resolutions"] == ["fft2048_hop240_win1200"]
    with pytest.raises(ValueError, match="too short"):
        spectral_cosine(x[:, :100], x[:, :100])
