"""Webhook acknowledgement latency and ``/screen`` end-to-end latency, before and after a
change, in one run.

Two ``campaign-bot serve`` processes run side by side: one on the source at ``--before REV``
(a temporary ``git worktree``, put first on ``PYTHONPATH`` for the server and its worker
process), one on this checkout.  Both talk to one GitHub double (``tests/github_double``, in
this process, over HTTP), each about its own repository, with SQLite databases of their own.
The load alternates between them in ``--slices`` blocks, so background load on a shared
machine falls on both alike.  Each block, per server:

- **acknowledgement**: signed 12 kB deliveries of an event no handler takes, at ``--rate``
  per second for ``--ack-s`` seconds, open loop (latency from each request's due time:
  ``benchmarks/webhook_load.py``);
- **/screen**: ``--screens`` rounds of a ``/screen control track=5s-lossless`` comment on a
  pull request (write permission, a free pool): *dispatch* is the time from posting the
  ``issue_comment`` delivery to the screen workflow's ``workflow_dispatch`` reaching GitHub;
  then the run is completed (cancelled before any runner took it) and its ``workflow_run``
  delivery posted: *result* is the time to the screen's result comment, the pool free again.

Reported: p50/p90/p99/max of each.  Exit 0, or 2 for bad usage or a server that did not
start.  No target: the figures go to docs/benchmarks.md.

    python benchmarks/worker_latency.py --before REV [--rate 100] [--ack-s 10] [--screens 5]
        [--slices 4] [--json-out FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import hashlib
import hmac
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from screen_scope import scope_dict, toml_dumps  # noqa: E402
from webhook_load import FIXTURE, Result, free_port, load, stop, wait_up  # noqa: E402

from sandbox.github_double import GitHubDouble, OpenAPISubset, default_openapi_path  # noqa: E402

SECRET = "benchmark-secret"
DERIVED = ROOT / "tests" / "fixtures" / "github" / "webhooks-derived"
PR = 5
TIMEOUT_S = 60.0


def deliver(port: int, event: str, payload: dict[str, Any]) -> None:
    """POST one signed delivery to the server on ``port``; raises unless it answers 2xx."""
    import httpx

    body = json.dumps(payload).encode()
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    r = httpx.post(f"http://127.0.0.1:{port}/webhook", content=body, timeout=10, headers={
        "Content-Type": "application/json", "X-GitHub-Event": event,
        "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": sig,
        "User-Agent": "GitHub-Hookshot/benchmark"})
    if r.status_code // 100 != 2:
        raise RuntimeError(f"{event} delivery answered {r.status_code}: {r.text[:200]}")


def _base(repo: str) -> dict[str, Any]:
    return {"repository": {"id": 1, "name": repo.split("/")[1], "full_name": repo,
                           "private": False, "owner": {"login": repo.split("/")[0]},
                           "default_branch": "main"},
            "installation": {"id": 1}}


def comment_payload(repo: str, body: str, cid: int) -> dict[str, Any]:
    """An ``issue_comment`` created on PR :data:`PR` by ``maint``."""
    p = json.loads((DERIVED / "issue_comment" / "created.on-pull-request.json").read_text())
    p.update(_base(repo))
    p["issue"]["number"] = PR
    p["comment"].update(id=cid, body=body)
    p["comment"]["user"] = {**p["comment"]["user"], "login": "maint", "type": "User"}
    p["comment"].pop("performed_via_github_app", None)
    p["sender"] = {**p["sender"], "login": "maint", "type": "User"}
    return p


def run_payload(repo: str, run: dict[str, Any]) -> dict[str, Any]:
    """A ``workflow_run`` completed delivery for the double's ``run``."""
    p = json.loads((DERIVED / "workflow_run" / "completed.workflow-dispatch.json").read_text())
    p.update(_base(repo))
    p["action"] = "completed"
    p["workflow_run"].update(
        id=run["id"], status="completed", conclusion=run["conclusion"],
        display_title=run["display_title"], head_sha=run["head_sha"],
        path=f".github/workflows/{run['workflow']}", head_branch=run["head_branch"],
        event=run["event"], run_started_at=run.get("created_at"),
        updated_at=run["updated_at"])
    return p


