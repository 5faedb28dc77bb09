"""What a large fork push beside the campaigns costs the bot: peak memory and mirror disk.

A fork opens a pull request that adds ``--mib`` MiB of text (random hex lines: compresses
like source, diffs line by line) outside every campaign directory, against the local GitHub
double (``sandbox/github_double``: real HTTP, real ``git http-backend``).  Each mode runs in
a fresh child process with a fresh bare mirror, so its figures are the bot's own:

* ``before``: what the review did first until GitHub's list of changed files was read
  first and the head fetched without file contents: one ``git fetch`` of the PR head and
  base branch with every blob, then the full diff with patches, read into Python;
* ``after``: :func:`bot.features.review.review.review_pull` as it is now: the list of
  changed files names no campaign, nothing fetched; with ``--campaign`` (the PR also edits
  the campaign's ``results/status.json``) the head comes as commits and trees only, and only
  the campaign folder's contents are fetched, diffed and checked.

Figures: the child's peak RSS (``VmHWM``), the peak RSS of its git subprocesses
(``RUSAGE_CHILDREN``; Linux counts a child's RSS at fork in it, so a bound from above), the
mirror's size on disk, and wall time.

    python benchmarks/fork_push.py [--mib 100] [--campaign]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import secrets
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

REPO = "acme/campaigns"
EXAMPLE = ROOT / "examples" / "h3-ref2va-4x910b1"


def _vm_hwm_kib() -> int:
    """This process's peak RSS in KiB (``VmHWM`` of /proc/self/status, proc(5)); not
    ``ru_maxrss``, which Linux carries over from the forking parent across execve."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise RuntimeError("no VmHWM in /proc/self/status")


def child(mode: str, base_url: str, cache: Path, campaign: bool) -> dict[str, float]:
    """Run one mode in this (fresh) process; returns its figures."""
    from github import Auth

    from bot.features.review.review import review_pull
    from bot.github.client import make_client
    from bot.github.git import GitMirrors
    from bot.github.pygithub import PyGithubPort
    from bot.repo_config import RepoConfig

    auth = Auth.Token("test-token")
    gh = PyGithubPort(make_client(base_url, auth, throttle=False), REPO, "campaign-bot[bot]",
                      auth=auth, base_url=base_url)
    git = GitMirrors(cache, timeout_s=600)
    t0 = time.monotonic()
    if mode == "before":
        pr = gh.get_pull(1)
        remote = gh.git_remote()
        assert remote is not None
        refs = git.fetch(remote, REPO, ["refs/pull/1/head", f"refs/heads/{pr.base_ref}"])
        files = git.changed_files(REPO, refs[f"refs/heads/{pr.base_ref}"], pr.head_sha)
        assert files, "the diff is empty"
    else:
        out = review_pull(gh, RepoConfig(), 1, git=git)
        assert out.campaigns == (["campaigns/h3"] if campaign else [])
    wall = time.monotonic() - t0
    disk = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
    return {"wall_s": wall, "rss_mib": _vm_hwm_kib() / 1024,
            "git_rss_mib": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
            "mirror_mib": disk / 2**20}


def main() -> None:
    """Set up the double and the fork PR, run both modes, print a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mib", type=float, default=100.0, help="MiB of text the fork adds")
    ap.add_argument("--campaign", action="store_true",
                    help="the pull request also edits a campaign file")
    ap.add_argument("--child", nargs=3, metavar=("MODE", "URL", "CACHE"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], a.child[1], Path(a.child[2]), a.campaign)))
        return
    from sandbox.github_double import GitHubDouble, OpenAPISubset, default_openapi_path

    double = GitHubDouble(OpenAPISubset(default_openapi_path()))
    double.start()
    try:
        files: dict[str, bytes | str] = {
            f"campaigns/h3/{p.relative_to(EXAMPLE).as_posix()}": p.read_bytes()
            for p in sorted(EXAMPLE.rglob("*")) if p.is_file()}
        double.add_repo(REPO, files)
        lines = int(a.mib * 2**20 / 65)
        blob = "".join(secrets.token_hex(32) + "\n" for _ in range(lines))
        change: dict[str, bytes | str | None] = {"vendor/blob.txt": blob}
        if a.campaign:
            status = EXAMPLE / "results" / "status.json"
            change["campaigns/h3/results/status.json"] = status.read_text().replace(
                '"execution": "queued"', '"execution": "running"')
        double.add_pull(REPO, 1, change, fork="evil/campaigns")
        del blob
        rows = []
        for mode in ("before", "after"):
            with tempfile.TemporaryDirectory(prefix="fork-push-") as tmp:
                res = subprocess.run(
                    [sys.executable, __file__, "--child", mode, double.base_url, tmp,
                     *(["--campaign"] if a.campaign else [])],
                    capture_output=True, text=True, check=True, env=os.environ)
                rows.append((mode, json.loads(res.stdout.strip().splitlines()[-1])))
    finally:
        double.stop()
    print(f"fork push of {a.mib:g} MiB of text outside the campaigns"
          + (", and one campaign file edited" if a.campaign else "") + "\n")
    print("| mode | bot peak RSS (MiB) | git peak RSS (MiB) | mirror on disk (MiB) | wall (s) |")
    print("|---|---:|---:|---:|---:|")
    for mode, f in rows:
        print(f"| {mode} | {f['rss_mib']:.0f} | {f['git_rss_mib']:.0f} | "
              f"{f['mirror_mib']:.1f} | {f['wall_s']:.1f} |")


if __name__ == "__main__":
    main()
