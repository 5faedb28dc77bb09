"""The stand-in against vLLM-Omni's own server code: the same requests, the same answers.

Each case is sent to ``runners.standin`` and to vLLM-Omni 0.30.0's real ``vllm serve --omni``
run with a fake engine (``runners/upstream/launch_fake_engine.py``), and the two answers must
match: status, error body, which contract headers are present and their formats, and for an
MP4 its streams (size, frame count, audio).  Only values that identify one answer are
normalised (request ids, timings, pydantic's documentation URL version); a fault is produced
on the stand-in by its documented simulation-only switch and on upstream by the launcher's
fault mode.  Also: the flag table equals upstream's parser, and ``campaign-bot runner
check-flags`` runs that parser.  Needs the contract environment (``tests/upstream_helpers.py``).
"""

from __future__ import annotations

import io
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from upstream_helpers import CAMPAIGN, model_dir, upstream_campaign, upstream_python

from runners import upstream

ROOT = Path(__file__).resolve().parents[1]
REF_MP4 = (CAMPAIGN / "ref.mp4").read_bytes()
REF_WAV = (CAMPAIGN / "ref.wav").read_bytes()
SYNC_TIMEOUT = "1"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Srv:
    name: str
    proc: subprocess.Popen[bytes]
    port: int
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _start(name: str, argv: list[str], env: dict[str, str], log: Path) -> Srv:
    port = _port()
    with open(log, "wb") as fh:
        proc = subprocess.Popen([*argv, "--host", "127.0.0.1", "--port", str(port)],
                                stdout=fh, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "VLLM_LOGGING_COLOR": "0", **env},
                                start_new_session=True)
    return Srv(name, proc, port, log)


def _wait_ready(servers: list[Srv], timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    pending = list(servers)
    while pending:
        for s in list(pending):
            assert s.proc.poll() is None, f"{s.name} exited: {s.log.read_text()[-2000:]}"
            try:
                if httpx.get(s.url + "/health", timeout=2).status_code == 200:
                    pending.remove(s)
            except httpx.TransportError:
                pass
        assert time.monotonic() < deadline, f"not ready: {[s.name for s in pending]}"
        time.sleep(0.3)


def _stop(s: Srv) -> None:
    if s.proc.poll() is None:
        s.proc.send_signal(signal.SIGTERM)
        try:
            s.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(s.proc.pid, signal.SIGKILL)
            s.proc.wait(10)


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, tuple[Srv, Srv]]]:
    """Pairs (stand-in, upstream) for each fault, all started at once: ``error`` answers an
    engine error on the first generation and is healthy after it, ``slow`` times out,
    ``dead`` loses its engine on the first generation, ``client`` rejects as the model
    would."""
    py = upstream_python()
    tmp = tmp_path_factory.mktemp("contract")
    model = str(model_dir(tmp))
    base = {"VLLM_OMNI_VIDEO_SYNC_TIMEOUT": "600", "CAMPAIGN_BOT_FAKE_ENGINE_MAX_FRAMES": "12"}
    standin = [sys.executable, "-m", "runners.standin", "serve", model, "--omni",
               "--num-gpus", "1", "--max-frames", "12", "--ladder-s", "1,1,1"]
    ups = [str(py), str(upstream.LAUNCHER), "serve", model, "--omni", "--num-gpus", "1"]
    fault = "CAMPAIGN_BOT_FAKE_ENGINE_FAULT"
    plan = {
        "error": ([*standin, "--fail-first-500"], base,
                  {**base, fault: "error", "CAMPAIGN_BOT_FAKE_ENGINE_FAULT_ON": "1"}),
        "slow": ([*standin, "--timeout-504"],
                 {**base, "VLLM_OMNI_VIDEO_SYNC_TIMEOUT": SYNC_TIMEOUT},
                 {**base, fault: "slow", "VLLM_OMNI_VIDEO_SYNC_TIMEOUT": SYNC_TIMEOUT}),
        "dead": ([*standin, "--crash-worker-mid-request"], base, {**base, fault: "dead"}),
    }
    started: dict[str, tuple[Srv, Srv]] = {}
    try:
        for key, (s_argv, s_env, u_env) in plan.items():
            started[key] = (_start(f"standin-{key}", s_argv, s_env, tmp / f"s-{key}.log"),
                            _start(f"upstream-{key}", ups, u_env, tmp / f"u-{key}.log"))
        _wait_ready([s for pair in started.values() for s in pair])
        yield started
    finally:
        for pair in started.values():
            for s in pair:
                _stop(s)


