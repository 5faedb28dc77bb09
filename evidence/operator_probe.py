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
end-to-end or model gain.  Two review rules guard that (:func:`probe_findings`):

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
import re
import statistics
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Annotated

from pydantic import AfterValidator, Field, field_validator, model_validator

from evidence.models import Finding, Receipt, Strict, _check_schema, _finite_nonneg, schema_field

if TYPE_CHECKING:
    from evidence.claims import Claim

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


# ----------------------------------------------------------------------------- rules

PROBE_FIX = (
    "quote a probe as an operator observation (\"operator observations, not model gains\"); "
    "an end-to-end or model gain comes only from a screen's receipts and verdict"
)
NONEXACT_FIX = (
    "do not offer the candidate as lossless: a lossless candidate must be bit-exact with "
    "finite outputs on every rank; keep it for a lossy track or fix the operator"
)
_CUE = re.compile(r"\b(end[- ]to[- ]end|e2e|model|whole[- ]model|overall|pipeline|request)\b"
                  r"(?:(?!\.\s)[^;\n]){0,40}?\b(gains?|speed[- ]?ups?|latency|"
                  r"improvements?|reductions?|faster|lower)\b", re.I)
_NEG = re.compile(r"\b(not|no|never|without|isn'?t|aren'?t)\b[^.;\n]{0,30}$", re.I)


def probe_values(p: OperatorProbe) -> list[tuple[str, float, str]]:
    """(kind, value, label) that prose may quote from a probe: each rank's and the overall
    median ms per arm, and the candidate's gain in percent and ratio per rank and overall."""
    out: list[tuple[str, float, str]] = []
    per = {arm: p.medians_ms(arm) for arm in ("control", "candidate")}
    for arm, meds in per.items():
        for rank, v in meds.items():
            out.append(("ms", v, f"probe {p.probe_id} rank {rank} {arm} median"))
        out.append(("ms", statistics.median(meds.values()),
                    f"probe {p.probe_id} {arm} median over ranks"))
    pairs = [(r, per["control"][r], per["candidate"][r]) for r in per["control"]]
    pairs.append((-1, statistics.median(per["control"].values()),
                  statistics.median(per["candidate"].values())))
    for rank, c, t in pairs:
        if c <= 0 or t <= 0:
            continue
        where = "over ranks" if rank < 0 else f"rank {rank}"
        out += [("%", (1 - t / c) * 100, f"probe {p.probe_id} {where} gain"),
                ("%", (t / c - 1) * 100, f"probe {p.probe_id} {where} change"),
                ("x", t / c, f"probe {p.probe_id} {where} ratio"),
                ("x", c / t, f"probe {p.probe_id} {where} speed-up")]
    return out


def _matches(kind: str, unit: str, value: float, decimals: int, src: float) -> bool:
    tol = 0.5 * 10 ** (-decimals) + 1e-9 * max(1.0, abs(value))
    if kind == "latency":
        if unit == "ms":
            return abs(src - value) <= tol
        return abs(src / 1000 - value) <= tol
    return abs(src - value) <= tol


def probe_findings(
    probes: Sequence[tuple[OperatorProbe, str, str | None]],
    *,
    lossless_tracks: Iterable[str] = (),
    receipts: Iterable[Receipt] = (),
    claims: Sequence[Claim] = (),
    claims_path: str | None = None,
    claims_text: str = "",
) -> tuple[list[Finding], set[tuple[int, str]]]:
    """The two probe rules.  ``probes``: (probe, bundle path, its text for line numbers);
    ``lossless_tracks``: track ids
    whose quality mode is lossless; ``receipts``: to find a candidate's tracks; ``claims``:
    the claims of ``claims_text`` (the file ``claims_path``), whose untraced numbers are
    matched against the probes' values (``traced_to`` is filled in place).

    Returns (findings, {(line, claim text)} of claims the probes now trace, whose
    UNTRACEABLE_CLAIM or SUMMED_GAINS findings the caller drops).
    """
    from evidence.lines import line_of

    lossless = set(lossless_tracks)
    cand_tracks: dict[str, set[str]] = {}
    for r in receipts:
        if r.arm == "candidate" and r.candidate:
            cand_tracks.setdefault(r.candidate, set()).add(r.track)
    out: list[Finding] = []
    for p, path, text in probes:
        reasons = []
        if p.claims_lossless:
            reasons.append("the probe offers it as lossless")
        if p.track in lossless:
            reasons.append(f"it targets lossless track {p.track}")
        if p.candidate_name:
            on = sorted(cand_tracks.get(p.candidate_name, set()) & lossless)
            if on:
                reasons.append(f"candidate {p.candidate_name} is screened on lossless "
                               f"track(s) {', '.join(on)}")
        bad = p.nonexact_ranks()
        if reasons and bad:
            worst = max((e.max_abs_diff or 0.0 for e in p.exactness), default=0.0)
            fin = [e.rank for e in p.exactness if not e.finite]
            what = f"not bit-exact on rank(s) {', '.join(map(str, bad))} of {p.device_count}"
            if fin:
                what += f" (non-finite on {', '.join(map(str, fin))})"
            out.append(Finding(
                rule="PROBE_NONEXACT_LOSSLESS", severity="P1", path=path,
                line=line_of(text, ("exactness",)) if text else None, field="exactness",
                message=f"probe {p.probe_id}: {p.candidate.operator} is {what}, max abs "
                f"difference {worst:g}, but {'; '.join(reasons)}", resolution=NONEXACT_FIX))
    explained: set[tuple[int, str]] = set()
    if not claims or not probes:
        return out, explained
    values = [v for p, _, _ in probes for v in probe_values(p)]
    lines = claims_text.split("\n")
    flagged: set[int] = set()
    for c in claims:
        if c.traced_to:
            continue
        want = {"latency": "ms", "percent": "%", "ratio": "x"}[c.kind]
        hit = next((label for k, v, label in values
                    if k == want and _matches(c.kind, c.unit, c.value, c.decimals, v)), None)
        if hit is None:
            continue
        c.traced_to = f"{hit} (operator observation)"
        c.summed = False
        c.setting_as_result = None
        explained.add((c.line, c.text.strip()))
        line = lines[c.line - 1] if c.line <= len(lines) else ""
        if c.line in flagged:
            continue
        for m in _CUE.finditer(line):
            if _NEG.search(line[: m.start()]):
                continue
            flagged.add(c.line)
            out.append(Finding(
                rule="PROBE_GAIN_AS_MODEL_GAIN", severity="P1", path=claims_path or "<claims>",
                line=c.line, message=f"{c.text.strip()!r} is {hit}, an operator observation, "
                f"but the line calls it {m.group(0)!r}", resolution=PROBE_FIX))
            break
    return out, explained


def finite_or_none(x: float) -> float | None:
    """``x`` when finite, else None (for difference fields)."""
    return x if math.isfinite(x) else None
