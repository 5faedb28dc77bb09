"""Reference uploads that vLLM-Omni's HTTP layer refuses for MiniMax H3 (rule
``REFERENCE_REFUSED_UPSTREAM`` of ``campaign-bot check``).

A campaign pins its reference video and audio by digest; the screen runner uploads each as a
repeated ``input_references`` multipart part, with the file's name and the scope's MIME type.
vLLM-Omni 0.30.0 checks those parts before any engine work and answers HTTP 400 for

* more than 12 references (``MINIMAX_H3_MAX_REFERENCE_COUNT``);
* a part over its kind's size cap: image 30 MiB, video 50 MiB, audio 15 MiB
  (``MINIMAX_H3_MAX_REFERENCE_{IMAGE,VIDEO,AUDIO}_BYTES``);
* a video whose file suffix is not ``.mp4``/``.mov``, audio not ``.wav``/``.mp3`` (a part
  without a suffix passes), or an image that does not decode or is not JPEG, PNG, WEBP, HEIC
  or HEIF.

Source: ``vllm_omni/entrypoints/openai/video/generation/helpers.py`` of the vllm-omni 0.30.0
wheel (constants at lines 79-89; ``_uploaded_media_kind``, ``_read_upload_limited``,
``_validate_minimax_h3_image_payload``, ``_persist_uploaded_media_references``).  A part is an
image when its MIME type starts with ``image/``, audio when it starts with ``audio/``, else
by suffix; anything else is a video.  The messages below are upstream's, word for word, so a
finding and the server's 400 read the same.  The stand-in server (``runners.standin``)
applies the same functions.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from evidence.lines import line_of
from evidence.models import Finding, Inputs

MiB = 1 << 20
IMAGE_MAX_BYTES = 30 * MiB
VIDEO_MAX_BYTES = 50 * MiB
AUDIO_MAX_BYTES = 15 * MiB
MAX_COUNT = 12
IMAGE_FORMATS = frozenset({"jpeg", "png", "webp", "heic", "heif"})
VIDEO_SUFFIXES = frozenset({".mp4", ".mov"})
AUDIO_SUFFIXES = frozenset({".wav", ".mp3"})
IMAGE_KIND_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".webp", ".heic", ".heif"})
AUDIO_KIND_SUFFIXES = frozenset({".wav", ".mp3", ".m4a", ".aac", ".flac", ".ogg"})
RULE = "REFERENCE_REFUSED_UPSTREAM"

Kind = Literal["image", "video", "audio"]


def media_kind(filename: str | None, content_type: str | None) -> Kind:
    """How upstream classifies one uploaded part (``_uploaded_media_kind``)."""
    ctype = (content_type or "").lower()
    if ctype.startswith("image/"):
        return "image"
    if ctype.startswith("audio/"):
        return "audio"
    suffix = PurePosixPath(filename or "").suffix.lower()
    if suffix in IMAGE_KIND_SUFFIXES:
        return "image"
    if suffix in AUDIO_KIND_SUFFIXES:
        return "audio"
    return "video"


def size_limit(kind: Kind) -> int:
    """Upstream's byte cap for one part of ``kind``."""
    return {"image": IMAGE_MAX_BYTES, "audio": AUDIO_MAX_BYTES}.get(kind, VIDEO_MAX_BYTES)


def count_refusal(count: int) -> str | None:
    """Upstream's message for too many references, or None."""
    if count > MAX_COUNT:
        return f"MiniMax H3 accepts at most {MAX_COUNT} total references."
    return None


