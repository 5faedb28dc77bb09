"""``campaign-bot screen``: one A/B screen of a candidate against control on one track.

Flow: load ``campaign.toml`` -> plan (order, warmups, measured per session) and
estimate -> for every session: wait ``idle_wait_s`` after the previous server's exit, device
idle gate, start an independent server in its own process session, wait for ``/health`` 200,
snapshot the workers, send warmups then measured requests (a failed request is recorded and the
session goes on to shutdown), SIGTERM the main pid, escalate to SIGKILL of the tree after
``shutdown_timeout_s``, record the lifecycle -> media gates against the first control output
(when ``evidence.media.compare`` is installed) -> BagIt bundle -> DSSE signature.

SIGINT or SIGTERM (job cancel) stops the screen: the running server is shut down the same way,
the session is recorded as interrupted, and the bundle is still written and signed.

Bundle layout (``--out``)::

    bagit.txt bag-info.txt manifest-sha256.txt tagmanifest-sha256.txt attestation.dsse.json
    data/screen.json                      plan, sessions, notes, problems
    data/receipts/session-NN-ARM.json     one campaign-bot/receipt@1 per session
    data/logs/session-NN-ARM.log          the server's stdout+stderr
    data/outputs/sNN-ARM-KIND-I.mp4       each successful response body
    data/media/*.json                     campaign-bot/media-report@1 per comparison
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import socket
import time
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Literal

import httpx
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from evidence.hashing import git_blob_sha
from evidence.models import (
    CampaignScope,
    Candidate,
    DeviceCheck,
    Lifecycle,
    Receipt,
    RequestRecord,
)
from evidence.revisions import revision_scope
from evidence.scope_binding import SCOPE_FILE, redefined_candidates, section_differences
from evidence.signing import KeyFileError, sha256_file
from runners import devices
from runners.client import FilePart, send_request
from runners.isolation import (
    Isolation,
    IsolationError,
    ServerIdentity,
    device_nodes,
    enter,
    harden_runner,
    make_scratch,
    probe,
    remove_scratch,
    resolve_identity,
    server_environment,
)
from runners.plan import Estimate, PlannedSession, estimate, make_plan
from runners.server import (
    DEFAULT_SERVER_CMD,
    SERVER_CMD_ENV,
    ServerProcess,
    ServerStartError,
    become_subreaper,
    build_command,
    build_env,
    config_digest,
)
from runners.signer import load_private_key, sign_bundle, write_bag

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
REVISION_ENV = "CAMPAIGN_BOT_ENGINE_REVISION"
"""Set in a revision screen's server environment: the engine revision the session runs."""


class UsageError(Exception):
    """Bad usage or unreadable input (exit 2); the message names the file and field."""


@dataclass
class ScreenOptions:
    """Options of one screen (see ``campaign-bot screen --help``)."""

    campaign: Path
    candidate: str | None
    track: str
    out: Path
    dry_run: bool = False
    sessions: int | None = None
    control_only: bool = False
    device_tool: str = "auto"
    server_cmd: str | None = None
    signing_key: Path | None = None
    host: str = "127.0.0.1"
    port: int | None = None
    container: bool = False
    health_poll_s: float = 2.0
    idle_timeout_s: float = 300.0
    request_estimate_s: float | None = None
    media_device: str = "cpu"
    lpips_weights: Path | None = None
    lpips_sha256: str | None = None
    futility_stop: bool = False
    frozen_scope: Path | None = None
    frozen_scope_blob: str | None = None
    follow_up: str | None = None
    server_user: str | None = None
    server_pass_env: list[str] = field(default_factory=list)
    server_env: dict[str, str] = field(default_factory=dict)
    control_revision: str | None = None
    """Engine revision of the control arm (a revision screen); None: the scope's commit."""
    candidate_revision: str | None = None
    """Engine revision of arm B, which then runs the control config
    (:mod:`evidence.revisions`); None: an ordinary screen."""


@dataclass
class Inputs:
    """Resolved request inputs and their digests."""

    prompt: str
    files: list[FilePart]
    digests: dict[str, str]


@dataclass
class SessionResult:
    """A session's receipt plus where it was written."""

    planned: PlannedSession
    receipt: Receipt
    path: Path
    problems: list[str] = field(default_factory=list)


def load_scope(campaign_dir: Path) -> CampaignScope:
    """Read and validate ``campaign_dir/campaign.toml``.  Raises UsageError naming the file,
    the field and the problem."""
    return load_scope_file(campaign_dir / "campaign.toml")


def load_scope_file(path: Path) -> CampaignScope:
    """Read and validate the campaign scope file ``path``.  Raises UsageError naming the
    file, the field and the problem."""
    from evidence.signing import read_small_text

    try:
        raw = tomllib.loads(read_small_text(path))
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{path}: not valid TOML: {exc}") from exc
    except RecursionError:
        raise UsageError(f"{path}: not valid TOML: nested too deeply") from None
    except ValueError as exc:  # not a regular file (FIFO: never blocks), too large, not UTF-8
        raise UsageError(f"{path}: cannot read: {exc}") from None
    try:
        return CampaignScope.model_validate(raw)
    except ValidationError as exc:
        lines = [f"{path}: field {'.'.join(str(x) for x in e['loc'])}: {e['msg']}"
                 for e in exc.errors()]
        raise UsageError("\n".join(lines)) from exc