def _mp4_shape(data: bytes) -> dict[str, Any]:
    import av

    with av.open(io.BytesIO(data)) as c:
        v = c.streams.video[0]
        a = c.streams.audio[0] if c.streams.audio else None
        frames = sum(1 for _ in c.decode(v))
        return {"size": (v.codec_context.width, v.codec_context.height), "frames": frames,
                "video_codec": v.codec_context.name,
                "audio": None if a is None else (a.codec_context.name, a.sample_rate,
                                                 a.codec_context.layout.name)}


ID = re.compile(r"^video_sync-[0-9a-f]{16}$")
THREE_DECIMALS = re.compile(r"^\d+\.\d{3}$")


def _norm(resp: httpx.Response) -> dict[str, Any]:
    """What must match between the two servers (see the module docstring)."""
    h = resp.headers
    out: dict[str, Any] = {"status": resp.status_code,
                           "content_type": h.get("content-type", "").split(";")[0]}
    rid = h.get("x-request-id")
    out["x-request-id"] = None if rid is None else bool(ID.match(rid))
    for k in ("x-inference-time-s", "x-peak-memory-mb"):
        out[k] = None if k not in h else bool(THREE_DECIMALS.match(h[k]))
    if "x-stage-durations" in h:
        stages = json.loads(h["x-stage-durations"])
        out["x-stage-durations"] = isinstance(stages, dict) and all(
            isinstance(v, int | float) and v >= 0 for v in stages.values())
    else:
        out["x-stage-durations"] = None
    out["x-model"] = h.get("x-model")
    if out["content_type"] == "video/mp4":
        out["mp4"] = _mp4_shape(resp.content)
        return out
    body = resp.json()
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        if "request_id" in err:
            err["request_id"] = bool(ID.match(str(err["request_id"])))
        err["message"] = re.sub(r"errors\.pydantic\.dev/[\d.]+/", "errors.pydantic.dev/V/",
                                str(err["message"]))
    out["body"] = body
    return out


def _png() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (200, 30, 30)).save(buf, format="PNG")
    return buf.getvalue()


def _gif() -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="GIF")
    return buf.getvalue()


GOOD = {"prompt": "contract", "width": "64", "height": "64", "fps": "24",
        "num_inference_steps": "2", "seed": "0", "flow_shift": "12",
        "extra_params": '{"task":"ref2va","duration":0.5,"audio_flow_shift":3.0}'}
REFS = [("input_references", ("ref.mp4", REF_MP4, "video/mp4")),
        ("input_references", ("ref.wav", REF_WAV, "audio/wav"))]


def _with(**changes: str | None) -> dict[str, str]:
    """GOOD with fields changed; a None value removes the field."""
    d = dict(GOOD)
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return d


CASES: dict[str, tuple[dict[str, str], list[Any]]] = {
    "valid": (GOOD, REFS),
    "fps-float": (_with(fps="24.0"), REFS),
    "no-width-height": (_with(width=None, height=None, extra_params='{"task":"ref2va",'
                              '"duration":0.1}'), REFS),
    "image-and-audio": (GOOD, [("input_references", ("face.png", _png(), "image/png")),
                               REFS[1]]),
    "missing-prompt": (_with(prompt=None), REFS),
    "empty-prompt": (_with(prompt=""), REFS),
    "width-not-int": (_with(width="abc"), REFS),
    "two-bad-fields": (_with(prompt=None, width="abc", height="x"), REFS),
    "fps-0": (_with(fps="0"), REFS),
    "fps-inf": (_with(fps="inf"), REFS),
    "seed-not-int": (_with(seed="abc"), REFS),
    "flow-shift-not-number": (_with(flow_shift="abc"), REFS),
    "seconds-not-integer": (_with(seconds="5.5"), REFS),
    "steps-0": (_with(num_inference_steps="0"), REFS),
    "steps-201": (_with(num_inference_steps="201"), REFS),
    "width-0": (_with(width="0"), REFS),
    "extra-not-json": (_with(extra_params="{bad"), REFS),
    "extra-not-object": (_with(extra_params="[1]"), REFS),
    "model-mismatch": (_with(model="someone/else"), REFS),
    "video-mkv": (GOOD, [("input_references", ("ref.mkv", REF_MP4, "video/x-matroska")),
                         REFS[1]]),
    "audio-flac": (GOOD, [REFS[0], ("input_references", ("ref.flac", REF_WAV, "audio/flac"))]),
    "image-undecodable": (GOOD, [("input_references", ("face.png", b"not a png", "image/png")),
                                 REFS[1]]),
    "image-gif": (GOOD, [("input_references", ("face.gif", _gif(), "image/gif")), REFS[1]]),
    "thirteen-refs": (GOOD, [("input_references", (f"r{i}.mp4", REF_MP4, "video/mp4"))
                             for i in range(13)]),
    "video-over-50-mib": (GOOD, [("input_references", ("big.mp4", b"\0" * (50 * 2**20 + 1),
                                                       "video/mp4")), REFS[1]]),
    "audio-over-15-mib": (GOOD, [REFS[0], ("input_references", ("long.wav",
                                                                b"\0" * (15 * 2**20 + 1),
                                                                "audio/wav"))]),
    "ref2va-audio-only": (GOOD, [REFS[1]]),
    "ref2va-four-videos": (GOOD, [REFS[0]] * 4),
}


