"""A small valid campaign scope for the /screen tests (4-device pool, two tracks)."""

from __future__ import annotations

from typing import Any

from evidence.models import CampaignScope

H = "0" * 64


def scope_dict(**over: Any) -> dict[str, Any]:
    """campaign.toml content as a dict; ``over`` replaces top-level keys."""
    d: dict[str, Any] = {
        "schema": "campaign-bot/campaign@1",
        "id": "h3-ref2va",
        "title": "H3 Ref2VA on 4x910B1",
        "issue": 1,
        "engine": {"repo": "vllm-project/vllm-omni", "commit": "abcdef1", "version": "0.30.0"},
        "image_digest": "sha256:" + H,
        "checkpoint": {"name": "MiniMax-H3", "digest": H},
        "pool": {
            "name": "pool-4x910b1",
            "device_model": "Ascend910B1",
            "device_count": 4,
            "memory_gib_per_device": 64,
            "runner_labels": ["self-hosted", "ascend-4x910b1"],
            "device_ids": [0, 1, 2, 3],
        },
        "inputs": {
            "prompt": "a cat",
            "reference_video": {"path": "inputs/ref.mp4", "sha256": H, "mime": "video/mp4"},
            "reference_audio": {"path": "inputs/ref.wav", "sha256": H, "mime": "audio/wav"},
        },
        "workload": {
            "width": 1344, "height": 768, "fps": 24, "seed": 0,
            "num_inference_steps": 50, "flow_shift": 5.0,
        },
        "serving": {"model": "MiniMax/H3", "flags": ["--omni"]},
        "tracks": [
            {"id": "5s-lossless", "duration_s": 5, "expected_frames": 121,
             "quality_mode": "lossless", "target_reduction": 0.3},
            {"id": "15s-lossy", "duration_s": 15, "expected_frames": 362,
             "quality_mode": "lossy", "target_reduction": 0.3},
        ],
        "protocol": {"order": "ABBAAB", "warmups_per_session": 1,
                     "measured_requests_per_session": 1, "min_measured_sessions_per_arm": 3},
        "quality_gates": {
            "ssim_min": {"threshold": 0.98, "source": "test"},
            "psnr_min_db": {"threshold": 35, "source": "test"},
            "lpips_max": {"threshold": 0.05, "source": "test"},
            "audio_spectral_cosine_min": {"threshold": 0.99, "source": "test"},
            "audio_rms_ratio": {"low": 0.9, "high": 1.1, "source": "test"},
            "audio_latent_rate_hz": {"threshold": 40, "source": "test"},
        },
        "budget": {"candidate_directions": 2, "wall_hours": 16, "device_hours": 64},
        "requesters": ["amy"],
        "candidates": [{"name": "cache-dit"}, {"name": "fp8-attn"}, {"name": "teacache"}],
    }
    d.update(over)
    return d


def make_scope(**over: Any) -> CampaignScope:
    """A validated CampaignScope."""
    return CampaignScope.model_validate(scope_dict(**over))


def _val(v: Any) -> str:
    import json

    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_val(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {_val(x)}" for k, x in v.items()) + "}"
    raise TypeError(type(v))


def toml_dumps(d: dict[str, Any], prefix: str = "") -> str:
    """A small TOML writer for campaign dicts (tables, arrays of tables, scalars)."""
    lines: list[str] = []
    tables: list[tuple[str, Any]] = []
    for k, v in d.items():
        if isinstance(v, dict) and not prefix.count(".") > 2:
            tables.append((k, v))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((k, v))
        else:
            lines.append(f"{k} = {_val(v)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in tables:
        name = f"{prefix}{k}"
        if isinstance(v, dict):
            inner = {a: b for a, b in v.items() if not isinstance(b, dict)}
            sub = {a: b for a, b in v.items() if isinstance(b, dict)}
            out += f"\n[{name}]\n" + toml_dumps(inner, name + ".")
            for a, b in sub.items():
                out += f"\n[{name}.{a}]\n" + toml_dumps(b, f"{name}.{a}.")
        else:
            for item in v:
                out += f"\n[[{name}]]\n" + toml_dumps(item, name + ".")
    return out
