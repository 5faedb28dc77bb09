"""Cost of one PR evidence review (review feature) against the local GitHub double: wall time
and GitHub REST requests per review (evidence is read through git, one ``git fetch`` per
review, not counted here), first run (posts review, summary, check run) and re-run (posts
nothing).  The campaign is the bundled example (examples/h3-ref2va-4x910b1) with one broken
status file.  Run with

    .venv/bin/python benchmarks/pr_review.py [--reviews 20] [--throttle]

``--throttle`` keeps PyGithub's production pacing (0.25 s between requests, 1 s between
writes), which dominates real wall time.  No target is asserted; the request count bounds how
many reviews an installation's 5,000 requests/hour allow (GitHub Docs, "Rate limits for
the REST API").
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import track
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from github import Auth  # noqa: E402

from bot.features.review.review import review_pull  # noqa: E402
from bot.github.client import make_client, make_retry  # noqa: E402
from bot.github.git import GitMirrors  # noqa: E402
from bot.github.pygithub import PyGithubPort  # noqa: E402
from bot.repo_config import RepoConfig  # noqa: E402
from sandbox.github_double import GitHubDouble, OpenAPISubset, default_openapi_path  # noqa: E402

REPO = "acme/campaigns"
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reviews", type=int, default=20, help="PRs reviewed (each twice)")
    ap.add_argument("--throttle", action="store_true", help="PyGithub production pacing")
    a = ap.parse_args()
    double = GitHubDouble(OpenAPISubset(default_openapi_path()))
    double.start()
    files = {f"campaigns/h3/{p.relative_to(EXAMPLE).as_posix()}": p.read_bytes()
             for p in EXAMPLE.rglob("*") if p.is_file()}
    double.add_repo(REPO, files)
    status = (EXAMPLE / "results" / "status.json").read_text()
    auth = Auth.Token("test-token")
    client = make_client(double.base_url, auth, retry=make_retry(), throttle=a.throttle)
    gh = PyGithubPort(client, REPO, "campaign-bot[bot]", auth=auth, base_url=double.base_url)
    rows: dict[str, list[tuple[float, int, int]]] = {"first run": [], "re-run": []}
    work = tempfile.TemporaryDirectory(prefix="pr-review-bench-")
    git = GitMirrors(Path(work.name) / "git")  # evidence is read through git
    for i in track(range(a.reviews), description="reviewing PRs"):
        double.add_pull(REPO, 100 + i, {"campaigns/h3/results/status.json":
                                        status.replace('"queued"', f'"bad-{i}"')},
                        head_ref=f"topic-{i}")
        for label in rows:
            n0, w0 = len(double.calls), len(double.writes())
            t0 = time.perf_counter()
            review_pull(gh, RepoConfig(), 100 + i, git=git)
            rest = [c for c in double.calls[n0:] if not c.is_git]
            rows[label].append((time.perf_counter() - t0, len(rest),
                                len(double.writes()) - w0))
    double.stop()
    work.cleanup()
    table = Table(title=f"PR review of the example campaign ({len(files)} files), "
                        f"{a.reviews} PRs, throttle {'on' if a.throttle else 'off'}")
    for col in ("run", "p50 s", "max s", "REST requests", "writes",
                "reviews/hour at 5,000 req"):
        table.add_column(col, justify="right")
    for label, vals in rows.items():
        secs = [v[0] for v in vals]
        reqs = statistics.median(v[1] for v in vals)
        table.add_row(label, f"{statistics.median(secs):.3f}", f"{max(secs):.3f}",
                      f"{reqs:.0f}", f"{statistics.median(v[2] for v in vals):.0f}",
                      f"{5000 / reqs:.0f}")
    Console().print(table)


if __name__ == "__main__":
    main()
