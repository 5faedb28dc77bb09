"""Connection exhaustion against a real ``campaign-bot serve`` with a lowered file-descriptor
limit: stalled connections, a slow-loris body and bodies held in flight must not stop
``/healthz`` or signed deliveries, and must not flood the log (``bot.inbox.limits``)."""

from __future__ import annotations

import contextlib
import errno
import multiprocessing
import os
import resource
import select
import selectors
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from webhook_helpers import (
    ROOT,
    SECRET,
    fixture_bytes,
    free_port,
    headers_for,
    metric_values,
    wait_for,
)

NOFILE = 256
"""The serve process's RLIMIT_NOFILE (soft and hard) in these tests."""
ATTACKERS = 400
"""Stalled connections held open at once: more than the process may have descriptors."""
ATTACKER_ADDRESS = "127.0.0.2"
"""The attack's source address (Linux routes all of 127.0.0.0/8 to the loopback): another
client than the test's own requests, from 127.0.0.1."""
TIMEOUT_S = 3
"""CAMPAIGN_BOT_HEADER_TIMEOUT_S and CAMPAIGN_BOT_BODY_TIMEOUT_S in these tests."""


def start_serve(cwd: Path, port: int, nofile: tuple[int, int] = (NOFILE, NOFILE),
                **env_extra: str) -> subprocess.Popen[bytes]:
    """``campaign-bot serve`` in ``cwd`` with RLIMIT_NOFILE ``nofile`` (soft, hard), receiving
    only (no worker), its output in ``cwd/serve.log``; returns once ``/healthz`` answers."""

    def _limit_fds() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, nofile)

    env = dict(os.environ)
    for k in list(env):
        if k.startswith("CAMPAIGN_BOT_"):
            del env[k]
    env.update(CAMPAIGN_BOT_WEBHOOK_SECRET=SECRET, CAMPAIGN_BOT_PORT=str(port),
               CAMPAIGN_BOT_RUN_WORKER="false", **env_extra)
    proc = subprocess.Popen(
        [sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
        cwd=cwd, env=env, stdout=(cwd / "serve.log").open("ab"), stderr=subprocess.STDOUT,
        preexec_fn=_limit_fds)

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}:\n"
                        f"{(cwd / 'serve.log').read_text()}")
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "campaign-bot serve to answer /healthz")
    return proc


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    port = free_port()
    proc = start_serve(tmp_path, port, CAMPAIGN_BOT_HEADER_TIMEOUT_S=str(TIMEOUT_S),
                       CAMPAIGN_BOT_BODY_TIMEOUT_S=str(TIMEOUT_S),
                       CAMPAIGN_BOT_MAX_INFLIGHT_BODY_BYTES="1000000")
    try:
        yield f"http://127.0.0.1:{port}", tmp_path / "serve.log"
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


