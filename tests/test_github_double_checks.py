"""The GitHub double's check-run annotations, buttons and labels behave as GitHub documents
them (REST "Update a check run", "Create a check run", "Create a label"): annotations are
appended per request and at most 50 per request, each with its required fields; at most three
buttons with GitHub's length limits; a label name exists once, whatever its case."""

from __future__ import annotations

import httpx
import pytest
from github_helpers import REPO, port

from bot.github import Annotation, CheckAction, GitHubValidationError

P = f"/repos/{REPO}"
AUTH = {"Authorization": "token test-token", "Accept": "application/vnd.github+json"}


def annotation(i: int) -> Annotation:
    return Annotation(f"f{i}.json", i + 1, i + 1, "warning", f"finding {i}", title=f"P2 R{i}")


@pytest.fixture
def run(github_double):
    github_double.add_repo(REPO, {"README.md": "hi\n"})
    pull = github_double.add_pull(REPO, 2, {"README.md": "hi\nthere\n"})
    gh = port(github_double)
    return github_double, gh, gh.create_check_run("c", pull.head_sha, status="in_progress")


def test_annotations_are_appended_fifty_at_most_per_request(run) -> None:
    d, gh, ck = run
    gh.update_check_run(ck.id, title="t", summary="s",
                        annotations=[annotation(i) for i in range(50)])
    gh.update_check_run(ck.id, conclusion="success", title="t", summary="s",
                        annotations=[annotation(50)])
    stored = d.repo(REPO).check_runs[ck.id]
    assert len(stored["annotations"]) == 51 and stored["status"] == "completed"
    assert d.calls[-1].response["output"]["annotations_count"] == 51
    with pytest.raises(ValueError, match="at most 50"):  # the port refuses before sending
        gh.update_check_run(ck.id, title="t", summary="s",
                            annotations=[annotation(i) for i in range(51)])
    with pytest.raises(ValueError, match="title and summary"):
        gh.update_check_run(ck.id, summary="s", annotations=[annotation(0)])
    # what GitHub answers a client that sends them anyway
    url = f"{d.base_url}{P}/check-runs/{ck.id}"
    item = annotation(0).as_json()
    for body, why in [
        ({"output": {"title": "t", "summary": "s", "annotations": [item] * 51}}, "at most 50"),
        ({"output": {"summary": "s", "annotations": [item]}}, "output.title is required"),
        ({"output": {"title": "t", "summary": "s",
                     "annotations": [{**item, "annotation_level": "error"}]}}, "invalid"),
        ({"output": {"title": "t", "summary": "s",
                     "annotations": [{k: v for k, v in item.items() if k != "path"}]}},
         "invalid"),
    ]:
        r = httpx.patch(url, json=body, headers=AUTH)
        assert r.status_code == 422 and why in r.text, (body, r.text)
    assert len(d.repo(REPO).check_runs[ck.id]["annotations"]) == 51


def test_buttons_follow_githubs_limits(run) -> None:
    d, gh, ck = run
    buttons = [CheckAction("Re-run", "Queue this screen again", "rerun"),
               CheckAction("Cancel", "Cancel the run", "cancel")]
    gh.update_check_run(ck.id, actions=buttons)
    assert [a["identifier"] for a in d.repo(REPO).check_runs[ck.id]["actions"]] == [
        "rerun", "cancel"]
    gh.update_check_run(ck.id, actions=[])
    assert d.repo(REPO).check_runs[ck.id]["actions"] == []
    too_many = [CheckAction(f"B{i}", "d", f"b{i}") for i in range(4)]
    too_long = [CheckAction("x" * 21, "d", "b")]
    for actions in (too_many, too_long):
        with pytest.raises(GitHubValidationError):
            gh.update_check_run(ck.id, actions=actions)


def test_a_label_is_created_once_and_removing_an_absent_one_is_no_error(run) -> None:
    d, gh, _ck = run
    assert gh.ensure_label("Screen:Supported", "0e8a16", "supported") is True
    assert gh.ensure_label("screen:supported", "0e8a16", "supported") is False
    assert list(d.repo(REPO).labels) == ["screen:supported"]
    gh.add_labels(2, ["screen:supported", "brand-new"])  # GitHub creates a missing one
    assert gh.get_issue(2).labels == ("Screen:Supported", "brand-new")
    gh.remove_label(2, "screen:supported")
    gh.remove_label(2, "screen:supported")  # not on the PR any more: no error
    assert gh.get_issue(2).labels == ("brand-new",)
