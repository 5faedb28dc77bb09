"""GitHub's "Re-run" link on the ``campaign-bot/evidence`` check run (``check_run``
rerequested) and "Re-run all checks" on its suite (``check_suite`` rerequested), through the
composed router against the GitHub double (PyGithub over HTTP): the review runs again as
``/campaign verify`` by the clicker; an unauthorised click and a click on an older head's
run are refused in the check run."""

from __future__ import annotations

import copy

import pytest
from github_helpers import (
    REPO,
    clear_configs,
    example_files,
    fixture,
    port,
    pr_event,
    router,
)

from bot.features.review.review import CHECK_NAME
from bot.inbox.router import Event
from bot.repo_config import RepoConfig

P = f"/repos/{REPO}"
STATUS = "campaigns/h3/results/status.json"


@pytest.fixture
def reviewed(github_double):
    """PR #2 reviewed once, but its check run left in progress: GitHub answered its last
    update 500 (the kind of run a person re-runs)."""
    d = github_double
    d.add_repo(REPO, example_files())
    pull = d.add_pull(REPO, 2, {STATUS: "{}\n"}, user="dave")
    d.set_permission(REPO, "eve", "read")
    clear_configs()
    d.inject("PATCH", f"{P}/check-runs/*", 500)
    results = router.dispatch(pr_event(2, pull.head_sha), port(d), RepoConfig())
    assert not all(r.ok for r in results)
    d.faults.clear()
    (run,) = d.repo(REPO).check_runs.values()
    assert (run["status"], run["external_id"]) == ("in_progress", "pull/2")
    return d, pull, run


def rerequest(d, run: dict, login: str, *, suite: bool = False) -> list:
    if suite:
        p = copy.deepcopy(fixture("webhooks/check_suite/rerequested.payload.json"))
        p["check_suite"]["head_sha"] = run["head_sha"]
        p["check_suite"]["pull_requests"] = []
        name = "check_suite"
    else:
        p = copy.deepcopy(fixture("webhooks/check_run/rerequested.payload.json"))
        p["check_run"].update(id=run["id"], name=run["name"], head_sha=run["head_sha"],
                              external_id=run["external_id"], pull_requests=[])
        name = "check_run"
    p["action"] = "rerequested"
    p["repository"]["full_name"] = REPO
    p["sender"].update(login=login, type="User")
    results = router.dispatch(Event(f"re-{login}-{suite}", name, p), port(d), RepoConfig())
    assert all(r.ok for r in results), results
    return results


def test_the_rerun_link_completes_the_review(reviewed) -> None:
    d, pull, run = reviewed
    n = len(d.writes())
    rerequest(d, run, "eve")  # read permission, not the author: refused in the check run
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{run['id']}")]
    assert run["output"]["text"].startswith("**Re-run** by @eve was refused: @eve may not "
                                            "re-run this check (permission read)")
    assert run["status"] == "in_progress"
    rerequest(d, run, "dave")  # the PR's author may, as with /campaign verify
    assert (run["name"], run["status"], run["conclusion"]) == (CHECK_NAME, "completed",
                                                               "failure")
    assert len(d.repo(REPO).check_runs) == 1 and len(d.repo(REPO).reviews) == 1
    n = len(d.writes())
    rerequest(d, run, "dave")  # again: everything is already said
    assert d.writes()[n:] == []


def test_rerun_all_checks_of_the_suite_reviews_the_pull(reviewed) -> None:
    d, pull, run = reviewed
    rerequest(d, run, "dave", suite=True)
    assert (run["status"], run["conclusion"]) == ("completed", "failure")


def test_a_rerun_of_an_older_head_is_refused(reviewed) -> None:
    d, pull, run = reviewed
    new = d.push(REPO, 2, {STATUS: "{ }\n"})
    n = len(d.writes())
    rerequest(d, run, "dave")
    assert d.write_summary()[n:] == [("checks/update", f"{P}/check-runs/{run['id']}")]
    assert (f"this check run is for {run['head_sha'][:12]}, but the PR head is now "
            f"{new[:12]}") in run["output"]["text"]
    assert run["status"] == "in_progress"
