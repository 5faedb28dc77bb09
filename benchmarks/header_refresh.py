"""GitHub API calls and time of a campaign status header refresh.

Runs the real refresh path (``bot.features.header.service.HeaderService`` over the PyGithub
port, a migrated SQLite database, ``evidence``'s loader and verdict engine)
against the local GitHub double (``sandbox/github_double``, a real HTTP server on 127.0.0.1)
holding the bundled example campaign ``examples/h3-ref2va-4x910b1`` and two candidate PRs.
Every HTTP request the double receives is counted: REST reads and writes, and git round trips
(evidence is read through git: one ``git fetch`` is one round trip, whatever HTTP requests of
git's smart protocol it takes).

Target: a refresh with nothing changed makes at most 1 REST read, 1 git round trip and 0
writes.

    python benchmarks/header_refresh.py [--repeat 20]

Exit status 0 when the target holds, 1 when it does not.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from github import Auth  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from bot.database import make_engine, migrate  # noqa: E402
from bot.features.header import service as cs  # noqa: E402
from bot.github.client import make_client  # noqa: E402
from bot.github.git import GitMirrors  # noqa: E402
from bot.github.pygithub import PyGithubPort  # noqa: E402
from sandbox.github_double import GitHubDouble, default_openapi_path  # noqa: E402
from sandbox.github_double.openapi import OpenAPISubset  # noqa: E402

REPO = "org/campaigns"
CAMPAIGN = "campaigns/h3-ref2va-4x910b1"
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"


def example_files() -> dict[str, bytes]:
    """Every file of the example campaign, under ``campaigns/``."""
    return {
        f"{CAMPAIGN}/{p.relative_to(EXAMPLE).as_posix()}": p.read_bytes()
        for p in sorted(EXAMPLE.rglob("*"))
        if p.is_file()
    }


def counted(double: GitHubDouble, since: int) -> tuple[int, int, int]:
    """(REST reads, writes, git fetches) the double received since call index ``since``."""
    calls = double.calls[since:]
    reads = sum(1 for c in calls if c.method == "GET" and not c.is_git)
    writes = sum(1 for c in calls if c.is_write)
    fetches = sum(1 for c in calls if c.operation == "git-info-refs")
    return reads, writes, fetches


def run(repeat: int) -> tuple[list[tuple[str, int, int, float]], bool]:
    double = GitHubDouble(OpenAPISubset(default_openapi_path()))
    double.start()
    rows: list[tuple[str, int, int, int, float]] = []
    try:
        files = example_files()
        double.add_repo(REPO, files)
        scope_text = files[f"{CAMPAIGN}/campaign.toml"].decode()
        issue = int(next(x for x in scope_text.splitlines() if x.startswith("issue"))
                    .split("=")[1])
        double.add_issue(REPO, issue, body="Goal and scope\r\n\r\nWritten by the requester.\r\n")
        with tempfile.TemporaryDirectory() as tmp:
            engine = make_engine(f"sqlite:///{tmp}/bot.sqlite3")
            migrate(engine)
            svc = cs.HeaderService(engine, git=GitMirrors(Path(tmp) / "git"))
            auth = Auth.Token("test-token")
            gh = PyGithubPort(make_client(double.base_url, auth, throttle=False), REPO,
                              "campaign-bot[bot]", auth=auth, base_url=double.base_url)
            svc.discover(gh, None, "main")
            camp = svc.campaigns(REPO)[0]

            def step(label: str, **kw: Any) -> cs.RefreshResult:
                start = len(double.calls)
                t0 = time.perf_counter()
                res = svc.refresh(gh, camp, trigger="benchmark", **kw)
                ms = (time.perf_counter() - t0) * 1000
                r, w, f = counted(double, start)
                rows.append((f"{label} -> {res.outcome}", r, w, f, ms))
                return res

            step("first refresh (header inserted)")
            times, worst = [], (0, 0, 0)
            for _ in range(repeat):
                start = len(double.calls)
                t0 = time.perf_counter()
                res = svc.refresh(gh, camp, trigger="benchmark")
                times.append((time.perf_counter() - t0) * 1000)
                r, w, f = counted(double, start)
                assert res.outcome == "unchanged", res.outcome
                worst = (max(worst[0], r), max(worst[1], w), max(worst[2], f))
            rows.append((f"nothing changed, worst of {repeat} (p50 time)", *worst,
                         statistics.median(times)))
            step("scheduler pass, nothing changed", skip_if_unchanged=True)
            pr = double.add_pull(REPO, 41, {
                f"{CAMPAIGN}/results/candidate-notes.md": "candidate notes\n"}, head_ref="cand")
            svc.record_pull(gh, {"number": 41, "state": "open", "title": "cand",
                                 "head": {"sha": pr.head_sha}})
            step("candidate PR opened (its evidence read)")
            step("after the PR, nothing changed")
            double.set_branch(REPO, "main", {f"{CAMPAIGN}/results/note.txt": "new\n"},
                              parent="main")
            step("new evidence on the default branch")
            engine.dispose()
    finally:
        double.stop()
    ok = worst[0] <= 1 and worst[1] == 0 and worst[2] <= 1
    return rows, ok


def main() -> int:
    """Run and print the table; exit 1 when the no-change target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20, help="no-change refreshes to time")
    args = ap.parse_args()
    rows, ok = run(args.repeat)
    table = Table(title="campaign status header: GitHub calls per refresh")
    for col in ("refresh", "REST reads", "writes", "git fetches", "time (ms)"):
        table.add_column(col, justify="left" if col == "refresh" else "right")
    for label, r, w, f, ms in rows:
        table.add_row(label, str(r), str(w), str(f), f"{ms:.1f}")
    console = Console()
    console.print(table)
    console.print(
        "target: nothing changed -> at most 1 REST read, 1 git fetch, 0 writes: "
        + ("[green]met[/green]" if ok else "[red]missed[/red]")
    )
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
