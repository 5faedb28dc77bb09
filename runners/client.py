"""The measured request: ``POST /v1/videos/sync`` as a streamed multipart upload, the MP4
streamed to disk, timed by the client from the first upload byte to the last MP4 byte.

Contract (``../shared/VLLM_OMNI.md`` §2): text fields ``prompt``, ``width``, ``height``,
``fps``, ``num_inference_steps``, ``seed``, ``flow_shift`` and ``extra_params`` (JSON:
``task``, ``duration``, ``audio_flow_shift``); the reference video and audio each as a
repeated ``input_references`` file part with its MIME type.  Response headers recorded:
``X-Request-Id``, ``X-Inference-Time-S``, ``X-Stage-Durations``, ``X-Peak-Memory-MB``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import httpx

from evidence.models import RequestRecord

READ_CHUNK = 1 << 20
ERROR_BODY_MAX = 2000


@dataclass
class FilePart:
    """A file part: form field name, path on disk, MIME type."""

    field: str
    path: Path
    mime: str


class MultipartBody:
    """A ``multipart/form-data`` body streamed from disk with a known Content-Length.

    Iterating yields the bytes in chunks of at most 1 MiB; ``first_byte_at`` is the
    ``time.perf_counter()`` value when the first chunk was handed to the transport."""

    def __init__(self, fields: list[tuple[str, str]], files: list[FilePart]) -> None:
        self.boundary = uuid.uuid4().hex
        self.fields = fields
        self.files = files
        self.first_byte_at: float | None = None

    def _field_head(self, name: str) -> bytes:
        return (f"--{self.boundary}\r\nContent-Disposition: form-data; "
                f'name="{name}"\r\n\r\n').encode()

    def _file_head(self, f: FilePart) -> bytes:
        return (f"--{self.boundary}\r\nContent-Disposition: form-data; name=\"{f.field}\"; "
                f"filename=\"{f.path.name}\"\r\nContent-Type: {f.mime}\r\n\r\n").encode()

    @property
    def content_type(self) -> str:
        return f"multipart/form-data; boundary={self.boundary}"

    def __len__(self) -> int:
        n = sum(len(self._field_head(k)) + len(v.encode()) + 2 for k, v in self.fields)
        n += sum(len(self._file_head(f)) + f.path.stat().st_size + 2 for f in self.files)
        return n + len(f"--{self.boundary}--\r\n")

    def __iter__(self) -> Iterator[bytes]:
        first = True

        def mark(b: bytes) -> bytes:
            nonlocal first
            if first:
                self.first_byte_at = time.perf_counter()
                first = False
            return b

        for k, v in self.fields:
            yield mark(self._field_head(k) + v.encode() + b"\r\n")
        for f in self.files:
            yield mark(self._file_head(f))
            with open(f.path, "rb") as fh:
                while chunk := fh.read(READ_CHUNK):
                    yield chunk
            yield b"\r\n"
        yield mark(f"--{self.boundary}--\r\n".encode())


def _float(v: str | None) -> float | None:
    if v is None:
        return None
    try:
        x = float(v)
    except ValueError:
        return None
    return x if math.isfinite(x) and x >= 0 else None


def _stages(v: str | None) -> dict[str, float]:
    if not v:
        return {}
    try:
        obj = json.loads(v)
    except json.JSONDecodeError:
        return {}
    out: dict[str, float] = {}
    if isinstance(obj, dict):
        for k, x in obj.items():
            if isinstance(x, int | float) and math.isfinite(x) and x >= 0:
                out[str(k)] = float(x)
    return out


def send_request(
    client: httpx.Client, url: str, *, index: int, kind: str,
    fields: list[tuple[str, str]], files: list[FilePart], out_path: Path, rel_path: str,
    timeout_s: float,
) -> RequestRecord:
    """Send one request and stream the answer to ``out_path``.

    Returns a :class:`RequestRecord`; never raises for HTTP or transport failures (they are
    recorded with ``error`` set, ``http_status`` None when no response arrived).  A non-200
    body is not kept as an output; its first 2000 characters go into ``error``.
    ``client_wall_s`` runs from the first upload byte to the last response byte."""
    body = MultipartBody(fields, files)
    started = datetime.now(UTC)
    t_send = time.perf_counter()
    rec: dict[str, object] = {"index": index, "kind": kind, "started_at": started}
    headers = {"Content-Type": body.content_type, "Content-Length": str(len(body))}
    timeout = httpx.Timeout(timeout_s, connect=30.0)
    sha = hashlib.sha256()
    size = 0
    try:
        with client.stream("POST", url, content=iter(body), headers=headers,
                           timeout=timeout) as resp:
            rec["http_status"] = resp.status_code
            rec["request_id"] = resp.headers.get("x-request-id")
            rec["server_inference_s"] = _float(resp.headers.get("x-inference-time-s"))
            rec["stage_durations"] = _stages(resp.headers.get("x-stage-durations"))
            rec["peak_memory_mb"] = _float(resp.headers.get("x-peak-memory-mb"))
            if resp.status_code == 200:
                out_path.parent.mkdir(parents=True, exist_ok=True)
                with open(out_path, "wb") as fh:
                    for chunk in resp.iter_raw(READ_CHUNK):
                        fh.write(chunk)
                        sha.update(chunk)
                        size += len(chunk)
                t_end = time.perf_counter()
                rec["output_path"] = rel_path
                rec["output_sha256"] = sha.hexdigest()
                rec["output_bytes"] = size
            else:
                text = resp.read()[:ERROR_BODY_MAX].decode("utf-8", "replace")
                t_end = time.perf_counter()
                rec["error"] = f"HTTP {resp.status_code}: {text}"
    except httpx.TimeoutException as exc:
        t_end = time.perf_counter()
        rec["error"] = f"client timeout after {timeout_s:g} s: {type(exc).__name__}"
        _drop(out_path)
        rec.pop("output_path", None)
    except httpx.TransportError as exc:
        t_end = time.perf_counter()
        rec["error"] = f"connection failed: {type(exc).__name__}: {exc}"
        _drop(out_path)
        rec.pop("output_path", None)
    t0 = body.first_byte_at if body.first_byte_at is not None else t_send
    rec["client_wall_s"] = max(0.0, t_end - t0)
    rec["finished_at"] = datetime.now(UTC)
    return RequestRecord.model_validate(rec)


def _drop(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
