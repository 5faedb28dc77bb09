"""End to end: ``campaign-bot screen`` as a real subprocess against two servers, a fake
``npu-smi`` printing recorded-format idle output, and ``campaign-bot check --trusted-keys`` on
the signed bundle.

* ``standin``: ``runners.standin``, our simulation: worker processes, the shutdown ladder, its
  log markers and exit codes.
* ``upstream``: vLLM-Omni 0.30.0's own ``vllm serve --omni`` with a fake engine
  (``runners/upstream/launch_fake_engine.py``): the request/response contract.  It spawns no
  workers, so every upstream session's lifecycle reads "no worker exits recorded".  Skipped
  when the contract environment is absent (``tests/upstream_helpers.py``).

Cases from campaign #320: a teardown with four terminate and four kill actions fails the
lifecycle; a failed measured request leaves no denominator (and container exit 1 fails the
lifecycle although every worker exited 0); a clean run passes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import psutil
import pytest
from upstream_helpers import upstream_campaign, upstream_python

from evidence.models import CampaignScope, MediaReport, Receipt
from runners import upstream

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN = ROOT / "tests" / "data" / "screen-campaign"
FIX = ROOT / "tests" / "fixtures" / "npu-smi"
STANDIN = f"{sys.executable} -m runners.standin"
SERVERS = ("standin", "upstream")
NO_WORKERS = "no worker exits recorded"
RECEIPTS = {"data/receipts/session-00-control.json", "data/receipts/session-01-candidate.json"}


@pytest.fixture(scope="module")
def upstream_setup(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    """(server command prefix, campaign directory) for vLLM-Omni's real server."""
    py = upstream_python()
    return upstream.server_cmd(py), upstream_campaign(tmp_path_factory.mktemp("upstream"))


def _server(request: pytest.FixtureRequest, name: str) -> tuple[str, Path]:
    if name == "upstream":
        return request.getfixturevalue("upstream_setup")
    return STANDIN, CAMPAIGN


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("keys")
    res = _cli("keygen", str(d / "runner.key"))
    assert res.returncode == 0, res.stderr
    return d / "runner.key", d / "runner.key.pub"


@pytest.fixture(scope="module")
def npu_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("npu")
    shutil.copy(FIX / "info-a3-idle.txt", d / "info.txt")
    shutil.copy(FIX / "proc-mem-idle.txt", d / "proc-mem.txt")
    return d


def _env(npu_dir: Path | None = None, server_cmd: str = STANDIN) -> dict[str, str]:
    env = dict(os.environ)
    env["CAMPAIGN_BOT_SERVER_CMD"] = server_cmd
    env["PATH"] = f"{ROOT / 'tests' / 'bin'}{os.pathsep}{env['PATH']}"
    env["COLUMNS"] = "200"
    if npu_dir is not None:
        env["FAKE_NPU_SMI_DIR"] = str(npu_dir)
    return env


def _cli(*args: str, env: dict[str, str] | None = None,
         timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", "from evidence.cli import main; main()",
                           *args], capture_output=True, text=True, env=env, timeout=timeout,
                          cwd=ROOT)


def _screen_args(out: Path, key: Path, candidate: str, *extra: str,
                 campaign: Path = CAMPAIGN) -> list[str]:
    return ["screen", "--campaign", str(campaign), "--candidate", candidate,
            "--track", "1s-lossless", "--out", str(out), "--signing-key", str(key),
            "--device-tool", "npu-smi", "--health-poll-s", "0.05", "--idle-timeout-s", "2",
            *extra]


def _receipts(out: Path) -> list[Receipt]:
    files = sorted((out / "data" / "receipts").glob("*.json"))
    return [Receipt.model_validate_json(f.read_text()) for f in files]


def _check(out: Path, pub: Path) -> subprocess.CompletedProcess[str]:
    return _cli("check", str(out), "--trusted-keys", str(pub), "--json")


def _assert_checks_clean(out: Path, pub: Path,
                         expect: dict[str, set[str]] | None = None) -> None:
    """``campaign-bot check --trusted-keys`` verifies the signature, and its only problems are
    the ``expect``ed ones (rule -> receipt paths): an honest bundle of a failed session must
    be reported as failed, and nothing else."""
    chk = _check(out, pub)
    findings = json.loads(chk.stdout)["findings"]
    assert "SIGNATURE_VERIFIED" in {f["rule"] for f in findings}
    problems = [f for f in findings if f["severity"] in ("P0", "P1", "P2")]
    got: dict[str, set[str]] = {}
    for f in problems:
        got.setdefault(f["rule"], set()).add(f["path"])
    assert got == (expect or {}), problems
    assert chk.returncode == (1 if expect else 0)


