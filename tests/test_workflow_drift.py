"""The bot warns on the campaign issue when the repository's screen workflow differs from the
template of the running campaign-bot, and says so again when it matches."""

from __future__ import annotations

import copy
from typing import Any

from github_helpers import APP, BOT, REPO, clear_configs, fixture, port, router

from bot.inbox.router import Event
from bot.repo_config import RepoConfig
from bot.scaffold import workflow_template

WF = ".github/workflows/screen.yml"
CAMPAIGN = ("schema = 'campaign-bot/campaign@1'\nid = 'h3'\ntitle = 't'\nissue = 9\n"
            "requesters = ['amy']\nimage_digest = 'sha256:" + "1" * 64 + "'\n")


def push_event(after: str, touched: list[str], delivery: str = "d-push") -> Event:
    p = copy.deepcopy(fixture("webhooks/push/payload.json"))
    p.update(ref="refs/heads/main", after=after, deleted=False,
             commits=[{"id": after, "added": [], "modified": touched, "removed": []}])
    p["repository"]["default_branch"] = "main"
    return Event(delivery, "push", p)


def _campaign_files(workflow: bytes) -> dict[str, Any]:
    # a campaign.toml that names its issue; the rest of the scope is irrelevant here, so the
    # bundled example campaign (issue 320) supplies it
    from github_helpers import example_files

    files: dict[str, Any] = example_files("campaigns/h3")
    files[WF] = workflow
    return files


def test_a_drifted_workflow_is_flagged_on_the_campaign_issue_and_cleared(
        github_double: Any) -> None:
    clear_configs()
    d = github_double
    old = workflow_template().decode().replace("${{ fromJSON(inputs.runs_on) }}",
                                               "${{ fromJSON(vars.CAMPAIGN_BOT_POOL_LABELS) }}")
    d.add_repo(REPO, _campaign_files(old.encode()))
    d.add_issue(REPO, 320, body="campaign")
    gh = port(d)
    results = router.dispatch(push_event(d.repo(REPO).refs["main"], ["README.md"]), gh,
                              RepoConfig())
    assert all(r.ok for r in results), results
    (c,) = [c for c in d.repo(REPO).comments.values() if c["issue"] == 320]
    assert c["user"] == BOT and c["body"].startswith("<!-- campaign-bot:workflow-drift -->\n")
    assert "`.github/workflows/screen.yml` on `main`" in c["body"]
    assert "differs from the template of campaign-bot" in c["body"]
    assert "reads the CAMPAIGN_BOT_POOL_LABELS repository variable" in c["body"]
    assert "`campaign-bot init . --force`" in c["body"]
    # the same push delivered again: nothing is rewritten
    n = len(d.writes())
    router.dispatch(push_event(d.repo(REPO).refs["main"], ["README.md"], "d-2"), gh,
                    RepoConfig())
    assert len(d.writes()) == n
    # the workflow is replaced by this version's: the warning says it matches again
    sha = d.set_branch(REPO, "main", {WF: workflow_template()}, parent="main")
    router.dispatch(push_event(sha, [WF], "d-3"), gh, RepoConfig())
    assert [w.operation for w in d.writes()[n:]] == ["issues/update-comment"]
    (c,) = [c for c in d.repo(REPO).comments.values() if c["issue"] == 320]
    assert "matches the template of campaign-bot" in c["body"]


def test_a_current_workflow_costs_one_read_and_no_comment(github_double: Any) -> None:
    clear_configs()
    d = github_double
    d.add_repo(REPO, _campaign_files(workflow_template()))
    d.add_issue(REPO, 320, body="campaign")
    gh = port(d)
    from bot.features.config.drift import on_push

    start = len(d.calls)
    on_push(push_event(d.repo(REPO).refs["main"], ["README.md"]), gh, RepoConfig())
    assert [(c.method, c.operation) for c in d.calls[start:]] == [("GET", "repos/get-content")]
    assert d.writes() == []
    # a push to another branch is not looked at
    ev = push_event(d.repo(REPO).refs["main"], [WF])
    ev.payload["ref"] = "refs/heads/topic"
    start = len(d.calls)
    on_push(ev, gh, RepoConfig())
    assert d.calls[start:] == []
    assert "push" in APP.router.subscriptions()
