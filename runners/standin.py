"""A stand-in for a vLLM-Omni server (``vllm serve MODEL --omni``), for tests and benchmarks.

It is a real HTTP server process that speaks the contract the screen runner depends on
(``../shared/VLLM_OMNI.md``):

* ``GET /health``: 200 ``{"status":"healthy"}``; 503 ``{"status":"unhealthy"}`` once a worker
  died.  The socket only listens once the "model" is loaded and the workers are up, so
  connections are refused while loading (§1.4).
* ``POST /v1/videos/sync``: ``multipart/form-data`` with ``prompt``, ``width``, ``height``,
  ``fps``, ``num_inference_steps``, ``seed``, ``flow_shift``, ``extra_params`` (JSON, with
  ``task`` and ``duration``) and repeated ``input_references`` file parts (classified by MIME
  type as in §2.2: audio-only is rejected).  Answers the raw MP4 (H.264 + AAC stereo 32 kHz,
  made with PyAV) with ``X-Request-Id``, ``X-Model``, ``X-Inference-Time-S``,
  ``X-Stage-Durations`` and ``X-Peak-Memory-MB``; 504 "Video generation timed out after Ns."
  after ``VLLM_OMNI_VIDEO_SYNC_TIMEOUT`` seconds.
* Worker child processes, spawned like ``MultiprocDiffusionExecutor`` (``spawn`` start
  method, process title ``vLLM-Omni::DiffusionWorker_SP<rank>``, ``PR_SET_PDEATHSIG``), and
  the same shutdown ladder and log markers (§4.2): shutdown message, wait, "Calling terminate
  on diffusion worker ...", wait, "Calling kill on diffusion worker ...", "Diffusion worker
  cleanup incomplete after kill: [...]"; workers log "Worker N: Shutdown complete." and exit 0,
  or exit 143 on SIGTERM.

Usage: ``python -m runners.standin MODEL --omni --host 127.0.0.1 --port P [switches]``.
Unknown vLLM flags (``--usp 4`` ...) are accepted and ignored, so a campaign's real serving
flags can be passed through unchanged.  Switches (all off by default):

``--num-gpus N``            number of worker processes (default 2)
``--slow-start S``          sleep S seconds "loading" before listening
``--die-during-load``       exit 1 during loading (after ``--slow-start``)
``--fail-first-500``        the first /v1/videos/sync answers HTTP 500
``--fail-request-500 N``    the N-th (1-based) /v1/videos/sync answers HTTP 500
``--timeout-504``           every request exceeds the sync timeout and answers 504
``--gen-seconds S``         simulated generation time per request (default 0.05)
``--ignore-shutdown``       workers ignore the shutdown message and SIGTERM (terminate + kill)
``--hang-shutdown``         the main process ignores SIGTERM (the runner must SIGKILL it)
``--crash-worker-mid-request``  worker 0 SIGKILLs itself during the first request (HTTP 500)
``--die-mid-request``       the main process SIGKILLs itself during the first request
``--vary-output``           different output bytes on every run (random noise in the frames)
``--response-mb M``         pad each MP4 with a trailing ``free`` box to M MiB (benchmarks)
``--resolution WxH``        encode at this size instead of the request's width x height
``--max-frames N``          cap the encoded frame count (default 48) for speed
``--ladder-s A,B,C``        shutdown ladder waits: message, terminate, kill (default 15,5,5)
``--container-exit N``      act as a container: log the server's exit code, exit with N
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
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

LOG = logging.getLogger("vllm_omni.standin")
CHUNK = 1 << 20

# Markers the runner reads (same wording as vLLM-Omni 0.30.0, VLLM_OMNI.md §4.2).
MARK_STARTUP = "Application startup complete."
MARK_TERMINATE = "Calling terminate on diffusion worker {name} (pid={pid})"
MARK_KILL = "Calling kill on diffusion worker {name} (pid={pid})"
MARK_INCOMPLETE = "Diffusion worker cleanup incomplete after kill: {names}"
MARK_DIED = "Diffusion worker(s) died unexpectedly: {items}"
CONTAINER_MARKER = "campaign-bot-entrypoint: server exited with code {code}"
"""Line a container entrypoint prints so the runner can tell the server's own exit code from
the container's (see runners.server)."""

