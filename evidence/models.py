"""The evidence bundle format: pydantic v2 models for scope, receipts, status snapshots,
media reports and findings.

Every document carries a ``schema`` field of the form ``campaign-bot/NAME@VERSION`` (for
example ``campaign-bot/receipt@1``).  A document with an unknown NAME or VERSION is refused
with an error naming the field, never coerced.  Frozen receipts are never edited: a new rule
comes as a new schema or validator version (campaign #293 frozen scope: "add a new validator
version without changing the old frozen bundle").

Units: every ``*_s`` field is seconds, ``*_bytes`` bytes, ``*_mb`` mebibytes, ``*_db``
decibels, timestamps are RFC 3339 UTC.  Durations must be finite and non-negative.
"""

from __future__ import annotations

import math
import re
import signal as _signal
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)

SHA256_RE = re.compile(r"^[0-9a-f]{64}$")


def signal_words(sig: int) -> str:
    """``signal 9 (SIGKILL)``; the number alone when this platform has no name for it."""
    try:
        return f"signal {sig} ({_signal.Signals(sig).name})"
    except ValueError:
        return f"signal {sig}"


def exit_words(exit_code: int | None, sig: int | None) -> str:
    """How a process ended, in words: ``exited with code 1``, ``ended by signal 9 (SIGKILL)``,
    ``exited with code 0 after signal 15 (SIGTERM)``; ``exit status not recorded`` when both
    are None.  Never prints ``None``."""
    if sig is not None and exit_code is not None:
        return f"exited with code {exit_code} after {signal_words(sig)}"
    if sig is not None:
        return f"ended by {signal_words(sig)}"
    if exit_code is not None:
        return f"exited with code {exit_code}"
    return "exit status not recorded"


def _finite_nonneg(v: float) -> float:
    if not math.isfinite(v):
        raise ValueError("must be a finite number (NaN and infinity are not durations)")
    if v < 0:
        raise ValueError("must not be negative")
    return v


def _sha256_hex(v: str) -> str:
    if v.startswith("sha256:"):
        v = v[len("sha256:") :]
    if not SHA256_RE.match(v):
        raise ValueError("must be 64 lowercase hex digits (optionally prefixed 'sha256:')")
    return v


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise ValueError("must be a finite number (NaN and infinity are not thresholds)")
    return v


Finite = Annotated[float, AfterValidator(_finite)]
"""A finite float (NaN and infinity refused: a gate of ``inf`` would pass or fail anything)."""
Seconds = Annotated[float, AfterValidator(_finite_nonneg)]
"""A finite, non-negative duration in seconds."""
Sha256 = Annotated[str, AfterValidator(_sha256_hex)]
"""A SHA-256 digest as 64 lowercase hex digits (a ``sha256:`` prefix is accepted and dropped)."""


class Strict(BaseModel):
    """Base for documents we write: unknown fields are an error (a typo is not silently lost)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)


def schema_field(name: str, version: int) -> Any:
    """A ``schema`` field that accepts exactly ``campaign-bot/NAME@VERSION``."""
    sid = f"campaign-bot/{name}@{version}"
    return Field(default=sid, alias="schema", description=f"Schema id, exactly '{sid}'.")


def _check_schema(value: str, expected: str) -> str:
    if value != expected:
        name = expected.split("@")[0]
        if value.startswith(name + "@"):
            raise ValueError(
                f"unknown schema version {value!r}; this campaign-bot reads {expected!r}"
            )
        raise ValueError(f"expected schema {expected!r}, got {value!r}")
    return value


# --------------------------------------------------------------------------- campaign scope


class EngineSource(Strict):
    """The engine under test, pinned: ``repo@commit`` plus the package version it reports."""

    repo: str = Field(description="Source repository, e.g. 'vllm-project/vllm-omni'.")
    commit: str = Field(pattern=r"^[0-9a-f]{7,40}$", description="Commit id (hex).")
    version: str | None = Field(default=None, min_length=1,
                                description="Version string, e.g. '0.30.0' (not empty).")


class Checkpoint(Strict):
    """Model checkpoint identity: name and content digest."""

    name: str = Field(min_length=1, description="Checkpoint name (not empty).")
    digest: Sha256 = Field(description="SHA-256 of the checkpoint content (e.g. its index).")


class HardwarePool(Strict):
    """A reservation of whole machines that screens of one campaign share, one at a time."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    device_model: str = Field(min_length=1, description="e.g. 'Ascend910B1', 'H200'.")
    device_count: int = Field(ge=1)
    memory_gib_per_device: Finite = Field(gt=0)
    runner_labels: list[str] = Field(
        default_factory=list, description="GitHub Actions self-hosted runner labels."
    )
    device_ids: list[int] = Field(
        default_factory=list, min_length=1,
        description="Device indices used (ASCEND_RT_VISIBLE_DEVICES); when given, at least one."
    )


