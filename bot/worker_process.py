"""The worker as a child process of ``campaign-bot serve`` (the default ``worker_mode``).

Why a process: handlers parse payloads, run evidence checks and call PyGithub (blocking);
on the server's interpreter they would hold the GIL and delay webhook acknowledgements by
milliseconds each (measured with ``benchmarks/webhook_load.py``).  In its own process the
worker never competes with the acknowledgement path for the GIL.

Protocol with the parent (``bot.app.WorkerProcess``):

* ``--wake-fd``: the parent writes a byte after every inbox commit; the child wakes its loop.
  End of file means the parent died: the child exits at once, exactly as if killed (the next
  ``serve`` requeues what it was doing).  ``PR_SET_PDEATHSIG`` (Linux) backs this up.
* ``--report-fd``: the child writes one JSON line per second with its counters
  (``bot.metrics.Metrics.snapshot``), which ``GET /metrics`` on the parent adds to its own.
* SIGTERM or SIGINT: stop taking deliveries, let running handlers finish (10 s), exit 0.

Settings come from the same environment / ``.env`` as the parent.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import logging
import os
import signal
import sys

from bot.metrics import metrics
from bot.settings import SettingsError, load_settings

log = logging.getLogger(__name__)


def _die_with_parent() -> None:
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:  # not Linux: the wake pipe's end of file still stops us
        pass


async def _run(wake_fd: int, report_fd: int) -> int:
    from bot import store
    from bot.worker import Worker, default_context_factory, load_handlers

    settings = load_settings()
    # The worker's own commits (claims, done marks) need not survive a power loss: losing
    # one means re-processing a delivery, never losing it; only the inbox insert is FULL.
    engine = store.make_engine(settings.database_url, sqlite_synchronous="NORMAL")
    load_handlers(settings.extra_handler_modules)
    worker = Worker(
        engine, default_context_factory(settings), concurrency=settings.worker_concurrency,
        max_attempts=settings.max_attempts, retry_delays=settings.retry_delay_seconds,
    )
    loop = asyncio.get_running_loop()
    os.set_blocking(wake_fd, False)
    os.set_blocking(report_fd, False)

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

    async def report() -> None:
        last = None
        while True:
            snap = json.dumps(metrics.snapshot(), separators=(",", ":"))
            if snap != last:
                try:
                    os.write(report_fd, snap.encode() + b"\n")
                    last = snap
                except (BlockingIOError, BrokenPipeError):
                    pass
            await asyncio.sleep(0.5)

    reporter = asyncio.create_task(report())
    screens_svc = None
    if "bot.screen" in sys.modules:  # the /screen flow (issue 7): runtime and watchdog jobs
        from bot import screen_service

        screens_svc = screen_service.start(engine, worker.context_factory)
    try:
        await worker.run()
    finally:
        reporter.cancel()
        if screens_svc is not None:
            screens_svc.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point: ``python -m bot.worker_process --wake-fd N --report-fd M``."""
    ap = argparse.ArgumentParser(prog="campaign-bot-worker")
    ap.add_argument("--wake-fd", type=int, required=True)
    ap.add_argument("--report-fd", type=int, required=True)
    a = ap.parse_args(argv)
    _die_with_parent()
    # On a small machine the acknowledgement path must win the CPU: GitHub waits for it,
    # nobody waits for the worker by the millisecond.
    with contextlib.suppress(OSError):
        os.nice(5)
    try:
        level = load_settings().log_level.upper()
    except SettingsError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    logging.basicConfig(level=level,
                        format="%(asctime)s %(levelname)s %(name)s [worker]: %(message)s")
    return asyncio.run(_run(a.wake_fd, a.report_fd))


if __name__ == "__main__":
    raise SystemExit(main())