AUDIO_RATE = 32000
AUDIO_SUFFIXES = (".wav", ".mp3", ".m4a", ".aac", ".flac", ".ogg")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".heic", ".heif")


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
    fps: int = 24,
    seed: int = 0,
    noise: bytes | None = None,
) -> bytes:
    """Encode a small real MP4: ``frames`` H.264 frames (yuv420p, ``width`` x ``height``,
    both rounded up to even) and AAC stereo 32 kHz audio of the same duration.  Deterministic
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
        vs = out.add_stream("libx264", rate=fps)
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
    """Parse ``multipart/form-data``: (text fields, [(filename, content type, bytes)] of the
    ``input_references`` parts).  Raises ValueError on a malformed body."""
    if not ctype.startswith("multipart/form-data"):
        raise ValueError("expected multipart/form-data")
    head = f"Content-Type: {ctype}\r\nMIME-Version: 1.0\r\n\r\n".encode()
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(head + body)
    if not msg.is_multipart():
        raise ValueError("body is not multipart")
    fields: dict[str, str] = {}
    files: list[tuple[str, str, bytes]] = []
    for part in msg.iter_parts():
        name = part.get_param("name", header="content-disposition")
        raw = part.get_payload(decode=True)
        payload = raw if isinstance(raw, bytes) else b""
        filename = part.get_filename()
        if filename is not None:
            if name in ("input_references", "input_reference"):
                files.append((filename, part.get_content_type(), payload))
        elif name:
            fields[str(name)] = payload.decode("utf-8")
    return fields, files


def _kind(filename: str, ctype: str) -> str:
    low = filename.lower()
    if ctype.startswith("image/") or low.endswith(IMAGE_SUFFIXES):
        return "image"
    if ctype.startswith("audio/") or low.endswith(AUDIO_SUFFIXES):
        return "audio"
    return "video"


def make_handler(engine: Engine, opts: argparse.Namespace) -> type[BaseHTTPRequestHandler]:
    """The request handler class bound to ``engine`` and the switches in ``opts``."""
    sync_timeout = float(os.environ.get("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", "600"))

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
            LOG.info("%s - %s", self.address_string(), format % args)

        def _json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
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
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length)
            try:
                fields, files = _parse_form(self.headers.get("Content-Type", ""), body)
                if not fields.get("prompt"):
                    raise ValueError("field 'prompt' is required")
                width, height = int(fields["width"]), int(fields["height"])
                fps = int(fields.get("fps", "24"))
                seed = int(fields.get("seed", "42"))
                int(fields.get("num_inference_steps", "50"))
                float(fields.get("flow_shift", "12"))
                extra = json.loads(fields.get("extra_params", "{}"))
                if not isinstance(extra, dict):
                    raise ValueError("extra_params must be a JSON object")
                duration = float(extra.get("duration", fields.get("seconds", 5)))
                kinds = [_kind(f, c) for f, c, _ in files]
                if extra.get("task", "ref2va") == "ref2va" and not (
                    "video" in kinds or "image" in kinds
                ):
                    raise ValueError("Ref2VA needs at least one image or video reference")
            except (KeyError, ValueError) as exc:
                self._json(400, {"error": {"message": f"invalid request: {exc}"}})
                return
            with engine.lock:
                engine.requests += 1
                first = engine.requests == 1
                t_inf = time.perf_counter()
                rid = f"video_gen_{uuid.uuid4().hex}"
                if opts.die_mid_request and first:
                    LOG.error("stand-in: server dying mid-request (--die-mid-request)")
                    os.kill(os.getpid(), signal.SIGKILL)
                if (opts.fail_first_500 and first) or engine.requests == opts.fail_request_500:
                    self._json(500, {"error": {"message": "stand-in: injected HTTP 500"}},
                               {"X-Request-Id": rid})
                    return
                if engine.dead.is_set():
                    self._json(500, {"error": {"message": "EngineDeadError"}},
                               {"X-Request-Id": rid})
                    return
                gen = sync_timeout + 1.0 if opts.timeout_504 else opts.gen_seconds
                state = engine.run(gen, opts.crash_worker_mid_request and first,
                                   time.monotonic() + sync_timeout)
                if state == "timeout":
                    self._json(504, {"detail": f"Video generation timed out after "
                                     f"{sync_timeout:g}s."}, {"X-Request-Id": rid})
                    return
                if state == "dead":
                    self._json(500, {"error": {"message": "Diffusion worker died"}},
                               {"X-Request-Id": rid})
                    return
                if opts.resolution:
                    width, height = opts.resolution
                frames = min(opts.max_frames, max(1, int(round(duration * fps))))
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
                self.send_header("X-Inference-Time-S", f"{inf_s:.6f}")
                self.send_header("X-Stage-Durations",
                                 json.dumps({"diffuse": gen, "encode": inf_s - gen},
                                            separators=(",", ":")))
                self.send_header("X-Peak-Memory-MB", "1024.0")
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


def build_parser() -> argparse.ArgumentParser:
    """Argument parser; vLLM flags it does not know are ignored (parse_known_args)."""
    p = argparse.ArgumentParser(prog="python -m runners.standin", description=__doc__,
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
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the stand-in server until SIGTERM/SIGINT; returns the process exit code."""
    opts, unknown = build_parser().parse_known_args(argv)
    if opts.serve and opts.serve != "serve" and opts.model == "standin/model":
        opts.model = opts.serve
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(levelname)s %(asctime)s [standin] %(message)s")
    LOG.info("stand-in vLLM-Omni server for %s (pid %d); ignoring flags %s",
             opts.model, os.getpid(), unknown)
    stop = threading.Event()

    def _on_signal(signum: int, _frame: Any) -> None:
        if opts.hang_shutdown and signum == signal.SIGTERM:
            LOG.warning("stand-in: ignoring SIGTERM (--hang-shutdown)")
            return
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
    httpd = ThreadingHTTPServer((opts.host, opts.port), make_handler(engine, opts))
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05},
                     daemon=True).start()
    LOG.info("Started server process [%d]", os.getpid())
    LOG.info(MARK_STARTUP)
    while not stop.wait(0.2):
        pass
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