def image_refusal(payload: bytes, filename: str | None) -> str | None:
    """Upstream's message when ``payload`` is not an acceptable image, or None.  Needs
    Pillow; raises ImportError without it."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(payload)) as image:
            fmt = str(image.format or "").lower()
    except Image.DecompressionBombError:
        return (f"Invalid uploaded image reference: {filename}; image exceeds the decoder "
                "pixel limit.")
    except (OSError, ValueError):
        return f"Invalid uploaded image reference: {filename}"
    if fmt not in IMAGE_FORMATS:
        return ("MiniMax H3 reference images must use JPG, JPEG, PNG, WEBP, HEIC, or HEIF; "
                f"got {fmt or 'unknown'}.")
    return None


def upload_refusal(filename: str | None, content_type: str | None, size: int,
                   read: Callable[[], bytes]) -> str | None:
    """Upstream's message for one part it refuses, in upstream's order (size, then image
    decoding, then suffix), or None when the part passes.  ``read`` returns the part's bytes
    (called only for an image within its cap)."""
    kind = media_kind(filename, content_type)
    cap = size_limit(kind)
    if size > cap:
        return f"Uploaded reference exceeds the {cap // MiB} MiB size limit."
    if kind == "image":
        return image_refusal(read(), filename)
    suffix = PurePosixPath(filename or "").suffix.lower()
    if kind == "video" and suffix and suffix not in VIDEO_SUFFIXES:
        return "MiniMax H3 reference videos must use an MP4 or MOV file."
    if kind == "audio" and suffix and suffix not in AUDIO_SUFFIXES:
        return "MiniMax H3 reference audio must use a WAV or MP3 file."
    return None


@dataclass(frozen=True)
class PinnedReference:
    """One pinned reference of a campaign: the scope field (``inputs.reference_video``), the
    file on disk and the MIME type the runner sends."""

    field: str
    path: Path
    mime: str


def refusals(refs: Sequence[PinnedReference]) -> list[tuple[str | None, str]]:
    """``(field or None for the whole set, upstream's message)`` for every reference
    upstream would refuse.  Missing files are skipped (other rules report them).  Raises
    ImportError only when an image reference needs Pillow and it is absent."""
    out: list[tuple[str | None, str]] = []
    msg = count_refusal(len(refs))
    if msg:
        out.append((None, msg))
    for ref in refs:
        try:
            size = ref.path.stat().st_size
        except OSError:
            continue
        msg = upload_refusal(ref.path.name, ref.mime, size, ref.path.read_bytes)
        if msg:
            out.append((ref.field, msg))
    return out


def reference_findings(root: Path, scope_path: str, scope_text: str,
                       inputs: Inputs) -> list[Finding]:
    """``REFERENCE_REFUSED_UPSTREAM`` findings (P2: a screen with these inputs gets HTTP 400
    on every request) for a campaign's pinned references.  ``inputs`` is the scope's
    :class:`evidence.models.Inputs`; files resolve against ``root`` and a path leaving it is
    not read.  Without Pillow an image reference gets a P3 note instead."""
    base = root.resolve()
    refs: list[PinnedReference] = []
    for name, default in (("reference_video", "video/mp4"), ("reference_audio", "audio/wav")):
        ref = getattr(inputs, name)
        if not ref.path:
            continue
        p = (root / ref.path).resolve()
        if not p.is_relative_to(base) or not p.is_file():
            continue
        refs.append(PinnedReference(f"inputs.{name}", p, ref.mime or default))

    def finding(fld: str | None, sev: Literal["P2", "P3"], msg: str, fix: str) -> Finding:
        loc: tuple[str | int, ...] = tuple(fld.split(".")) + ("path",) if fld else ("inputs",)
        return Finding(rule=RULE, severity=sev, path=scope_path,
                       line=line_of(scope_text, loc, fmt="toml"),
                       field=f"{fld}.path" if fld else "inputs", message=msg, resolution=fix)

    try:
        found = refusals(refs)
    except ImportError:
        return [finding(None, "P3", "image references not checked against vLLM-Omni's upload "
                        "rules: Pillow is not installed", "install Pillow")]
    fix = ("convert the reference to a format and size vLLM-Omni accepts (video .mp4/.mov "
           "<= 50 MiB, audio .wav/.mp3 <= 15 MiB, image JPEG/PNG/WEBP/HEIC/HEIF <= 30 MiB) "
           "and pin its new SHA-256")
    return [finding(fld, "P2", f"vLLM-Omni 0.30.0 refuses this upload with HTTP 400: {msg}",
                    fix) for fld, msg in found]