@pytest.fixture(scope="module", params=SERVERS)
def clean_bundle(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 keys: tuple[Path, Path], npu_dir: Path
                 ) -> tuple[Path, subprocess.CompletedProcess[str], str]:
    cmd, campaign = _server(request, request.param)
    out = tmp_path_factory.mktemp(f"clean-{request.param}") / "bundle"
    res = _cli(*_screen_args(out, keys[0], "noop", campaign=campaign),
               env=_env(npu_dir, server_cmd=cmd), timeout=600)
    return out, res, request.param


def test_clean_run_passes(clean_bundle: tuple[Path, subprocess.CompletedProcess[str], str],
                          keys: tuple[Path, Path]) -> None:
    out, res, server = clean_bundle
    assert res.returncode == (0 if server == "standin" else 1), res.stdout + res.stderr
    control, cand = _receipts(out)
    assert (control.arm, cand.arm, cand.candidate) == ("control", "candidate", "noop")
    for r in (control, cand):
        if server == "standin":
            assert r.lifecycle.problems() == []
            assert [w.exit_code for w in r.lifecycle.workers] == [0, 0]
            assert all("DiffusionWorker" in (w.name or "") for w in r.lifecycle.workers)
        else:  # upstream's HTTP layer only: no worker processes, a clean SIGTERM exit
            assert r.lifecycle.problems() == [NO_WORKERS]
            assert r.lifecycle.server_exit_code == 0 and not r.lifecycle.server_exited_unasked
        assert "npu-smi: devices [0, 1] idle" == r.lifecycle.devices_idle_before.detail
        assert [q.kind for q in r.requests] == ["warmup", "measured"]
        for q in r.requests:
            assert q.ok and q.request_id and re.fullmatch(r"video_sync-[0-9a-f]{16}",
                                                          q.request_id)
            assert q.client_wall_s is not None and q.server_inference_s is not None
            assert q.wall_covers_server()
            assert q.stage_durations and q.peak_memory_mb == 1024.0
            f = out / str(q.output_path)
            assert f.stat().st_size == q.output_bytes
        assert r.server_log and "Application startup complete." in (out / r.server_log
                                                                   ).read_text()
    # Same seed, same server: byte-identical outputs across the arms.
    assert control.measured[0].output_sha256 == cand.measured[0].output_sha256
    assert control.config_digest == cand.config_digest
    summary = json.loads((out / "data" / "screen.json").read_text())
    assert summary["order"] == "AB"
    if server == "standin":
        assert summary["problems"] == []
        _assert_checks_clean(out, keys[1])
    else:
        assert summary["problems"] == [f"session {i} ({arm}): lifecycle: {NO_WORKERS}"
                                       for i, arm in enumerate(("control", "candidate"))]
        _assert_checks_clean(out, keys[1], {"LIFECYCLE_FAILED": RECEIPTS})


def test_bundle_is_a_valid_bagit_bag(
        clean_bundle: tuple[Path, subprocess.CompletedProcess[str], str]) -> None:
    bagit = pytest.importorskip("bagit")
    bag = bagit.Bag(str(clean_bundle[0]))
    bag.validate()  # raises BagValidationError on any problem
    assert "data/receipts/session-00-control.json" in bag.payload_entries()


def test_tamper_after_signing_fails(
        clean_bundle: tuple[Path, subprocess.CompletedProcess[str], str], keys: tuple[Path, Path],
        tmp_path: Path) -> None:
    edited = tmp_path / "edited"
    shutil.copytree(clean_bundle[0], edited)
    rec = edited / "data" / "receipts" / "session-01-candidate.json"
    doc = json.loads(rec.read_text())
    doc["requests"][1]["client_wall_s"] = 0.001  # a "faster" candidate
    rec.write_text(json.dumps(doc, indent=2) + "\n")
    chk = _check(edited, keys[1])
    assert chk.returncode == 1
    bad = [f for f in json.loads(chk.stdout)["findings"] if f["rule"] == "SIGNATURE_INVALID"]
    assert any("session-01-candidate.json" in f["message"] for f in bad)
    # Re-sealing the bag does not help: the signed tag manifest digest no longer matches.
    from runners.signer import write_bag
    write_bag(edited, {})
    chk = _check(edited, keys[1])
    assert chk.returncode == 1
    assert any("edited after signing" in f["message"]
               for f in json.loads(chk.stdout)["findings"] if f["rule"] == "SIGNATURE_INVALID")