class Attack:
    """Keeps ``n`` stalled connections from :data:`ATTACKER_ADDRESS` open to ``port``, in a
    child process (its own CPU, not the test's), reopening each one the server closes at
    once: a third send nothing, a third a request head that never ends (one more header byte
    a second), a third a complete head announcing a body that never comes.  ``opened`` and
    ``closed_by_server`` count connections."""

    HEADS = (b"", b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Slow: ",
             b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256=00\r\n"
             b"Content-Length: 100000\r\n\r\n")

    def __init__(self, port: int, n: int) -> None:
        ctx = multiprocessing.get_context("fork")
        self.port, self.n = port, n
        self._opened = ctx.Value("l", 0)
        self._closed = ctx.Value("l", 0)
        self.stop = ctx.Event()
        self.proc = ctx.Process(target=self._run, daemon=True)

    @property
    def opened(self) -> int:
        return int(self._opened.value)

    @property
    def closed_by_server(self) -> int:
        return int(self._closed.value)

    def _open(self, sel: selectors.BaseSelector, kind: int) -> None:
        s = socket.socket()
        s.bind((ATTACKER_ADDRESS, 0))
        s.setblocking(False)
        if s.connect_ex(("127.0.0.1", self.port)) not in (0, errno.EINPROGRESS):
            s.close()
            return
        self._opened.value += 1
        sel.register(s, selectors.EVENT_READ | selectors.EVENT_WRITE, kind)

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        for i in range(self.n):
            self._open(sel, i % 3)
        last_drip = time.monotonic()
        while not self.stop.is_set():
            for key, events in sel.select(0.1):
                s: socket.socket = key.fileobj  # type: ignore[assignment]
                kind = key.data
                gone = False
                try:
                    if events & selectors.EVENT_READ:
                        gone = s.recv(65536) == b""
                    elif events & selectors.EVENT_WRITE:  # connected: send the head, then wait
                        if self.HEADS[kind]:
                            s.send(self.HEADS[kind])
                        sel.modify(s, selectors.EVENT_READ, kind)
                except BlockingIOError:
                    pass
                except OSError:
                    gone = True
                if gone:
                    sel.unregister(s)
                    s.close()
                    self._closed.value += 1
                    self._open(sel, kind)
            if time.monotonic() - last_drip > 1:
                last_drip = time.monotonic()
                for key in list(sel.get_map().values()):
                    if key.data == 1:
                        with contextlib.suppress(OSError):
                            key.fileobj.send(b"a")  # type: ignore[union-attr]

    def __enter__(self) -> Attack:
        self.proc.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.proc.join(10)
        if self.proc.is_alive():
            self.proc.kill()


def _raw_response(s: socket.socket, within: float) -> bytes:
    """What the server sends on ``s`` until it closes it or ``within`` seconds pass."""
    s.settimeout(0.2)
    out = b""
    end = time.monotonic() + within
    while time.monotonic() < end:
        try:
            chunk = s.recv(65536)
        except TimeoutError:
            continue
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    return out


def slow_loris(port: int, result: dict[str, object]) -> None:
    """A correctly signed delivery whose 60-byte body is sent one byte every 0.5 s (30 s in
    all); ``result`` gets the seconds until the server answered or closed, and what it
    sent."""
    body = b'{"zen": "' + b"x" * 48 + b'"}'
    h = headers_for(body, "ping", f"slow-{uuid.uuid4()}")
    head = "POST /webhook HTTP/1.1\r\nHost: x\r\n" + "".join(
        f"{k}: {v}\r\n" for k, v in h.items()) + f"Content-Length: {len(body)}\r\n\r\n"
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(head.encode())
        t0 = time.monotonic()
        s.settimeout(0.5)
        got = b""
        for i in range(len(body)):
            try:
                s.send(body[i:i + 1])
                got = s.recv(65536)
                if got == b"":
                    break
                if got:
                    break
            except TimeoutError:
                continue
            except OSError:
                break
        result["seconds"] = time.monotonic() - t0
        result["answer"] = got


