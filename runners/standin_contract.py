"""vLLM-Omni 0.30.0's request/response contract as the stand-in server (``runners.standin``)
applies it: form validation, reference rules, error bodies, request ids and the serve flag
table.  What passes the stand-in must pass upstream's own server code, and
``tests/test_upstream_contract.py`` compares the two servers' answers request by request.

Sources (files of the vllm-omni 0.30.0 and vllm 0.30.0 wheels):

* form fields and their types: ``_parse_video_form``,
  ``vllm_omni/entrypoints/openai/video/generation/helpers.py:852-1198``; model-level bounds:
  ``VideoGenerationRequest``, ``vllm_omni/entrypoints/openai/protocol/videos.py``;
* a field that fails FastAPI's form validation is a 400 whose message lists pydantic's
  errors: ``vllm/entrypoints/serve/exception_handling/handlers/validation.py``; a
  ``VideoGenerationRequest`` bound is a 400 ``BadRequestError`` with pydantic's text
  (``handlers/exception.py``); every ``HTTPException`` becomes
  ``{"error": {"message", "type": <HTTP phrase>, "param": null, "code"}}``
  (``handlers/http.py``), messages cleaned by ``sanitize_message``
  (``exception_handling/utils.py``);
* engine errors: ``_create_engine_error_json_response``,
  ``vllm_omni/entrypoints/serve/utils/errors.py:24-64``: 500 ``InternalServerError`` with
  ``request_id`` and ``error_stage_id`` in the body and no ``X-Request-Id`` header;
* sync request id ``video_sync-<random_uuid()>`` (16 hex), ``api_server.py:2730``; response
  headers ``X-Inference-Time-S`` and ``X-Peak-Memory-MB`` with three decimals,
  ``api_server.py:2770-2780``;
* reference upload rules: :mod:`evidence.reference_rules`; MiniMax H3's Ref2VA count rule
  (an ``OmniClientError``, HTTP 400): ``_validate_ref2va_reference_counts``,
  ``vllm_omni/model_executor/models/minimax_h3/encoder_processing.py:126-138``.
"""

from __future__ import annotations

import argparse
import json
import re
import uuid
from collections.abc import Callable
from http import HTTPStatus
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from evidence.reference_rules import count_refusal, media_kind, upload_refusal
from runners.upstream import load_flag_table

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
ENGINE_DEAD_MESSAGE = ("EngineCore encountered an issue. See stack trace (above) for the "
                       "root cause.")
"""``vllm.v1.engine.exceptions.EngineDeadError``'s message."""
ENGINE_DEAD_LOG = ("EngineDeadError: orchestrator_alive=N/A, errored=True, request_id={rid}, "
                   "error_stage_id=None")
"""The line upstream logs before answering an engine death (``serve/utils/errors.py:50``)."""

SecondStr = Annotated[str, StringConstraints(pattern=r"^[1-9]\d*$")]
SizeStr = Annotated[str, StringConstraints(pattern=r"^\d+x\d+$")]


class ContractError(Exception):
    """An HTTP error answer: ``status`` and the JSON ``body``."""

    def __init__(self, status: int, body: dict[str, Any]) -> None:
        super().__init__(body["error"]["message"] if "error" in body else str(body))
        self.status = status
        self.body = body


def sync_request_id() -> str:
    """``video_sync-`` + 16 hex digits, as upstream's ``/v1/videos/sync``."""
    return f"video_sync-{uuid.uuid4().hex[:16]}"


def sanitize_message(message: str) -> str:
    """vLLM's ``sanitize_message``: memory addresses, traceback lines and file paths out."""
    message = re.sub(r" at 0x[0-9a-f]+>", ">", message)
    message = re.sub(r'\n?\s*File "[^"]+", line \d+, in \S+(\n\s+.*)?', "", message)
    message = re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>",
                     message)
    message = re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


def error_body(status: int, message: str, *, type_: str | None = None,
               param: str | None = None) -> dict[str, Any]:
    """vLLM's ``ErrorResponse`` body: ``type`` defaults to the HTTP phrase."""
    return {"error": {"message": sanitize_message(message),
                      "type": type_ or HTTPStatus(status).phrase, "param": param,
                      "code": status}}