def test_teardown_with_four_terminate_and_four_kill_fails(
        tmp_path: Path, keys: tuple[Path, Path], npu_dir: Path) -> None:
    out = tmp_path / "b"
    res = _cli(*_screen_args(out, keys[0], "stuck-workers"), env=_env(npu_dir))
    assert res.returncode == 1, res.stdout + res.stderr
    control, cand = _receipts(out)
    assert control.lifecycle.problems() == []
    life = cand.lifecycle
    assert (life.terminate_actions, life.kill_actions) == (4, 4)
    assert len(life.workers) == 4 and not any(w.clean for w in life.workers)
    assert all(w.exit_code is None for w in life.workers)
    assert sum("Calling kill on diffusion worker" in m for m in life.log_markers) == 4
    probs = life.problems()
    assert "4 terminate action(s)" in probs and "4 kill action(s)" in probs
    # The requests themselves were fine: latency is not what fails this session.
    assert all(q.ok for q in cand.requests)
    # the bundle is honest and verifies, and check reports the failed teardown
    _assert_checks_clean(
        out, keys[1], {"LIFECYCLE_FAILED": {"data/receipts/session-01-candidate.json"}})


@pytest.mark.parametrize("server", SERVERS)
def test_failed_measured_request_leaves_no_denominator(
        request: pytest.FixtureRequest, server: str, tmp_path: Path, keys: tuple[Path, Path],
        npu_dir: Path) -> None:
    cmd, campaign = _server(request, server)
    out = tmp_path / "b"
    extra = ("--container",) if server == "standin" else ()
    if server == "standin":
        cmd = f"{STANDIN} --container-exit 0"
    res = _cli(*_screen_args(out, keys[0], "oom-measured", *extra, campaign=campaign),
               env=_env(npu_dir, server_cmd=cmd), timeout=600)
    assert res.returncode == 1, res.stdout + res.stderr
    control, cand = _receipts(out)
    warm, meas = cand.requests
    assert warm.kind == "warmup" and warm.ok
    assert meas.kind == "measured" and meas.http_status == 500 and not meas.ok
    assert meas.error and meas.error.startswith("HTTP 500 InternalServerError: ")
    # no X-Request-Id on an error answer: the id comes from the error body
    assert meas.request_id and meas.request_id.startswith("video_sync-")
    assert meas.output_path is None and meas.output_sha256 is None
    assert [q for q in cand.measured if q.ok] == []  # no candidate denominator
    life = cand.lifecycle
    assert life.server_exit_code == 0 and not life.engine_died
    if server == "standin":
        assert control.lifecycle.problems() == [] and control.lifecycle.container_exit_code == 0
        assert all(w.clean for w in life.workers)
        assert life.container_exit_code == 1
        assert life.problems() == ["container exit 1"]
    else:  # an engine error (not a death): the server stays up until the runner's SIGTERM
        assert life.problems() == [NO_WORKERS] and not life.server_exited_unasked


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize(("candidate", "status", "needle"), [
    ("timeout-504", 504, "HTTP 504 Gateway Timeout: Video generation timed out after 0.5s."),
    ("worker-crash", 500, "HTTP 500 InternalServerError: EngineCore encountered an issue."),
], ids=["504", "engine-death"])
def test_failed_warmup_is_recorded_and_session_shuts_down(
        request: pytest.FixtureRequest, server: str, tmp_path: Path, keys: tuple[Path, Path],
        npu_dir: Path, candidate: str, status: int, needle: str) -> None:
    cmd, campaign = _server(request, server)
    out = tmp_path / "b"
    res = _cli(*_screen_args(out, keys[0], candidate, campaign=campaign),
               env=_env(npu_dir, server_cmd=cmd), timeout=600)
    assert res.returncode == 1, res.stdout + res.stderr
    cand = _receipts(out)[1]
    assert len(cand.requests) == 1  # the session went on to shutdown
    q = cand.requests[0]
    assert q.http_status == status and needle in (q.error or ""), q.error
    assert q.client_wall_s is not None
    notes = json.loads((out / "data" / "screen.json").read_text())["notes"]
    warned = [n for n in notes if "VLLM_OMNI_VIDEO_SYNC_TIMEOUT=0.5 is not above" in n]
    assert len(warned) == (1 if candidate == "timeout-504" else 0)
    life = cand.lifecycle
    if candidate == "timeout-504":
        assert q.request_id is None  # upstream's 504 names no request id anywhere
        assert not life.engine_died and not life.server_exited_unasked
        return
    # Engine death: HTTP 500 with the id in the body, then the server ends itself (exit 0).
    # Exit 0 is not a clean lifecycle: the death is recorded from the server log.
    assert q.request_id and q.request_id.startswith("video_sync-")
    assert life.engine_died and life.server_exit_code == 0
    assert "engine died (EngineDeadError in the server log)" in life.problems()
    assert any("EngineDeadError: orchestrator_alive=" in m for m in life.log_markers)
    if server == "standin":
        w0 = life.workers[0]
        assert (w0.rank, w0.signal, w0.source) == (0, 9, "log: died unexpectedly")
    assert not life.clean