class Server:
    """One ``campaign-bot serve`` on source ``src`` (None: this checkout) about ``repo``."""

    def __init__(self, name: str, src: Path | None, double: GitHubDouble, work: Path,
                 repo: str) -> None:
        self.name, self.repo, self.double = name, repo, double
        self.port = free_port()
        self.cid = 1000
        self.screens = 0
        self.dispatched = threading.Event()
        self.ack = Result(name)
        self.dispatch_ms: list[float] = []
        self.result_ms: list[float] = []
        scope = scope_dict()
        scope["budget"] = {**scope.get("budget", {}), "wall_hours": 10_000.0,
                           "device_hours": 40_000.0}
        double.add_repo(repo, {
            ".github/campaign-bot.toml": '[campaigns]\npaths = ["campaigns/*"]\n',
            ".github/workflows/screen.yml": "on: workflow_dispatch\n",
            "campaigns/h3/campaign.toml": toml_dumps(scope),
            "campaigns/h3/trusted-keys.pem": ""})
        double.add_workflow(repo, "screen.yml")
        double.add_pull(repo, PR, {"campaigns/h3/candidates.md": "cache-dit\n"})
        double.set_permission(repo, "maint", "write")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}
        env.update({
            "CAMPAIGN_BOT_WEBHOOK_SECRET": SECRET, "CAMPAIGN_BOT_TOKEN": "test-token",
            "CAMPAIGN_BOT_GITHUB_API_URL": double.base_url,
            "CAMPAIGN_BOT_PORT": str(self.port), "CAMPAIGN_BOT_LOG_LEVEL": "WARNING",
            "CAMPAIGN_BOT_DATABASE_URL": f"sqlite:///{work / (name + '.sqlite3')}",
            "CAMPAIGN_BOT_GITHUB_THROTTLE": "false", "CAMPAIGN_BOT_SCREEN_DEBOUNCE_S": "0",
            "CAMPAIGN_BOT_SCREEN_WATCHDOG_INTERVAL_S": "3600",
            "CAMPAIGN_BOT_GIT_CACHE_DIR": str(work / f"git-{name}"),
        })
        if src is not None:
            env["PYTHONPATH"] = os.pathsep.join([str(src), env.get("PYTHONPATH", "")])
        self.log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - closed in close()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", "from evidence.cli import main; main()", "serve"],
            cwd=work, env=env, stdout=self.log, stderr=subprocess.STDOUT)
        wait_up(self.port, self.proc)

    def on_dispatch(self, double: Any, repo: str, run: dict[str, Any]) -> None:
        if repo == self.repo:
            self.dispatched.set()

    def screen_round(self) -> None:
        """One ``/screen control``: comment -> dispatch, completed run -> result comment."""
        self.cid += 1
        self.screens += 1
        label = f"S{self.screens}"
        self.dispatched.clear()
        t0 = time.perf_counter()
        deliver(self.port, "issue_comment",
                comment_payload(self.repo, "/screen control track=5s-lossless", self.cid))
        if not self.dispatched.wait(TIMEOUT_S):
            raise RuntimeError(f"{self.name}: {label} was not dispatched within {TIMEOUT_S} s")
        self.dispatch_ms.append((time.perf_counter() - t0) * 1000)
        runs = sorted(self.double.repo(self.repo).runs.values(), key=lambda r: r["id"])
        run = self.double.set_run(self.repo, runs[-1]["id"], status="completed",
                                  conclusion="cancelled", updated_at=runs[-1]["created_at"])
        mark = f"campaign-bot:screen-result screen={label} "
        t1 = time.perf_counter()
        deliver(self.port, "workflow_run", run_payload(self.repo, copy.deepcopy(run)))
        while not any(mark in c["body"] + " " for c in
                      list(self.double.repo(self.repo).comments.values())):
            if time.perf_counter() - t1 > TIMEOUT_S:
                raise RuntimeError(f"{self.name}: no result for {label} in {TIMEOUT_S} s")
            time.sleep(0.005)
        self.result_ms.append((time.perf_counter() - t1) * 1000)

    def close(self) -> None:
        stop(self.proc)
        self.log.close()


