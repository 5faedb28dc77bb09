"""Operator probes: ``campaign-bot/probe@2`` (and ``probe@1``, still read), an operator-level
screen on actual shapes.

Campaigns screen operators before spending device hours on a model A/B: campaign #320
rejected an alternative dense attention kernel at "201.82 ms Laser vs 311.75 ms fused
score", found combined QKV "17.24 ms separate vs 18.78 ms combined", and saw a fused
projection go "35.431 -> 29.126 ms and 39.929 -> 29.230 ms, but every rank was nonexact, so
it is not promoted as lossless".  A probe document records such a screen: the operator or
kernel names of control and candidate, the tensor shapes and dtypes, the device and device
count, the engine revision, per-rank timings (milliseconds; repeated samples, warmups kept
apart) and per-rank exactness (bit-exact, max absolute and relative difference, finite).

``probe@2`` adds what a performance engineer needs to line a probe up with a profiler
(``timing``: device-event timing, cache flush, graph capture, repeat budget, launch floor;
``versions``: torch, CUDA/CANN, driver), host latency as a separate figure per call
(``host_samples_ms``), and per rank a ``comparison`` of the arms (ratio of medians with a
bootstrap interval, and a finding that is ``faster`` only when the whole interval is below 1
and the difference is material: :func:`compare_samples`).  ``probe@1`` documents (host
``perf_counter_ns`` around a synchronized call) are still read and listed.

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
from collections.abc import Sequence
from datetime import datetime
from typing import Annotated, Literal

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
    """Timings of one arm on one rank, milliseconds.  Warmups are apart and never counted.

    ``samples_ms`` are what the probe's ``timer`` measured (``probe@2`` on a GPU or NPU: the
    device's own events around the call; ``probe@1``: host time around a synchronized
    call); ``host_samples_ms`` (``probe@2``) the host latency of the same calls, from the call
    to its return, each issued with the device idle: what it costs the host to issue the
    call (a separate pass of its own; any count)."""

    rank: int = Field(ge=0)
    arm: str = Field(pattern=r"^(control|candidate)$")
    warmups_ms: list[Millis] = Field(default_factory=list)
    samples_ms: list[Millis] = Field(min_length=1, description="Measured repetitions.")
    host_samples_ms: list[Millis] = Field(
        default_factory=list, description="Host latency of calls issued with the device idle "
        "(probe@2).")

    @property
    def median_ms(self) -> float:
        """Median of the measured samples (ms)."""
        return statistics.median(self.samples_ms)

    @property
    def min_ms(self) -> float:
        """Fastest measured sample (ms)."""
        return min(self.samples_ms)

    @property
    def iqr_ms(self) -> tuple[float, float]:
        """(first quartile, third quartile) of the measured samples, ms (the inclusive
        method of :func:`statistics.quantiles`; both equal the sample when there is one)."""
        return quartiles(self.samples_ms)

    @property
    def host_median_ms(self) -> float | None:
        """Median host latency (ms), None when not recorded (probe@1)."""
        return statistics.median(self.host_samples_ms) if self.host_samples_ms else None


def quartiles(xs: Sequence[float]) -> tuple[float, float]:
    """(Q1, Q3) of ``xs`` by :func:`statistics.quantiles` (``method="inclusive"``); a single
    value is its own quartiles.  Raises ``statistics.StatisticsError`` on an empty list."""
    if len(xs) == 1:
        return float(xs[0]), float(xs[0])
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], q[2]


ProbeFinding = Literal["faster", "slower", "no material difference", "too few samples"]

MIN_EFFECT = 0.05
"""Default materiality threshold (the smallest effect size of interest of equivalence
testing: Lakens, Scheel and Isager, "Equivalence Testing for Psychological Research", 2018):
a candidate/control ratio within 5 % of 1 is ``no material difference`` even when its
interval excludes 1.  From the dispersion measured on an H200 (docs/probes-and-traces.md):
six probes of one compute-bound pair at the card's power cap, interleaved in one process,
gave ratios up to 2.8 % from their median (fused QKV, 0.986 to 1.040), and
``triton.testing.do_bench``'s own ratios for that pair spanned 5.7 %, so a smaller
difference is not reproducible from one run there.  Memory-bound pairs moved under 1 %
between probes: ``--min-effect 0.02`` suits them."""
CONFIDENCE = 0.95
"""Default confidence level of the ratio's interval."""
MIN_BLOCKS = 3
"""Fewest blocks per arm for the block-level interval of :func:`compare_samples`: with two
the resampled blocks take three patterns, too few for a percentile interval."""
RESAMPLES = 2000
"""Bootstrap resamples of the ratio's interval (fixed seed, so a probe's document is
reproducible from its samples)."""