def test_media_gates_run_against_the_control_output(
        clean_bundle: tuple[Path, subprocess.CompletedProcess[str], str]) -> None:
    pytest.importorskip("evidence.media.compare")
    out = clean_bundle[0]  # upstream muxes the fake engine's frames itself: same gate
    cand = _receipts(out)[1]
    assert cand.media_reports == ["data/media/s01-measured-1-vs-s00.json"]
    rep = MediaReport.model_validate_json((out / cand.media_reports[0]).read_text())
    assert rep.mode == "lossless" and rep.passed and rep.bit_exact and rep.bit_exact.frames_equal


def test_different_output_bytes_fail_the_lossless_gate(
        tmp_path: Path, keys: tuple[Path, Path], npu_dir: Path) -> None:
    pytest.importorskip("evidence.media.compare")
    out = tmp_path / "b"
    res = _cli(*_screen_args(out, keys[0], "vary"), env=_env(npu_dir))
    assert res.returncode == 1, res.stdout + res.stderr
    control, cand = _receipts(out)
    assert control.measured[0].output_sha256 != cand.measured[0].output_sha256
    assert cand.lifecycle.problems() == [] and all(q.ok for q in cand.requests)
    rep = MediaReport.model_validate_json((out / cand.media_reports[0]).read_text())
    assert rep.mode == "lossless" and not rep.passed
    summary = json.loads((out / "data" / "screen.json").read_text())
    assert any("media gate s01-measured-1-vs-s00 failed" in p for p in summary["problems"])


def test_connection_loss_is_recorded_and_orphans_are_reaped(
        tmp_path: Path, keys: tuple[Path, Path], npu_dir: Path) -> None:
    out = tmp_path / "b"
    res = _cli(*_screen_args(out, keys[0], "dies-mid-request"), env=_env(npu_dir))
    assert res.returncode == 1, res.stdout + res.stderr
    cand = _receipts(out)[1]
    (q,) = cand.requests
    assert q.http_status is None and q.error and q.error.startswith("connection failed")
    life = cand.lifecycle
    assert life.server_signal == signal.SIGKILL and life.server_exit_code is None
    # The orphaned workers got SIGTERM through PDEATHSIG and were re-parented to the
    # runner (a child subreaper), which read their real exit status: 143 from the worker's
    # SIGTERM handler, or SIGTERM itself when it lands before the handler runs.
    assert len(life.workers) == 2
    for w in life.workers:
        assert (w.state, w.source) == ("exited", "waitpid")
        assert (w.exit_code, w.signal) in ((143, None), (None, signal.SIGTERM))
        assert not w.clean


def test_server_dying_during_load_fails_fast(tmp_path: Path, keys: tuple[Path, Path],
                                             npu_dir: Path) -> None:
    out = tmp_path / "b"
    t0 = time.monotonic()
    res = _cli(*_screen_args(out, keys[0], "dies-during-load"), env=_env(npu_dir))
    assert time.monotonic() - t0 < 15  # not the 20 s init timeout
    assert res.returncode == 1
    cand = _receipts(out)[1]
    assert cand.requests == [] and cand.ready_at is None
    assert "server exited with code 1 before /health answered 200" in (cand.notes or "")
    assert cand.lifecycle.server_exit_code == 1


