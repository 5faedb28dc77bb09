"""PR evidence review through the router against the GitHub double, on the bundled example
campaign (examples/h3-ref2va-4x910b1, committed under ``campaigns/h3`` on the default
branch).  Each test asserts the exact GitHub writes, and that retries never duplicate."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from github_helpers import (
    BOT,
    EXAMPLE,
    GIT,
    REPO,
    clear_configs,
    comment_event,
    example_files,
    port,
    pr_event,
    router,
)

from bot.features.review.review import (
    CHECK_NAME,
    analyse_directory,
    campaign_dir_of,
    diff_lines,
    place,
    review_pull,
)
from bot.github import GitHubRetryableError
from bot.github.recording import RecordingGitHub
from bot.repo_config import RepoConfig

STATUS = "campaigns/h3/results/status.json"
P = f"/repos/{REPO}"
OPENED_WRITES = [
    ("checks/create", f"{P}/check-runs"),
    ("pulls/create-review", f"{P}/pulls/2/reviews"),
    ("issues/create-comment", f"{P}/issues/2/comments"),
]


def bad_status() -> str:
    return (EXAMPLE / "results" / "status.json").read_text().replace(
        '"execution": "queued"', '"execution": "runing"')


@pytest.fixture
def campaign_pr(github_double):
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {STATUS: bad_status()}, user="dave")
    clear_configs()
    return github_double, pull


def expected_findings(tmp_path: Path, status_text: str) -> list:
    """What the evidence checks say about the example with ``status_text`` (computed by the
    same evidence code, from a local copy: the review must post exactly these)."""
    root = tmp_path / "copy"
    root.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(EXAMPLE, root)
    (root / "results" / "status.json").write_text(status_text)
    hashes, findings, rows = analyse_directory(root)
    return hashes, place("campaigns/h3", findings), rows


def check_runs(double) -> list[dict]:
    return list(double.repo(REPO).check_runs.values())


def summaries(double) -> list[str]:
    return [c["body"] for c in double.repo(REPO).comments.values()
            if c["user"] == BOT and "<!-- campaign-bot:summary pr=2 -->" in c["body"]]


def test_opened_posts_one_review_summary_and_check(campaign_pr, tmp_path) -> None:
    double, pull = campaign_pr
    hashes, placed, rows = expected_findings(tmp_path, bad_status())
    results = router.dispatch(pr_event(2, pull.head_sha), port(double), RepoConfig())
    assert all(r.ok for r in results), results
    assert double.write_summary() == [*OPENED_WRITES,
                                      ("checks/update", f"{P}/check-runs/"
                                       f"{check_runs(double)[0]['id']}")]
    # the review: pinned to the head SHA analysed, inline exactly on the diff's lines
    (review,) = double.repo(REPO).reviews.values()
    assert review["commit_id"] == pull.head_sha and review["state"] == "COMMENTED"
    changed = diff_lines(next(f["patch"] for f in pull.files if f["filename"] == STATUS))
    in_diff = [p for p in placed if p.repo_path == STATUS and p.line in changed]
    assert any(p.finding.rule == "SCHEMA_INVALID" and p.line == 4 for p in in_diff)
    inline = sorted((c["path"], c["line"]) for c in double.repo(REPO).review_comments.values())
    assert inline == sorted((p.repo_path, p.line) for p in in_diff)
    body_keys = set(re.findall(r"finding key=([0-9a-f]+)", review["body"]))
    assert body_keys == {p.key for p in placed if p not in in_diff}
    # the summary: counts and verdict table
    (summary,) = summaries(double)
    problems = sum(1 for p in placed if p.finding.severity in ("P0", "P1", "P2"))
    assert f"**Checked {hashes} hashes, {problems} problems.**" in summary
    for row in rows:
        assert f"| **{row.verdict}** |" in summary and row.track in summary
    # the check run
    (run,) = check_runs(double)
    assert (run["name"], run["head_sha"], run["status"], run["conclusion"]) == (
        CHECK_NAME, pull.head_sha, "completed", "failure")


def test_redelivery_and_verify_post_nothing_twice(campaign_pr) -> None:
    double, pull = campaign_pr
    gh = port(double)
    ev = pr_event(2, pull.head_sha)
    router.dispatch(ev, gh, RepoConfig())
    n = len(double.writes())
    router.dispatch(ev, gh, RepoConfig())  # GitHub redelivery
    assert len(double.writes()) == n
    double.set_permission(REPO, "wendy", "write")
    results = router.dispatch(comment_event("/campaign verify", login="wendy"), gh,
                              RepoConfig())
    assert all(r.ok for r in results), results
    assert double.write_summary()[n:] == [("issues/create-comment", f"{P}/issues/2/comments")]
    reply = list(double.repo(REPO).comments.values())[-1]["body"]
    assert "no finding that was not already posted" in reply
    assert len(double.repo(REPO).reviews) == 1 and len(summaries(double)) == 1


def test_push_reviews_only_new_findings(campaign_pr, tmp_path) -> None:
    double, pull = campaign_pr
    gh = port(double)
    first_sha = pull.head_sha
    router.dispatch(pr_event(2, first_sha), gh, RepoConfig())
    n = len(double.writes())
    # the fix: status back to a valid value (the file still differs from its manifest hash)
    fixed = bad_status().replace('"runing"', '"running"')
    _, before, _ = expected_findings(tmp_path / "a", bad_status())
    _, after, _ = expected_findings(tmp_path / "b", fixed)
    new_keys = {p.key for p in after} - {p.key for p in before}
    assert new_keys  # the manifest mismatch message names the file's new digest
    sha = double.push(REPO, 2, {STATUS: fixed})
    router.dispatch(pr_event(2, sha, "synchronize"), gh, RepoConfig())
    run_id = next(r["id"] for r in check_runs(double) if r["head_sha"] == sha)
    assert double.write_summary()[n:] == [
        ("checks/create", f"{P}/check-runs"),
        ("pulls/create-review", f"{P}/pulls/2/reviews"),
        ("issues/update-comment",
         f"{P}/issues/comments/{next(iter(double.repo(REPO).comments))}"),
        ("checks/update", f"{P}/check-runs/{run_id}"),
    ]
    later = list(double.repo(REPO).reviews.values())[1]
    posted = set(re.findall(r"finding key=([0-9a-f]+)", later["body"])) | {
        k for c in double.repo(REPO).review_comments.values() if c["commit_id"] == sha
        for k in re.findall(r"finding key=([0-9a-f]+)", c["body"])}
    assert later["commit_id"] == sha and posted == new_keys
    assert len(summaries(double)) == 1 and sha[:7] in summaries(double)[0]
    assert {r["head_sha"] for r in check_runs(double)} == {first_sha, sha}


def test_review_5xx_after_write_is_retryable_and_not_duplicated(campaign_pr) -> None:
    double, pull = campaign_pr
    double.inject("POST", f"{P}/pulls/2/reviews", 502, after_write=True)
    gh = port(double)
    with pytest.raises(GitHubRetryableError):
        review_pull(gh, RepoConfig(), 2, git=GIT)
    assert len(double.repo(REPO).reviews) == 1  # GitHub did store it
    outcome = review_pull(gh, RepoConfig(), 2, git=GIT)  # the delivery's retry
    assert outcome.new_findings == 0
    assert len(double.repo(REPO).reviews) == 1 and len(check_runs(double)) == 1
    assert len(summaries(double)) == 1 and check_runs(double)[0]["status"] == "completed"
    assert [c.status for c in double.calls if c.method == "POST" and
            c.path.endswith("/reviews")] == [502]


def test_check_run_500_then_retry_creates_one_run(campaign_pr) -> None:
    double, pull = campaign_pr
    double.inject("POST", f"{P}/check-runs", 500)
    results = router.dispatch(pr_event(2, pull.head_sha), port(double), RepoConfig())
    (failed,) = [r for r in results if not r.ok]
    assert failed.error.startswith("GitHubRetryableError")
    assert double.writes() == []
    router.dispatch(pr_event(2, pull.head_sha), port(double), RepoConfig())
    assert len(check_runs(double)) == 1 and len(double.repo(REPO).reviews) == 1


def test_review_refused_with_422_falls_back_to_body(campaign_pr) -> None:
    double, pull = campaign_pr
    double.inject("POST", f"{P}/pulls/2/reviews", 422,
                  message="Pull request review thread line must be part of the diff")
    outcome = review_pull(port(double), RepoConfig(), 2, git=GIT)
    (review,) = double.repo(REPO).reviews.values()
    assert double.repo(REPO).review_comments == {}
    assert outcome.inline == 0 and outcome.in_body == outcome.new_findings
    assert len(re.findall(r"finding key=", review["body"])) == outcome.new_findings


def test_rate_limited_reads_back_off_and_complete(campaign_pr) -> None:
    double, pull = campaign_pr
    double.inject("GET", f"{P}/pulls/2/files", 403, retry_after=1)
    double.inject("GET", f"{P}/contents/campaigns/h3*", 500, times=2)
    results = router.dispatch(pr_event(2, pull.head_sha), port(double), RepoConfig())
    assert all(r.ok for r in results), results
    assert [w for w, _ in double.write_summary()][:3] == [w for w, _ in OPENED_WRITES]


def test_token_without_checks_permission_still_reviews(campaign_pr) -> None:
    double, pull = campaign_pr
    double.inject("POST", f"{P}/check-runs", 403,
                  message="Resource not accessible by personal access token")
    results = router.dispatch(pr_event(2, pull.head_sha), port(double), RepoConfig())
    assert all(r.ok for r in results), results
    assert double.write_summary() == OPENED_WRITES[1:]


def test_pr_without_campaign_changes_writes_nothing(github_double) -> None:
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {"README.md": "docs\n"})
    router.dispatch(pr_event(2, pull.head_sha), port(github_double), RepoConfig())
    assert github_double.writes() == []


def test_a_fork_push_outside_the_campaigns_is_never_fetched(github_double) -> None:
    """GitHub's list of the changed paths names no campaign: the mirror fetches nothing (a
    fork could push any amount of data beside the campaigns)."""
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {"blob/big.bin": "x" * 200_000},
                                  fork="evil/Hello-World")
    outcome = review_pull(port(github_double), RepoConfig(), 2, git=GIT)
    assert outcome.head_sha == pull.head_sha and outcome.campaigns == []
    assert [c.path for c in github_double.calls if "git-upload-pack" in c.path
            or c.path.endswith("/info/refs")] == []
    assert github_double.writes() == []


def test_a_closed_pull_leaves_the_mirror(campaign_pr) -> None:
    double, pull = campaign_pr
    router.dispatch(pr_event(2, pull.head_sha), port(double), RepoConfig())
    assert GIT.has_commit(REPO, pull.head_sha)
    results = router.dispatch(pr_event(2, pull.head_sha, action="closed", delivery="d-c"),
                              port(double), RepoConfig())
    assert all(r.ok for r in results), results
    assert not GIT.has_commit(REPO, pull.head_sha)


def test_summary_marker_in_a_user_comment_is_not_taken_over(campaign_pr) -> None:
    double, pull = campaign_pr
    double.add_comment(REPO, 2, "<!-- campaign-bot:summary pr=2 --> fake", "eve")
    review_pull(port(double), RepoConfig(), 2, git=GIT)
    assert len(summaries(double)) == 1
    assert [c["body"] for c in double.repo(REPO).comments.values()][0].endswith("fake")


@pytest.mark.parametrize("path,patterns,expected", [
    ("campaigns/h3/results/status.json", ["campaigns/*"], "campaigns/h3"),
    ("campaigns/h3/campaign.toml", ["campaigns/*"], "campaigns/h3"),
    ("campaigns/readme.md", ["campaigns/*"], None),
    ("perf/2026/h3/r.json", ["perf/*/*"], "perf/2026/h3"),
    ("results/status.json", ["."], "."),
], ids=["nested", "root-file", "above", "two-levels", "repo-root"])
def test_campaign_dir_of(path, patterns, expected) -> None:
    assert campaign_dir_of(path, patterns) == expected


def test_fork_pr_is_reviewed_as_data(github_double) -> None:
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {STATUS: bad_status()}, fork="evil/Hello-World")
    gh = port(github_double)
    assert (gh.get_pull(2)).is_fork
    outcome = review_pull(gh, RepoConfig(), 2, git=GIT)
    assert outcome.head_sha == pull.head_sha and outcome.problem_count > 0
    (run,) = check_runs(github_double)
    assert run["head_sha"] == pull.head_sha  # on the base repository, at the fork's head


def test_dry_run_records_the_review_writes(campaign_pr) -> None:
    double, _ = campaign_pr
    rec = RecordingGitHub(port(double))
    review_pull(rec, RepoConfig(), 2, git=GIT)
    assert [w.op for w in rec.writes] == ["create_check_run", "create_review",
                                          "create_issue_comment", "update_check_run"]
    assert double.writes() == []


# ------------------------------------------------------------------ evidence through git


def _sums(files: dict[str, bytes]) -> str:
    import hashlib

    return "".join(f"{hashlib.sha256(b).hexdigest()}  {p}\n" for p, b in sorted(files.items()))


def test_large_files_are_verified_and_lfs_pointers_are_external(github_double) -> None:
    import hashlib
    import os

    big = os.urandom(3 * 1024 * 1024)  # the contents API served 1 MB at most
    video = os.urandom(1000)
    pointer = (f"version https://git-lfs.github.com/spec/v1\noid sha256:"
               f"{hashlib.sha256(video).hexdigest()}\nsize {len(video)}\n")
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {
        "campaigns/h3/outputs/big.bin": big, "campaigns/h3/outputs/video.mp4": pointer,
        "campaigns/h3/outputs/SHA256SUMS": _sums({"big.bin": big, "video.mp4": video})})
    clear_configs()
    outcome = review_pull(port(github_double), RepoConfig(), 2, git=GIT)
    (summary,) = summaries(github_double)
    base = expected_findings_of(EXAMPLE)
    assert outcome.hashes_checked == base + 1  # big.bin hashed; the video is external
    assert ("**Kept outside the repository** (Git LFS pointers: the recorded SHA-256 is "
            "listed, the content is not verifiable here): `campaigns/h3/outputs/video.mp4 "
            f"(sha256:{hashlib.sha256(video).hexdigest()[:12]}..., 1000 bytes, Git LFS)`.") in \
        summary
    assert "Not verified" not in summary
    assert not [p for p in outcome_findings(github_double) if "outputs/" in p]
    assert not [c for c in github_double.calls if "/contents/" in c.path and
                c.path != "/repos/Codertocat/Hello-World/contents/.github/campaign-bot.toml"]
    assert outcome.head_sha == pull.head_sha


def expected_findings_of(root: Path) -> int:
    return analyse_directory(root)[0]


def outcome_findings(double) -> list[str]:
    return [c["path"] for c in double.repo(REPO).review_comments.values()]


def test_a_fetch_failure_is_said_in_the_check_run_and_the_summary(campaign_pr) -> None:
    double, pull = campaign_pr
    double.inject("POST", f"/{REPO}.git/git-upload-pack", 500, times=10,
                  message="upstream unavailable")
    outcome = review_pull(port(double), RepoConfig(), 2, git=GIT)
    assert outcome.unread and outcome.conclusion == "failure"
    (run,) = check_runs(double)
    assert (run["status"], run["conclusion"], run["output"]["title"]) == (
        "completed", "failure", "Evidence not read")
    assert run["output"]["summary"].startswith(
        "The evidence was not read, so nothing was checked: git fetch failed: ")
    (summary,) = summaries(double)
    assert f"Commit {pull.head_sha[:7]}: **the evidence was not read, so nothing was " \
        "checked.** git fetch failed: " in summary
    assert double.repo(REPO).reviews == {}  # nothing was claimed about the evidence
    # the next attempt (a push, /campaign verify) reads it and says what it found
    double.faults.clear()
    outcome = review_pull(port(double), RepoConfig(), 2, git=GIT)
    assert outcome.unread is None and outcome.hashes_checked > 0
    (summary,) = summaries(double)
    assert "was not read" not in summary


def test_a_campaign_over_the_limit_is_not_checked_and_says_why(campaign_pr,
                                                               tmp_path) -> None:
    from bot.github.git import GitMirrors

    double, _ = campaign_pr
    small = GitMirrors(tmp_path / "git", max_campaign_bytes=1000)
    outcome = review_pull(port(double), RepoConfig(), 2, git=small)
    assert outcome.conclusion == "failure" and outcome.hashes_checked == 0
    (summary,) = summaries(double)
    assert "**`campaigns/h3` was not checked:** campaigns/h3 at " in summary
    assert "over the per-campaign limit of 1000 bytes (CAMPAIGN_BOT_GIT_MAX_CAMPAIGN_BYTES)" \
        in summary
    (run,) = check_runs(double)
    assert run["output"]["title"] == "Evidence not checked in 1 campaign(s)"


def test_a_delivery_saves_the_pull_read_and_a_stale_one_is_read_again(campaign_pr
                                                                             ) -> None:
    double, pull = campaign_pr
    start = len(double.calls)
    router.dispatch(pr_event(2, pull.head_sha), port(double), RepoConfig())
    rest = [c.operation for c in double.calls[start:] if not c.is_git]
    assert "pulls/get" not in rest  # the delivery described the PR
    assert check_runs(double)[0]["head_sha"] == pull.head_sha
    # a delivery whose head no longer exists anywhere: the PR is read from GitHub
    stale = pr_event(2, "f" * 40, "synchronize", delivery="d-stale")
    start = len(double.calls)
    router.dispatch(stale, port(double), RepoConfig())
    assert "pulls/get" in [c.operation for c in double.calls[start:] if not c.is_git]
    assert all(r["head_sha"] == pull.head_sha for r in check_runs(double))


def test_an_over_long_name_beside_a_forged_receipt_does_not_stop_the_review(
        github_double) -> None:
    """A campaign file whose name is over 255 bytes (ENAMETOOLONG if written) next to an
    edited status: the review is still posted, the check run completes, and the long name is
    listed as not written."""
    long_name = "campaigns/h3/" + "n" * 300 + ".json"
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {STATUS: bad_status(), long_name: "{}\n"},
                                  user="dave")
    clear_configs()
    results = router.dispatch(pr_event(2, pull.head_sha), port(github_double), RepoConfig())
    assert all(r.ok for r in results), results
    (run,) = check_runs(github_double)
    assert (run["status"], run["conclusion"]) == ("completed", "failure")
    (review,) = github_double.repo(REPO).reviews.values()
    assert review["commit_id"] == pull.head_sha
    (summary,) = summaries(github_double)
    assert "n" * 40 in summary and "over 255 bytes" in summary


def _stored_bytes(mirror: Path) -> int:
    return sum(p.stat().st_size for p in (mirror / "objects").rglob("*") if p.is_file())


def test_a_huge_file_beside_a_campaign_change_is_never_fetched(github_double) -> None:
    """A fork's PR edits a campaign file and adds 8 MiB of random bytes outside every
    campaign: the head comes without file contents (a partial fetch through real git and
    ``git http-backend``), only the campaign folder's contents are fetched, the huge file is
    listed and never fetched nor diffed, and the review of the campaign still runs."""
    import os
    import subprocess

    huge = os.urandom(8 << 20)
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {STATUS: bad_status(), "blob/huge.bin": huge},
                                  fork="evil/Hello-World")
    mirror = GIT.path(REPO)
    before = _stored_bytes(mirror) if mirror.is_dir() else 0
    outcome = review_pull(port(github_double), RepoConfig(), 2, git=GIT)
    assert outcome.head_sha == pull.head_sha and outcome.campaigns == ["campaigns/h3"]
    assert outcome.problem_count >= 1  # the edited status was read and checked
    oid = subprocess.run(["git", "hash-object", "--stdin"], input=huge, capture_output=True,
                         check=True).stdout.decode().strip()
    listed = subprocess.run(["git", "-C", str(mirror), "rev-list", "--objects",
                             "--missing=print", pull.head_sha], capture_output=True,
                            check=True).stdout.decode().split()
    assert f"?{oid}" in listed  # known by name, left on the server
    assert _stored_bytes(mirror) - before < 1 << 20


def test_a_full_fetch_brings_the_files_of_a_commit_first_fetched_partially(
        github_double) -> None:
    """A PR's head comes without its files (a partial fetch); when that commit later becomes
    the default branch (a fast-forward merge), the default branch's full fetch must bring its
    files: git's negotiation tells the server the mirror has that commit, so the server
    sends none of its objects, and a read of the default branch failed on a missing file."""
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(REPO, 2, {STATUS: bad_status(),
                                            "notes/merged.txt": "merged by fast-forward\n"})
    remote = port(github_double).git_remote()
    assert remote is not None
    GIT.fetch(remote, REPO, ["refs/pull/2/head"], blobs=False)
    with github_double._lock:
        github_double.repos[REPO].refs["main"] = pull.head_sha  # the PR merged, fast-forward
    refs = GIT.fetch(remote, REPO, ["refs/heads/main"])
    assert refs["refs/heads/main"] == pull.head_sha
    assert GIT.read_file(REPO, pull.head_sha, "notes/merged.txt") == b"merged by fast-forward\n"
    assert GIT.read_file(REPO, pull.head_sha, STATUS) == bad_status().encode()