class InputFile(Strict):
    """An input file pinned by digest; ``path`` is relative to the campaign directory."""

    path: str | None = Field(default=None, description="Path; None when external.")
    sha256: Sha256
    mime: str | None = Field(default=None, description="MIME type sent on upload.")


class Inputs(Strict):
    """Request inputs: prompt (inline text or file) plus the reference video and audio."""

    prompt: str | None = None
    prompt_file: InputFile | None = None
    prompt_sha256: Sha256 | None = Field(
        default=None, description="SHA-256 of the UTF-8 prompt text."
    )
    reference_video: InputFile
    reference_audio: InputFile

    @model_validator(mode="after")
    def _one_prompt(self) -> Inputs:
        if (self.prompt is None) == (self.prompt_file is None):
            raise ValueError("give exactly one of 'prompt' or 'prompt_file'")
        return self


class Workload(Strict):
    """Generation parameters of the served model: frame size in pixels (campaign #320: 1344x768),
    frames per second (24), random seed, inference steps and flow shifts."""

    width: int = Field(gt=0)
    height: int = Field(gt=0)
    fps: int = Field(gt=0)
    seed: int
    num_inference_steps: int = Field(gt=0)
    flow_shift: Finite
    audio_flow_shift: Finite | None = None
    concurrency: int = Field(default=1, ge=1)
    task: str = "ref2va"


