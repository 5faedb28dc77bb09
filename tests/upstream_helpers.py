"""Shared helpers for tests that run vLLM-Omni's real server code (runners/upstream).

The upstream variants need the contract environment (``runners/upstream/
install-contract-venv.sh``, default ``.venv-upstream``, or ``$CAMPAIGN_BOT_UPSTREAM_VENV``).
Without it they skip with the reason below; ``CAMPAIGN_BOT_REQUIRE_UPSTREAM=1`` turns that skip
into a failure (for a CI that builds the environment).
"""

from __future__ import annotations

import json
import os
import shutil
import tomllib
from pathlib import Path
from typing import Any

import pytest
from screen_scope import toml_dumps

from runners import upstream

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "tests" / "data" / "screen-campaign"
STANDIN_ONLY = ("--ladder-s", "--max-frames")
"""Stand-in switches in the test campaign's serving flags; upstream's parser refuses them."""
UPSTREAM_INIT_TIMEOUT_S = 180.0
"""A server start is 12-15 s of imports on an idle 2-core machine; much more under load."""


def upstream_python() -> Path:
    """The contract environment's interpreter, or skip (fail with
    ``CAMPAIGN_BOT_REQUIRE_UPSTREAM=1``) naming the missing directory."""
    py = upstream.venv_python()
    if py is None:
        why = (f"upstream contract environment absent ({upstream.venv_dir()}); build it with "
               "runners/upstream/install-contract-venv.sh (2.5-4 min, 2.6 GB)")
        if os.environ.get(upstream.REQUIRE_ENV) == "1":
            pytest.fail(f"{upstream.REQUIRE_ENV}=1 but the {why}")
        pytest.skip(why)
    return py


def model_dir(root: Path) -> Path:
    """A local model directory upstream's ``validate()`` accepts as MiniMax H3 (only
    ``model_index.json``)."""
    d = root / "MiniMax-H3-fake"
    d.mkdir(parents=True, exist_ok=True)
    (d / "model_index.json").write_text(json.dumps(
        {"_class_name": "MiniMaxH3Pipeline", "_diffusers_version": "0.40.0"}) + "\n")
    return d


UPSTREAM_CANDIDATES: list[dict[str, Any]] = [
    {"name": "noop", "description": "Same config as control"},
    {"name": "oom-measured", "description": "The measured request fails: engine error (500)",
     "env": {"CAMPAIGN_BOT_FAKE_ENGINE_FAULT": "error", "CAMPAIGN_BOT_FAKE_ENGINE_FAULT_ON": "2"}},
    {"name": "timeout-504", "description": "Every request exceeds the server's sync timeout",
     "env": {"CAMPAIGN_BOT_FAKE_ENGINE_FAULT": "slow", "VLLM_OMNI_VIDEO_SYNC_TIMEOUT": "0.5"}},
    {"name": "worker-crash", "description": "The engine dies during the first request",
     "env": {"CAMPAIGN_BOT_FAKE_ENGINE_FAULT": "dead"}},
]
"""The test campaign's candidates that upstream can play, by fault environment variables
(the real parser has no stand-in switches)."""


def upstream_campaign(root: Path) -> Path:
    """A copy of the test campaign for upstream's server: the model is a local fake model
    directory, stand-in switches are dropped from the flags, the init timeout allows the
    import time, and the candidates use the launcher's fault modes."""
    dst = root / "upstream-campaign"
    dst.mkdir(parents=True, exist_ok=True)
    for f in ("ref.mp4", "ref.wav"):
        shutil.copy(CAMPAIGN / f, dst / f)
    scope = tomllib.loads((CAMPAIGN / "campaign.toml").read_text())
    serving = scope["serving"]
    serving["model"] = str(model_dir(root))
    serving["flags"] = [f for f in serving["flags"] if not f.startswith(STANDIN_ONLY)]
    serving["env"] = {"CAMPAIGN_BOT_FAKE_ENGINE_MAX_FRAMES": "12"}
    scope["protocol"]["init_timeout_s"] = UPSTREAM_INIT_TIMEOUT_S
    scope["candidates"] = UPSTREAM_CANDIDATES
    (dst / "campaign.toml").write_text(toml_dumps(scope))
    return dst