def _send(s: Srv, fields: dict[str, str], files: list[Any]) -> httpx.Response:
    return httpx.post(s.url + "/v1/videos/sync", data=fields, files=files or None,
                      timeout=120)


def _pair(pairs: dict[str, tuple[Srv, Srv]], key: str, fields: dict[str, str],
          files: list[Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    a, b = pairs[key]
    ra, rb = _send(a, fields, files), _send(b, fields, files)
    na, nb = _norm(ra), _norm(rb)
    # X-Model names the served model: the same path on both servers
    return na, nb


def test_engine_error_then_every_request_kind(pairs: dict[str, tuple[Srv, Srv]]) -> None:
    """The first generation fails with an engine error (HTTP 500, request id only in the
    body); afterwards both servers answer every valid and invalid request alike."""
    standin, up = _pair(pairs, "error", GOOD, REFS)
    assert up["status"] == 500 and up["x-request-id"] is None, up
    assert up["body"]["error"]["request_id"] is True
    assert standin == up
    diffs = {}
    accepted = {"valid", "fps-float", "no-width-height", "image-and-audio"}
    for name, (fields, files) in CASES.items():
        a, b = _pair(pairs, "error", fields, files)
        assert b["status"] == (200 if name in accepted else 400), (name, b)
        if a != b:
            diffs[name] = {"standin": a, "upstream": b}
    assert diffs == {}, json.dumps(diffs, indent=1, default=str)[:6000]
    # and a form body that is not multipart, and a path that does not exist
    a, b = pairs["error"]
    form = {"prompt": "x", "width": "64", "height": "64", "extra_params": '{"duration":0.2}'}
    assert _norm(httpx.post(a.url + "/v1/videos/sync", data=form, timeout=60)) == \
        _norm(httpx.post(b.url + "/v1/videos/sync", data=form, timeout=60))
    assert _norm(httpx.get(a.url + "/nope")) == _norm(httpx.get(b.url + "/nope"))
    assert httpx.get(a.url + "/health").json() == httpx.get(b.url + "/health").json()


def test_timeout_answers_alike(pairs: dict[str, tuple[Srv, Srv]]) -> None:
    standin, up = _pair(pairs, "slow", GOOD, REFS)
    assert up["status"] == 504 and up["x-request-id"] is None
    assert up["body"]["error"]["message"] == \
        f"Video generation timed out after {float(SYNC_TIMEOUT)}s."
    assert standin == up


def test_engine_death_answers_500_then_the_server_exits_0(
        pairs: dict[str, tuple[Srv, Srv]]) -> None:
    standin, up = _pair(pairs, "dead", GOOD, REFS)
    assert up["status"] == 500 and up["body"]["error"]["message"].startswith("EngineCore")
    assert standin == up
    for s in pairs["dead"]:
        assert s.proc.wait(60) == 0, s.name  # it shut itself down: nobody sent SIGTERM
        with pytest.raises(httpx.TransportError):
            httpx.get(s.url + "/health", timeout=2)
        assert "EngineDeadError: orchestrator_alive=" in s.log.read_text()


def test_client_error_fault_is_a_400(tmp_path: Path) -> None:
    """The launcher's ``client-error`` fault: the model's ``OmniClientError`` is a 400 with
    the message, request id nowhere."""
    py = upstream_python()
    s = _start("upstream-client", [str(py), str(upstream.LAUNCHER), "serve",
                                   str(model_dir(tmp_path)), "--omni"],
               {"CAMPAIGN_BOT_FAKE_ENGINE_FAULT": "client-error"}, tmp_path / "u.log")
    try:
        _wait_ready([s])
        n = _norm(_send(s, GOOD, REFS))
    finally:
        _stop(s)
    assert n["status"] == 400 and n["x-request-id"] is None
    assert n["body"] == {"error": {
        "message": "ref2va requires at least one image or video reference (fake engine fault)",
        "type": "Bad Request", "param": None, "code": 400}}


# ------------------------------------------------------------------------ flags and pins


def test_flag_table_is_upstream_parsers() -> None:
    """``serve-flags.json`` (what the stand-in accepts) equals upstream's parser today."""
    py = upstream_python()
    res = subprocess.run([str(py), str(upstream.LAUNCHER), "--list-flags"], capture_output=True,
                         text=True, timeout=300, env={**os.environ, "VLLM_LOGGING_COLOR": "0"})
    line = next(x for x in res.stdout.splitlines() if x.startswith(upstream.LIST_MARK))
    live = json.loads(line[len(upstream.LIST_MARK):])
    table = json.loads(upstream.FLAGS_FILE.read_text())
    assert (live["vllm_omni"], live["vllm"]) == (table["vllm_omni"], table["vllm"])
    assert live["actions"] == table["actions"]


RECIPE = ["--omni", "--trust-remote-code", "--num-gpus 8", "--usp 8", "--ring 1",
          "--text-encoder-tp-size 8", "--enable-distributed-layerwise-offload",
          "--vae-parallel-mode tile", "--vae-use-tiling", "--vae-patch-parallel-size 8",
          "--diffusion-attention-backend FLASH_ATTN"]
"""The MiniMax H3 NPU recipe's flags (vLLM-Omni recipes/MiniMaxAI/MiniMax-H3-NPU.md)."""


def test_check_flags_runs_upstreams_parser(tmp_path: Path) -> None:
    py = upstream_python()
    import shlex

    def argv(flags: list[str]) -> list[str]:
        return ["vllm", "serve", "MiniMaxAI/MiniMax-H3/Ref2VA",
                *[t for f in flags for t in shlex.split(f)]]

    res = upstream.check_flag_lines([("recipe", argv(RECIPE)),
                                     ("typo", argv([*RECIPE, "--usp-typo 3"])),
                                     ("bad-value", argv(["--omni", "--usp eight"])),
                                     ("frame-workers", argv(
                                         ["--omni", "--video-response-frame-conversion-workers 8"]
                                     ))], python=py)
    assert res.vllm_omni == upstream.pinned_versions()["vllm-omni"]
    got = {a.arm: (a.exit, a.message) for a in res.arms}
    assert got["recipe"] == (0, "")
    assert got["typo"][0] == 2 and "unrecognized arguments: --usp-typo 3" in got["typo"][1]
    assert got["bad-value"][0] == 2 and "invalid int value: 'eight'" in got["bad-value"][1]
    # a flag the NPU recipe names but 0.30.0 does not have
    assert got["frame-workers"][0] == 2 and "--video-response-frame-conversion-workers" in \
        got["frame-workers"][1]
    assert not res.ok


def test_runner_check_flags_command(tmp_path: Path) -> None:
    """``campaign-bot runner check-flags``: exit 0 when every arm parses, 1 naming the arm and
    upstream's message otherwise."""
    upstream_python()
    camp = upstream_campaign(tmp_path)
    cli = [sys.executable, "-c", "from evidence.cli import main; main()", "runner",
           "check-flags", str(camp)]
    ok = subprocess.run(cli, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "control" in ok.stdout and "accepted" in ok.stdout
    toml = camp / "campaign.toml"
    toml.write_text(toml.read_text().replace('name = "noop"', 'name = "noop"\n'
                                             'add_flags = ["--ladder-s=1,1,1"]'))
    bad = subprocess.run([*cli, "--json"], capture_output=True, text=True, timeout=300,
                         cwd=ROOT)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    doc = json.loads(bad.stdout)
    arms = {a["arm"]: a for a in doc["arms"]}
    assert arms["control"]["exit"] == 0
    assert arms["noop"]["exit"] == 2 and "--ladder-s" in arms["noop"]["message"]