def split_blocks(samples: Sequence[float], per_block: int) -> list[list[float]]:
    """``samples`` of one arm, in measuring order, cut into its blocks of ``per_block``
    consecutive calls (the last block may be shorter: :func:`runners.probe.block_order`
    fills each arm's blocks in order).  ``per_block`` below 1 counts as 1."""
    k = max(1, int(per_block))
    return [list(samples[i:i + k]) for i in range(0, len(samples), k)]


def _two_stage_ratios(x_blocks: Sequence[Sequence[float]], y_blocks: Sequence[Sequence[float]],
                      resamples: int, rng: object) -> object:
    """``resamples`` bootstrap replicates of median(y) / median(x), each drawn in two
    stages per arm: the arm's blocks with replacement, then within each drawn block as many
    samples as it has, with replacement (a two-level random resampling, Kalibera and Jones,
    "Rigorous Benchmarking in Reasonable Time", ISMM 2013, section 6; Davison and Hinkley,
    "Bootstrap Methods and their Application", 1997, section 3.8)."""
    import numpy as np

    def medians(blocks: Sequence[Sequence[float]]) -> np.ndarray:
        nb = len(blocks)
        size = np.array([len(b) for b in blocks])
        width = int(size.max())
        table = np.full((nb, width), np.nan)
        for i, b in enumerate(blocks):
            table[i, :len(b)] = b
        pick = rng.integers(0, nb, size=(resamples, nb))  # type: ignore[attr-defined]
        n = size[pick]  # (resamples, nb): samples drawn from each picked block
        j = np.floor(rng.random((resamples, nb, width)) * n[..., None]).astype(int)  # type: ignore[attr-defined]
        vals = table[pick[..., None], j]
        vals[np.arange(width)[None, None, :] >= n[..., None]] = np.nan
        return np.nanmedian(vals.reshape(resamples, -1), axis=1)  # type: ignore[no-any-return]

    return medians(y_blocks) / medians(x_blocks)