def test_stalled_connections_over_the_fd_limit_leave_healthz_and_deliveries_answering(
        serve: tuple[str, Path]) -> None:
    base, log = serve
    port = int(base.rsplit(":", 1)[1])
    healthz: list[float] = []
    deliveries: list[float] = []
    # without an attack: the slow-loris body gets 408 at the body deadline, not 202
    alone: dict[str, object] = {}
    slow_loris(port, alone)
    assert isinstance(alone["answer"], bytes) and alone["answer"].startswith(b"HTTP/1.1 408"), \
        alone
    assert TIMEOUT_S - 0.5 < float(alone["seconds"]) < TIMEOUT_S + 2  # type: ignore[arg-type]
    loris: dict[str, object] = {}
    with Attack(port, ATTACKERS) as attack:
        wait_for(lambda: attack.opened >= ATTACKERS, 10, "the attack's connections")
        time.sleep(1)
        t = threading.Thread(target=slow_loris, args=(port, loris))
        t.start()
        end = time.monotonic() + 3 * TIMEOUT_S
        with httpx.Client(timeout=10) as client:
            while time.monotonic() < end:
                t0 = time.monotonic()
                r = client.get(f"{base}/healthz", headers={"Connection": "close"})
                healthz.append(time.monotonic() - t0)
                assert r.status_code == 200, r.text
                body = fixture_bytes("issues")
                t0 = time.monotonic()
                r = client.post(f"{base}/webhook", content=body, headers={
                    **headers_for(body, "issues", str(uuid.uuid4())), "Connection": "close"})
                deliveries.append(time.monotonic() - t0)
                assert r.status_code == 202, r.text
                time.sleep(0.3)
        t.join(40)
        closed = attack.closed_by_server
    print(f"\n/healthz under attack: {len(healthz)} probes, max {max(healthz):.3f} s; "
          f"signed deliveries: {len(deliveries)}, max {max(deliveries):.3f} s; "
          f"attack connections closed by the server: {closed}; "
          f"slow loris cut after {alone['seconds']:.1f} s alone, "
          f"{loris.get('seconds', 0):.1f} s under attack")
    # a few seconds at most (typically under 1 s: the listen queue is long enough for the
    # attack's connections and ours, LISTEN_QUEUE; the rest is the shared machine's load)
    assert max(healthz) < 5 and max(deliveries) < 5
    # the stalled connections were closed by the server (deadline or cap), not left open
    assert closed >= ATTACKERS
    # the slow-loris body was cut off by the body deadline, not accepted
    answer = loris["answer"]
    assert isinstance(answer, bytes)
    assert answer.startswith(b"HTTP/1.1 408"), answer  # from another address: not closed
    assert float(loris["seconds"]) < TIMEOUT_S + 3  # type: ignore[arg-type]
    text = log.read_text()
    assert "Traceback" not in text
    assert len(text) < 20_000, text[-3000:]


def _head(path: str, length: int, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256=00\r\n"
            f"X-GitHub-Event: issues\r\nX-GitHub-Delivery: d\r\n"
            f"Content-Type: application/json\r\nContent-Length: {length}\r\n{extra}\r\n").encode()


def test_body_bytes_in_flight_are_capped_before_reading(serve: tuple[str, Path]) -> None:
    base, log = serve
    port = int(base.rsplit(":", 1)[1])
    holders = []
    try:
        # two unsigned bodies hold 2 x 450,000 of the 1,000,000 bytes, then stall
        for _ in range(2):
            s = socket.create_connection(("127.0.0.1", port))
            s.sendall(_head("/webhook", 480_000) + b"x" * 450_000)
            holders.append(s)
        # a body that does not fit is refused before any of it is sent (asked again until
        # the server has read what the two sent: a loaded machine may take a while)
        deadline = time.monotonic() + 10
        while True:
            with socket.create_connection(("127.0.0.1", port)) as s:
                s.sendall(_head("/webhook", 200_000))
                answer = _raw_response(s, 1)
            if answer or time.monotonic() > deadline:
                break
        assert answer.startswith(b"HTTP/1.1 503"), answer
        assert b"retry-after: 5" in answer.lower()
        # a chunked body (no Content-Length) is stopped once it passes the budget
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"POST /webhook HTTP/1.1\r\nHost: x\r\nX-Hub-Signature-256: sha256=00\r\n"
                      b"Transfer-Encoding: chunked\r\n\r\n")
            chunk = b"y" * 60_000
            for _ in range(5):  # one chunk at a time, until the server answers
                s.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                if select.select([s], [], [], 0.5)[0]:
                    break
            answer = _raw_response(s, 2)
        assert answer.startswith(b"HTTP/1.1 503"), answer
        # a small signed delivery still fits
        body = fixture_bytes("issues")
        assert len(body) < 100_000
        r = httpx.post(f"{base}/webhook", content=body,
                       headers=headers_for(body, "issues", str(uuid.uuid4())), timeout=5)
        assert r.status_code == 202, r.text
        # the stalled holders get 408 at their deadline, which frees the budget
        for s in holders:
            assert _raw_response(s, TIMEOUT_S + 3).startswith(b"HTTP/1.1 408")
    finally:
        for s in holders:
            s.close()
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(_head("/webhook", 200_000) + b"z" * 200_000)
        answer = _raw_response(s, 3)
    assert answer.startswith(b"HTTP/1.1 401"), answer  # read whole, then the signature fails
    # 50 connections sending garbage: one summary line, not one line each
    for _ in range(50):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(b"\x16\x03\x01 not http\r\n\r\n")
            assert _raw_response(s, 2).startswith(b"HTTP/1.1 400")
    text = log.read_text()
    assert "Traceback" not in text
    assert text.count("Invalid HTTP request received") == 1, text
    # the summarised refusals are counted one by one in /metrics
    counts = metric_values(httpx.get(f"{base}/metrics", timeout=5).text)
    assert counts['campaign_bot_deliveries_rejected_total{reason="busy"}'] >= 2
    assert counts['campaign_bot_deliveries_rejected_total{reason="body_timeout"}'] == 2


