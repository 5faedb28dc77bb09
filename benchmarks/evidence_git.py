"""Evidence through git, measured side by side in one run against the local GitHub double
(``sandbox/github_double``: a real HTTP server serving real bare repositories through ``git
http-backend``):

1. **The bot**: one PR evidence review (:func:`bot.features.review.review.review_pull` on the
   PyGithub port, a fresh bare mirror: ``git fetch`` of the PR head and base branch, the
   campaign written from git objects, ``check_campaign`` and the verdict engine, the review,
   summary and check run written).
2. **By hand**, on the same data: ``git init``, ``git fetch`` of the PR head with the same
   token, ``git checkout``, then ``campaign-bot check`` on the campaign directory (a
   subprocess, as a person would run it).
3. **A refresh when nothing changed**: the campaign status header of the same campaign,
   refreshed twice; the second refresh is counted.

The campaign: the bundled example (30 files) plus one BagIt bundle of 441 payload and tag
files: 380 small JSON documents, 50 binary outputs of 10 MB (500 MB committed) and 6 outputs
of 250 MB kept outside the repository (1.5 GB, listed with their SHA-256 in the bundle's
``external-artifacts.json``): 471 files holding 2 GB.  ``--scale`` shrinks every binary
(0.25: 125 MB committed) and keeps the counts and the committed/external ratio.

Targets: the bot's review makes at most 5 GitHub REST reads (the evidence itself costs none;
the old contents-API reader made one request per file and directory) and takes at most 1.3x
the by-hand time; the unchanged refresh makes at most 1 REST call, 1 git round trip and no
write.  Exit status 0 when every target holds.

    python benchmarks/evidence_git.py [--scale 1.0] [--rounds 1]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import os
import statistics
import subprocess
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
from rich.progress import Progress  # noqa: E402
from rich.table import Table  # noqa: E402

from bot.database import make_engine, migrate  # noqa: E402
from bot.features.header import service as hs  # noqa: E402
from bot.features.review.review import review_pull  # noqa: E402
from bot.github.client import make_client  # noqa: E402
from bot.github.git import GitMirrors  # noqa: E402
from bot.github.pygithub import PyGithubPort  # noqa: E402
from bot.repo_config import RepoConfig  # noqa: E402
from sandbox.github_double import GitHubDouble, OpenAPISubset, default_openapi_path  # noqa: E402

REPO = "acme/campaigns"
CAMP = "campaigns/h3"
BAG = f"{CAMP}/bundles/outputs"
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"
N_JSON, N_BIN, N_EXT = 380, 50, 6
BIN_BYTES, EXT_BYTES = 10_000_000, 250_000_000
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]


def campaign(scale: float) -> tuple[dict[str, bytes], int, int]:
    """The campaign's committed files (repo path -> bytes), committed bytes, external bytes."""
    files = {f"{CAMP}/{p.relative_to(EXAMPLE).as_posix()}": p.read_bytes()
             for p in sorted(EXAMPLE.rglob("*")) if p.is_file()}
    payload: dict[str, bytes] = {}
    for i in range(N_JSON):
        payload[f"data/docs/doc-{i:03d}.json"] = json.dumps(
            {"index": i, "note": "x" * 1500}).encode()
    size = int(BIN_BYTES * scale)
    for i in range(N_BIN):
        payload[f"data/outputs/out-{i:02d}.bin"] = os.urandom(size)
    ext_size = int(EXT_BYTES * scale)
    external = {f"data/outputs/video-{i}.mp4": hashlib.sha256(f"video {i}".encode()).hexdigest()
                for i in range(N_EXT)}
    lines = [f"{hashlib.sha256(b).hexdigest()}  {p}" for p, b in sorted(payload.items())]
    lines += [f"{d}  {p}" for p, d in sorted(external.items())]
    octets = sum(map(len, payload.values())) + ext_size * N_EXT
    tags = {
        "bagit.txt": b"BagIt-Version: 1.0\nTag-File-Character-Encoding: UTF-8\n",
        "bag-info.txt": (f"Bag-Software-Agent: campaign-bot benchmark\nPayload-Oxum: "
                         f"{octets}.{len(payload) + N_EXT}\n").encode(),
        "manifest-sha256.txt": ("\n".join(lines) + "\n").encode(),
    }
    tags["tagmanifest-sha256.txt"] = "".join(
        f"{hashlib.sha256(b).hexdigest()}  {n}\n" for n, b in sorted(tags.items())).encode()
    tags["external-artifacts.json"] = json.dumps({
        "schema": "campaign-bot/integrity@1",
        "external": {p: {"sha256": d, "size": ext_size, "external": True,
                         "url": "https://github.com/acme/campaigns/actions/runs/1"}
                     for p, d in external.items()}}, indent=2).encode()
    files.update({f"{BAG}/{n}": b for n, b in {**tags, **payload}.items()})
    committed = sum(len(b) for p, b in files.items())
    return files, committed, ext_size * N_EXT


