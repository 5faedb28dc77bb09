"""A stand-in for a vLLM-Omni server (``vllm serve MODEL --omni``), for tests and benchmarks.

It is a real HTTP server process that follows vLLM-Omni 0.30.0's contract, the same answers
for the same requests as upstream's own server code (``runners.standin_contract`` lists the
sources; ``tests/test_upstream_contract.py`` compares the two servers):

* ``GET /health``: 200 ``{"status":"healthy"}``; 503 ``{"status":"unhealthy"}`` once the
  engine died.  The socket only listens once the "model" is loaded and the workers are up, so
  connections are refused while loading (``vllm_omni/entrypoints/openai/api_server.py``,
  ``omni_run_server_worker``: uvicorn starts accepting in ``serve_http``).
* ``POST /v1/videos/sync``: ``multipart/form-data`` (or urlencoded) with upstream's form
  fields, types and bounds; repeated ``input_references`` parts classified and refused as
  upstream refuses them (:mod:`evidence.reference_rules`) and MiniMax H3's Ref2VA count rule.
  Answers the raw MP4 (H.264 + AAC stereo 32 kHz, made with PyAV) with ``X-Request-Id``
  (``video_sync-<16 hex>``), ``X-Model``, ``X-Inference-Time-S`` (three decimals),
  ``X-Stage-Durations`` and ``X-Peak-Memory-MB`` (three decimals).  Errors carry no
  ``X-Request-Id`` and the body ``{"error": {"message", "type", "param", "code"}}``; an engine
  error (500) adds ``request_id`` and ``error_stage_id``; 504 "Video generation timed out after
  N.Ns." after ``VLLM_OMNI_VIDEO_SYNC_TIMEOUT`` seconds.
* Engine death (a worker died): the request in flight gets HTTP 500 with ``EngineDeadError``'s
  message, the server logs ``EngineDeadError: ...``, then shuts itself down and exits 0, as
  vLLM's ``terminate_if_errored`` (``vllm/entrypoints/launchers/launcher.py``) does unless
  ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1``; a death between requests is noticed within 5 s
  (vLLM's watchdog loop).
* Worker child processes, spawned like ``MultiprocDiffusionExecutor`` (``spawn`` start
  method, process title ``vLLM-Omni::DiffusionWorker_SP<rank>``, ``PR_SET_PDEATHSIG``), and
  the same shutdown ladder and log markers as
  ``vllm_omni/diffusion/executor/multiproc_executor.py`` (``_ExecutorShutdownCleaner``):
  shutdown message, wait, "Calling terminate on diffusion worker ...", wait, "Calling kill on
  diffusion worker ...", "Diffusion worker cleanup incomplete after kill: [...]"; workers log
  "Worker N: Shutdown complete." and exit 0, or exit 143 on SIGTERM
  (``vllm_omni/diffusion/worker/diffusion_worker.py``).

Usage: ``python -m runners.standin [serve] MODEL --omni --host 127.0.0.1 --port P [flags]``.
Like upstream's parser it refuses an unknown flag with exit 2 ("unrecognized arguments"); it
accepts every flag of vLLM-Omni's ``vllm serve --omni`` (``runners/upstream/serve-flags.json``)
without acting on it, and these simulation-only switches (all off by default), which the real
server does not have:

``--num-gpus N``            number of worker processes (default 2; upstream's flag too)
``--slow-start S``          sleep S seconds "loading" before listening
``--die-during-load``       exit 1 during loading (after ``--slow-start``)
``--fail-first-500``        the first /v1/videos/sync answers HTTP 500 (an engine error)
``--fail-request-500 N``    the N-th (1-based) /v1/videos/sync answers HTTP 500
``--timeout-504``           every request exceeds the sync timeout and answers 504
``--gen-seconds S``         simulated generation time per request (default 0.05)
``--ignore-shutdown``       workers ignore the shutdown message and SIGTERM (terminate + kill)
``--hang-shutdown``         the main process ignores SIGTERM (the runner must SIGKILL it)
``--crash-worker-mid-request``  worker 0 SIGKILLs itself during the first request: engine
                            death (HTTP 500, then the server shuts itself down, exit 0)
``--die-mid-request``       the main process SIGKILLs itself during the first request
``--vary-output``           different output bytes on every run (random noise in the frames)
``--response-mb M``         pad each MP4 with a trailing ``free`` box to M MiB (benchmarks)
``--resolution WxH``        encode at this size instead of the request's width x height
``--max-frames N``          cap the encoded frame count (default 48) for speed
``--ladder-s A,B,C``        shutdown ladder waits: message, terminate, kill (default 15,5,5)
``--container-exit N``      act as a container: log the server's exit code, exit with N
``--gen-seconds-by-revision FILE``  a JSON object ``{"REVISION": seconds}``: when the
                            engine revision the runner names (``CAMPAIGN_BOT_ENGINE_REVISION``)
                            and a key are one a prefix of the other, that key's seconds replace
                            ``--gen-seconds`` (the longest such key wins): an engine whose latency
                            changes at one commit, for ``/compare`` and ``/bisect``

Differences from upstream that remain, on purpose: flag values are not type-checked (use
``campaign-bot runner check-flags``); reference videos and audio are not decoded (upstream's
model checks duration, codec and resolution); the fps and duration do not follow MiniMax H3's
17n+5 frame alignment.
"""

