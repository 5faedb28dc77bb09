"""The worker as a child process of ``campaign-bot serve`` (the default ``worker_mode``).

Why a process: handlers parse payloads, run evidence checks and call PyGithub (blocking);
on the server's interpreter they would hold the GIL and delay webhook acknowledgements by
milliseconds each (measured with ``benchmarks/webhook_load.py``).  In its own process the
worker never competes with the acknowledgement path for the GIL.

Protocol between the parent (:class:`WorkerProcess`) and the child (:func:`run_child`, called
by the composition root's entry point ``python -m bot.worker_process``):

* ``--settings-fd``: the parent writes the settings it read (JSON, secrets included) and
  closes the pipe; the child never reads the environment for them.
* ``--wake-fd``: the parent writes a byte after every inbox commit; the child wakes its loop.
  End of file means the parent died: the child exits at once, exactly as if killed (the next
  ``serve`` requeues what it was doing).  ``PR_SET_PDEATHSIG`` (Linux) backs this up.
* Metrics go through prometheus-client's multiprocess files (:mod:`bot.metrics`).
* SIGTERM or SIGINT: stop taking deliveries, let running handlers finish (10 s), exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)


class WorkerProcess:
    """The worker as a supervised child process (``python -m MODULE``): if it dies it is
    started again (its unfinished deliveries are requeued by the new one).

    ``settings`` are the bytes handed to each child on its settings pipe; ``on_exit(pid)`` is
    called for a child that exited.  :meth:`wake` is thread-safe and never blocks.
    """

    def __init__(self, module: str, settings: bytes,
                 on_exit: Callable[[int], None] | None = None) -> None:
        self.module = module
        self.settings = settings
        self.on_exit = on_exit
        self.proc: Any = None
        self._wake_w: int | None = None
        self.restarts = 0

    def start(self) -> None:
        """Spawn the child with a settings pipe and a wake pipe."""
        wake_r, wake_w = os.pipe()
        set_r, set_w = os.pipe()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", self.module, "--wake-fd", str(wake_r),
             "--settings-fd", str(set_r)],
            pass_fds=(wake_r, set_r),
        )
        os.close(wake_r)
        os.close(set_r)
        try:
            with os.fdopen(set_w, "wb") as f:
                f.write(self.settings)
        except BrokenPipeError:  # the child died at once; the supervisor restarts it
            pass
        os.set_blocking(wake_w, False)
        self._wake_w = wake_w

    @property
    def alive(self) -> bool:
        """True while the child runs."""
        return self.proc is not None and self.proc.poll() is None

    def wake(self) -> None:
        """Tell the child new deliveries are stored."""
        fd = self._wake_w
        if fd is None:
            return
        try:
            os.write(fd, b"w")
        except (BlockingIOError, BrokenPipeError, OSError):
            pass  # pipe full (the child is awake anyway) or child gone (supervisor restarts)

    def _close(self) -> None:
        if self._wake_w is not None:
            os.close(self._wake_w)
            self._wake_w = None

    async def supervise(self) -> None:
        """Restart the child whenever it exits (until cancelled)."""
        while True:
            await asyncio.sleep(1.0)
            if self.proc is not None and self.proc.poll() is not None:
                log.error("worker process exited with %s; starting a new one",
                          self.proc.returncode)
                self._close()
                if self.on_exit is not None:
                    self.on_exit(self.proc.pid)
                self.restarts += 1
                self.start()
                self.wake()

    async def stop(self, grace: float = 10.0) -> None:
        """SIGTERM the child and wait (it finishes running handlers for up to ``grace``)."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, grace + 5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                await asyncio.to_thread(self.proc.wait)
        self._close()
        if self.on_exit is not None:
            self.on_exit(self.proc.pid)


def read_settings_fd(fd: int) -> bytes:
    """Everything the parent wrote on the settings pipe (until it closed it)."""
    with os.fdopen(fd, "rb") as f:
        return f.read()


def die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when its parent dies (no-op elsewhere)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the wake pipe's end of file still stops us
        pass
    # On a small machine the acknowledgement path must win the CPU: GitHub waits for it,
    # nobody waits for the worker by the millisecond.
    with contextlib.suppress(OSError):
        os.nice(5)


async def run_child(worker: Any, wake_fd: int) -> None:
    """Run ``worker`` (a :class:`bot.inbox.worker.Worker`) on this process's loop, woken by
    the parent's ``wake_fd``, until SIGTERM/SIGINT (or the parent's death)."""
    loop = asyncio.get_running_loop()
    os.set_blocking(wake_fd, False)

    def on_wake() -> None:
        try:
            data = os.read(wake_fd, 65536)
        except BlockingIOError:
            return
        if not data:  # the parent is gone: stop now, like a kill (recovery requeues)
            os._exit(0)
        worker.wake()

    loop.add_reader(wake_fd, on_wake)
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, worker.request_stop)
    await worker.run()
