"""The measured request: ``POST /v1/videos/sync`` as a streamed multipart upload, the MP4
streamed to disk, timed by the client from the first upload byte to the last MP4 byte.

Contract (vLLM-Omni 0.30.0, ``vllm_omni/entrypoints/openai/api_server.py``
``create_video_sync`` and ``video/generation/helpers.py`` ``_parse_video_form``): text fields
``prompt``, ``width``, ``height``, ``fps``, ``num_inference_steps``, ``seed``, ``flow_shift``
and ``extra_params`` (JSON: ``task``, ``duration``, ``audio_flow_shift``); the reference video
and audio each as a repeated ``input_references`` file part with its MIME type.  Response
headers recorded: ``X-Request-Id``, ``X-Inference-Time-S``, ``X-Stage-Durations``,
``X-Peak-Memory-MB``.  An error answer carries no ``X-Request-Id``; its body is vLLM's
``{"error": {"message", "type", "param", "code"}}``, and an engine error (HTTP 500) adds
``request_id`` there (``vllm_omni/entrypoints/serve/utils/errors.py``), which is recorded.
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
ERROR_READ_MAX = 64 << 10
"""At most this many bytes of an error body are read (a hostile server cannot make the
runner buffer a huge one)."""
REQUEST_ID_MAX = 200


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


def parse_error_body(status: int, raw: bytes) -> tuple[str, str | None]:
    """The recorded ``error`` text and the request id found in an error body.

    vLLM's envelope ``{"error": {"message", "type", ...}}`` gives ``"HTTP 500
    InternalServerError: <message>"`` and ``error.request_id`` (a printable string of at most
    200 characters, else ignored); FastAPI's ``{"detail": ...}`` gives ``"HTTP 404: <detail>"``;
    anything else keeps the first 2000 characters of the body as text."""
    text = raw.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        doc = None
    rid: str | None = None
    if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
        err = doc["error"]
        message = str(err.get("message") or "(no message)")
        kind = err.get("type")
        head = f"HTTP {status} {kind}" if isinstance(kind, str) and kind else f"HTTP {status}"
        got = err.get("request_id")
        if isinstance(got, str) and 0 < len(got) <= REQUEST_ID_MAX and got.isprintable():
            rid = got
        return f"{head}: {message}"[:ERROR_BODY_MAX], rid
    if isinstance(doc, dict) and "detail" in doc:
        return f"HTTP {status}: {doc['detail']}"[:ERROR_BODY_MAX], None
    return f"HTTP {status}: {text[:ERROR_BODY_MAX]}", None


def _read_capped(resp: httpx.Response, limit: int) -> bytes:
    buf = bytearray()
    for chunk in resp.iter_raw(READ_CHUNK):
        buf += chunk
        if len(buf) >= limit:
            break
    return bytes(buf[:limit])


def send_request(
    client: httpx.Client, url: str, *, index: int, kind: str,
    fields: list[tuple[str, str]], files: list[FilePart], out_path: Path, rel_path: str,
    timeout_s: float,
) -> RequestRecord:
    """Send one request and stream the answer to ``out_path``.

    Returns a :class:`RequestRecord`; never raises for HTTP or transport failures (they are
    recorded with ``error`` set, ``http_status`` None when no response arrived).  A non-200
    body is not kept as an output; :func:`parse_error_body` turns it into ``error`` and, when
    the header is missing, the body's request id into ``request_id``.
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
                raw = _read_capped(resp, ERROR_READ_MAX)
                t_end = time.perf_counter()
                rec["error"], body_id = parse_error_body(resp.status_code, raw)
                if rec["request_id"] is None:
                    rec["request_id"] = body_id
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