from __future__ import annotations

import argparse
import ctypes
import email.parser
import email.policy
import json
import logging
import multiprocessing as mp
import os
import signal
import sys
import threading
import time
import urllib.parse
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported lazily: spawned workers import this module and stay light
    pass

LOG = logging.getLogger("vllm_omni.standin")
CHUNK = 1 << 20

# Markers the runner reads (same wording as vLLM-Omni 0.30.0:
# vllm_omni/diffusion/executor/multiproc_executor.py and uvicorn).
MARK_STARTUP = "Application startup complete."
MARK_TERMINATE = "Calling terminate on diffusion worker {name} (pid={pid})"
MARK_KILL = "Calling kill on diffusion worker {name} (pid={pid})"
MARK_INCOMPLETE = "Diffusion worker cleanup incomplete after kill: {names}"
MARK_DIED = "Diffusion worker(s) died unexpectedly: {items}"
CONTAINER_MARKER = "campaign-bot-entrypoint: server exited with code {code}"
"""Line a container entrypoint prints so the runner can tell the server's own exit code from
the container's (see runners.server)."""

AUDIO_RATE = 32000
WATCHDOG_S = 5.0
"""vLLM's ``watchdog_loop`` checks the engine every 5 s (``launchers/launcher.py``)."""


def _set_death_signal(sig: int = signal.SIGTERM) -> None:
    """prctl(PR_SET_PDEATHSIG, sig) as vLLM-Omni's workers do (Linux only; no-op elsewhere)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _set_title(title: str) -> None:
    try:
        import setproctitle

        setproctitle.setproctitle(title)
    except ImportError:  # pragma: no cover - setproctitle is a dependency
        pass


def _wlog(rank: int, msg: str) -> None:
    sys.stderr.write(f"(DiffusionWorker_SP{rank} pid={os.getpid()}) INFO {msg}\n")
    sys.stderr.flush()


def _worker_main(rank: int, conn: Any, ignore_shutdown: bool) -> None:
    """Body of one worker process (spawned).  Protocol on ``conn``: ``("work", seconds,
    crash)`` -> ``("done", rank)``; ``("shutdown",)`` -> exit 0 (unless ignoring)."""
    _set_title(f"vLLM-Omni::DiffusionWorker_SP{rank}")
    _set_death_signal()
    if ignore_shutdown:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    else:

        def _on_signal(signum: int, _frame: Any) -> None:
            _wlog(rank, f"Worker {rank}: Shutdown signal received, starting cleanup.")
            raise SystemExit(128 + signum)

        signal.signal(signal.SIGTERM, _on_signal)
        signal.signal(signal.SIGINT, _on_signal)
    _wlog(rank, f"Worker {rank}: ready")
    conn.send(("ready", rank))
    while True:
        try:
            msg = conn.recv()
        except EOFError:
            if ignore_shutdown:
                time.sleep(3600)
            return
        if msg[0] == "work":
            if msg[2]:
                _wlog(rank, f"Worker {rank}: crashing mid-request (stand-in switch)")
                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(msg[1])
            conn.send(("done", rank))
        elif msg[0] == "shutdown":
            _wlog(rank, f"Worker {rank}: Received shutdown message")
            if ignore_shutdown:
                _wlog(rank, f"Worker {rank}: ignoring shutdown (stand-in switch)")
                continue
            _wlog(rank, "event loop terminated.")
            _wlog(rank, f"Worker {rank}: Shutdown complete.")
            return


# ------------------------------------------------------------------------------------ media


def make_mp4(
    width: int,
    height: int,
    frames: int,
    *,
    fps: float = 24,
    seed: int = 0,
    noise: bytes | None = None,
) -> bytes:
    """Encode a small real MP4: ``frames`` H.264 frames (yuv420p, ``width`` x ``height``,
    both rounded up to even) at ``fps`` frames per second (fractional rates allowed) and AAC
    stereo 32 kHz audio of the same duration.  Deterministic
    for a given ``seed`` unless ``noise`` bytes are given (then they perturb the frames)."""
    import io

    import av
    import numpy as np

    width += width % 2
    height += height % 2
    rng = np.random.default_rng(seed if noise is None else int.from_bytes(noise[:8], "little"))
    base = rng.integers(0, 255, size=(height, width, 3), dtype=np.uint8)
    buf = io.BytesIO()
    with av.open(buf, "w", format="mp4") as out:
        vs = out.add_stream("libx264", rate=Fraction(fps).limit_denominator(1001))
        vs.width, vs.height, vs.pix_fmt = width, height, "yuv420p"
        vs.options = {"preset": "ultrafast", "threads": "1"}
        aus = out.add_stream("aac", rate=AUDIO_RATE)
        aus.layout = "stereo"
        for i in range(frames):
            img = np.roll(base, shift=i * 2, axis=1)
            if noise is not None:
                img = img ^ rng.integers(0, 8, size=img.shape, dtype=np.uint8)
            for pkt in vs.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                out.mux(pkt)
        for pkt in vs.encode():
            out.mux(pkt)
        n = int(round(frames / fps * AUDIO_RATE))
        t = np.arange(n, dtype=np.float32) / AUDIO_RATE
        tone = (0.1 * np.sin(2 * np.pi * (220 + seed % 200) * t)).astype(np.float32)
        for k in range(0, n, 1024):
            chunk = tone[k : k + 1024]
            fr = av.AudioFrame.from_ndarray(np.stack([chunk, chunk]), format="fltp",
                                            layout="stereo")
            fr.sample_rate, fr.pts = AUDIO_RATE, k
            for pkt in aus.encode(fr):
                out.mux(pkt)
        for pkt in aus.encode():
            out.mux(pkt)
    return buf.getvalue()


def pad_mp4(data: bytes, size: int) -> bytes:
    """Append a top-level ISO-BMFF ``free`` box so the file is ``size`` bytes (decoders skip
    it).  Returns ``data`` unchanged when it is already at least ``size - 8`` bytes."""
    extra = size - len(data)
    if extra < 8:
        return data
    return data + extra.to_bytes(4, "big") + b"free" + os.urandom(extra - 8)


# ----------------------------------------------------------------------------------- server


class Engine:
    """The worker pool and the shutdown ladder."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts = opts
        self.ctx = mp.get_context("spawn")
        self.procs: list[Any] = []
        self.conns: list[Any] = []
        self.dead = threading.Event()
        self.stopping = threading.Event()
        self.lock = threading.Lock()
        self.requests = 0

    def start(self) -> None:
        for rank in range(self.opts.num_gpus):
            parent, child = self.ctx.Pipe()
            p = self.ctx.Process(
                target=_worker_main,
                args=(rank, child, self.opts.ignore_shutdown),
                name=f"DiffusionWorker-{rank}",
                daemon=False,
            )
            p.start()
            child.close()
            self.procs.append(p)
            self.conns.append(parent)
        for conn in self.conns:  # like vLLM: listen only once every worker is up
            conn.recv()
        threading.Thread(target=self._monitor, daemon=True).start()

    def _monitor(self) -> None:
        while not self.stopping.is_set():
            gone = [p for p in self.procs if p.exitcode is not None]
            if gone and not self.dead.is_set():
                items = []
                for p in gone:
                    code = p.exitcode
                    sig = f", {signal.Signals(-code).name}" if code and code < 0 else ""
                    items.append(f"{p.name}(exitcode={code}{sig})")
                LOG.error(MARK_DIED.format(items=items))
                self.dead.set()
            time.sleep(0.05)

    def run(self, seconds: float, crash: bool, deadline: float) -> str:
        """Dispatch one request to every worker; "ok", "timeout" or "dead"."""
        for rank, conn in enumerate(self.conns):
            conn.send(("work", seconds, crash and rank == 0))
        for conn in self.conns:
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    return "timeout"
                if self.dead.is_set():
                    return "dead"
                try:
                    if conn.poll(min(left, 0.05)):
                        conn.recv()
                        break
                except (EOFError, OSError):
                    self.dead.wait(2.0)  # let the monitor log the death first, like vLLM
                    return "dead"
        return "ok"

    def shutdown(self) -> None:
        """The executor's ladder: message, wait, terminate, wait, kill, wait."""
        self.stopping.set()
        msg_s, term_s, kill_s = self.opts.ladder
        for conn in self.conns:
            try:
                conn.send(("shutdown",))
            except OSError:
                pass
        _join_all(self.procs, msg_s)
        alive = [p for p in self.procs if p.is_alive()]
        for p in alive:
            LOG.warning(MARK_TERMINATE.format(name=p.name, pid=p.pid))
            p.terminate()
        _join_all(alive, term_s)
        alive = [p for p in alive if p.is_alive()]
        for p in alive:
            LOG.warning(MARK_KILL.format(name=p.name, pid=p.pid))
            p.kill()
        _join_all(alive, kill_s)
        alive = [p for p in alive if p.is_alive()]
        if alive:
            LOG.error(MARK_INCOMPLETE.format(names=[p.name for p in alive]))