def http_error(status: int, message: str) -> ContractError:
    """What upstream's ``HTTPException(status, detail=message)`` answers."""
    return ContractError(status, error_body(status, message))


def engine_error(request_id: str, *, dead: bool, message: str = "") -> ContractError:
    """HTTP 500 for ``EngineDeadError`` / ``EngineGenerateError`` (request id in the body)."""
    body = error_body(500, ENGINE_DEAD_MESSAGE if dead else message,
                      type_="InternalServerError")
    body["error"].update(request_id=request_id, error_stage_id=None)
    return ContractError(500, body)


def timeout_error(sync_timeout_s: float) -> ContractError:
    """HTTP 504 after ``VLLM_OMNI_VIDEO_SYNC_TIMEOUT`` seconds (a float, printed as one)."""
    return http_error(504, f"Video generation timed out after {float(sync_timeout_s)}s.")


# ------------------------------------------------------------------------------ form layer


class _Form(BaseModel):
    """The text form fields of ``_parse_video_form`` that the stand-in reads, in upstream's
    order and with its FastAPI types."""

    model_config = ConfigDict(extra="ignore")
    prompt: str
    model: str | None = None
    seconds: SecondStr | None = None
    size: SizeStr | None = None
    user: str | None = None
    width: int | None = None
    height: int | None = None
    num_frames: int | None = None
    fps: Annotated[float | None, Field(ge=1.0, allow_inf_nan=False)] = None
    aspect_ratio: str | None = None
    short_edge: Annotated[int | None, Field(ge=1)] = None
    num_outputs_per_prompt: Annotated[int, Field(ge=1, le=10)] = 1
    start_time_seconds: Annotated[float | None, Field(ge=0.0)] = None
    quality: str | None = None
    num_inference_steps: int | None = None
    guidance_scale: float | None = None
    guidance_scale_2: float | None = None
    boundary_ratio: float | None = None
    flow_shift: float | None = None
    true_cfg_scale: float | None = None
    seed: int | None = None
    negative_prompt: str | None = None
    lora: str | None = None
    extra_params: str | None = None


class VideoGenerationRequest(BaseModel):
    """The model-level bounds of upstream's ``VideoGenerationRequest`` that apply to the
    fields above (its class name appears in pydantic's message, as upstream's does)."""

    model_config = ConfigDict(extra="ignore")
    width: Annotated[int | None, Field(ge=1, le=INT64_MAX)] = None
    height: Annotated[int | None, Field(ge=1, le=INT64_MAX)] = None
    num_frames: Annotated[int | None, Field(ge=1, le=INT64_MAX)] = None
    num_inference_steps: Annotated[int | None, Field(ge=1, le=200)] = None
    seed: Annotated[int | None, Field(ge=INT64_MIN, le=INT64_MAX)] = None


def _summarize_input(value: object) -> object:
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= 200 else text[:200] + "...[truncated]"


def _validation_error(exc: ValidationError) -> ContractError:
    errors = exc.errors(include_url=False)
    shown = []
    for e in errors[:10]:
        d: dict[str, Any] = {"type": e["type"], "loc": ".".join(["body", *map(str, e["loc"])]),
                             "msg": e["msg"]}
        d["input"] = "None" if e["type"] == "missing" else _summarize_input(e["input"])
        if "ctx" in e:
            d["ctx"] = e["ctx"]
        text = str(d)
        shown.append(text if len(text) <= 1000 else text[:1000] + "...[truncated]")
    label = "error" if len(errors) == 1 else "errors"
    message = f"{len(errors)} validation {label}:\n" + "".join(f"  {t}\n" for t in shown)
    if len(errors) > len(shown):
        message += f"  ...and {len(errors) - len(shown)} more {label}\n"
    return ContractError(400, error_body(400, message.rstrip(),
                                         param=".".join(["body", *map(str, errors[0]["loc"])])))


