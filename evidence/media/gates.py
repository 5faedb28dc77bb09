"""Where the thresholds come from: the campaign scope, a gates file, or the defaults.

Every threshold carries its source (a :class:`~evidence.models.Gate` with ``source``).  The
defaults are the thresholds the MiniMax-H3 campaigns adopted (campaign #293's frozen scope,
"Quality gates"): SSIM >= 0.97 and PSNR >= 34 dB from the upstream H3 reference test (ffmpeg
filter convention), LPIPS <= 0.20, audio spectral cosine >= 0.80 and RMS ratio in [0.50, 2.00] from
the upstream H3 quantization test, and the 40 Hz audio-latent rate of vLLM-Omni 0.30.0
``time_request.py``.
"""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from evidence import safejson
from evidence.media.errors import MediaInputError
from evidence.models import CampaignScope, Gate, QualityGates, RangeGate

_H3_REF = ("vLLM-Omni MiniMax-H3 reference test (ffmpeg ssim/psnr), adopted in campaign #293 "
           "frozen scope")
_H3_QUANT = "vLLM-Omni MiniMax-H3 quantization test, adopted in campaign #293 frozen scope"

DEFAULT_GATES = QualityGates(
    ssim_min=Gate(threshold=0.97, source=_H3_REF),
    psnr_min_db=Gate(threshold=34.0, source=_H3_REF),
    lpips_max=Gate(threshold=0.20,
                   source="campaign #293 frozen scope quality gates (LPIPS AlexNet v0.1)"),
    audio_spectral_cosine_min=Gate(threshold=0.80, source=_H3_QUANT),
    audio_rms_ratio=RangeGate(low=0.5, high=2.0, source=_H3_QUANT),
    audio_latent_rate_hz=Gate(threshold=40.0,
                              source="vLLM-Omni 0.30.0 MiniMax-H3 time_request.py (40 Hz)"),
)
"""Defaults used when neither ``--campaign`` nor ``--gates`` is given (sources inline)."""


def _errors(exc: ValidationError) -> str:
    parts = []
    for e in exc.errors():
        loc = ".".join(str(x) for x in e["loc"])
        parts.append(f"{loc}: {e['msg']}")
    return "; ".join(parts)


def _read_mapping(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise MediaInputError(path, "gates file not found")
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        if path.suffix.lower() == ".json":
            data = safejson.loads(text)
        else:
            data = tomllib.loads(text)
    except json.JSONDecodeError as exc:
        raise MediaInputError(path, f"invalid JSON at line {exc.lineno}: {exc.msg}") from exc
    except safejson.JSONTooDeep as exc:
        raise MediaInputError(path, str(exc)) from None
    except tomllib.TOMLDecodeError as exc:
        raise MediaInputError(path, f"invalid TOML: {exc}") from exc
    except RecursionError:
        raise MediaInputError(path, "nested too deeply to read") from None
    except ValueError as exc:  # e.g. an integer over Python's 4300-digit limit
        raise MediaInputError(path, f"not readable: {exc}") from None
    if not isinstance(data, dict):
        raise MediaInputError(path, "expected a table of gates at the top level")
    return data


def load_gates_file(path: Path) -> QualityGates:
    """Read quality gates from a TOML or JSON file (``.json`` suffix: JSON).

    The file holds the :class:`~evidence.models.QualityGates` fields either at the top level
    or under ``[quality_gates]`` (so a ``campaign.toml`` works too).  Raises
    :class:`MediaInputError` naming the file and the field for any problem.
    """
    path = Path(path)
    data = _read_mapping(path)
    if "quality_gates" in data:
        data = data["quality_gates"]
    try:
        return QualityGates.model_validate(data)
    except ValidationError as exc:
        raise MediaInputError(path, f"bad quality gates: {_errors(exc)}") from exc


def load_campaign_scope(campaign_dir: Path) -> CampaignScope:
    """Read and validate ``campaign.toml`` in ``campaign_dir``.

    Raises :class:`MediaInputError` naming the file and the failing fields.
    """
    campaign_dir = Path(campaign_dir)
    path = campaign_dir / "campaign.toml" if campaign_dir.is_dir() else campaign_dir
    if not path.is_file():
        raise MediaInputError(path, "campaign.toml not found")
    data = _read_mapping(path)
    try:
        return CampaignScope.model_validate(data)
    except ValidationError as exc:
        raise MediaInputError(path, f"invalid campaign scope: {_errors(exc)}") from exc
