"""From a fresh clone to a ``/screen`` result in ``campaign-bot sandbox``, timed per step.

What a new user does, following the README: clone, README command 1 (a venv and
``pip install .``, the base install: no torch), ``campaign-bot sandbox``, then a
``/screen candidate noop`` comment on the sandbox's pull request.  "Done" is what the README
promises: the bot's result comment, the completed check run, the evidence committed on the
PR's branch and the status header naming the candidate.  The comment is posted through the
page's own endpoint (``POST /api/comment``, what its Comment button sends).

Usage::

    python benchmarks/sandbox_first_screen.py [--no-cache]   # --no-cache: pip downloads all

Prints one line per step with its seconds and the total, then the machine (CPU model, cores)
and its load averages (:func:`os.getloadavg`) at the start and the end: the figures of a
shared machine mean little without them.  Needs git and PyPI (or a pip
mirror) for the install; the sandbox itself runs offline.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--no-cache", action="store_true", help="pip without its download cache")
    args = ap.parse_args()
    steps: list[tuple[str, float]] = []
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="first-screen-") as tmp:
        t0 = time.monotonic()
        clone = Path(tmp) / "campaign-bot"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(ROOT), str(clone)],
                       check=True)
        steps.append(("git clone", time.monotonic() - t0))
        t = time.monotonic()
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("CAMPAIGN_BOT_", "VIRTUAL_ENV", "PYTHON"))}
        if args.no_cache:
            env["PIP_NO_CACHE_DIR"] = "1"
        subprocess.run(f"{sys.executable} -m venv .venv && .venv/bin/pip install -q .",
                       shell=True, check=True, cwd=clone, env=env)
        steps.append(("README command 1: venv + pip install .", time.monotonic() - t))
        t = time.monotonic()
        proc = subprocess.Popen([str(clone / ".venv/bin/campaign-bot"), "sandbox", "--port", "0",
                                 "--no-open"], cwd=clone, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            assert proc.stdout is not None
            url = None
            for line in proc.stdout:
                m = re.match(r"sandbox page: (\S+)", line)
                if m:
                    url = m.group(1)
                    break
            if url is None:
                print("the sandbox did not start", file=sys.stderr)
                return 1
            steps.append(("campaign-bot sandbox: page ready", time.monotonic() - t))
            t = time.monotonic()
            r = httpx.post(f"{url}api/comment", json={"user": "maintainer", "number": 2,
                                                      "body": "/screen candidate noop"})
            r.raise_for_status()
            end = time.monotonic() + 300
            while time.monotonic() < end:
                s = httpx.get(f"{url}api/state").json()
                done = (any("campaign-bot:screen-result" in c["body"] for c in s["comments"])
                        and any(c["name"] == "campaign-bot/screen: noop"
                                and c["status"] == "completed" for c in s["checks"])
                        and any(p.endswith("/attestation.dsse.json") for p in s["evidence"])
                        and "| noop |" in s["issue_body"])
                if done:
                    break
                time.sleep(0.2)
            else:
                print("no result within 300 s", file=sys.stderr)
                return 1
            steps.append(("/screen comment -> result, check run, evidence, header",
                          time.monotonic() - t))
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(60)
        total = time.monotonic() - t0
    for name, s in steps:
        print(f"{s:8.1f} s  {name}")
    print(f"{total:8.1f} s  total, fresh clone to a /screen result")
    print(f"machine: {_cpu_model()}, {os.cpu_count()} cores; load averages (1, 5, 15 min) "
          f"at the start {_load(load_start)}, at the end {_load(os.getloadavg())}")
    return 0


def _load(avg: tuple[float, float, float]) -> str:
    return " / ".join(f"{x:.2f}" for x in avg)


def _cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (Linux), else ``platform.processor()``."""
    import platform

    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


if __name__ == "__main__":
    raise SystemExit(main())