def frozen_scope(opts: ScreenOptions, checkout: CampaignScope
                 ) -> tuple[CampaignScope, str, bytes]:
    """The scope a screen runs: with ``opts.frozen_scope`` (the default branch's
    ``campaign.toml``, checked out by the workflow), that file, whose git blob SHA must be
    ``opts.frozen_scope_blob`` (pinned by the bot at dispatch), with only the candidates
    taken from the checkout (the pull request); the checkout must not differ from it in any
    of :data:`evidence.scope_binding.FROZEN_SECTIONS`, nor define otherwise a candidate the
    frozen file defines (it may add candidates).  Without it, the checkout's own scope (a
    screen run by hand).  Returns ``(scope, blob SHA of the file the control came from, that
    file's bytes)``.  Raises UsageError naming the file and the sections that differ."""
    own_file = opts.campaign / "campaign.toml"
    if opts.frozen_scope is None:
        try:
            own = own_file.read_bytes()
            return checkout, git_blob_sha(own), own
        except OSError as exc:
            raise UsageError(f"{own_file}: cannot read: {exc.strerror or exc}") from None
    try:
        data = opts.frozen_scope.read_bytes()
    except OSError as exc:
        raise UsageError(f"--frozen-scope {opts.frozen_scope}: cannot read: "
                         f"{exc.strerror or exc}") from None
    blob = git_blob_sha(data)
    want = (opts.frozen_scope_blob or "").lower()
    if blob != want:
        raise UsageError(f"--frozen-scope {opts.frozen_scope}: its git blob SHA is {blob}, the "
                         f"screen was dispatched for {want or '(none given)'}: the default "
                         "branch's campaign.toml changed since the dispatch; not running")
    frozen = load_scope_file(opts.frozen_scope)
    differ = section_differences(frozen, checkout) + [
        f"candidate {n}" for n in redefined_candidates(frozen, checkout)]
    if differ:
        raise UsageError(
            f"{own_file}: the pull request changes {', '.join(differ)} of the campaign's "
            "frozen scope (the default branch's campaign.toml defines the control, protocol, "
            "pool and serving settings); a screen runs only a candidate against that control. "
            "Merge the scope change first, or define the change as a candidate "
            "(add_flags, remove_flags, env) under a new name")
    return frozen.model_copy(update={"candidates": checkout.candidates}), blob, data


def resolve_inputs(scope: CampaignScope, campaign_dir: Path) -> Inputs:
    """Prompt text and the reference video/audio parts, each checked against its pinned
    SHA-256 (:func:`evidence.input_rules.input_problems`, the rules ``campaign-bot check``
    reports: a named file must be a regular file inside ``campaign_dir``, never reached through
    ``..`` or a link leaving it).  Raises UsageError on a missing file or a digest mismatch."""
    from evidence.input_rules import input_problems

    inp = scope.inputs
    problems = input_problems(campaign_dir, inp)  # the rules `campaign-bot check` reports
    if problems:
        raise UsageError("\n".join(f"campaign.toml: {p.field}: {p.message}" for p in problems))
    digests: dict[str, str] = {}
    if inp.prompt_file is not None:
        if not inp.prompt_file.path:
            raise UsageError("campaign.toml: inputs.prompt_file.path is required to run")
        ppath = campaign_dir / inp.prompt_file.path
        try:
            prompt = ppath.read_text()
        except OSError as exc:
            raise UsageError(f"{ppath}: cannot read prompt file: {exc}") from exc
    else:
        prompt = inp.prompt or ""
    digests["prompt"] = hashlib.sha256(prompt.encode()).hexdigest()
    want = inp.prompt_sha256 or (inp.prompt_file.sha256 if inp.prompt_file else None)
    if want and want != digests["prompt"]:
        raise UsageError(f"campaign.toml: inputs.prompt: SHA-256 {digests['prompt']} differs "
                         f"from the pinned {want}")
    files: list[FilePart] = []
    for name, ref, default_mime in (("reference_video", inp.reference_video, "video/mp4"),
                                    ("reference_audio", inp.reference_audio, "audio/wav")):
        if not ref.path:
            raise UsageError(f"campaign.toml: inputs.{name}.path is required to run a screen")
        p = campaign_dir / ref.path
        if not p.is_file():
            raise UsageError(f"campaign.toml: inputs.{name}.path: {p} does not exist")
        got = sha256_file(p)
        if got != ref.sha256:
            raise UsageError(f"campaign.toml: inputs.{name}.sha256: {p} has SHA-256 {got}, "
                             f"pinned {ref.sha256}")
        digests[name] = got
        files.append(FilePart("input_references", p, ref.mime or default_mime))
    return Inputs(prompt, files, digests)


def request_fields(scope: CampaignScope, track_duration_s: float, prompt: str,
                   ) -> list[tuple[str, str]]:
    """The text form fields of ``POST /v1/videos/sync`` (vLLM-Omni's MiniMax H3 recipe,
    ``recipes/MiniMaxAI/MiniMax-H3.md`` "Ref2VA"; ``fps`` is sent as the scope's integer, which
    upstream's float field accepts)."""
    w = scope.workload
    extra: dict[str, Any] = {"task": w.task, "duration": track_duration_s}
    if w.audio_flow_shift is not None:
        extra["audio_flow_shift"] = w.audio_flow_shift
    return [("prompt", prompt), ("width", str(w.width)), ("height", str(w.height)),
            ("fps", str(w.fps)), ("num_inference_steps", str(w.num_inference_steps)),
            ("seed", str(w.seed)), ("flow_shift", f"{w.flow_shift:g}"),
            ("extra_params", json.dumps(extra, separators=(",", ":")))]


