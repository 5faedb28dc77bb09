"""Review findings as check-run annotations, against the GitHub double over HTTP (PyGithub):
a PR whose evidence has 120 findings gets 120 annotations on the evidence files' lines, sent
in three requests of at most 50 (the Checks API's limit), each with its rule, level and fix;
a redelivery sends none again, and a delivery that failed half-way resumes where it stopped.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from github_helpers import EXAMPLE, GIT, REPO, clear_configs, example_files, port, pr_event, router

from bot.features.review.review import (
    ANNOTATION_LEVELS,
    CHECK_NAME,
    analyse_directory,
    place,
    review_pull,
)
from bot.github import GitHubRetryableError
from bot.repo_config import RepoConfig

P = f"/repos/{REPO}"
BUNDLES = sorted(p.name for p in (EXAMPLE / "bundles").iterdir())
MISSING = (20, 20, 20, 20, 18)
"""Manifest lines naming files that are not in each bundle: with the example's own 17
findings and one tag-manifest mismatch per changed bundle, 120 findings in all."""


def manifest_changes() -> dict[str, str]:
    """Each bundle's ``manifest-sha256.txt`` with lines for files it does not have."""
    out = {}
    for bundle, n in zip(BUNDLES, MISSING, strict=True):
        rel = f"bundles/{bundle}/manifest-sha256.txt"
        text = (EXAMPLE / rel).read_text() + "".join(
            f"{i:064x}  data/missing-{i}.json\n" for i in range(n))
        out[rel] = text
    return out


def expected(tmp_path: Path) -> list:
    """The findings the evidence code gives for the changed campaign (computed locally)."""
    root = tmp_path / "copy"
    shutil.copytree(EXAMPLE, root)
    for rel, text in manifest_changes().items():
        (root / rel).write_text(text)
    _hashes, findings, _rows = analyse_directory(root)
    return place("campaigns/h3", findings)


@pytest.fixture
def pr120(github_double):
    github_double.add_repo(REPO, example_files())
    pull = github_double.add_pull(
        REPO, 2, {f"campaigns/h3/{rel}": text for rel, text in manifest_changes().items()})
    clear_configs()
    return github_double, pull


def annotation_patches(double) -> list[list[dict]]:
    """The annotations each successful check-run update sent, in order."""
    return [c.request["output"]["annotations"] for c in double.calls
            if c.operation == "checks/update" and c.status == 200
            and "annotations" in (c.request.get("output") or {})]


def test_120_findings_become_120_annotations_in_three_requests(pr120, tmp_path) -> None:
    double, pull = pr120
    placed = expected(tmp_path)
    assert len(placed) == 120
    results = router.dispatch(pr_event(2, pull.head_sha), port(double), RepoConfig())
    assert all(r.ok for r in results), results
    (run,) = double.repo(REPO).check_runs.values()
    assert (run["name"], run["head_sha"], run["status"], run["conclusion"]) == (
        CHECK_NAME, pull.head_sha, "completed", "failure")
    assert [len(batch) for batch in annotation_patches(double)] == [50, 50, 20]
    got = run["annotations"]
    assert len(got) == 120
    # one annotation per finding, on its file and line, with its rule, level and fix
    want = sorted(
        (p.repo_path, p.line or 1, ANNOTATION_LEVELS[p.finding.severity],
         f"{p.finding.severity} {p.finding.rule}", p.finding.message) for p in placed)
    have = sorted((a["path"], a["start_line"], a["annotation_level"], a["title"],
                   a["message"].split("\n\nFix: ")[0]) for a in got)
    assert have == want
    assert all(a["start_line"] == a["end_line"] for a in got)
    fixes = {p.finding.resolution for p in placed if p.finding.resolution}
    assert fixes and all(
        a["message"].split("\n\nFix: ")[1] in fixes for a in got if "\n\nFix: " in a["message"])
    assert {a["annotation_level"] for a in got} >= {"failure", "warning", "notice"}
    missing = [a for a in got if "missing-" in a["message"]]
    assert missing and all(a["path"].endswith("/manifest-sha256.txt") and a["start_line"] > 1
                           for a in missing)
    # the answer GitHub gives counts them, and the summary records them
    last = [c for c in double.calls if c.operation == "checks/update"][-1]
    assert last.response["output"]["annotations_count"] == 120
    assert "campaign-bot:annotations" in run["output"]["summary"]
    assert "sent=120" in run["output"]["summary"]

    n = len(double.writes())  # GitHub redelivers: nothing is sent again
    results = router.dispatch(pr_event(2, pull.head_sha), port(double), RepoConfig())
    assert all(r.ok for r in results) and len(double.writes()) == n
    assert len(run["annotations"]) == 120


def test_a_delivery_failed_half_way_resumes_without_duplicates(pr120) -> None:
    double, pull = pr120
    # the second batch is stored, then GitHub answers 502: the delivery fails
    gh = port(double)
    calls = {"n": 0}
    real = gh.update_check_run

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            double.inject("PATCH", f"{P}/check-runs/*", 502, after_write=True)
        return real(*args, **kwargs)

    gh.update_check_run = flaky  # type: ignore[method-assign]
    with pytest.raises(GitHubRetryableError):
        review_pull(gh, RepoConfig(), 2, git=GIT)
    (run,) = double.repo(REPO).check_runs.values()
    assert len(run["annotations"]) == 100 and run["status"] == "in_progress"
    review_pull(port(double), RepoConfig(), 2, git=GIT)  # the delivery's retry
    assert len(run["annotations"]) == 120 and run["status"] == "completed"
    keys = [(a["path"], a["start_line"], a["title"], a["message"]) for a in run["annotations"]]
    assert len(set(keys)) == 120
    assert [len(b) for b in annotation_patches(double)] == [50, 20]  # 50 + (50 lost) + 20
