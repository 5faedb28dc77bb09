"""A synthetic campaign directory for the dashboard's tests and benchmark.

:func:`write_campaign` copies the example campaign's ``campaign.toml`` (campaign #320's
frozen scope) and writes ``screens`` screens of ``sessions`` sessions each as receipt JSON
files, in the protocol's ABBAAB order, spread over time so that control drift and budget
burn-down have something to show.  Every value is deterministic (no clock, no randomness), so
tests can compute the expected number of chart marks from the same plan.

Mixed in on purpose, at fixed screens:

- every 7th screen's candidate is slower than the futility margin (a screening REJECT);
- every 11th screen has a candidate session whose lifecycle failed (a worker killed by
  signal 9, the container exit 137);
- every 13th screen has a candidate measured request that failed (HTTP 500, no time);
- every session has one warmup, timed, never counted.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_SCOPE = ROOT / "examples" / "h3-ref2va-4x910b1" / "campaign.toml"
COMMIT = "922f1e9f1cb85b9f2b66d86e1eb500e6872b2dcb"
INPUTS = {
    "prompt": "1befe3f5646b879dc61fcf90ffe027fe2cde8ac3b0f5c3ec00be5cdf2ff3b47c",
    "reference_video": "d6edc20ac82aa980c9cbd0b05b371f60d12dc8d018492e571b42de0086819c41",
    "reference_audio": "2a48d447b343b38a2c504d5281a0c97c688db0ba87931ed9282c598bd6752454",
}
TRACKS = ("5s-lossless", "15s-lossless", "5s-lossy", "15s-lossy")
CANDIDATES = ("resident-layers-24", "tp2-sp2", "tp4-sp1-resident-dit", "task-queue-l2")
ORDER = "ABBAAB"
T0 = datetime(2026, 11, 4, 8, 0, tzinfo=UTC)


def sha(text: str) -> str:
    """A deterministic SHA-256 hex digest of ``text``."""
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class Plan:
    """What :func:`write_campaign` wrote, for tests that count chart marks."""

    root: Path
    screens: list[str]
    receipts: int
    measured_timed: dict[str, dict[str, int]]
    """screen id -> arm -> measured requests with a client wall time."""
    warmups_timed: dict[str, int]
    """screen id -> warmup requests with a client wall time."""
    control_sessions: dict[str, list[str]]
    """pool -> control session ids with a session median (all screens)."""


def _lifecycle(failed: bool) -> dict[str, Any]:
    workers = [{"rank": i, "pid": 4000 + i, "name": "DiffusionWorker", "state": "exited",
                "exit_code": 0} for i in range(4)]
    out: dict[str, Any] = {"workers": workers, "server_exit_code": 0,
                           "container_exit_code": 0,
                           "devices_idle_before": {"idle": True},
                           "devices_idle_after": {"idle": True}}
    if failed:
        workers[2].update(exit_code=None, signal=9)
        out.update(kill_actions=1, container_exit_code=137,
                   forced_actions=["SIGKILL to worker rank 2 after the 60 s grace period"])
    return out


def write_campaign(root: Path, screens: int = 12, sessions: int = len(ORDER)) -> Plan:
    """Write a campaign of ``screens`` x ``sessions`` receipts under ``root`` (created).

    Session ``k`` of a screen takes arm ``ORDER[k % 6]``.  Returns the :class:`Plan`.
    """
    root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(EXAMPLE_SCOPE, root / "campaign.toml")
    ids: list[str] = []
    measured: dict[str, dict[str, int]] = {}
    warm: dict[str, int] = {}
    controls: list[str] = []
    n = 0
    for i in range(screens):
        track = TRACKS[i % len(TRACKS)]
        cand = CANDIDATES[(i // len(TRACKS)) % len(CANDIDATES)]
        long = track.startswith("15s")
        sid = f"screen-{i:03d}-{cand}-{track}"
        ids.append(sid)
        measured[sid] = {"control": 0, "candidate": 0}
        warm[sid] = 0
        base = (520.0 if long else 173.0) * (1 + 0.0004 * i)  # slow control drift
        ratio = 1.32 if i % 7 == 3 else (0.62 + 0.01 * (i % 5))
        start = T0 + timedelta(hours=3 * i)
        out_sha = sha(f"output-{track}")
        for k in range(sessions):
            arm = "control" if ORDER[k % len(ORDER)] == "A" else "candidate"
            wobble = 1 + 0.004 * ((k * 7 + i * 3) % 5 - 2)
            wall = round(base * (ratio if arm == "candidate" else 1.0) * wobble, 3)
            t = start + timedelta(minutes=25 * k)
            failed_lc = arm == "candidate" and i % 11 == 5 and k == 1
            failed_req = arm == "candidate" and i % 13 == 6 and k == 2
            reqs: list[dict[str, Any]] = [
                {"index": 0, "kind": "warmup", "http_status": 200,
                 "client_wall_s": round(wall * 1.4, 3), "output_sha256": sha(f"warm-{track}"),
                 "started_at": (t + timedelta(minutes=4)).isoformat(),
                 "finished_at": (t + timedelta(minutes=8)).isoformat()}]
            req: dict[str, Any] = {"index": 1, "kind": "measured", "http_status": 200,
                                   "client_wall_s": wall, "server_inference_s": wall - 2.5,
                                   "output_sha256": out_sha}
            if failed_req:
                req = {"index": 1, "kind": "measured", "http_status": 500,
                       "client_wall_s": None, "error": "HCCL timeout in the VAE decode"}
            reqs.append(req)
            warm[sid] += 1
            if req["client_wall_s"] is not None:
                measured[sid][arm] += 1
                if arm == "control":
                    controls.append(f"{sid}-s{k}")
            doc = {
                "schema": "campaign-bot/receipt@1", "screen_id": sid,
                "session_id": f"{sid}-s{k}", "campaign": "h3-ref2va-4x910b1",
                "track": track, "arm": arm,
                "candidate": cand if arm == "candidate" else None,
                "slot": k, "order": ORDER, "engine_revision": COMMIT,
                "config_digest": sha("control-config" if arm == "control" else f"cfg-{cand}"),
                "input_digests": INPUTS, "pool": "ascend910b1-x4",
                "devices": ["npu:0", "npu:1", "npu:2", "npu:3"],
                "started_at": t.isoformat(),
                "ready_at": (t + timedelta(minutes=4)).isoformat(),
                "stopped_at": (t + timedelta(minutes=20)).isoformat(),
                "requests": reqs, "lifecycle": _lifecycle(failed_lc),
            }
            path = root / "receipts" / sid / f"s{k}-{arm}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(doc, indent=2) + "\n")
            n += 1
    return Plan(root, ids, n, measured, warm, {"ascend910b1-x4": controls})