def _port_in_use(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def free_port(host: str) -> int:
    """A TCP port free on ``host`` right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def print_plan(console: Console, scope: CampaignScope, plan: list[PlannedSession],
               est: Estimate, track: str, candidate: str | None) -> None:
    """Print the session plan table and the time estimate: wall hours and device hours
    (wall x ``[pool] device_count``, the budget's definition)."""
    t = Table(title=f"screen plan: campaign {scope.id}, track {track}, candidate "
                    f"{candidate or '-'}", title_justify="left")
    for c in ("slot", "arm", "warmups", "measured"):
        t.add_column(c)
    for s in plan:
        t.add_row(str(s.slot), s.arm, str(s.warmups), str(s.measured))
    console.print(t)
    p = scope.protocol
    console.print(f"order {''.join('A' if s.arm == 'control' else 'B' for s in plan)}; "
                  f"timeouts: init {p.init_timeout_s:g} s, request {p.request_timeout_s:g} s, "
                  f"shutdown {p.shutdown_timeout_s:g} s; idle wait {p.idle_wait_s:g} s")
    devices = scope.pool.device_count
    # device-hours = wall-hours x the pool's devices, as the budget ledger charges them
    # (docs/user-guide.md, Budget)

    def hours(s: float) -> str:
        return (f"{s / 3600:.2f} wall h = {s * devices / 3600:.2f} device h "
                f"({devices} devices)")

    if est.typical_s is not None:
        console.print(f"estimated time: {hours(est.typical_s)}; upper bound from the "
                      f"timeouts {hours(est.upper_bound_s)}")
    else:
        console.print(f"estimated time: upper bound from the timeouts "
                      f"{hours(est.upper_bound_s)} (give --request-estimate-s for a typical "
                      "figure)")


class Interrupt:
    """SIGINT/SIGTERM handling: the first signal raises KeyboardInterrupt in the main thread;
    while tearing down, later signals are only counted so the bundle still gets written."""

    def __init__(self) -> None:
        self.hit = False
        self.shielded = False
        self.count = 0
        self._old: dict[int, Any] = {}

    def _handler(self, signum: int, _frame: Any) -> None:
        self.count += 1
        if self.shielded or self.hit:
            return
        self.hit = True
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    def install(self) -> None:
        for s in (signal.SIGINT, signal.SIGTERM):
            self._old[s] = signal.signal(s, self._handler)

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)


def _same_version(installed: str, pinned: str) -> bool:
    """``0.30.0`` pins ``0.30.0`` and local builds of it (``0.30.0+npu``); ``0.26.1.dev``
    style pins match by prefix."""
    base = installed.split("+")[0]
    return base == pinned or (pinned.endswith("dev") and base.startswith(pinned))


def _engine_installed() -> str | None:
    for dist in ("vllm-omni", "vllm_omni"):
        try:
            return version(dist)
        except PackageNotFoundError:
            continue
    return None


def check_out_dir(out: Path) -> None:
    """Refuse an ``--out`` the bundle cannot be written to, before anything starts: an
    existing non-directory, a non-empty directory (a bundle is never overwritten), or a
    path whose nearest existing parent is not a writable directory.  Raises UsageError
    naming ``--out``."""
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise UsageError(f"--out {out}: exists and is not a directory")
    if out.is_dir():
        try:
            empty = not any(out.iterdir())
        except OSError as exc:
            raise UsageError(f"--out {out}: cannot list: {exc.strerror or exc}") from None
        if not empty:
            raise UsageError(f"--out {out}: exists and is not empty; a bundle is never "
                             "overwritten")
        parent = out
    else:
        parent = out.absolute().parent
        while not parent.exists() and parent != parent.parent:
            parent = parent.parent
        if not parent.is_dir():
            raise UsageError(f"--out {out}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--out {out}: {parent} is not writable")


FOLLOW_UP_RE = re.compile(r"^([2-9]):([A-Za-z0-9._-]{1,200})$")
"""``--follow-up LOOK:SCREEN_ID``: the look this screen adds and the first look's screen id."""


def parse_follow_up(text: str | None, scope: CampaignScope, *, control_only: bool = False,
                    ) -> tuple[int, str] | None:
    """``(look, first screen id)`` of ``--follow-up LOOK:SCREEN_ID``; None without it.

    A follow-up screen adds look ``LOOK`` to the group-sequential series that began with
    screen ``SCREEN_ID`` (its receipts say so, signed: ``look`` and ``continues``;
    :mod:`evidence.sequential`).  Raises :class:`UsageError` for a malformed value, a
    control-only screen, a protocol without ``[protocol.sequential]`` (follow-ups need the
    design declared before the first look) or a look beyond the design's ``looks``."""
    if text is None or text == "":
        return None
    m = FOLLOW_UP_RE.match(text)
    if m is None:
        raise UsageError(f"--follow-up {text!r}: use LOOK:SCREEN_ID, e.g. 2:camp.5s.cand."
                         "20261202T101500Z (LOOK 2-9; SCREEN_ID of A-Z a-z 0-9 . _ -)")
    if control_only:
        raise UsageError("--follow-up: a control-vs-control screen has no series to continue")
    seq = scope.protocol.sequential
    if seq is None:
        raise UsageError("--follow-up: the campaign's protocol declares no [protocol."
                         "sequential] design, so a screen cannot be a further look")
    look = int(m.group(1))
    if look > seq.looks:
        raise UsageError(f"--follow-up: look {look}, but [protocol.sequential] allows at most "
                         f"{seq.looks}")
    return look, m.group(2)


def run_screen(opts: ScreenOptions, console: Console | None = None) -> int:
    """Run (or with ``dry_run`` only plan) one screen; returns the exit code: 0 every session
    ran with HTTP 200 requests, clean lifecycles and passing media gates; 1 problems found
    (failed request, unqualified lifecycle, failed gate, interruption, sessions not run);
    2 bad usage or unreadable input (nothing started)."""
    console = console or Console()
    scope, scope_blob, scope_data = frozen_scope(opts, load_scope(opts.campaign))
    if opts.control_revision is not None and opts.candidate_revision is None:
        raise UsageError("--control-revision needs --candidate-revision (a revision screen)")
    if opts.candidate_revision is not None:
        if opts.candidate or opts.control_only:
            raise UsageError("--candidate-revision runs the control config at that revision: "
                             "it excludes --candidate and --control-only")
        try:
            scope = revision_scope(scope, opts.control_revision, opts.candidate_revision)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        opts.candidate = scope.candidates[0].name
    try:
        track = scope.track(opts.track)
        cand: Candidate | None = None
        if opts.candidate:
            cand = scope.candidate(opts.candidate)
        elif not opts.control_only:
            raise UsageError("--candidate is required unless --control-only")
    except KeyError as exc:
        raise UsageError(f"{opts.campaign / 'campaign.toml'}: {exc.args[0]}") from exc
    follow = parse_follow_up(opts.follow_up, scope, control_only=opts.control_only)
    try:
        plan = make_plan(scope.protocol, sessions=opts.sessions, control_only=opts.control_only)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    est = estimate(plan, scope.protocol, request_s=opts.request_estimate_s)
    print_plan(console, scope, plan, est, track.id, cand.name if cand else None)
    if opts.dry_run:
        # the preflight of a real screen: a dry run that would not start exits as it would
        stops = 0
        try:
            resolve_inputs(scope, opts.campaign)
            console.print("inputs: present, digests match")
        except UsageError as exc:
            stops += 1
            console.print(f"[yellow]inputs: {exc}[/]", highlight=False)
        try:
            check_out_dir(opts.out)
            console.print(f"out: {opts.out} can be written")
        except UsageError as exc:
            stops += 1
            console.print(f"[yellow]out: {exc}[/]", highlight=False)
        if stops:
            console.print(f"dry run: nothing started; a real screen would stop here on the "
                          f"{stops} problem(s) above (exit 2)")
            return EXIT_USAGE
        console.print("dry run: nothing started")
        return EXIT_OK
    inputs = resolve_inputs(scope, opts.campaign)
    key_path = opts.signing_key or (Path(os.environ["CAMPAIGN_BOT_SIGNING_KEY"])
                                    if os.environ.get("CAMPAIGN_BOT_SIGNING_KEY") else None)
    if key_path is None:
        raise UsageError("no signing key: pass --signing-key FILE or set "
                         "CAMPAIGN_BOT_SIGNING_KEY (make one with `campaign-bot keygen`)")
    try:
        key = load_private_key(key_path)
    except KeyFileError as exc:
        raise UsageError(str(exc)) from exc
    check_out_dir(opts.out)
    isolation = isolate(opts, key_path, console)
    tool = devices.detect_tool() if opts.device_tool == "auto" else opts.device_tool
    if tool not in devices.TOOLS:
        raise UsageError(f"--device-tool {opts.device_tool!r}: use auto, none, npu-smi or "
                         "nvidia-smi")
    if opts.device_tool == "auto" and tool == "none":
        console.print("[yellow]warning:[/] neither npu-smi nor nvidia-smi is on PATH: the "
                      "device idle gate is recorded as not checked, so no session's lifecycle "
                      "can qualify")
    return _Screen(opts, console, scope, track.id, track.duration_s, cand, plan, inputs, key,
                   tool, isolation, scope_blob, scope_data, follow).run()


def isolate(opts: ScreenOptions, key_path: Path, console: Console) -> Isolation | None:
    """Before any server starts: with ``[isolation] user`` set, create the bundle folder (mode
    0755, the runner's), make this process non-dumpable, and probe the isolation as the server
    account (:func:`runners.isolation.probe`): a readable signing key, a visible runner
    ``/proc/<pid>`` or a writable bundle folder refuses the screen (UsageError, exit 2).
    Without an [isolation] user: None and a warning (the server runs as the runner)."""
    if not opts.server_user:
        console.print("[yellow]warning:[/] no \\[isolation] user in the runner config: the "
                      "screened server runs as the runner's own account and could read the "
                      "signing key (docs/security.md)")
        return None
    try:
        identity = resolve_identity(opts.server_user)
        opts.out.mkdir(parents=True, exist_ok=True)
        os.chmod(opts.out, 0o755)
        harden_runner()
        iso = probe(identity, key=key_path, no_write=[opts.out, opts.out.parent],
                    devices=device_nodes())
    except (IsolationError, OSError) as exc:
        raise UsageError(f"server isolation: {exc}") from None
    if not iso.holds:
        raise UsageError("server isolation does not hold, not running: "
                         + "; ".join(iso.problems))
    for p in iso.device_problems:
        console.print(f"[yellow]warning:[/] {p}")
    console.print(f"server runs as {identity.name} (uid {identity.uid}) in a private /proc; "
                  "signing key unreadable to it")
    return iso


class _Screen:
    def __init__(self, opts: ScreenOptions, console: Console, scope: CampaignScope,
                 track: str, duration_s: float, cand: Candidate | None,
                 plan: list[PlannedSession], inputs: Inputs, key: Any, tool: str,
                 isolation: Isolation | None = None, scope_blob: str | None = None,
                 scope_data: bytes | None = None,
                 follow_up: tuple[int, str] | None = None) -> None:
        self.opts, self.console, self.scope = opts, console, scope
        self.scope_blob, self.scope_data = scope_blob, scope_data
        self.follow_up = follow_up
        self.isolation = isolation
        self.identity: ServerIdentity | None = isolation.identity if isolation else None
        self.scratch: Path | None = None
        self.track, self.duration_s, self.cand, self.plan = track, duration_s, cand, plan
        self.inputs, self.key, self.tool = inputs, key, tool
        self.out = opts.out
        self.data = opts.out / "data"
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        who = cand.name if cand else "control-only"
        self.screen_id = f"{scope.id}.{track}.{who}.{stamp}"
        self.results: list[SessionResult] = []
        self.notes: list[str] = []
        self.screen_problems: list[str] = []
        self.last_exit: float | None = None
        self.intr = Interrupt()
        self.interrupted = False

    # ------------------------------------------------------------------------- sessions
    def run(self) -> int:
        for d in (self.out, self.data, *(self.data / s for s in
                                          ("receipts", "logs", "outputs", "media"))):
            d.mkdir(parents=True, exist_ok=True)
            os.chmod(d, 0o755)  # the runner's alone: the server account cannot write here
        if self.identity is not None:
            self.scratch = make_scratch(self.identity)
            assert self.isolation is not None
            self.notes.append(f"server account: {self.identity.name} (uid {self.identity.uid})"
                              ", private /proc (hidepid=2), no capabilities, allow-listed "
                              "environment; signing key unreadable to it (probed)")
            self.notes += [f"device: {p}" for p in self.isolation.device_problems]
        else:
            self.notes.append("server account: the runner's own (no [isolation] user): the "
                              "server could read the signing key")
        if become_subreaper():
            self.notes.append("runner is a child subreaper: orphaned workers' exit status "
                              "is read with waitpid")
        installed = _engine_installed()
        pinned = self.scope.engine.version
        self.notes.append(f"engine pinned by scope: {self.scope.engine.repo}@"
                          f"{self.scope.engine.commit} version {pinned}; "
                          f"installed vllm-omni on the runner: {installed or 'not found'}")
        if installed and pinned and not _same_version(installed, pinned):
            self.screen_problems.append(f"installed vllm-omni {installed} is not the scope's "
                                        f"pinned {pinned}")
        self.notes.append(f"device idle gate: {self.tool}")
        for arm_cand in [None] + ([self.cand] if self.cand else []):
            env = build_env(self.scope.serving, arm_cand, device_ids=[],
                            request_timeout_s=self.scope.protocol.request_timeout_s,
                            device_tool=self.tool)
            try:
                sync = float(env["VLLM_OMNI_VIDEO_SYNC_TIMEOUT"])
            except ValueError:
                sync = -1.0
            if sync <= self.scope.protocol.request_timeout_s:
                who = arm_cand.name if arm_cand else "control"
                self.notes.append(
                    f"{who}: VLLM_OMNI_VIDEO_SYNC_TIMEOUT={env['VLLM_OMNI_VIDEO_SYNC_TIMEOUT']} "
                    f"is not above the request timeout {self.scope.protocol.request_timeout_s:g}"
                    " s: the server may answer 504 before the client gives up")
        self.intr.install()
        try:
            for ps in self.plan:
                if self.interrupted:
                    break
                res = self._session(ps)
                self.results.append(res)
                if res.receipt.lifecycle.interrupted:
                    self.interrupted = True
                    break
                if res.receipt.ready_at is None:
                    break  # not started, or the server never became ready: fail fast
                if self.opts.futility_stop and self._futile():
                    break
        except KeyboardInterrupt:
            self.interrupted = True
        finally:
            self.intr.shielded = True
        try:
            self._media()
            return self._finish()
        finally:
            self.intr.restore()
            if self.scratch is not None:
                remove_scratch(self.scratch)

    def _futile(self) -> bool:
        """After the first control and candidate sessions with a successful measured request:
        True (and a note) when candidate/control client wall exceeds the protocol's
        ``futility_ratio`` (as campaign #320 showed: 173.211 s control vs 365.884 s candidate,
        rejected after the first pair, the rest of the order explicitly not run)."""
        walls: dict[str, list[float]] = {"control": [], "candidate": []}
        for r in self.results:
            walls[r.planned.arm] += [float(q.client_wall_s) for q in r.receipt.measured
                                     if q.ok and q.client_wall_s is not None]
        if not walls["control"] or not walls["candidate"]:
            return False
        ratio = (sorted(walls["candidate"])[len(walls["candidate"]) // 2]
                 / sorted(walls["control"])[len(walls["control"]) // 2])
        limit = self.scope.protocol.futility_ratio
        if ratio > limit:
            self.notes.append(f"futility stop: candidate/control client wall {ratio:.3f} > "
                              f"{limit:g} after the first pair; remaining sessions not run")
            return True
        return False

    def _wait_idle_gap(self) -> None:
        if self.last_exit is None:
            return
        left = self.scope.protocol.idle_wait_s - (time.monotonic() - self.last_exit)
        if left > 0:
            self.console.print(f"waiting {left:.1f} s after the previous server's exit "
                               "(idle_wait_s)")
            time.sleep(left)

    def _gate(self) -> DeviceCheck:
        return devices.wait_idle(self.tool, self.scope.pool.device_ids,
                                 timeout_s=self.opts.idle_timeout_s,
                                 poll_s=min(2.0, max(0.2, self.opts.idle_timeout_s / 10)))

    def _session(self, ps: PlannedSession) -> SessionResult:
        scope, p = self.scope, self.scope.protocol
        arm_cand = self.cand if ps.arm == "candidate" else None
        tag = f"session-{ps.slot:02d}-{ps.arm}"
        port = self.opts.port or free_port(self.opts.host)
        revision = self._revision(ps.arm)
        server_cmd = self.opts.server_cmd
        if self.opts.candidate_revision is not None:
            # a revision screen: the host's command may name the revision (an image tag or
            # an install prefix per engine commit), and the server learns it from its env
            server_cmd = (server_cmd or os.environ.get(SERVER_CMD_ENV) or DEFAULT_SERVER_CMD
                          ).replace("{revision}", revision)
        argv = build_command(scope.serving, arm_cand, host=self.opts.host, port=port,
                             server_cmd=server_cmd)
        env = build_env(scope.serving, arm_cand, device_ids=scope.pool.device_ids,
                        request_timeout_s=p.request_timeout_s, device_tool=self.tool)
        if self.opts.candidate_revision is not None:
            env[REVISION_ENV] = revision
        started = datetime.now(UTC)
        full_env = server_environment(env, host_env=os.environ,
                                      pass_env=self.opts.server_pass_env,
                                      fixed=self.opts.server_env, identity=self.identity,
                                      scratch=self.scratch)
        srv = ServerProcess(argv, full_env, self.data / "logs" / f"{tag}.log", port,
                            host=self.opts.host, container=self.opts.container,
                            launch=enter(self.identity), cwd=self.scratch)
        records = []
        notes: list[str] = []
        ready_at = None
        interrupted = False
        before: DeviceCheck | None = None
        in_flight: tuple[int, Literal["warmup", "measured"], datetime] | None = None
        self.console.rule(f"session {ps.slot} ({ps.arm})")
        try:
            self._wait_idle_gap()
            before = self._gate()
            if not before.idle and self.tool != "none":
                notes.append(f"not started: devices not idle after {self.opts.idle_timeout_s:g}"
                             f" s: {before.detail}")
                return self._receipt(ps, tag, argv, env, started, None, [], srv, before,
                                     notes, started_server=False)
            if self.opts.port is not None and _port_in_use(self.opts.host, port):
                notes.append(f"not started: port {port} on {self.opts.host} already accepts "
                             "connections (a previous server still running?)")
                return self._receipt(ps, tag, argv, env, started, None, [], srv, before,
                                     notes, started_server=False)
            self.console.print("starting: " + " ".join(argv))
            srv.start()
            try:
                waited = srv.wait_ready(p.init_timeout_s, self.opts.health_poll_s)
            except ServerStartError as exc:
                notes.append(f"server did not become ready: {exc}")
                self.console.print(f"[red]{exc}[/]")
                return self._receipt(ps, tag, argv, env, started, None, [], srv, before,
                                     notes)
            ready_at = datetime.now(UTC)
            self.console.print(f"ready after {waited:.1f} s")
            srv.snapshot_workers()
            if srv.others:
                notes.append("other server descendants (not workers): " + "; ".join(srv.others))
            url = srv.base_url + "/v1/videos/sync"
            fields = request_fields(scope, self.duration_s, self.inputs.prompt)
            warm: list[Literal["warmup", "measured"]] = ["warmup"]
            meas: list[Literal["warmup", "measured"]] = ["measured"]
            kinds = warm * ps.warmups + meas * ps.measured
            with httpx.Client() as client:
                for i, kind in enumerate(kinds):
                    in_flight = (i, kind, datetime.now(UTC))
                    rel = f"data/outputs/s{ps.slot:02d}-{ps.arm}-{kind}-{i}.mp4"
                    rec = send_request(client, url, index=i, kind=kind, fields=fields,
                                       files=self.inputs.files, out_path=self.out / rel,
                                       rel_path=rel, timeout_s=p.request_timeout_s)
                    records.append(rec)
                    self.console.print(
                        f"{kind} {i}: HTTP {rec.http_status}, client wall "
                        f"{rec.client_wall_s:.3f} s, server {rec.server_inference_s} s"
                        + (f" [red]{rec.error[:200]}[/]" if rec.error else ""))
                    if not rec.ok:
                        notes.append(f"request {i} ({kind}) failed; the session went on to "
                                     "shutdown")
                        break
        except KeyboardInterrupt:
            interrupted = True
            self.intr.shielded = True
            if in_flight is not None and len(records) == in_flight[0]:
                partial = self.out / f"data/outputs/s{ps.slot:02d}-{ps.arm}-{in_flight[1]}-" \
                    f"{in_flight[0]}.mp4"
                partial.unlink(missing_ok=True)  # never bundle half an MP4
                records.append(RequestRecord(
                    index=in_flight[0], kind=in_flight[1], started_at=in_flight[2],
                    finished_at=datetime.now(UTC),
                    error="interrupted (SIGINT/SIGTERM) before the response completed"))
            notes.append("interrupted (SIGINT/SIGTERM); server shut down by the same ladder")
            self.console.print("[yellow]interrupted: shutting the server down[/]")
        return self._receipt(ps, tag, argv, env, started, ready_at, records, srv, before, notes,
                             interrupted=interrupted)

    def _revision(self, arm: str) -> str:
        """The engine revision ``arm`` runs: arm B of a revision screen runs
        ``--candidate-revision``; every other session the scope's (or
        ``--control-revision``'s, already in the scope) engine commit."""
        if arm == "candidate" and self.opts.candidate_revision is not None:
            return self.opts.candidate_revision.lower()
        return self.scope.engine.commit

    def _receipt(self, ps: PlannedSession, tag: str, argv: list[str], env: dict[str, str],
                 started: datetime, ready_at: datetime | None, records: list[Any],
                 srv: ServerProcess, before: DeviceCheck | None, notes: list[str], *,
                 interrupted: bool = False, started_server: bool = True) -> SessionResult:
        p = self.scope.protocol
        self.intr.shielded = True  # teardown must complete
        if started_server and srv.popen is not None:
            srv.shutdown(p.shutdown_timeout_s)
            self.last_exit = srv.exited_at or time.monotonic()
            life = srv.lifecycle()
            self._wait_idle_gap()
            life.devices_idle_after = self._gate()
        else:
            life = Lifecycle()
        life.devices_idle_before = before
        life.interrupted = interrupted
        self.intr.shielded = self.interrupted or interrupted
        rec = Receipt(
            screen_id=self.screen_id, session_id=f"{self.screen_id}.s{ps.slot:02d}",
            campaign=self.scope.id, track=self.track, arm=ps.arm,
            candidate=self.cand.name if ps.arm == "candidate" and self.cand else None,
            slot=ps.slot, order="".join("A" if s.arm == "control" else "B" for s in self.plan),
            engine_revision=self._revision(ps.arm), engine_version=self.scope.engine.version,
            config_digest=config_digest(argv, env), input_digests=self.inputs.digests,
            pool=self.scope.pool.name, devices=[str(d) for d in self.scope.pool.device_ids],
            started_at=started, ready_at=ready_at, stopped_at=datetime.now(UTC),
            requests=records, lifecycle=life,
            look=self.follow_up[0] if self.follow_up else None,
            continues=self.follow_up[1] if self.follow_up else None,
            server_log=f"data/logs/{tag}.log" if srv.log_path.exists() else None,
            notes="; ".join(notes + [f"server argv: {json.dumps(argv)}",
                                     f"env changes: {json.dumps(env, sort_keys=True)}"]))
        path = self.data / "receipts" / f"{tag}.json"
        path.write_text(rec.model_dump_json(indent=2, by_alias=True) + "\n")
        probs = [f"request {r.index} ({r.kind}) failed: {r.error or r.http_status}"
                 for r in rec.requests if not r.ok]
        if len(rec.requests) < ps.warmups + ps.measured:
            probs.append(f"{ps.warmups + ps.measured - len(rec.requests)} planned request(s) "
                         "not sent")
        probs += [f"lifecycle: {x}" for x in life.problems()]
        self.console.print(f"session {ps.slot} ({ps.arm}): "
                           + ("[green]clean[/]" if not probs else "[red]" + "; ".join(probs)
                              + "[/]"))
        return SessionResult(ps, rec, path, probs)

    # ------------------------------------------------------------------------ media gates
    def _media(self) -> None:
        ctrl = [(res, r) for res in self.results if res.planned.arm == "control"
                for r in res.receipt.measured if r.ok and r.output_path]
        others = [(res, r) for res in self.results for r in res.receipt.measured
                  if r.ok and r.output_path]
        if not ctrl:
            self.notes.append("media gates not run: no successful control output")
            return
        try:
            from evidence.media import compare  # type: ignore[attr-defined]

            if not callable(compare):  # evidence.media.compare is a module: take its function
                compare = compare.compare
        except (ImportError, AttributeError) as exc:
            self.notes.append(f"media gates skipped: evidence.media.compare not available "
                              f"({exc})")
            return
        ref_res, ref = ctrl[0]
        mode = next(t.quality_mode for t in self.scope.tracks if t.id == self.track)
        expected = next(t.expected_frames for t in self.scope.tracks if t.id == self.track)
        for res, r in others:
            if r is ref:
                continue
            name = f"s{res.planned.slot:02d}-{r.kind}-{r.index}-vs-s{ref_res.planned.slot:02d}"
            try:
                report = compare(self.out / str(ref.output_path), self.out / str(r.output_path),
                                 mode=mode, gates=self.scope.quality_gates,
                                 device=self.opts.media_device, expected_frames=expected,
                                 lpips_weights=self.opts.lpips_weights,
                                 lpips_sha256=self.opts.lpips_sha256)
            except ImportError as exc:
                self.notes.append(f"media gates skipped: media extra not installed ({exc})")
                return
            except Exception as exc:  # noqa: BLE001 - recorded, never dropped
                self.notes.append(f"media gate {name} failed to run: {type(exc).__name__}: "
                                  f"{exc}")
                res.problems.append(f"media gate {name} could not run")
                continue
            rel = f"data/media/{name}.json"
            try:
                from evidence.media.report import write_report
            except ImportError:
                (self.out / rel).write_text(report.model_dump_json(indent=2, by_alias=True)
                                            + "\n")
            else:
                write_report(self.out / rel, report)
            res.receipt.media_reports.append(rel)
            if not report.passed:
                res.problems.append(f"media gate {name} failed: {'; '.join(report.reasons)}")
            res.path.write_text(res.receipt.model_dump_json(indent=2, by_alias=True) + "\n")

    # -------------------------------------------------------------------------- bundle
    def _finish(self) -> int:
        problems = [f"session {r.planned.slot} ({r.planned.arm}): {x}" for r in self.results
                    for x in r.problems]
        problems += self.screen_problems
        not_run = self.plan[len(self.results):]
        if not_run:
            problems.append(f"{len(not_run)} planned session(s) not run: "
                            + ", ".join(f"{s.slot} ({s.arm})" for s in not_run))
        if self.interrupted:
            problems.append("screen interrupted")
        summary = {
            "format": "campaign-bot screen summary, version 1", "screen_id": self.screen_id,
            "campaign": self.scope.id, "track": self.track,
            "candidate": self.cand.name if self.cand else None,
            "order": "".join("A" if s.arm == "control" else "B" for s in self.plan),
            "plan": [{"slot": s.slot, "arm": s.arm, "warmups": s.warmups,
                      "measured": s.measured} for s in self.plan],
            "sessions": [{"slot": r.planned.slot, "arm": r.planned.arm,
                          "receipt": r.path.relative_to(self.out).as_posix(),
                          "problems": r.problems} for r in self.results],
            "interrupted": self.interrupted, "problems": problems, "notes": self.notes,
            "scope": {"blob": self.scope_blob, "frozen": self.opts.frozen_scope is not None},
            "runner": {"campaign_bot": _own_version(), "host": socket.gethostname(),
                       "device_tool": self.tool,
                       "server_account": self.identity.name if self.identity else None},
        }
        (self.data / "screen.json").write_text(json.dumps(summary, indent=2) + "\n")
        if self.scope_data is not None:  # the file the control came from, for check
            (self.out / SCOPE_FILE).write_bytes(self.scope_data)
        writer = write_bag(self.out, {"Source-Organization": "campaign-bot screen runner",
                                      "External-Identifier": self.screen_id})
        keep = ("screen_id", "campaign", "track", "candidate", "order", "interrupted")
        predicate: dict[str, Any] = {k: summary[k] for k in keep}
        predicate["receipts"] = [r.path.relative_to(self.out).as_posix() for r in self.results]
        predicate["problem_count"] = len(problems)
        predicate["bag_writer"] = writer
        predicate["server_account"] = self.identity.name if self.identity else None
        # the git blob of the campaign.toml the control, protocol and pool came from, and
        # whether it was the default branch's pinned at dispatch (--frozen-scope)
        predicate["scope_blob"] = self.scope_blob
        predicate["scope_frozen"] = self.opts.frozen_scope is not None
        # what the candidate changed, as run (check compares it with the frozen scope's)
        predicate["candidate_config"] = None if self.cand is None else {
            "add_flags": self.cand.add_flags, "remove_flags": self.cand.remove_flags,
            "env": self.cand.env}
        sign_bundle(self.out, self.key, predicate)
        self._print_summary(problems)
        return EXIT_PROBLEMS if problems else EXIT_OK

    def _print_summary(self, problems: list[str]) -> None:
        t = Table(title=f"screen {self.screen_id}", title_justify="left")
        for c in ("slot", "arm", "request", "HTTP", "client wall s", "server s", "output"):
            t.add_column(c)
        for r in self.results:
            for q in r.receipt.requests:
                t.add_row(str(r.planned.slot), r.planned.arm, f"{q.kind} {q.index}",
                          str(q.http_status), f"{q.client_wall_s:.3f}" if q.client_wall_s
                          is not None else "-", str(q.server_inference_s or "-"),
                          (q.output_sha256 or "-")[:12])
        self.console.print(t)
        for x in problems:
            self.console.print(f"[red]problem:[/] {x}")
        for n in self.notes:
            self.console.print(f"note: {n}")
        self.console.print(f"bundle written and signed: {self.out}")
        from runners.judge import judgement_lines

        for line in judgement_lines(self.out, self.opts.campaign, self.track,
                                    self.cand.name if self.cand else None):
            self.console.print(line, highlight=False, markup=False, soft_wrap=True)


def _own_version() -> str:
    try:
        return version("campaign-bot")
    except PackageNotFoundError:
        return "unknown"

