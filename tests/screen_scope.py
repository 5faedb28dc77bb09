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