def _allowed_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` unchanged, or ValueError listing the names a campaign may not set for the
    server (:mod:`evidence.env_rules`: loader, interpreter and CI runner names, credentials)."""
    from evidence.env_rules import env_problems

    problems = env_problems(env)
    if problems:
        raise ValueError("; ".join(problems))
    return env


class Serving(Strict):
    """Server command line and environment of the control arm."""

    model: str = Field(min_length=1, description="Model argument of `vllm serve`.")
    flags: list[str] = Field(default_factory=list, description="Server flags, one per item.")
    env: dict[str, str] = Field(default_factory=dict)
    port: int = Field(default=8091, ge=1, le=65535)

    @field_validator("env")
    @classmethod
    def _env_allowed(cls, v: dict[str, str]) -> dict[str, str]:
        return _allowed_env(v)


class Track(Strict):
    """One independently judged target, e.g. ``5s-lossless``.

    ``kind = "speedup"`` (the default) asks for ``target_reduction`` (0.30: at least 30 %
    lower latency; verdicts SUPPORTED / FAILED / INCONCLUSIVE).  ``kind = "no-regression"``
    asks that a change (a lifecycle or shutdown fix) cost no latency beyond a pre-registered
    margin ``max_slowdown`` (0.05: at most 5 % slower than control), a non-inferiority test
    judged from the same exact bounds with theta0 = 1 + max_slowdown: EQUIVALENT when the
    upper bound of the candidate/control ratio lies below it, else NOT SHOWN
    (:func:`evidence.verdicts.judge`).  For such a track ``target_reduction`` is
    ``-max_slowdown``, filled in."""

    id: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    duration_s: Seconds
    expected_frames: int = Field(gt=0)
    quality_mode: Literal["lossless", "lossy"]
    kind: Literal["speedup", "no-regression"] = Field(
        default="speedup", description="speedup: a latency target; no-regression: no slower "
        "than control by more than max_slowdown (EQUIVALENT / NOT SHOWN).")
    target_reduction: float = Field(
        gt=-1, lt=1, description="Required latency reduction, 0.30 = 30 % lower E2E latency "
        "(speedup tracks, > 0); for a no-regression track, -max_slowdown (filled in).")
    max_slowdown: float | None = Field(
        default=None, gt=0, lt=1, description="no-regression tracks only: the pre-registered "
        "margin, 0.05 = at most 5 % slower than control.")

    @model_validator(mode="before")
    @classmethod
    def _fill_no_regression_target(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("kind") == "no-regression":
            ms = data.get("max_slowdown")
            if ms is None and "target_reduction" not in data:
                raise ValueError("a no-regression track needs max_slowdown (0.05 = at most "
                                 "5 % slower than control)")
            if isinstance(ms, int | float) and not isinstance(ms, bool) and "target_reduction" \
                    not in data:
                return {**data, "target_reduction": -float(ms)}
        return data

    @model_validator(mode="after")
    def _kind_fields(self) -> Track:
        if self.kind == "speedup":
            if self.max_slowdown is not None:
                raise ValueError("max_slowdown is for kind = \"no-regression\" tracks")
            if self.target_reduction <= 0:
                raise ValueError("target_reduction must be above 0 (0.30 = 30 % lower)")
        elif self.max_slowdown is None:
            raise ValueError("a no-regression track needs max_slowdown (0.05 = at most 5 % "
                             "slower than control)")
        elif not math.isclose(self.target_reduction, -self.max_slowdown):
            raise ValueError("a no-regression track states max_slowdown, not target_reduction")
        return self

    @property
    def theta0(self) -> float:
        """The candidate/control ratio the track asks for: ``1 - target_reduction`` (0.70 for
        a 30 % reduction; 1.05 for a no-regression track with a 5 % margin)."""
        return 1 - self.target_reduction

    @property
    def target_text(self) -> str:
        """``-30 %`` for a speedup track, ``<= +5 %`` for a no-regression track."""
        if self.kind == "no-regression":
            return f"<= +{-self.target_reduction * 100:g} %"
        return f"-{self.target_reduction * 100:g} %"


class SequentialDesign(Strict):
    """``[protocol.sequential]``: a group-sequential design with Lan-DeMets alpha spending,
    frozen with the protocol before the first look (evidence.sequential says how each look
    decides).

    ``looks``: the most looks (the first screen and up to ``looks - 1`` follow-up screens);
    ``max_sessions_per_arm``: the information at which the whole alpha is spent (the
    information fraction of a look is its sessions per arm over this); ``spending``: the
    spending function, ``obrien-fleming`` (Lan and DeMets, *Biometrika* 70 (1983) 659-663:
    ``2 - 2 Phi(z_{1-alpha/2} / sqrt(t))``) or ``pocock`` (``alpha log(1 + (e - 1) t)``)."""

    looks: int = Field(default=3, ge=2, le=5)
    max_sessions_per_arm: int = Field(default=9, ge=2, le=60)
    spending: Literal["obrien-fleming", "pocock"] = "obrien-fleming"


class Protocol(Strict):
    """A/B protocol, frozen before any candidate is observed (campaign #297: 'a prospectively
    frozen independent-server, ordering, warmup and repeat protocol')."""

    order: str = Field(
        default="ABBAAB",
        pattern=r"^[AB]+$",
        description="Session order, A = control, B = candidate.",
    )
    warmups_per_session: int = Field(default=1, ge=0)
    measured_requests_per_session: int = Field(default=1, ge=1)
    min_measured_sessions_per_arm: int = Field(default=3, ge=1)
    independent_server_per_session: bool = True
    request_timeout_s: Seconds = 3600.0
    shutdown_timeout_s: Seconds = 60.0
    init_timeout_s: Seconds = 1800.0
    idle_wait_s: Seconds = Field(
        default=10.0, description="Wait after a server exit before the next start (HCCL)."
    )
    futility_ratio: Finite = Field(
        default=1.10,
        gt=1.0,
        description="Screening: REJECT when candidate/control exceeds this in the first pair.",
    )
    sequential: SequentialDesign | None = Field(
        default=None, description="A group-sequential design declared before the first look: "
        "follow-up screens (/screen continue) add looks, and each look's decision spends "
        "its share of alpha (evidence.sequential). Absent: one look, no follow-ups.")
    auto_followup: bool = Field(
        default=False, description="Queue the projected follow-up screen by itself when a "
        "look is INCONCLUSIVE for lack of power (needs [protocol.sequential]; within budget).")

    @model_validator(mode="after")
    def _followup_needs_design(self) -> Protocol:
        if self.auto_followup and self.sequential is None:
            raise ValueError("auto_followup needs a declared [protocol.sequential] design: "
                             "repeated looks without alpha spending would overstate the "
                             "evidence")
        return self


class Gate(Strict):
    """One quality threshold with the source it comes from."""

    threshold: Finite
    source: str = Field(description="Where the threshold comes from (a spec, a campaign's "
                        "frozen scope, an upstream test).")


class RangeGate(Strict):
    """An inclusive [low, high] range with its source."""

    low: Finite
    high: Finite
    source: str

    @model_validator(mode="after")
    def _ordered(self) -> RangeGate:
        if self.low > self.high:
            raise ValueError("low must not exceed high")
        return self


class QualityGates(Strict):
    """Perceptual gates for lossy tracks (SSIM/PSNR in ffmpeg's convention, LPIPS, audio)."""

    ssim_min: Gate
    psnr_min_db: Gate
    lpips_max: Gate
    audio_spectral_cosine_min: Gate
    audio_rms_ratio: RangeGate
    audio_latent_rate_hz: Gate | None = Field(
        default=None,
        description="A model's audio-latent rate (Hz): names the model-specific audio-length "
        "rule (MiniMax-H3: 40 Hz). Absent: generic audio coverage checks only.")


class Budget(Strict):
    """Campaign budget; failures and retries are always charged (campaign #297: "16
    wall-hours / 64 logical-device-hours including failures and retries")."""

    candidate_directions: int = Field(ge=0)
    wall_hours: Finite = Field(ge=0)
    device_hours: Finite = Field(ge=0)
    failures_and_retries_included: Literal[True] = True


class Candidate(Strict):
    """A named set of server flag and environment changes against the control."""

    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    description: str = ""
    add_flags: list[str] = Field(default_factory=list)
    remove_flags: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    source: str | None = Field(default=None, description="Attribution: PR, commit or upstream.")

    @field_validator("env")
    @classmethod
    def _env_allowed(cls, v: dict[str, str]) -> dict[str, str]:
        return _allowed_env(v)


DEFAULT_EVIDENCE_PATHS = ("results", "receipts", "screens")
"""The evidence folders of a campaign unless its campaign.toml names others: status snapshots,
receipts, and ``screens``, where the bot commits each verified screen bundle (the default
``[screen] evidence_path`` of the repository config).  ``campaign-bot init`` writes the same
list into a new campaign.toml."""


class CampaignScope(Strict):
    """``campaign.toml``: the frozen RunSpec of one campaign."""

    schema_: str = schema_field("campaign", 1)
    id: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    title: str = Field(min_length=1, description="One line: model, hardware and target.")
    issue: int | None = Field(default=None, description="Campaign issue number.")
    engine: EngineSource
    image_digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    checkpoint: Checkpoint
    pool: HardwarePool
    inputs: Inputs
    workload: Workload
    serving: Serving
    tracks: list[Track] = Field(min_length=1)
    protocol: Protocol
    quality_gates: QualityGates
    budget: Budget
    requesters: list[str] = Field(min_length=1, description="GitHub logins.")
    candidates: list[Candidate] = Field(default_factory=list)
    evidence_paths: list[str] = Field(
        default_factory=lambda: list(DEFAULT_EVIDENCE_PATHS),
        description="Directories (relative) that hold this campaign's evidence; a pull "
                    "request touching them is a candidate on the status header.",
    )

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        return _check_schema(v, "campaign-bot/campaign@1")

    @model_validator(mode="after")
    def _unique(self) -> CampaignScope:
        ids = [t.id for t in self.tracks]
        if len(set(ids)) != len(ids):
            raise ValueError(f"track ids must be unique, got {ids}")
        names = [c.name for c in self.candidates]
        if len(set(names)) != len(names):
            raise ValueError(f"candidate names must be unique, got {names}")
        return self

    def track(self, track_id: str) -> Track:
        """Return the track with ``track_id``; raises KeyError naming the valid ids."""
        for t in self.tracks:
            if t.id == track_id:
                return t
        raise KeyError(f"unknown track {track_id!r}; valid: {[t.id for t in self.tracks]}")

    def candidate(self, name: str) -> Candidate:
        """Return the candidate called ``name``; raises KeyError naming the valid names."""
        for c in self.candidates:
            if c.name == name:
                return c
        raise KeyError(f"unknown candidate {name!r}; valid: {[c.name for c in self.candidates]}")


# --------------------------------------------------------------------------------- receipt


HEADER_ROUNDING_S = 0.0005
"""vLLM-Omni prints ``X-Inference-Time-S`` with three decimals (``f"{inference_time_s:.3f}"``,
``vllm_omni/entrypoints/openai/api_server.py:2770-2780`` in 0.30.0), so the header can exceed
the server's true time by up to half a millisecond."""


class RequestRecord(Strict):
    """One HTTP request of a session. A failed request is recorded, never dropped."""

    index: int = Field(ge=0, description="Order within the session, from 0.")
    kind: Literal["warmup", "measured"]
    http_status: int | None = Field(
        default=None, description="HTTP status; None when no response arrived."
    )
    client_wall_s: Seconds | None = Field(
        default=None, description="Seconds from first upload byte to last MP4 byte."
    )
    server_inference_s: Seconds | None = Field(
        default=None, description="Server header X-Inference-Time-S."
    )
    stage_durations: dict[str, Seconds] = Field(
        default_factory=dict, description="X-Stage-Durations, stage -> seconds."
    )
    request_id: str | None = Field(default=None, description="X-Request-Id.")
    peak_memory_mb: Finite | None = Field(default=None, description="X-Peak-Memory-MB.")
    output_path: str | None = Field(default=None, description="Bundle-relative MP4 path.")
    output_sha256: Sha256 | None = None
    output_bytes: int | None = Field(default=None, ge=0)
    error: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def ok(self) -> bool:
        """True when the request returned HTTP 200 without an error."""
        return self.http_status == 200 and self.error is None

    def wall_covers_server(self) -> bool | None:
        """True when the client wall time is at least the server's own time (the client's
        span contains the server's), within :data:`HEADER_ROUNDING_S`; None when either time
        is missing."""
        if self.client_wall_s is None or self.server_inference_s is None:
            return None
        return self.client_wall_s >= self.server_inference_s - HEADER_ROUNDING_S


class WorkerExit(Strict):
    """How one engine worker process ended."""

    rank: int | None = None
    pid: int = Field(ge=0)
    name: str | None = Field(default=None, description="Process title, e.g. DiffusionWorker.")
    state: Literal["exited", "gone", "alive"] = Field(
        description="exited: exit status read; gone: ended, status unreadable; alive: still "
        "running after the grace period."
    )
    exit_code: int | None = None
    signal: int | None = None
    source: str | None = Field(
        default=None,
        description="How the end was read: 'waitpid', 'log: ...' (server log markers) or "
        "'psutil: ...'.",
    )

    @property
    def clean(self) -> bool:
        """Exit 0, no signal."""
        return self.state == "exited" and self.exit_code == 0 and self.signal is None

    def describe(self) -> str:
        """How this worker ended, in words (``still running``, ``exited with code 1``,
        ``ended by signal 9 (SIGKILL)``, ``gone, exit status unreadable``); never ``None``."""
        if self.state == "alive":
            return "still running"
        if self.state == "gone" and self.exit_code is None and self.signal is None:
            return "gone, exit status unreadable"
        if self.exit_code is None and self.signal is None:
            return "exited, exit status not recorded"
        return exit_words(self.exit_code, self.signal)

    def who(self) -> str:
        """``worker rank N`` (or ``worker pid N`` when the rank is unknown)."""
        return f"worker rank {self.rank}" if self.rank is not None else f"worker pid {self.pid}"


class DeviceCheck(Strict):
    """Result of a device idle check (npu-smi / nvidia-smi)."""

    idle: bool
    checked_at: datetime | None = None
    detail: str | None = None


class Lifecycle(Strict):
    """Server and worker lifecycle of one session : a run whose workers did not all exit
    cleanly, or whose container exited non-zero, does not qualify (campaign #320's 5 s baseline
    needed four terminate and four kill actions)."""

    workers: list[WorkerExit] = Field(default_factory=list)
    terminate_actions: int = Field(default=0, ge=0)
    kill_actions: int = Field(default=0, ge=0)
    forced_actions: list[str] = Field(
        default_factory=list, description="Each forced action, human-readable."
    )
    log_markers: list[str] = Field(
        default_factory=list, description="Shutdown-ladder log lines seen."
    )
    server_exit_code: int | None = None
    server_signal: int | None = None
    container_exit_code: int | None = None
    server_exited_unasked: bool = Field(
        default=False,
        description="The main process had exited before the runner asked it to stop. After an "
        "engine death vLLM ends its own server and exits 0 (vllm/entrypoints/launchers/"
        "launcher.py, terminate_if_errored), so exit 0 alone does not mean a clean shutdown.",
    )
    engine_died: bool = Field(
        default=False,
        description="The server logged an engine death ('EngineDeadError: ...', "
        "vllm_omni/entrypoints/serve/utils/errors.py).",
    )
    devices_idle_before: DeviceCheck | None = None
    devices_idle_after: DeviceCheck | None = None
    interrupted: bool = False

    def problems(self) -> list[str]:
        """Reasons this lifecycle does not qualify; empty when clean."""
        out: list[str] = []
        if not self.workers:
            out.append("no worker exits recorded")
        for w in self.workers:
            if not w.clean:
                out.append(f"{w.who()} {w.describe()}")
        if self.terminate_actions:
            out.append(f"{self.terminate_actions} terminate action(s)")
        if self.kill_actions:
            out.append(f"{self.kill_actions} kill action(s)")
        if self.server_exit_code != 0 or self.server_signal is not None:
            out.append(self.server_problem())
        if self.container_exit_code not in (None, 0):
            out.append(f"container exit {self.container_exit_code}")
        if self.server_exited_unasked:
            out.append("server exited on its own before the runner's SIGTERM")
        if self.engine_died:
            out.append("engine died (EngineDeadError in the server log)")
        checks = (("before", self.devices_idle_before), ("after", self.devices_idle_after))
        for label, chk in checks:
            if chk is None or not chk.idle:
                out.append(f"devices not shown idle {label}")
        if self.interrupted:
            out.append("session interrupted")
        return out

    @property
    def clean(self) -> bool:
        """True when :meth:`problems` is empty."""
        return not self.problems()

    def server_problem(self) -> str:
        """The server's exit in words (``server exited with code 1``, ``server ended by signal
        9 (SIGKILL)``, ``no server exit status recorded``)."""
        if self.server_exit_code is None and self.server_signal is None:
            return "no server exit status recorded"
        return "server " + exit_words(self.server_exit_code, self.server_signal)


class Receipt(Strict):
    """``campaign-bot/receipt@1``: the record of one server session."""

    schema_: str = schema_field("receipt", 1)
    screen_id: str
    session_id: str
    campaign: str
    track: str
    arm: Literal["control", "candidate"]
    candidate: str | None = Field(default=None, description="Candidate name (candidate arm).")
    slot: int = Field(ge=0, description="0-based position in the screen's session order.")
    order: str | None = Field(default=None, pattern=r"^[AB]+$", description="e.g. 'ABBAAB'.")
    engine_revision: str
    engine_version: str | None = None
    config_digest: Sha256 = Field(description="SHA-256 of the canonical server command + env.")
    input_digests: dict[str, Sha256] = Field(
        default_factory=dict, description="name -> SHA-256 of prompt/reference inputs."
    )
    pool: str | None = None
    devices: list[str] = Field(default_factory=list)
    started_at: datetime
    ready_at: datetime | None = None
    stopped_at: datetime | None = None
    requests: list[RequestRecord] = Field(default_factory=list)
    lifecycle: Lifecycle
    media_reports: list[str] = Field(
        default_factory=list, description="Bundle-relative paths of media reports."
    )
    server_log: str | None = Field(default=None, description="Bundle-relative log path.")
    notes: str | None = None
    look: int | None = Field(
        default=None, ge=2, le=5, description="Follow-up screens only: the look this screen "
        "adds to a group-sequential series ([protocol.sequential]); absent: a first look.")
    continues: str | None = Field(
        default=None, pattern=r"^[A-Za-z0-9._-]{1,200}$", description="Follow-up screens "
        "only: the screen_id of the series' first look.")

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        return _check_schema(v, "campaign-bot/receipt@1")

    @model_validator(mode="after")
    def _consistent(self) -> Receipt:
        if self.arm == "candidate" and not self.candidate:
            raise ValueError("a candidate-arm receipt must name its candidate")
        idx = [r.index for r in self.requests]
        if len(set(idx)) != len(idx):
            raise ValueError("request indexes must be unique")
        if (self.look is None) != (self.continues is None):
            raise ValueError("look and continues go together (a follow-up screen names both)")
        return self

    @property
    def warmups(self) -> list[RequestRecord]:
        """Warmup requests (never counted)."""
        return [r for r in self.requests if r.kind == "warmup"]

    @property
    def measured(self) -> list[RequestRecord]:
        """Measured (post-warmup) requests."""
        return [r for r in self.requests if r.kind == "measured"]


# ------------------------------------------------------------------------- status snapshot


class StatusSnapshot(Strict):
    """``campaign-bot/status@1``: where a campaign says it is.  A snapshot that contradicts
    newer receipts is stale unless ``frozen`` (the P2 review finding on
    campaign #320's ``results/status.json``)."""

    schema_: str = schema_field("status", 1)
    campaign: str
    execution: Literal["planned", "queued", "running", "completed", "failed", "cancelled"]
    samples: dict[str, int] = Field(
        default_factory=dict, description="track id -> measured sessions completed."
    )
    as_of: datetime
    frozen: bool = Field(default=False, description="A historical snapshot, not current state.")
    superseded_by: str | None = Field(
        default=None, description="What supersedes a frozen snapshot (path or URL)."
    )
    note: str | None = None

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        return _check_schema(v, "campaign-bot/status@1")

    @model_validator(mode="after")
    def _frozen_needs_successor(self) -> StatusSnapshot:
        if self.frozen and not self.superseded_by:
            raise ValueError("a frozen snapshot must say what supersedes it ('superseded_by')")
        return self


# ---------------------------------------------------------------------------- media report


class MediaCheck(Strict):
    """One structural check: what was expected, what was seen."""

    name: str
    passed: bool
    expected: str | None = None
    actual: str | None = None
    detail: str | None = None


class MediaMetric(Strict):
    """One metric with its gate. ``passed`` is None when the metric has no gate here.

    JSON writes infinities as the strings ``"Infinity"``/``"-Infinity"`` (identical inputs
    give PSNR = inf); they read back as floats.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True, ser_json_inf_nan="strings",
                              defer_build=True)

    name: str = Field(description="e.g. 'ssim_all', 'psnr_avg_db', 'lpips', 'audio_rms_ratio'.")
    value: float | None = Field(description="None when not computed; inf for identical PSNR.")
    op: Literal[">=", "<=", "in", "=="] | None = None

    @field_validator("value", mode="before")
    @classmethod
    def _infinity_strings(cls, v: Any) -> Any:
        # JSON has no infinity; we write "Infinity"/"-Infinity" and read them back even under
        # strict validation (check loads documents strictly).  "NaN" stays refused.
        if v == "Infinity":
            return math.inf
        if v == "-Infinity":
            return -math.inf
        return v
    threshold: float | list[float] | None = None
    passed: bool | None = None
    source: str | None = None
    detail: dict[str, Any] = Field(default_factory=dict)


class BitExact(Strict):
    """Lossless comparison: compressed packets, then decoded planes and PCM."""

    packets_equal: dict[str, bool] = Field(default_factory=dict, description="stream -> equal")
    frames_equal: bool
    first_differing_frame: int | None = None
    pcm_equal: bool | None = None
    decoder_build: str | None = Field(default=None, description="FFmpeg/libav build compared.")
    frames_compared: int | None = Field(default=None, description="Frame pairs hashed.")
    differing_frames: int | None = Field(default=None, description="Frame pairs that differ.")
    first_differing_packet: dict[str, int | None] = Field(
        default_factory=dict, description="stream -> index of the first differing packet.")
    video_sha256: dict[str, str] = Field(
        default_factory=dict,
        description="arm -> SHA-256 over the per-frame SHA-256s of the decoded YUV planes.")
    pcm_sha256: dict[str, str] = Field(
        default_factory=dict,
        description="arm -> SHA-256 of the decoded float32 PCM (this decoder build only).")


class MediaReport(Strict):
    """``campaign-bot/media-report@1``: a control/candidate comparison, by a versioned
    validator (a newer validator writes a new report, never rewrites an older one)."""

    schema_: str = schema_field("media-report", 1)
    validator_version: str = Field(description="e.g. 'media-gates/2'.")
    control: InputFile
    candidate: InputFile
    mode: Literal["lossless", "lossy", "structural"]
    device: str = "cpu"
    frame_stride: int = Field(default=1, ge=1, description="LPIPS frame subsampling, 1 = all.")
    structural: list[MediaCheck] = Field(default_factory=list)
    bit_exact: BitExact | None = None
    metrics: list[MediaMetric] = Field(default_factory=list)
    passed: bool
    reasons: list[str] = Field(default_factory=list)
    created_at: datetime | None = None
    decoder_build: str | None = Field(default=None, description="Decoder build used.")
    gates_source: str | None = Field(
        default=None, description="Where the thresholds came from (campaign, file, defaults).")
    wall_s: Seconds | None = Field(default=None, description="Wall time of the comparison.")

    model_config = ConfigDict(extra="forbid", populate_by_name=True, ser_json_inf_nan="strings",
                              defer_build=True)

    @field_validator("schema_")
    @classmethod
    def _schema(cls, v: str) -> str:
        return _check_schema(v, "campaign-bot/media-report@1")


# -------------------------------------------------------------------------------- findings

Severity = Literal["P0", "P1", "P2", "P3"]


class Finding(Strict):
    """A review result: P0 blocks, P1 wrong evidence, P2 ambiguous
    evidence, P3 note."""

    rule: str = Field(description="Rule id, e.g. 'STALE_STATUS', 'MANIFEST_MISMATCH'.")
    severity: Severity
    path: str = Field(description="Bundle- or repo-relative path the finding concerns.")
    line: int | None = Field(default=None, ge=1, description="1-based line, when known.")
    field: str | None = Field(default=None, description="Field path, e.g. 'requests.0.kind'.")
    message: str = Field(description="What is wrong.")
    resolution: str | None = Field(default=None, description="What would resolve it.")


SCHEMA_MODELS: dict[str, type[BaseModel]] = {
    "campaign": CampaignScope,
    "receipt": Receipt,
    "status": StatusSnapshot,
    "media-report": MediaReport,
    "finding": Finding,
}
"""Models exported by ``campaign-bot schema NAME`` and committed under evidence/schemas/."""
