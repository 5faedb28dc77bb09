"""Builders for campaign scopes and receipts used by the status-header tests (plain data,
shaped like the seeds: 4 devices, tracks 5 s / 15 s lossless and lossy)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from evidence.models import CampaignScope, Receipt

SHA = "a" * 64
T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


def scope_dict(**over: Any) -> dict[str, Any]:
    """A valid campaign.toml as a dict; ``over`` replaces top-level keys."""
    d: dict[str, Any] = {
        "schema": "campaign-bot/campaign@1",
        "id": "h3-ref2va-4x910b1",
        "title": "MiniMax-H3 Ref2VA on 4x Ascend 910B1",
        "issue": 7,
        "engine": {"repo": "vllm-project/vllm-omni", "commit": "c7f56f01"},
        "image_digest": "sha256:" + SHA,
        "checkpoint": {"name": "MiniMaxAI/MiniMax-H3", "digest": SHA},
        "pool": {"name": "910b1-4x", "device_model": "Ascend910B1", "device_count": 4,
                 "memory_gib_per_device": 64},
        "inputs": {"prompt": "p", "reference_video": {"sha256": SHA},
                   "reference_audio": {"sha256": SHA}},
        "workload": {"width": 1344, "height": 768, "fps": 24, "seed": 0,
                     "num_inference_steps": 50, "flow_shift": 12.0},
        "serving": {"model": "MiniMaxAI/MiniMax-H3"},
        "tracks": [
            {"id": "5s-lossless", "duration_s": 5, "expected_frames": 124,
             "quality_mode": "lossless", "target_reduction": 0.3},
            {"id": "15s-lossless", "duration_s": 15, "expected_frames": 362,
             "quality_mode": "lossless", "target_reduction": 0.3},
            {"id": "5s-lossy", "duration_s": 5, "expected_frames": 124,
             "quality_mode": "lossy", "target_reduction": 0.3},
            {"id": "15s-lossy", "duration_s": 15, "expected_frames": 362,
             "quality_mode": "lossy", "target_reduction": 0.3},
        ],
        "protocol": {},
        "quality_gates": {
            "ssim_min": {"threshold": 0.97, "source": "seed 003"},
            "psnr_min_db": {"threshold": 34, "source": "seed 003"},
            "lpips_max": {"threshold": 0.2, "source": "seed 003"},
            "audio_spectral_cosine_min": {"threshold": 0.8, "source": "seed 003"},
            "audio_rms_ratio": {"low": 0.5, "high": 2.0, "source": "seed 003"},
            "audio_latent_rate_hz": {"threshold": 40, "source": "seed 000"},
        },
        "budget": {"candidate_directions": 6, "wall_hours": 40, "device_hours": 160},
        "requesters": ["amy-why-3459"],
        "candidates": [
            {"name": "resident-layers", "source": "vLLM-Omni#9698"},
            {"name": "tp2-sp2", "source": "upstream recipe"},
        ],
    }
    d.update(over)
    return d


def scope(**over: Any) -> CampaignScope:
    """A validated :class:`CampaignScope`."""
    return CampaignScope.model_validate(scope_dict(**over))


def lifecycle(clean: bool = True) -> dict[str, Any]:
    """A lifecycle block; unclean is seed 000's original 5 s baseline (4 terminate, 4 kill,
    workers alive)."""
    idle = {"idle": True}
    if clean:
        workers = [{"rank": i, "pid": 100 + i, "state": "exited", "exit_code": 0}
                   for i in range(4)]
        return {"workers": workers, "server_exit_code": 0, "container_exit_code": 0,
                "devices_idle_before": idle, "devices_idle_after": idle}
    workers = [{"rank": i, "pid": 100 + i, "state": "alive"} for i in range(4)]
    return {"workers": workers, "terminate_actions": 4, "kill_actions": 4,
            "server_exit_code": 0, "container_exit_code": 0,
            "devices_idle_before": idle, "devices_idle_after": idle}


def receipt(
    track: str,
    arm: str,
    seconds: float,
    *,
    session: str,
    screen: str = "scr-1",
    candidate: str | None = None,
    slot: int = 0,
    clean: bool = True,
    start: datetime = T0,
) -> Receipt:
    """One session receipt with one warmup and one measured request of ``seconds``."""
    end = start + timedelta(seconds=2 * seconds + 600)
    return Receipt.model_validate({
        "schema": "campaign-bot/receipt@1",
        "screen_id": screen, "session_id": session, "campaign": "h3-ref2va-4x910b1",
        "track": track, "arm": arm, "candidate": candidate, "slot": slot,
        "engine_revision": "c7f56f01", "config_digest": SHA if arm == "control" else "b" * 64,
        "devices": ["0", "1", "2", "3"],
        "started_at": start.isoformat(), "stopped_at": end.isoformat(),
        "requests": [
            {"index": 0, "kind": "warmup", "http_status": 200, "client_wall_s": seconds * 1.1},
            {"index": 1, "kind": "measured", "http_status": 200, "client_wall_s": seconds},
        ],
        "lifecycle": lifecycle(clean),
    })


def toml_dumps(d: dict[str, Any]) -> str:
    """A small TOML writer for scope dicts (str, int, float, bool, lists, tables, arrays of
    tables): enough for campaign.toml files in tests."""
    import json as _json

    def val(v: Any) -> str:
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, int | float):
            return repr(v)
        if isinstance(v, str):
            return _json.dumps(v)
        if isinstance(v, list):
            return "[" + ", ".join(val(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{" + ", ".join(f"{_json.dumps(k)} = {val(x)}" for k, x in v.items()) + "}"
        raise TypeError(type(v))

    lines: list[str] = []
    tables: list[tuple[str, Any]] = []
    for k, v in d.items():
        if isinstance(v, dict):
            tables.append((k, v))
        elif isinstance(v, list) and v and all(isinstance(x, dict) for x in v):
            tables.append((k, v))
        else:
            lines.append(f"{k} = {val(v)}")
    for k, v in tables:
        if isinstance(v, dict):
            lines.append(f"\n[{k}]")
            lines += [f"{kk} = {val(vv)}" for kk, vv in v.items()]
        else:
            for item in v:
                lines.append(f"\n[[{k}]]")
                lines += [f"{kk} = {val(vv)}" for kk, vv in item.items()]
    return "\n".join(lines) + "\n"


def campaign_files(
    root: str, receipts: list[Receipt], **scope_over: Any
) -> dict[str, bytes | str | None]:
    """Repository files of one campaign directory: campaign.toml and one JSON per receipt
    under ``receipts/``."""
    files: dict[str, bytes | str | None] = {
        f"{root}/campaign.toml": toml_dumps(scope_dict(**scope_over)),
        f"{root}/README.md": "Campaign evidence.\n",
    }
    for r in receipts:
        files[f"{root}/receipts/{r.screen_id}/{r.session_id}.json"] = r.model_dump_json(
            by_alias=True, exclude_none=True, indent=2
        )
    return files


def ab_screen(
    track: str, candidate: str, control_s: float, cand_s: float, *, screen: str,
    order: str = "ABBAAB", start: datetime = T0, clean_control: bool = True,
) -> list[Receipt]:
    """Receipts of one balanced screen: ``order`` sessions, control ~``control_s`` and
    candidate ~``cand_s`` seconds (small deterministic spread)."""
    out = []
    for slot, arm in enumerate(order):
        ctrl = arm == "A"
        base = control_s if ctrl else cand_s
        out.append(
            receipt(
                track, "control" if ctrl else "candidate", base + slot * 0.5,
                session=f"{screen}-s{slot}", screen=screen,
                candidate=None if ctrl else candidate, slot=slot,
                clean=clean_control or not ctrl,
                start=start + timedelta(hours=slot),
            )
        )
    return out