ACCEPT_SERVER = """
import asyncio, logging, resource, sys
from bot.inbox.limits import install_accept_error_handler
resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
held = []
class Hold(asyncio.Protocol):
    def connection_made(self, transport):
        held.append(transport)
async def main():
    if sys.argv[1] == "handler":
        install_accept_error_handler(asyncio.get_running_loop())
    server = await asyncio.get_running_loop().create_server(Hold, "127.0.0.1", 0, backlog=200)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.sleep(float(sys.argv[2]))
asyncio.run(main())
"""


@pytest.mark.parametrize("mode", ["handler", "asyncio-default"])
def test_accept_out_of_descriptors_is_one_line_per_interval(mode: str) -> None:
    """A real asyncio server out of descriptors (RLIMIT_NOFILE 64, 150 connections waiting):
    with the handler, 5 s of failed ``accept()`` retries log one line, no traceback;
    asyncio's default logs a traceback per retry (the second case shows the test can
    fail)."""
    proc = subprocess.Popen([sys.executable, "-c", ACCEPT_SERVER, mode, "5"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    port = int(proc.stdout.readline())
    socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(150)]
    try:
        _, err = proc.communicate(timeout=30)
    finally:
        for s in socks:
            s.close()
    text = err.decode()
    tracebacks = text.count("Traceback")
    if mode == "handler":
        assert tracebacks == 0, text
        assert text.count("accept() failed") == 1, text
        assert "EMFILE" in text
    else:
        assert tracebacks >= 3, text


def test_the_soft_fd_limit_is_raised_to_the_hard_one_and_the_cap_follows(
        tmp_path: Path) -> None:
    port = free_port()
    proc = start_serve(tmp_path, port, nofile=(256, 512))
    try:
        pid_limits = Path(f"/proc/{proc.pid}/limits").read_text()
        line = next(ln for ln in pid_limits.splitlines() if ln.startswith("Max open files"))
        assert line.split()[3:5] == ["512", "512"], line
    finally:
        proc.terminate()
        proc.wait(20)
    # 512 - 192 descriptors kept free
    assert "at most 320 connections" in (tmp_path / "serve.log").read_text()


def test_repeated_events_are_one_line_per_interval(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from bot.inbox.limits import Summary

    now = [0.0]
    s = Summary(logging.getLogger("t"), logging.WARNING, "closed", interval=10,
                clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="t"):
        for i in range(1000):  # 1000 events, one each 20 ms
            now[0] = i * 0.02
            s.note("x")
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["closed: x", "closed: x (499 more in the last 10 s)"]
    assert s.total == 1000