def by_hand(url: str, token: str, work: Path) -> tuple[float, float, int]:
    """``git fetch`` + ``git checkout`` + ``campaign-bot check``: (fetch s, total s, exit)."""
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    env = {**os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
           "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}", "GIT_TERMINAL_PROMPT": "0"}
    t0 = time.perf_counter()
    subprocess.run(["git", "init", "-q", str(work)], check=True, env=env)
    subprocess.run(["git", "-C", str(work), "fetch", "-q", "--no-tags", url,
                    "refs/pull/1/head"], check=True, env=env)
    t_fetch = time.perf_counter() - t0
    subprocess.run(["git", "-C", str(work), "-c", "advice.detachedHead=false", "checkout", "-q",
                    "FETCH_HEAD"], check=True, env=env)
    res = subprocess.run([*CLI, "check", str(work / CAMP)], capture_output=True, text=True)
    return t_fetch, time.perf_counter() - t0, res.returncode


def main() -> int:
    """Run the three measurements and print the tables; exit 1 when a target is missed."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=1.0, help="size of every binary (1.0: 2 GB)")
    ap.add_argument("--rounds", type=int, default=1, help="bot and by-hand runs, alternated")
    a = ap.parse_args()
    console = Console()
    double = GitHubDouble(OpenAPISubset(default_openapi_path()))
    double.start()
    rows: list[tuple[str, ...]] = []
    ok = True
    tmpdir = tempfile.TemporaryDirectory(prefix="evidence-git-")
    work = Path(tmpdir.name)
    try:
        with Progress(console=console, transient=True) as progress:
            task = progress.add_task("making the campaign", total=None)
            files, committed, external = campaign(a.scale)
            n_files = sum(1 for p in files if p.startswith(CAMP + "/")) + N_EXT
            base = {p: b for p, b in files.items() if not p.endswith("doc-000.json")}
            double.add_repo(REPO, base)
            double.add_pull(REPO, 1, {f"{BAG}/data/docs/doc-000.json":
                                      files[f"{BAG}/data/docs/doc-000.json"]})
            # the double writes its git objects on the first git request: not timed
            subprocess.run(["git", "ls-remote", "-q", double.git_url(REPO)], env={
                **os.environ, "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": "Authorization: Basic "
                + base64.b64encode(b"x:test-token").decode()}, capture_output=True)
            auth = Auth.Token("test-token")
            gh = PyGithubPort(make_client(double.base_url, auth, throttle=False), REPO,
                              "campaign-bot[bot]", auth=auth, base_url=double.base_url)
            bot_s, hand_s, fetch_s = [], [], []
            reads = writes = fetches = 0
            hand_rc = 0
            for r in range(a.rounds):
                progress.update(task, description=f"round {r + 1}: by hand")
                with tempfile.TemporaryDirectory(prefix="evidence-git-hand-") as tmp:
                    tf, tt, hand_rc = by_hand(double.git_url(REPO), "test-token",
                                              Path(tmp) / "w")
                fetch_s.append(tf)
                hand_s.append(tt)
                progress.update(task, description=f"round {r + 1}: the bot's review")
                git = GitMirrors(work / f"bot-{r}")  # fresh: a first review
                for kept in ("check_runs", "comments", "reviews", "review_comments"):
                    getattr(double.repo(REPO), kept).clear()  # every round a first review
                start = len(double.calls)
                t0 = time.perf_counter()
                outcome = review_pull(gh, RepoConfig(), 1, git=git)
                bot_s.append(time.perf_counter() - t0)
                calls = double.calls[start:]
                reads = sum(1 for c in calls if not c.is_git and c.method == "GET")
                writes = sum(1 for c in calls if c.is_write)
                fetches = sum(1 for c in calls if c.operation == "git-info-refs")
            progress.update(task, description="the header refresh")
            refresh = header_refresh(double, gh, git)
    finally:
        double.stop()
        tmpdir.cleanup()
    bot, hand = statistics.median(bot_s), statistics.median(hand_s)
    dirs = len({p.rsplit("/", 1)[0] for p in files if p.startswith(CAMP + "/")})
    small = sum(1 for p, b in files.items() if p.startswith(CAMP + "/") and len(b) <= 1 << 20)
    rows.append(("PR review by the bot", f"{bot:.1f}", str(reads), str(writes), str(fetches),
                 f"{outcome.hashes_checked} hashes, {outcome.problem_count} problems"))
    rows.append(("git fetch + checkout + check, by hand", f"{hand:.1f}", "-", "-", "1",
                 f"git fetch alone {statistics.median(fetch_s):.1f} s; check exit {hand_rc}"))
    rows.append(("old contents-API reader (computed)", "-", str(dirs + small), "-", "0",
                 f"{dirs} listings + {small} file reads; "
                 f"{n_files - N_EXT - small} files over 1 MB not verified"))
    rows.append(("header refresh, nothing changed", f"{refresh[3]:.2f}", str(refresh[0]),
                 str(refresh[1]), str(refresh[2]), "REST reads / writes / git round trips"))
    table = Table(title=f"Evidence through git: a campaign of {n_files} files, "
                        f"{committed / 1e6:.0f} MB committed + {external / 1e9:.2f} GB external "
                        f"(scale {a.scale}, {a.rounds} round(s), {os.cpu_count()} CPUs)")
    for col in ("what", "wall s", "REST reads", "writes", "git fetches", "note"):
        table.add_column(col, justify="left" if col in ("what", "note") else "right")
    for row in rows:
        table.add_row(*row)
    console.print(table)
    ratio = bot / hand
    targets = [
        (f"review REST reads <= 5 ({reads})", reads <= 5),
        (f"review wall time <= 1.3x by hand ({ratio:.2f}x)", ratio <= 1.3),
        (f"unchanged refresh <= 1 REST call, 1 git round trip, 0 writes "
         f"({refresh[0] + refresh[1]}, {refresh[2]}, {refresh[1]})",
         refresh[0] + refresh[1] <= 1 and refresh[2] <= 1 and refresh[1] == 0),
    ]
    for text, met in targets:
        console.print(f"target: {text}: " + ("[green]met[/green]" if met else "[red]missed[/red]"))
        ok = ok and met
    return 0 if ok else 1


def header_refresh(double: GitHubDouble, gh: Any, git: GitMirrors
                   ) -> tuple[int, int, int, float]:
    """The second of two header refreshes of the campaign on the default branch, on the bot's
    mirror ``git``: (REST reads, writes, git round trips, seconds)."""
    scope = (EXAMPLE / "campaign.toml").read_text()
    issue = int(next(x for x in scope.splitlines() if x.startswith("issue")).split("=")[1])
    double.add_issue(REPO, issue, body="Written by the requester.\r\n")
    with tempfile.TemporaryDirectory(prefix="evidence-git-header-") as tmp:
        engine = make_engine(f"sqlite:///{tmp}/bot.sqlite3")
        migrate(engine)
        svc = hs.HeaderService(engine, git=git)
        svc.discover(gh, None, "main")
        camp = svc.campaigns(REPO)[0]
        svc.refresh(gh, camp, trigger="benchmark")
        start = len(double.calls)
        t0 = time.perf_counter()
        res = svc.refresh(gh, camp, trigger="benchmark")
        secs = time.perf_counter() - t0
        calls = double.calls[start:]
        engine.dispose()
    assert res.outcome == "unchanged", res.outcome
    return (sum(1 for c in calls if not c.is_git and c.method == "GET"),
            sum(1 for c in calls if c.is_write),
            sum(1 for c in calls if c.operation == "git-info-refs"), secs)


if __name__ == "__main__":
    raise SystemExit(main())