def test_hung_server_is_killed_and_recorded(tmp_path: Path, keys: tuple[Path, Path],
                                            npu_dir: Path) -> None:
    out = tmp_path / "b"
    res = _cli(*_screen_args(out, keys[0], "hang-shutdown", "--sessions", "2"),
               env=_env(npu_dir))
    assert res.returncode == 1
    life = _receipts(out)[1].lifecycle
    assert life.server_signal == signal.SIGKILL
    assert any(a.startswith("runner: SIGKILL pid") for a in life.forced_actions)
    assert life.kill_actions >= 3  # main process + two workers
    for w in life.workers:
        assert not psutil.pid_exists(w.pid) or psutil.Process(w.pid).status() == "zombie"


def test_sigint_shuts_down_and_writes_a_verifiable_bundle(
        tmp_path: Path, keys: tuple[Path, Path], npu_dir: Path) -> None:
    out = tmp_path / "b"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evidence.cli import main; main()",
         *_screen_args(out, keys[0], "slow")], env=_env(npu_dir), cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = out / "data" / "logs" / "session-01-candidate.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if log.exists() and "POST /v1/videos/sync received" in log.read_text():
            break  # the warmup request is in flight (30 s of stand-in generation)
        time.sleep(0.05)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    stdout, _ = proc.communicate(timeout=30)
    assert proc.returncode == 1, stdout
    control, cand = _receipts(out)
    assert control.lifecycle.problems() == []
    assert cand.lifecycle.interrupted
    assert "session interrupted" in cand.lifecycle.problems()
    assert [q.error for q in cand.requests] == [
        "interrupted (SIGINT/SIGTERM) before the response completed"]
    assert "Shutting down FastAPI HTTP server." in log.read_text()
    for w in cand.lifecycle.workers:
        assert not psutil.pid_exists(w.pid) or psutil.Process(w.pid).status() == "zombie"
    summary = json.loads((out / "data" / "screen.json").read_text())
    assert summary["interrupted"] and "screen interrupted" in summary["problems"]
    cand_path = "data/receipts/session-01-candidate.json"
    _assert_checks_clean(out, keys[1], {"LIFECYCLE_FAILED": {cand_path},
                                        "REQUEST_FAILED": {cand_path}})


def test_busy_port_is_not_mistaken_for_a_ready_server(
        tmp_path: Path, keys: tuple[Path, Path], npu_dir: Path) -> None:
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        out = tmp_path / "b"
        res = _cli(*_screen_args(out, keys[0], "noop", "--port", str(port)), env=_env(npu_dir))
    assert res.returncode == 1
    (control,) = _receipts(out)
    assert control.requests == [] and control.ready_at is None
    assert f"not started: port {port} on 127.0.0.1 already accepts connections" in (
        control.notes or "")
    summary = json.loads((out / "data" / "screen.json").read_text())
    assert "1 planned session(s) not run: 1 (candidate)" in summary["problems"]


def test_futility_stop_after_the_first_pair(tmp_path: Path, keys: tuple[Path, Path],
                                           npu_dir: Path) -> None:
    out = tmp_path / "b"
    res = _cli(*_screen_args(out, keys[0], "slower", "--sessions", "4", "--futility-stop"),
               env=_env(npu_dir))
    assert res.returncode == 1, res.stdout + res.stderr
    control, cand = _receipts(out)  # ABAB cut after AB
    assert cand.measured[0].client_wall_s > 1.1 * control.measured[0].client_wall_s
    summary = json.loads((out / "data" / "screen.json").read_text())
    assert any(n.startswith("futility stop: candidate/control client wall")
               for n in summary["notes"])
    assert "2 planned session(s) not run: 2 (control), 3 (candidate)" in summary["problems"]


