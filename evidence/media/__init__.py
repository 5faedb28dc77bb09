"""Media gates: decode generated MP4s with PyAV and judge a candidate against the control.

Public API (the screen runner calls these):

* :func:`probe` ``(path) -> ProbeResult``: what the structural checks see in one file;
* :func:`compare` ``(control, candidate, *, mode, gates=None, device="cpu",
  expected_frames=None, lpips_weights=None, lpips_sha256=None, frame_stride=1,
  progress=False) -> MediaReport``.

The base install (no torch) does structural checks, bit-exact comparison, SSIM/PSNR in
FFmpeg's convention and the audio metrics; LPIPS needs the ``[media]`` extra, imported only
when LPIPS is computed.

The names of ``__all__`` are imported on first use (a PEP 562 module ``__getattr__``):
importing this package, as ``campaign-bot --help`` does to list the ``media`` commands, loads
neither PyAV nor numpy.  ``evidence.media.compare`` and ``evidence.media.probe`` always name
the functions, as they did when this package imported them eagerly, even after the
submodules of the same names were imported.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from evidence.media.compare import compare
    from evidence.media.errors import MediaInputError
    from evidence.media.gates import DEFAULT_GATES
    from evidence.media.probe import ProbeResult, probe
    from evidence.media.validators import CURRENT_VALIDATOR, VALIDATORS, Expected

_EXPORTS = {
    "CURRENT_VALIDATOR": "evidence.media.validators",
    "DEFAULT_GATES": "evidence.media.gates",
    "VALIDATORS": "evidence.media.validators",
    "Expected": "evidence.media.validators",
    "MediaInputError": "evidence.media.errors",
    "ProbeResult": "evidence.media.probe",
    "compare": "evidence.media.compare",
    "probe": "evidence.media.probe",
}

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


def __getattr__(name: str) -> Any:
    """Import an exported name on first use; raise AttributeError for any other name."""
    where = _EXPORTS.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # cached: __getattr__ runs once per name
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


class _Package(types.ModuleType):
    """This package's module type: the import system binds an imported submodule to the
    attribute of its name, which would replace the functions ``compare`` and ``probe`` by
    the modules ``evidence.media.compare`` and ``evidence.media.probe``; the functions win."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in ("compare", "probe") and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