def _join_all(procs: list[Any], timeout: float) -> None:
    end = time.monotonic() + timeout
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))


def _parse_form(ctype: str, body: bytes) -> tuple[dict[str, str], list[tuple[str, str, bytes]]]:
    """Parse a ``multipart/form-data`` or ``application/x-www-form-urlencoded`` body: (text
    fields, [(filename, content type, bytes)] of the ``input_references`` parts).  Anything
    else, or a malformed body, gives no fields (upstream then reports ``prompt`` missing)."""
    if ctype.startswith("application/x-www-form-urlencoded"):
        pairs = urllib.parse.parse_qsl(body.decode("utf-8", "replace"), keep_blank_values=True)
        return dict(pairs), []
    if not ctype.startswith("multipart/form-data"):
        return {}, []
    head = f"Content-Type: {ctype}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not msg.is_multipart():
        return {}, []
    fields: dict[str, str] = {}
    files: list[tuple[str, str, bytes]] = []
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        raw = part.get_payload(decode=True)
        payload = raw if isinstance(raw, bytes) else b""
        filename = part.get_filename()
        if filename is not None:
            if name == "input_references":
                files.append((filename, part.get_content_type(), payload))
        elif name:
            fields[str(name)] = payload.decode("utf-8", "replace")
    return fields, files