def pct(xs: list[float], q: float) -> float:
    """The ``q`` quantile of ``xs`` (nearest rank); NaN when empty."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, metavar="REV",
                    help="the commit to compare this checkout with")
    ap.add_argument("--rate", type=float, default=100.0, help="deliveries per second")
    ap.add_argument("--ack-s", type=float, default=10.0, help="seconds of load per block")
    ap.add_argument("--screens", type=int, default=5, help="/screen rounds per block")
    ap.add_argument("--slices", type=int, default=4, help="blocks per server")
    ap.add_argument("--json-out", type=Path, help="write the figures as JSON here")
    a = ap.parse_args()
    if a.rate <= 0 or a.ack_s <= 0 or a.screens < 1 or a.slices < 1:
        print("--rate, --ack-s, --screens and --slices must be positive", file=sys.stderr)
        return 2
    from rich.console import Console
    from rich.table import Table

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
    rev = subprocess.run(["git", "rev-parse", "--short", a.before], cwd=ROOT, text=True,
                         capture_output=True)
    here = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                          capture_output=True).stdout.strip()
    if rev.returncode:
        print(f"--before {a.before}: not a commit of this repository", file=sys.stderr)
        return 2
    before = rev.stdout.strip()
    body = sorted(FIXTURE.glob("*.json"))[0].read_bytes()
    double = GitHubDouble(OpenAPISubset(default_openapi_path()))
    double.start()
    servers: list[Server] = []
    with tempfile.TemporaryDirectory(prefix="worker-latency-") as tmp:
        work = Path(tmp)
        tree = work / "before"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), before],
                       cwd=ROOT, check=True)
        try:
            servers = [Server(f"before-{before}", tree, double, work, "octo/before"),
                       Server(f"after-{here}", None, double, work, "octo/after")]
            for s in servers:
                double.dispatch_hooks.append(s.on_dispatch)
            for n in range(a.slices):
                for s in (servers if n % 2 == 0 else servers[::-1]):
                    s.ack.add(asyncio.run(load(s.name, s.port, a.rate, a.ack_s, body,
                                               f"{s.name}-{n}")))
                    for _ in range(a.screens):
                        s.screen_round()
        except RuntimeError:
            for s in servers:
                s.log.flush()
                print(f"--- {s.name} log (tail):", (work / f"{s.name}.log").read_text()[-3000:],
                      file=sys.stderr)
            raise
        finally:
            for s in servers:
                s.close()
            double.stop()
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT,
                           check=False)
    table = Table(title=f"webhook ack at {a.rate:g}/s and /screen end to end "
                        f"({a.slices} blocks each)")
    for col in ("server", "what", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"):
        table.add_column(col, justify="right" if col.endswith(("ms", "n")) else "left")
    out: dict[str, Any] = {"before": before, "after": here, "rate": a.rate, "servers": {}}
    for s in servers:
        rows = {"ack": s.ack.latencies_ms, "/screen -> dispatch": s.dispatch_ms,
                "workflow_run -> result": s.result_ms}
        out["servers"][s.name] = {}
        for what, xs in rows.items():
            q = {k: round(pct(xs, v), 2) for k, v in
                 (("p50", 0.5), ("p90", 0.9), ("p99", 0.99), ("max", 1.0))}
            out["servers"][s.name][what] = {"n": len(xs), **q}
            table.add_row(s.name, what, str(len(xs)), *(f"{q[k]:.1f}" for k in q))
        out["servers"][s.name]["ack errors"] = s.ack.errors
    Console(width=120).print(table)
    if a.json_out:
        a.json_out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    try:
        raise SystemExit(main())
    except KeyboardInterrupt:
        raise SystemExit(130) from None