def _form_json(value: str | None) -> dict[str, Any] | None:
    if value is None or value == "":
        return None
    try:
        parsed = json.loads(value)
    except json.JSONDecodeError:
        raise http_error(400, "Invalid JSON in form field.") from None
    if not isinstance(parsed, dict):
        raise http_error(400, "Invalid JSON in form field: expected dict, got "
                              f"{type(parsed).__name__}.")
    return parsed


def parse_request(fields: dict[str, str], files: list[tuple[str, str, int]], *,
                  served_model: str, read: Callable[[int], bytes]) -> tuple[_Form, dict[str, Any]]:
    """Validate one ``/v1/videos/sync`` form the way upstream does, in upstream's order:
    form types, JSON fields, request bounds, model name, then the reference parts.

    ``fields``: text fields (empty values count as absent, as in FastAPI's form handling);
    ``files``: ``(filename, content type, size)`` of each ``input_references`` part;
    ``read(i)`` returns part ``i``'s bytes (called for image parts only).  Returns the
    validated form and ``extra_params``.  Raises :class:`ContractError` with upstream's
    status and body."""
    try:
        form = _Form.model_validate({k: v for k, v in fields.items() if v != ""})
    except ValidationError as exc:
        raise _validation_error(exc) from None
    _form_json(form.lora)
    extra = _form_json(form.extra_params) or {}
    try:
        VideoGenerationRequest.model_validate(form.model_dump(exclude_none=True))
    except ValidationError as exc:
        raise ContractError(400, error_body(400, str(exc), type_="BadRequestError")) from None
    if form.model is not None and form.model != served_model:
        raise http_error(400, f"Model mismatch: request specifies '{form.model}' but server is "
                              f"running '{served_model}'.")
    msg = count_refusal(len(files))
    if msg:
        raise http_error(400, msg)
    for i, (name, ctype, size) in enumerate(files):
        msg = upload_refusal(name, ctype, size, lambda i=i: read(i))  # type: ignore[misc]
        if msg:
            raise http_error(400, msg)
    return form, extra


def ref2va_refusal(extra: dict[str, Any], files: list[tuple[str, str, int]]) -> str | None:
    """MiniMax H3's Ref2VA reference-count rule (applied by the model, after the HTTP layer):
    the ``OmniClientError`` message, or None."""
    if extra.get("task") != "ref2va":
        return None
    kinds = [media_kind(name, ctype) for name, ctype, _ in files]
    images, videos, audios = (kinds.count(k) for k in ("image", "video", "audio"))
    if images + videos == 0:
        return "ref2va requires at least one image or video reference"
    if images > 9:
        return "ref2va accepts at most 9 image references"
    if videos > 3:
        return "ref2va accepts at most 3 video references"
    if audios > 3:
        return "ref2va accepts at most 3 standalone audio references"
    return None


# ---------------------------------------------------------------------------- flag parsing


def normalize_flag(arg: str) -> str:
    """vLLM's ``FlexibleArgumentParser``: underscores in a ``--name`` become dashes (up to
    the first ``.``; the value after ``=`` is kept)."""
    if not arg.startswith("--"):
        return arg
    key, eq, value = arg.partition("=")
    head, dot, tail = key[2:].partition(".")
    return "--" + head.replace("_", "-") + dot + tail + eq + value


def add_upstream_flags(parser: argparse.ArgumentParser, own: set[str]) -> argparse._ArgumentGroup:
    """Add every option of upstream's ``vllm serve --omni`` parser (``serve-flags.json``)
    that ``parser`` does not define itself (``own``), values accepted and not checked."""
    table = load_flag_table()
    group = parser.add_argument_group(
        f"vLLM-Omni {table.vllm_omni} serve flags (accepted, not acted on)")
    for opts in table.groups:
        opts = [o for o in opts if o not in own and o not in ("-h", "--help")]
        if not opts:
            continue
        nargs = table.actions[opts[0]]
        dest = "upstream_" + opts[0].lstrip("-").replace("-", "_").replace(".", "_")
        if nargs == 0:
            group.add_argument(*opts, dest=dest, action="store_true")
        elif nargs == 1:
            group.add_argument(*opts, dest=dest, metavar="V")
        else:
            group.add_argument(*opts, dest=dest, nargs=nargs, metavar="V")
    return group