def compare_samples(control: Sequence[float], candidate: Sequence[float], *,
                    confidence: float = CONFIDENCE, min_effect: float = MIN_EFFECT,
                    resamples: int = RESAMPLES, seed: int = 0,
                    block_calls: tuple[int, int] | None = None,
                    ) -> tuple[float, float | None, float | None, ProbeFinding]:
    """The candidate/control ratio of medians, its bootstrap interval and the finding.

    Returns ``(ratio, low, high, finding)``.  The interval is a percentile bootstrap of
    ``median(candidate) / median(control)`` at ``confidence`` with ``resamples`` resamples
    and a fixed ``seed``:

    - with ``block_calls`` (calls per block of control and of candidate, as the probe
      measured them: :func:`split_blocks`) and at least :data:`MIN_BLOCKS` blocks in each
      arm, a two-stage resampling (blocks, then calls within a block; the blocks of each
      arm apart).  Calls of one block share the device's state (its clock under power
      capping, its temperature), so they are not independent: a block is the unit that
      holds the run's dispersion, and an interval over calls alone is too narrow (on an
      H200 the fused-QKV pair's call-level interval was [1.047, 1.053] while two
      ``do_bench`` runs of one of its arms differed by 5.5 %; docs/probes-and-traces.md).
      This is the multi-level rule of Kalibera and Jones, "Rigorous Benchmarking in
      Reasonable Time" (ISMM 2013): the interval of a ratio of execution times comes from
      resampling every level of repetition, the highest level first;
    - else the independent resamples of each arm's calls (``scipy.stats.bootstrap``,
      ``paired=False``; scipy because its resampling and percentile rules are maintained and
      documented, not re-derived here).

    ``finding``: ``faster`` only when the whole interval is below 1 and the ratio is at most
    ``1 - min_effect``; ``slower`` the mirror (interval above 1, ratio at least
    ``1 + min_effect``); ``no material difference`` otherwise, so an interval that contains
    1 is never "faster" (Georges, Buytaert and Eeckhout, "Statistically Rigorous Java
    Performance Evaluation", OOPSLA 2007: intervals that overlap mean no statistically
    significant difference); ``too few samples`` with fewer than 2 samples in an arm (no
    interval).

    Raises ``ValueError`` on an empty arm or a control median of 0.
    """
    if not control or not candidate:
        raise ValueError("both arms need samples")
    c, k = statistics.median(control), statistics.median(candidate)
    if c <= 0:
        raise ValueError("control median is 0: no ratio")
    ratio = k / c
    if len(control) < 2 or len(candidate) < 2:
        return ratio, None, None, "too few samples"
    import numpy as np
    from scipy import stats

    def stat(x: np.ndarray, y: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.median(y, axis=axis) / np.median(x, axis=axis)  # type: ignore[no-any-return]

    x = np.asarray(control, dtype=float)
    y = np.asarray(candidate, dtype=float)
    rng = np.random.default_rng(seed)
    xb = split_blocks(control, block_calls[0]) if block_calls else []
    yb = split_blocks(candidate, block_calls[1]) if block_calls else []
    if np.ptp(x) == 0 and np.ptp(y) == 0:
        lo = hi = ratio  # no spread: every resample gives the same ratio
    elif len(xb) >= MIN_BLOCKS and len(yb) >= MIN_BLOCKS:
        reps = _two_stage_ratios(xb, yb, resamples, rng)
        alpha = (1 - confidence) / 2
        lo, hi = (float(v) for v in np.quantile(reps, [alpha, 1 - alpha]))  # type: ignore[call-overload]
    else:
        res = stats.bootstrap((x, y), stat, paired=False, vectorized=True,
                              confidence_level=confidence, n_resamples=resamples,
                              method="percentile", rng=rng)
        lo = float(res.confidence_interval.low)
        hi = float(res.confidence_interval.high)
    lo, hi = min(lo, ratio), max(hi, ratio)  # with few blocks: never exclude the estimate
    if hi < 1 and ratio <= 1 - min_effect:
        finding: ProbeFinding = "faster"
    elif lo > 1 and ratio >= 1 + min_effect:
        finding = "slower"
    else:
        finding = "no material difference"
    return ratio, lo, hi, finding


def interval_method(block_calls: tuple[int, int] | None, control_n: int, candidate_n: int,
                    resamples: int = RESAMPLES) -> str:
    """How :func:`compare_samples` computed the interval for these counts, in words."""
    if block_calls:
        nb = (len(range(0, control_n, max(1, block_calls[0]))),
              len(range(0, candidate_n, max(1, block_calls[1]))))
        if min(nb) >= MIN_BLOCKS:
            return (f"two-stage percentile bootstrap of the ratio of medians: blocks, then "
                    f"calls within a block ({nb[0]} control and {nb[1]} candidate blocks; "
                    f"{resamples} resamples, seed 0)")
    return (f"percentile bootstrap of the ratio of medians over calls (scipy.stats.bootstrap, "
            f"{resamples} resamples, seed 0)")


class RankComparison(Strict):
    """Candidate against control on one rank (``probe@2``).

    ``ratio``: median candidate / median control (below 1: the candidate took less time);
    ``low``/``high``: its bootstrap interval at ``confidence``; ``finding`` as
    :func:`compare_samples` decides it; ``launch_bound``: arms whose device median is within
    a few launch latencies of the launch floor, or whose host latency is at least their
    device time (the host, not the device, sets their pace; see
    :func:`launch_bound`)."""

    rank: int = Field(ge=0)
    ratio: Annotated[float, AfterValidator(_finite_nonneg)]
    low: Annotated[float, AfterValidator(_finite_nonneg)] | None = None
    high: Annotated[float, AfterValidator(_finite_nonneg)] | None = None
    confidence: float = Field(gt=0, lt=1)
    method: str = Field(description="How the interval was computed.")
    finding: ProbeFinding
    launch_bound: list[Literal["control", "candidate"]] = Field(default_factory=list)


LAUNCH_LATENCIES = 4
"""An arm whose device median is under this many launch floors is launch-bound: its time is
a few kernel launches' worth, so on the device it is set by how fast the host issues work
(PyTorch's CUDA-semantics notes and Triton's ``do_bench`` docs: small kernels are
launch-overhead dominated; use graphs or an end-to-end screen)."""


def launch_bound(device_median_ms: float, host_median_ms: float | None,
                 launch_floor_ms: float | None) -> bool:
    """True when an arm is launch-bound: its device median is below
    :data:`LAUNCH_LATENCIES` launch floors (``launch_floor_ms``: the host latency of one
    trivial kernel launch), or its host latency is at least its device time.  False when
    neither figure is known (the CPU, ``probe@1``)."""
    if launch_floor_ms is not None and device_median_ms < LAUNCH_LATENCIES * launch_floor_ms:
        return True
    return host_median_ms is not None and host_median_ms >= device_median_ms


class ProbeTiming(Strict):
    """How ``probe@2`` timed the calls.

    ``method``: ``cuda-events``/``npu-events`` (the device's own events around each call,
    ``enable_timing=True``), ``host`` (``time.perf_counter_ns`` around the call; the CPU,
    where the call is synchronous, or ``--timer host`` with a synchronize before and after);
    ``cache_flush``: a buffer of ``flush_bytes`` zeroed on the device before every measured
    call, so no call finds the previous call's data in the L2 (Triton's ``do_bench`` does
    the same with 256 MB); ``hold_ms``: per launch-bound arm, a spin kernel of that length
    before each call (after the flush, outside the events), longer than the host takes to
    issue the call, so the events time the call's device work back to back rather than the
    host's launch gaps;
    ``graph``: each arm captured once in a CUDA/NPU graph and timed by
    replay; ``block_calls``: calls per ABBA block of each arm (the interval's blocks);
    ``budget_s`` and ``min_repeats``/``max_repeats``: measured calls per arm, from the
    warmups' time estimate, at least ``min_repeats``; ``launch_floor_ms``: median host
    latency of one trivial kernel launch on this device (None on the CPU)."""

    method: Literal["cuda-events", "npu-events", "host", "host-sync"]
    cache_flush: bool
    flush_bytes: int | None = Field(default=None, ge=0)
    graph: bool = False
    hold_ms: dict[str, Annotated[float, AfterValidator(_finite_nonneg)]] = Field(
        default_factory=dict, description="arm -> spin (ms) before each of its calls that "
        "keeps the device busy while the host issues it (CUDA; launch-bound arms only).")
    budget_s: float | None = Field(default=None, ge=0)
    min_repeats: int = Field(ge=1)
    max_repeats: int | None = Field(default=None, ge=1)
    launch_floor_ms: Annotated[float, AfterValidator(_finite_nonneg)] | None = None
    min_effect: float = Field(default=MIN_EFFECT, ge=0, lt=1)
    block_calls: dict[str, Annotated[int, Field(ge=1)]] = Field(
        default_factory=dict, description="arm -> consecutive calls of that arm per block "
        "(blocks in ABBA order); the comparison's interval resamples these blocks "
        "(compare_samples).  Empty in probes written before it was recorded.")


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


PROBE_SCHEMAS = ("campaign-bot/probe@1", "campaign-bot/probe@2")
"""Probe versions this campaign-bot reads; it writes the last."""


class OperatorProbe(Strict):
    """``campaign-bot/probe@2`` (``probe@1`` read too): one operator-level screen of a
    candidate against control.  A ``probe@2`` document needs ``timing``, ``versions`` and
    one ``comparisons`` entry per rank; a ``probe@1`` document has none of them."""

    schema_: str = schema_field("probe", 2)
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
    timing: ProbeTiming | None = Field(default=None, description="probe@2: how calls were "
                                       "timed.")
    versions: dict[str, str] = Field(
        default_factory=dict, description="probe@2: torch, CUDA/CANN, driver, python ... as "
        "the probing process saw them; a missing one was not found.")
    comparisons: list[RankComparison] = Field(default_factory=list,
                                              description="probe@2: one per rank.")

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        if v in PROBE_SCHEMAS:
            return v
        return _check_schema(v, PROBE_SCHEMAS[-1])

    @property
    def version(self) -> int:
        """The document's schema version (1 or 2)."""
        return int(self.schema_.rpartition("@")[2])

    @model_validator(mode="after")
    def _v2_fields(self) -> OperatorProbe:
        if self.version == 1:
            extra = [n for n in ("timing", "comparisons") if getattr(self, n)]
            if extra or self.versions:
                raise ValueError(f"{', '.join(extra or ['versions'])}: not part of probe@1; "
                                 "write 'campaign-bot/probe@2'")
            return self
        if self.timing is None:
            raise ValueError("timing: probe@2 needs how the calls were timed")
        got = sorted(c.rank for c in self.comparisons)
        if got != list(range(self.device_count)):
            raise ValueError(f"comparisons: needs exactly one entry per rank 0.."
                             f"{self.device_count - 1}, got {got}")
        c_med, k_med = self.medians_ms("control"), self.medians_ms("candidate")
        for c in self.comparisons:
            want = k_med[c.rank] / c_med[c.rank] if c_med[c.rank] > 0 else None
            if want is not None and not math.isclose(c.ratio, want, rel_tol=1e-6):
                raise ValueError(f"comparisons: rank {c.rank} ratio {c.ratio} is not its "
                                 f"medians' ratio {want:.6g}")
            if c.finding == "faster" and (c.high is None or c.high >= 1):
                raise ValueError(f"comparisons: rank {c.rank} says faster but its interval "
                                 f"reaches {c.high}")
            if c.finding == "slower" and (c.low is None or c.low <= 1):
                raise ValueError(f"comparisons: rank {c.rank} says slower but its interval "
                                 f"reaches {c.low}")
        return self

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
