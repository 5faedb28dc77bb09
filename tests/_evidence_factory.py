"""Builders of valid scopes, receipts and media reports for the verdict/finding tables.

Each builder returns a valid model; tests change one thing at a time (``model_copy`` with
``update`` or the keyword arguments) so every table row says exactly what it breaks.
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

from evidence.models import (
    BitExact,
    CampaignScope,
    InputFile,
    MediaCheck,
    MediaMetric,
    MediaReport,
    Receipt,
)

COMMIT = "922f1e9f1cb85b9f2b66d86e1eb500e6872b2dcb"


def sha(s: str) -> str:
    """A deterministic SHA-256 hex digest of ``s``."""
    return hashlib.sha256(s.encode()).hexdigest()


PROMPT, VIDEO, AUDIO = sha("prompt"), sha("video"), sha("audio")
CTRL_CFG, CAND_CFG = sha("control-config"), sha("candidate-config")

SCOPE_DATA: dict[str, Any] = {
    "schema": "campaign-bot/campaign@1",
    "id": "h3-test",
    "title": "test campaign",
    "engine": {"repo": "vllm-project/vllm-omni", "commit": COMMIT},
    "image_digest": "sha256:" + sha("image"),
    "checkpoint": {"name": "MiniMax-H3", "digest": sha("ckpt")},
    "pool": {"name": "4x910b1", "device_model": "Ascend910B1", "device_count": 4,
             "memory_gib_per_device": 64},
    "inputs": {"prompt": "a cat", "prompt_sha256": PROMPT,
               "reference_video": {"sha256": VIDEO}, "reference_audio": {"sha256": AUDIO}},
    "workload": {"width": 1344, "height": 768, "fps": 24, "seed": 0,
                 "num_inference_steps": 50, "flow_shift": 12.0},
    "serving": {"model": "MiniMaxAI/MiniMax-H3"},
    "tracks": [
        {"id": "5s-lossless", "duration_s": 5, "expected_frames": 121,
         "quality_mode": "lossless", "target_reduction": 0.30},
        {"id": "15s-lossy", "duration_s": 15, "expected_frames": 362,
         "quality_mode": "lossy", "target_reduction": 0.30},
    ],
    "protocol": {"order": "ABBAAB", "warmups_per_session": 1,
                 "measured_requests_per_session": 1, "min_measured_sessions_per_arm": 3},
    "quality_gates": {
        "ssim_min": {"threshold": 0.97, "source": "upstream H3 reference test"},
        "psnr_min_db": {"threshold": 34, "source": "upstream H3 reference test"},
        "lpips_max": {"threshold": 0.20, "source": "campaign"},
        "audio_spectral_cosine_min": {"threshold": 0.80, "source": "upstream quant test"},
        "audio_rms_ratio": {"low": 0.5, "high": 2.0, "source": "upstream quant test"},
        "audio_latent_rate_hz": {"threshold": 40, "source": "validator v2"},
    },
    "budget": {"candidate_directions": 12, "wall_hours": 16, "device_hours": 64},
    "requesters": ["amy"],
    "candidates": [{"name": "rank-local"}, {"name": "resident-24"}],
}


def scope(**update: Any) -> CampaignScope:
    """The test campaign scope; ``protocol`` keys may be given as ``protocol={...}``."""
    data = {**SCOPE_DATA}
    if "protocol" in update:
        data["protocol"] = {**data["protocol"], **update.pop("protocol")}
    data.update(update)
    return CampaignScope.model_validate(data)


T0 = datetime(2026, 11, 20, tzinfo=UTC)


def lifecycle(**kw: Any) -> dict[str, Any]:
    """A clean lifecycle (4 workers exit 0, devices idle), with overrides."""
    base: dict[str, Any] = {
        "workers": [{"rank": i, "pid": 100 + i, "state": "exited", "exit_code": 0}
                    for i in range(4)],
        "server_exit_code": 0, "container_exit_code": 0,
        "devices_idle_before": {"idle": True}, "devices_idle_after": {"idle": True},
    }
    base.update(kw)
    return base


def receipt(
    arm: str,
    slot: int,
    wall: float | list[float],
    *,
    screen: str = "s1",
    track: str = "5s-lossless",
    candidate: str | None = "rank-local",
    output: str | None = None,
    warmups: int = 1,
    media_reports: list[str] | None = None,
    order: str | None = "ABBAAB",
    **update: Any,
) -> Receipt:
    """One clean session.  ``output`` names the measured output (hashed); by default all
    outputs of a track are identical (bit-exact and repeatable)."""
    walls = wall if isinstance(wall, list) else [wall]
    out_sha = sha(output or f"out-{track}")
    reqs: list[dict[str, Any]] = []
    for i in range(warmups):
        reqs.append({"index": i, "kind": "warmup", "http_status": 200, "client_wall_s": 999.0,
                     "output_sha256": sha(f"warm-{i}")})
    for j, w in enumerate(walls):
        reqs.append({"index": warmups + j, "kind": "measured", "http_status": 200,
                     "client_wall_s": w, "output_sha256": out_sha})
    data: dict[str, Any] = {
        "schema": "campaign-bot/receipt@1",
        "screen_id": screen,
        "session_id": f"{screen}-{track}-{slot}",
        "campaign": "h3-test",
        "track": track,
        "arm": arm,
        "candidate": candidate if arm == "candidate" else None,
        "slot": slot,
        "order": order,
        "engine_revision": COMMIT,
        "config_digest": CTRL_CFG if arm == "control" else CAND_CFG,
        "input_digests": {"prompt": PROMPT, "reference_video": VIDEO, "reference_audio": AUDIO},
        "pool": "4x910b1",
        "started_at": (T0 + timedelta(hours=slot)).isoformat(),
        "requests": reqs,
        "lifecycle": lifecycle(),
        "media_reports": media_reports or [],
    }
    data.update(update)
    return Receipt.model_validate(data)


def screen(
    control: list[float],
    candidate: list[float],
    *,
    order: str | None = None,
    ctrl_outputs: list[str] | None = None,
    cand_outputs: list[str] | None = None,
    ctrl_kw: dict[str, Any] | None = None,
    cand_kw: dict[str, Any] | None = None,
    **kw: Any,
) -> list[Receipt]:
    """Sessions of one screen in ``order`` (default: ABBA... alternating pairs, long enough).
    control[i] / candidate[j] are the session medians, assigned in slot order;
    ``*_outputs`` name each session's output; ``*_kw`` update one arm's receipts."""
    if order is None:
        base = "ABBA" * ((len(control) + len(candidate)) // 4 + 1)
        order = _fit(base, len(control), len(candidate))
    ci = ti = 0
    out = []
    for slot, ch in enumerate(order):
        if ch == "A":
            extra = dict(kw, **(ctrl_kw or {}))
            if ctrl_outputs:
                extra["output"] = ctrl_outputs[ci]
            out.append(receipt("control", slot, control[ci], order=order, **extra))
            ci += 1
        else:
            extra = dict(kw, **(cand_kw or {}))
            if cand_outputs:
                extra["output"] = cand_outputs[ti]
            out.append(receipt("candidate", slot, candidate[ti], order=order, **extra))
            ti += 1
    return out


def _fit(base: str, m: int, n: int) -> str:
    out, a, b = [], m, n
    for ch in base:
        if ch == "A" and a:
            out.append(ch)
            a -= 1
        elif ch == "B" and b:
            out.append(ch)
            b -= 1
    out += ["A"] * a + ["B"] * b
    return "".join(out)


def lossless_report(ctrl: str, cand: str, equal: bool, pcm: bool | None = True) -> MediaReport:
    """A lossless media report comparing two named outputs."""
    return MediaReport.model_validate({
        "validator_version": "media-gates/2",
        "control": InputFile(sha256=sha(ctrl)).model_dump(),
        "candidate": InputFile(sha256=sha(cand)).model_dump(),
        "mode": "lossless",
        "bit_exact": BitExact(frames_equal=equal, pcm_equal=pcm if equal else pcm).model_dump(),
        "passed": equal,
    })


def lossy_report(ctrl: str, cand: str, *, structural_ok: bool = True,
                 **values: float | None) -> MediaReport:
    """A lossy report with passing metric values unless overridden (e.g. ``lpips=0.3``)."""
    vals: dict[str, float | None] = {"ssim_all": 0.99, "psnr_avg_db": 40.0, "lpips": 0.05,
                                     "audio_spectral_cosine": 0.95, "audio_rms_ratio": 1.0}
    vals.update(values)
    return MediaReport.model_validate({
        "validator_version": "media-gates/2",
        "control": {"sha256": sha(ctrl)},
        "candidate": {"sha256": sha(cand)},
        "mode": "lossy",
        "structural": [MediaCheck(name="frame_count", passed=structural_ok).model_dump()],
        "metrics": [MediaMetric(name=k, value=v).model_dump() for k, v in vals.items()],
        "passed": True,
    })


def as_items(receipts: list[Receipt], prefix: str = "receipts") -> list[Any]:
    """Receipts as they come from disk: path ``prefix/<session>.json`` and indented JSON."""
    from evidence.verdicts import ReceiptIn

    return [ReceiptIn(r, f"{prefix}/{r.session_id}.json",
                      r.model_dump_json(by_alias=True, indent=2, exclude_none=True))
            for r in receipts]


def line_containing(text: str, needle: str) -> int:
    """1-based number of the first line of ``text`` containing ``needle``."""
    for i, line in enumerate(text.split("\n"), 1):
        if needle in line:
            return i
    raise AssertionError(f"{needle!r} not in text")