def test_server_is_terminated_when_the_runner_is_killed(
        tmp_path: Path, keys: tuple[Path, Path], npu_dir: Path) -> None:
    """A job cancel ends with SIGKILL of the runner: the server (in its own session) gets
    SIGTERM through PR_SET_PDEATHSIG and runs its own shutdown ladder."""
    out = tmp_path / "b"
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evidence.cli import main; main()",
         *_screen_args(out, keys[0], "noop", "--control-only", "--sessions", "1")],
        env=_env(npu_dir, server_cmd=f"{STANDIN} --gen-seconds 30"), cwd=ROOT,
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    log = out / "data" / "logs" / "session-00-control.log"
    deadline = time.monotonic() + 30
    pid = None
    while time.monotonic() < deadline and pid is None:
        text = log.read_text() if log.exists() else ""
        m = re.search(r"Started server process \[(\d+)\]", text)
        if m and "POST /v1/videos/sync received" in text:
            pid = int(m.group(1))
        time.sleep(0.05)
    assert pid is not None
    proc.kill()
    proc.wait(10)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and psutil.pid_exists(pid) and \
            psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        time.sleep(0.1)
    assert list((out / "data" / "receipts").glob("*.json")) == []  # the runner never got
    text = log.read_text()                                       # to shut it down itself
    assert '"POST /v1/videos/sync HTTP/1.1"' not in text  # the warmup was still in flight
    assert "Shutting down FastAPI HTTP server." in text
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_dry_run_prints_plan_and_starts_nothing(tmp_path: Path) -> None:
    scope = CampaignScope.model_validate(tomllib.loads((CAMPAIGN / "campaign.toml").read_text()))
    out = tmp_path / "b"
    res = _cli("screen", "--campaign", str(CAMPAIGN), "--candidate", "noop", "--track",
               "1s-lossless", "--out", str(out), "--dry-run", "--sessions", "4",
               "--request-estimate-s", "60", env=_env())
    assert res.returncode == 0, res.stderr
    assert "order ABAB" in res.stdout and "estimated time" in res.stdout
    assert not out.exists()
    # wall hours and device hours (= wall x the pool's devices, as the budget charges them)
    p, devices = scope.protocol, scope.pool.device_count
    n_req = 4 * (p.warmups_per_session + p.measured_requests_per_session)
    upper = 4 * (p.init_timeout_s + p.shutdown_timeout_s + p.idle_wait_s) + \
        n_req * p.request_timeout_s
    text = " ".join(res.stdout.split())
    assert (f"upper bound from the timeouts {upper / 3600:.2f} wall h = "
            f"{upper * devices / 3600:.2f} device h ({devices} devices)") in text, text


@pytest.mark.parametrize(("args", "needle"), [
    (["--candidate", "nope"], "unknown candidate 'nope'"),
    (["--candidate", "noop", "--track", "9s"], "unknown track '9s'"),
    (["--candidate", "noop"], "no signing key"),
], ids=["candidate", "track", "key"])
def test_bad_usage_exits_2(tmp_path: Path, args: list[str], needle: str) -> None:
    base = ["screen", "--campaign", str(CAMPAIGN), "--track", "1s-lossless", "--out",
            str(tmp_path / "b")]
    if "--track" in args:
        base = base[:3] + base[5:]
    env = _env()
    env.pop("CAMPAIGN_BOT_SIGNING_KEY", None)
    res = _cli(*base, *args, env=env)
    assert res.returncode == 2
    assert needle in " ".join(res.stderr.split())


def test_check_trusted_keys_needs_a_signed_bundle(tmp_path: Path,
                                                  keys: tuple[Path, Path]) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "x.txt").write_text("x")
    res = _check(tmp_path, keys[1])
    assert res.returncode == 1
    assert "SIGNATURE_MISSING" in {f["rule"] for f in json.loads(res.stdout)["findings"]}
    bad = tmp_path / "bad.pub"
    bad.write_text("not a key\n")
    res = _cli("check", str(tmp_path), "--trusted-keys", str(bad))
    assert res.returncode == 2
    assert "no '-----BEGIN PUBLIC KEY-----' block" in " ".join(res.stderr.split())


def test_a_screen_ends_with_its_ratio_decision_and_verdict(
        tmp_path: Path, keys: tuple[Path, Path], npu_dir: Path) -> None:
    """The last lines of ``screen`` say what the bundle means, judged as ``check`` and the
    bot judge it (it ended with the bundle's path only)."""
    out = tmp_path / "b"
    res = _cli(*_screen_args(out, keys[0], "noop"), env=_env(npu_dir))
    assert res.returncode in (0, 1), res.stdout + res.stderr
    tail = res.stdout.split("bundle written and signed: ", 1)[1].splitlines()[1:]
    assert tail[0].startswith("ratio candidate/control: "), tail
    assert tail[1].startswith("screening decision: "), tail
    assert tail[2].startswith("verdict on 1s-lossless: "), tail
    assert tail[3] == f"every finding: campaign-bot check {out} --campaign {CAMPAIGN}", tail
    rep = json.loads(_cli("check", str(out), "--campaign", str(CAMPAIGN), "--json",
                          env=_env(npu_dir)).stdout)
    (v,) = [x for x in rep["verdicts"] if x["candidate"] == "noop"]
    assert tail[2].startswith(f"verdict on 1s-lossless: {v['verdict']}"), (tail, v)
