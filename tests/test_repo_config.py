"""``.github/campaign-bot.toml``: strict parsing, exact error messages, default branch only,
cache, and the validation comment on PRs that change it."""

from __future__ import annotations

import pytest
from github_helpers import BOT, REPO, port, pr_event, router

from bot.repo_config import CONFIG_PATH, RepoConfigs, parse

GOOD = """\
[campaigns]
paths = ["campaigns/*"]

[screen]
workflow = "campaign-screen.yml"
allowed = ["alice"]
"""


def test_good_config() -> None:
    cfg, problems = parse(GOOD)
    assert problems == [] and cfg is not None
    assert cfg.screen.allowed == ["alice"] and cfg.review.enabled


@pytest.mark.parametrize("text,expected", [
    ("[screen]\nworkflw = 'x.yml'\n",
     ".github/campaign-bot.toml line 2, `screen.workflw`: unknown key; allowed here: "
     "workflow, allowed, allow_requesters"),
    ("[screen]\nworkflow = 'screen.sh'\n",
     ".github/campaign-bot.toml line 2, `screen.workflow`: String should match pattern"),
    ("[screen]\nallowed = ['alice']\n\n[pools.a]\nrunner_labels = ['self-hosted']\n",
     ".github/campaign-bot.toml line 4, `pools`: is no longer read: runner labels come from "
     "the campaign's campaign.toml [pool] runner_labels"),
    ("[campaigns]\npaths = ['../other']\n",
     ".github/campaign-bot.toml line 2, `campaigns.paths`: '../other' must be a relative path"),
    ("[screeen]\n", ".github/campaign-bot.toml line 1, `screeen`: unknown key; allowed here: "
                    "campaigns, screen, review"),
    ("[screen\nworkflow = 1\n", ".github/campaign-bot.toml line 1, not valid TOML"),
], ids=["typo-key", "bad-workflow", "old-pools", "escaping-path", "typo-section", "toml"])
def test_broken_config_says_what_to_fix(text: str, expected: str) -> None:
    cfg, problems = parse(text)
    assert cfg is None
    assert str(problems[0]).startswith(expected), str(problems[0])


def test_read_from_default_branch_only_and_cached(github_double) -> None:
    github_double.add_repo(REPO, {CONFIG_PATH: GOOD})
    github_double.add_pull(REPO, 2, {CONFIG_PATH: GOOD.replace("alice", "mallory")})
    configs = RepoConfigs()
    gh = port(github_double)
    loaded = configs.load(gh)
    assert loaded.present and loaded.ref == "main" and loaded.config.screen.allowed == ["alice"]
    n = len(github_double.calls)
    assert (configs.load(gh)).config is loaded.config  # cached: no request
    assert len(github_double.calls) == n
    github_double.set_branch(REPO, "main", {CONFIG_PATH: "[screen]\nbad = 1\n"}, parent="main")
    fresh = configs.load(gh, use_cache=False)
    assert fresh.config is None and "bad" in str(fresh.problems[0])


def test_absent_config_means_defaults(github_double) -> None:
    github_double.add_repo(REPO, {"README.md": "x"})
    loaded = RepoConfigs().load(port(github_double))
    assert not loaded.present and loaded.config.campaigns.paths == ["campaigns/*"]


def test_pr_changing_config_gets_one_validation_comment(github_double) -> None:
    github_double.add_repo(REPO, {CONFIG_PATH: GOOD})
    pull = github_double.add_pull(REPO, 2, {CONFIG_PATH: "[screen]\nworkflw = 'x.yml'\n"})
    gh = port(github_double)
    cfg, _ = parse(GOOD)
    results = router.dispatch(pr_event(2, pull.head_sha), gh, cfg)
    assert all(r.ok for r in results), results
    assert github_double.write_summary() == [
        ("issues/create-comment", f"/repos/{REPO}/issues/2/comments")]
    (c,) = github_double.repo(REPO).comments.values()
    assert c["user"] == BOT and "<!-- campaign-bot:config pr=2 -->" in c["body"]
    assert "line 2, `screen.workflw`: unknown key" in c["body"] and "not valid" in c["body"]
    # the fix is pushed: the same comment is edited, not a second one posted
    fixed = GOOD + '\n[review]\nmax_inline_comments = 10\n'
    sha = github_double.push(REPO, 2, {CONFIG_PATH: fixed})
    router.dispatch(pr_event(2, sha, "synchronize"), gh, cfg)
    assert [w[0] for w in github_double.write_summary()] == [
        "issues/create-comment", "issues/update-comment"]
    (c,) = github_double.repo(REPO).comments.values()
    assert "is valid" in c["body"] and "takes effect once this PR is merged" in c["body"]
    # redelivered: unchanged, not rewritten
    router.dispatch(pr_event(2, sha, "synchronize"), gh, cfg)
    assert len(github_double.writes()) == 2
    # a later push reverts the change: the comment says so
    sha = github_double.push(REPO, 2, {CONFIG_PATH: GOOD})
    router.dispatch(pr_event(2, sha, "synchronize"), gh, cfg)
    (c,) = github_double.repo(REPO).comments.values()
    assert "no longer changes" in c["body"] and len(github_double.writes()) == 3
