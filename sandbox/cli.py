"""``campaign-bot sandbox``: try the whole product on this machine (registered as a plug-in).

Exit codes: 0 stopped cleanly (Ctrl-C or SIGTERM), 2 a part did not start (the message says
which and why).
"""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Annotated, Any

import typer

EXIT_START_FAILED = 2


def sandbox_cmd(
    port: Annotated[int, typer.Option(
        help="Port of the sandbox's page on 127.0.0.1 (0: a free port).")] = 8765,
    open_browser: Annotated[bool | None, typer.Option(
        "--open/--no-open",
        help="Open the page in the default web browser [default: when run in a "
             "terminal].")] = None,
    work: Annotated[Path | None, typer.Option(
        help="Folder for the sandbox's files (database, git mirrors, runner, logs), kept "
             "after it stops [default: a temporary folder, removed after].")] = None,
) -> None:
    """Start, on this machine, a local GitHub, a campaign repository, the bot and a runner
    on a stand-in model server, and a page to write /screen comments and watch the bot's
    replies, check runs, status header and committed evidence.  No GitHub, no accelerator,
    no network; Ctrl-C stops everything."""
    from evidence.console import print_error

    from .page import PageServer
    from .stand import Stand, StandError

    tmp = None
    if work is None:
        tmp = tempfile.TemporaryDirectory(prefix="campaign-bot-sandbox-")
        work = Path(tmp.name)

    def say(line: str) -> None:
        print(f"sandbox: {line}", flush=True)

    stand = Stand(work, log=say)
    page = None
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()

    old = {s: signal.signal(s, on_signal) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            page = PageServer(stand, port=port)
            stand.web_url = page.url  # GitHub's web links (runs, checks, evidence) open here
        except OSError as exc:
            print_error(f"cannot listen on 127.0.0.1:{port}: {exc.strerror}; pick another "
                        "with --port (0: any free port)")
            raise typer.Exit(EXIT_START_FAILED) from None
        say("starting (a few seconds; up to 20 s on a busy machine)...")
        t0 = time.monotonic()
        try:
            stand.start()
        except StandError as exc:
            print_error(str(exc))
            raise typer.Exit(EXIT_START_FAILED) from None
        url = page.start()
        say(f"ready in {time.monotonic() - t0:.1f} s")
        print(f"sandbox page: {url}", flush=True)
        say("write '/screen candidate noop' on the pull request; Ctrl-C stops everything")
        if open_browser if open_browser is not None else sys.stdout.isatty():
            import webbrowser

            webbrowser.open(url)
        while not stop.wait(0.5):
            if stand.proc is not None and stand.proc.poll() is not None:
                print_error(f"campaign-bot serve exited ({stand.proc.returncode}); its log: "
                            f"{stand.serve_log}")
                raise typer.Exit(EXIT_START_FAILED)
        say("stopping...")
    finally:
        if page is not None:
            page.stop()
        stand.stop()
        for s, h in old.items():
            signal.signal(s, h)
        if tmp is not None:
            tmp.cleanup()
    say("stopped")


def register(app: Any) -> None:
    """Add ``sandbox`` to the ``campaign-bot`` typer app."""
    app.command("sandbox")(sandbox_cmd)
