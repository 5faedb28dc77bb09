"""Filling a ``campaign-bot init`` campaign skeleton as a user would (shared by the init and
the zero-to-screen tests)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

from bot.scaffold import blanks

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data" / "screen-campaign"

FILLED: dict[str, Any] = {
    "title": '"MiniMax-H3 Ref2VA on 2x910B1: 30% lower latency"',
    "requesters": '["amy"]',
    "image_digest": f'"sha256:{"7" * 64}"',
    "engine.commit": '"922f1e9f1cb85b9f2b66d86e1eb500e6872b2dcb"',
    "engine.version": '"0.30.0"',
    "checkpoint.name": '"MiniMaxAI/MiniMax-H3"',
    "checkpoint.digest": f'"{"0" * 64}"',
    "pool.device_model": '"Ascend910B1"',
    "pool.device_count": "2",
    "pool.memory_gib_per_device": "64",
    "pool.runner_labels": '["self-hosted", "ascend910b1", "x2"]',
    "pool.device_ids": "[0, 1]",
    "workload.width": "64",
    "workload.height": "64",
    "workload.num_inference_steps": "2",
    "serving.model": '"MiniMaxAI/MiniMax-H3/Ref2VA"',
    "tracks.expected_frames": "12",
    "budget.candidate_directions": "4",
    "budget.wall_hours": "8",
    "budget.device_hours": "16",
}


def fill(campaign_dir: Path, values: dict[str, str] | None = None) -> None:
    """Fill every blank of a skeleton as a user would: the input files beside it and their
    digests, then each ``# FILL`` line replaced by ``key = value``."""
    values = {**FILLED, **(values or {})}
    (campaign_dir / "prompt.txt").write_text("A short scene.\n")
    for f in ("ref.mp4", "ref.wav"):
        (campaign_dir / f).write_bytes((DATA / f).read_bytes())
    digest = {f: hashlib.sha256((campaign_dir / f).read_bytes()).hexdigest()
              for f in ("prompt.txt", "ref.mp4", "ref.wav")}
    text = (campaign_dir / "campaign.toml").read_text()
    lines = text.splitlines()
    for b in blanks(text):
        line = lines[b.line - 1]
        if b.key.startswith("inputs."):
            file = re.search(r'path = "([^"]+)"', line).group(1)  # type: ignore[union-attr]
            lines[b.line - 1] = re.sub(r'sha256 = ""', f'sha256 = "{digest[file]}"',
                                       line.split("#")[0]).rstrip()
        else:
            lines[b.line - 1] = f"{b.key.rsplit('.', 1)[-1]} = {values[b.key]}"
    (campaign_dir / "campaign.toml").write_text("\n".join(lines) + "\n")


