"""Operator probes: ``campaign-bot/probe@1``, an operator-level screen on actual shapes.

Campaigns screen operators before spending device hours on a model A/B: campaign #320
rejected an alternative dense attention kernel at "201.82 ms Laser vs 311.75 ms fused
score", found combined QKV "17.24 ms separate vs 18.78 ms combined", and saw a fused
projection go "35.431 -> 29.126 ms and 39.929 -> 29.230 ms, but every rank was nonexact, so
it is not promoted as lossless".  A probe document records such a screen: the operator or
kernel names of control and candidate, the tensor shapes and dtypes, the device and device
count, the engine revision, per-rank timings (milliseconds; repeated samples, warmups kept
apart) and per-rank exactness (bit-exact, max absolute and relative difference, finite).

A probe is never an input to a verdict: its gain is an operator observation, not an
end-to-end or model gain.  Two review rules guard that
(:func:`evidence.probe_rules.probe_findings`):

- ``PROBE_GAIN_AS_MODEL_GAIN`` (P1): prose (``check --claims``) quotes a probe's timing or
  gain on a line that frames it as an end-to-end, model or overall gain (campaign #320's own
  wording is the resolution: "these are operator observations, not model gains").
- ``PROBE_NONEXACT_LOSSLESS`` (P1): a probe that claims ``lossless``, or screens a candidate
  for a lossless track (the probe's own ``track``, or any receipt of its candidate on a
  lossless track), is not bit-exact with finite outputs on every rank.

Numbers in prose that equal a probe's medians (ms) or its gain are traced to the probe as
operator observations, so they are not UNTRACEABLE_CLAIM.
"""

from __future__ import annotations

import math
import statistics
from datetime import datetime
from typing import Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from evidence.models import Strict, _check_schema, _finite_nonneg, schema_field

Millis = Annotated[float, AfterValidator(_finite_nonneg)]
"""A finite, non-negative duration in milliseconds."""


class OperatorArm(Strict):
    """What one arm runs: the operator (``LaserAttention``, ``torch.matmul``) and the
    device kernels it launched, when known (``MatMulV3``, ``FlashAttentionScore``)."""

    operator: str = Field(min_length=1)
    kernels: list[str] = Field(default_factory=list)
    source: str | None = Field(default=None, description="Attribution: PR, commit, library.")


class TensorSpec(Strict):
    """One input or output tensor: name, shape (elements per dimension) and dtype."""

    name: str
    shape: list[Annotated[int, Field(ge=0)]]
    dtype: str = Field(description="e.g. 'bfloat16', 'float16', 'float32'.")


class RankTiming(Strict):
    """Timings of one arm on one rank, milliseconds.  Warmups are apart and never counted."""

    rank: int = Field(ge=0)
    arm: str = Field(pattern=r"^(control|candidate)$")
    warmups_ms: list[Millis] = Field(default_factory=list)
    samples_ms: list[Millis] = Field(min_length=1, description="Measured repetitions.")

    @property
    def median_ms(self) -> float:
        """Median of the measured samples (ms)."""
        return statistics.median(self.samples_ms)


class RankExactness(Strict):
    """Candidate output against control output on one rank.

    ``max_abs_diff`` is ``max |candidate - control|`` over every element (computed in
    float64); ``max_rel_diff`` is ``max_abs_diff / max |control|`` (0 when both are zero):
    relative to the output's scale, so values near zero do not blow it up.  ``finite``:
    both outputs free of NaN and infinity.  Bit-exact needs equal shapes, dtypes and bytes.
    """

    rank: int = Field(ge=0)
    bit_exact: bool
    max_abs_diff: Annotated[float, AfterValidator(_finite_nonneg)] | None = Field(
        default=None, description="None when not comparable (shapes differ, non-finite).")
    max_rel_diff: Annotated[float, AfterValidator(_finite_nonneg)] | None = None
    finite: bool
    elements: int = Field(ge=0, description="Elements compared.")
    detail: str | None = None


class OperatorProbe(Strict):
    """``campaign-bot/probe@1``: one operator-level screen of a candidate against control."""

    schema_: str = schema_field("probe", 1)
    probe_id: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    campaign: str | None = None
    candidate_name: str | None = Field(
        default=None, description="The campaign candidate this probe screens, if any.")
    track: str | None = Field(default=None, description="The track the candidate targets.")
    claims_lossless: bool = Field(
        default=False, description="The candidate is offered as lossless (exact).")
    control: OperatorArm
    candidate: OperatorArm
    inputs: list[TensorSpec] = Field(min_length=1)
    outputs: list[TensorSpec] = Field(default_factory=list)
    device: str = Field(description="e.g. 'Ascend910B1', 'NVIDIA H200', 'cpu'.")
    device_count: int = Field(ge=1)
    revision: str = Field(min_length=1, description="Engine or code revision probed.")
    warmups: int = Field(ge=0, description="Warmup calls per arm and rank.")
    repeats: int = Field(ge=1, description="Measured calls per arm and rank.")
    timer: str = Field(description="How a call was timed, e.g. 'perf_counter_ns around the "
                       "call with a device synchronize before and after'.")
    timings: list[RankTiming] = Field(min_length=2)
    exactness: list[RankExactness] = Field(min_length=1)
    created_at: datetime
    notes: str | None = None

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        return _check_schema(v, "campaign-bot/probe@1")

    @model_validator(mode="after")
    def _per_rank(self) -> OperatorProbe:
        ranks = set(range(self.device_count))
        for arm in ("control", "candidate"):
            got = sorted(t.rank for t in self.timings if t.arm == arm)
            if sorted(set(got)) != got:
                raise ValueError(f"timings: rank listed twice for {arm}")
            if set(got) != ranks:
                raise ValueError(f"timings: {arm} needs exactly ranks 0..{self.device_count - 1}"
                                 f", got {got}")
        ex = sorted(e.rank for e in self.exactness)
        if ex != sorted(ranks):
            raise ValueError(f"exactness: needs exactly one entry per rank 0.."
                             f"{self.device_count - 1}, got {ex}")
        for t in self.timings:
            if len(t.samples_ms) != self.repeats or len(t.warmups_ms) != self.warmups:
                raise ValueError(f"timings: rank {t.rank} {t.arm} has {len(t.warmups_ms)} "
                                 f"warmup(s) and {len(t.samples_ms)} sample(s); the probe "
                                 f"says {self.warmups} and {self.repeats}")
        return self

    def medians_ms(self, arm: str) -> dict[int, float]:
        """rank -> median measured milliseconds of ``arm``."""
        return {t.rank: t.median_ms for t in self.timings if t.arm == arm}

    @property
    def exact_everywhere(self) -> bool:
        """Bit-exact with finite outputs on every rank."""
        return all(e.bit_exact and e.finite for e in self.exactness)

    def nonexact_ranks(self) -> list[int]:
        """Ranks whose candidate output is not bit-exact or not finite."""
        return sorted(e.rank for e in self.exactness if not (e.bit_exact and e.finite))


def finite_or_none(x: float) -> float | None:
    """``x`` when finite, else None (for difference fields)."""
    return x if math.isfinite(x) else None