def make_handler(engine: Engine, opts: argparse.Namespace,
                 on_engine_death: Any = None) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to ``engine`` and the switches in ``opts``;
    ``on_engine_death()`` is called after answering a request that found the engine dead."""
    from runners import standin_contract as contract

    sync_timeout = float(os.environ.get("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", "600"))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            LOG.info("%s - %s", self.address_string(), format % args)

        def _json(self, status: int, obj: Any) -> None:
            data = json.dumps(obj, separators=(",", ":")).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/health":
                if engine.dead.is_set():
                    self._json(503, {"status": "unhealthy"})
                else:
                    self._json(200, {"status": "healthy"})
            elif self.path == "/v1/models":
                self._json(200, {"object": "list", "data": [{"id": opts.model}]})
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            t_start = time.perf_counter()
            if self.path != "/v1/videos/sync":
                self._json(404, {"detail": "Not Found"})
                return
            LOG.info("stand-in: POST /v1/videos/sync received")
            try:
                length = max(0, int(self.headers.get("Content-Length") or 0))
            except ValueError:
                length = 0
            body = self.rfile.read(length)
            try:
                fields, files = _parse_form(self.headers.get("Content-Type", ""), body)
                parts = [(name, ctype, len(data)) for name, ctype, data in files]
                form, extra = contract.parse_request(
                    fields, parts, served_model=opts.model, read=lambda i: files[i][2])
                self._generate(form, extra, parts, t_start)
            except contract.ContractError as exc:
                self._json(exc.status, exc.body)

        def _generate(self, form: Any, extra: dict[str, Any],
                      parts: list[tuple[str, str, int]], t_start: float) -> None:
            with engine.lock:
                engine.requests += 1
                first = engine.requests == 1
                t_inf = time.perf_counter()
                rid = contract.sync_request_id()
                if opts.die_mid_request and first:
                    LOG.error("stand-in: server dying mid-request (--die-mid-request)")
                    os.kill(os.getpid(), signal.SIGKILL)
                refusal = contract.ref2va_refusal(extra, parts)
                if refusal:
                    LOG.info("Client error during sync video generation: %s", refusal)
                    raise contract.http_error(400, refusal)
                if (opts.fail_first_500 and first) or engine.requests == opts.fail_request_500:
                    LOG.error("stand-in: injected engine error for request_id=%s", rid)
                    raise contract.engine_error(rid, dead=False)
                gen = sync_timeout + 1.0 if opts.timeout_504 else opts.gen_seconds
                if not engine.dead.is_set():
                    state = engine.run(gen, opts.crash_worker_mid_request and first,
                                       time.monotonic() + sync_timeout)
                    if state == "timeout":
                        raise contract.timeout_error(sync_timeout)
                if engine.dead.is_set():
                    LOG.error(contract.ENGINE_DEAD_LOG.format(rid=rid))
                    self._json(500, contract.engine_error(rid, dead=True).body)
                    if on_engine_death is not None:
                        on_engine_death()
                    return
                width = form.width or 1344
                height = form.height or 768
                fps = form.fps or 24.0
                if opts.resolution:
                    width, height = opts.resolution
                duration = float(extra.get("duration", form.seconds or 5))
                frames = min(opts.max_frames, max(1, int(round(duration * fps))))
                seed = 42 if form.seed is None else form.seed
                data = make_mp4(width, height, frames, fps=fps, seed=seed,
                                noise=os.urandom(8) if opts.vary_output else None)
                if opts.response_mb:
                    data = pad_mp4(data, int(opts.response_mb * (1 << 20)))
                inf_s = time.perf_counter() - t_inf
                self.send_response(200)
                self.send_header("Content-Type", "video/mp4")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("X-Request-Id", rid)
                self.send_header("X-Model", opts.model)
                self.send_header("X-Inference-Time-S", f"{inf_s:.3f}")
                self.send_header("X-Stage-Durations",
                                 json.dumps({"diffuse": gen, "encode": inf_s - gen},
                                            separators=(",", ":")))
                self.send_header("X-Peak-Memory-MB", f"{1024.0:.3f}")
                self.end_headers()
                view = memoryview(data)
                for k in range(0, len(data), CHUNK):
                    self.wfile.write(view[k : k + CHUNK])
                self.wfile.flush()
                LOG.info("stand-in: request %s handled in %.6f s (request line to last byte), "
                         "%d bytes", rid, time.perf_counter() - t_start, len(data))

    return Handler


def _ladder(text: str) -> tuple[float, float, float]:
    parts = [float(x) for x in text.split(",")]
    if len(parts) != 3 or min(parts) < 0:
        raise argparse.ArgumentTypeError("--ladder-s needs three non-negative numbers A,B,C")
    return parts[0], parts[1], parts[2]


def _resolution(text: str) -> tuple[int, int]:
    w, _, h = text.lower().partition("x")
    return int(w), int(h)


OWN_SWITCHES = {
    "--num-gpus", "--slow-start", "--die-during-load", "--fail-first-500",
    "--fail-request-500", "--timeout-504", "--gen-seconds", "--ignore-shutdown",
    "--hang-shutdown", "--crash-worker-mid-request", "--die-mid-request", "--vary-output",
    "--response-mb", "--resolution", "--max-frames", "--ladder-s", "--container-exit",
    "--gen-seconds-by-revision", "--omni", "--host", "--port",
}
"""Options the stand-in acts on (the rest of upstream's flags are accepted and ignored)."""


def build_parser() -> argparse.ArgumentParser:
    """Argument parser: the stand-in's switches plus every flag of upstream's ``vllm serve
    --omni`` parser; anything else exits 2 with "unrecognized arguments", as upstream."""
    from runners import standin_contract as contract

    p = argparse.ArgumentParser(
        prog="python -m runners.standin", description=__doc__,
        usage="%(prog)s [serve] MODEL --omni [vLLM-Omni flags] [stand-in switches]",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("serve", nargs="?", help="optional literal 'serve' (vllm serve MODEL)")
    p.add_argument("model", nargs="?", default="standin/model")
    p.add_argument("--omni", action="store_true")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8091)
    p.add_argument("--num-gpus", type=int, default=2)
    p.add_argument("--slow-start", type=float, default=0.0)
    p.add_argument("--die-during-load", action="store_true")
    p.add_argument("--fail-first-500", action="store_true")
    p.add_argument("--fail-request-500", type=int, default=0)
    p.add_argument("--timeout-504", action="store_true")
    p.add_argument("--gen-seconds", type=float, default=0.05)
    p.add_argument("--ignore-shutdown", action="store_true")
    p.add_argument("--hang-shutdown", action="store_true")
    p.add_argument("--crash-worker-mid-request", action="store_true")
    p.add_argument("--die-mid-request", action="store_true")
    p.add_argument("--vary-output", action="store_true")
    p.add_argument("--response-mb", type=float, default=0.0)
    p.add_argument("--resolution", type=_resolution, default=None)
    p.add_argument("--max-frames", type=int, default=48)
    p.add_argument("--ladder-s", dest="ladder", type=_ladder, default=(15.0, 5.0, 5.0))
    p.add_argument("--container-exit", type=int, default=None)
    p.add_argument("--gen-seconds-by-revision", default=None)
    contract.add_upstream_flags(p, OWN_SWITCHES)
    return p


def parse_args(argv: list[str]) -> argparse.Namespace:
    """Parse a command line like upstream's parser: ``--a_b`` is ``--a-b``; ``serve`` before
    the model is optional.  Exits 2 on an unknown flag."""
    from runners import standin_contract as contract

    opts = build_parser().parse_args([contract.normalize_flag(a) for a in argv])
    if opts.serve and opts.serve != "serve" and opts.model == "standin/model":
        opts.model = opts.serve
    if opts.gen_seconds_by_revision:
        opts.gen_seconds = revision_seconds(opts.gen_seconds_by_revision,
                                            os.environ.get(REVISION_ENV, ""),
                                            opts.gen_seconds)
    return opts


REVISION_ENV = "CAMPAIGN_BOT_ENGINE_REVISION"
"""The engine revision a session runs, set by ``campaign-bot screen`` in a revision screen
(``--control-revision``/``--candidate-revision``)."""


def revision_seconds(path: str, revision: str, default: float) -> float:
    """Generation seconds for ``revision`` from the JSON file ``path`` (``{"REVISION":
    seconds}``; a key that ``revision`` starts with, or that starts with ``revision`` (a short
    SHA), the longest first), else ``default``.
    Exits 2 with the file named when it is unreadable or not such an object."""
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
        if not isinstance(table, dict) or not all(
                isinstance(v, int | float) and not isinstance(v, bool) for v in table.values()):
            raise ValueError("expected an object of REVISION: seconds")
    except (OSError, ValueError) as exc:
        sys.stderr.write(f"--gen-seconds-by-revision {path}: {exc}\n")
        raise SystemExit(2) from None
    keys = [k for k in table if revision and (revision.startswith(k) or k.startswith(revision))]
    return float(table[max(keys, key=len)]) if keys else default


def main(argv: list[str] | None = None) -> int:
    """Run the stand-in server until SIGTERM/SIGINT or an engine death; returns the process
    exit code (argparse exits 2 on an unknown flag)."""
    opts = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(asctime)s [standin] %(message)s")
    LOG.info("stand-in vLLM-Omni server for %s (pid %d)", opts.model, os.getpid())
    stop = threading.Event()
    keep_alive = os.environ.get("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "0") not in ("", "0")

    def _on_signal(signum: int, _frame: Any) -> None:
        if opts.hang_shutdown and signum == signal.SIGTERM:
            LOG.warning("stand-in: ignoring SIGTERM (--hang-shutdown)")
            return
        stop.set()

    def _on_engine_death() -> None:
        if not keep_alive:
            stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    LOG.info("Loading model weights ...")
    if stop.wait(opts.slow_start):
        return 0
    if opts.die_during_load:
        LOG.error("stand-in: dying during load (--die-during-load)")
        return 1
    engine = Engine(opts)
    engine.start()
    httpd = ThreadingHTTPServer((opts.host, opts.port),
                                make_handler(engine, opts, _on_engine_death))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    LOG.info("Started server process [%d]", os.getpid())
    LOG.info(MARK_STARTUP)
    dead_since: float | None = None
    while not stop.wait(0.2):
        if engine.dead.is_set() and not keep_alive:
            dead_since = dead_since or time.monotonic()
            if time.monotonic() - dead_since >= WATCHDOG_S:
                break  # vLLM's watchdog: an errored engine ends the server
    if engine.dead.is_set() and not keep_alive:
        LOG.error("stand-in: engine dead; the server shuts itself down (as vLLM's "
                  "terminate_if_errored)")
    LOG.info("Shutting down FastAPI HTTP server.")
    httpd.shutdown()
    httpd.server_close()
    LOG.info("[Orchestrator] Shutting down all 1 client(s)")
    engine.shutdown()
    LOG.info("stand-in: shutdown finished")
    if opts.container_exit is not None:
        sys.stderr.write(CONTAINER_MARKER.format(code=0) + "\n")
        sys.stderr.flush()
        return opts.container_exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
