"""The GitHub double speaks git: real ``git`` clients fetch and push over smart HTTP
(``git http-backend``), authenticated with the tokens the double issues, and the REST side
and the git side of a repository stay one state (sandbox/github_double/git_http.py)."""

from __future__ import annotations

import base64
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest
from github_helpers import REPO, port

from sandbox.github_double.server import Request

ZERO = "0" * 40


def git(cwd: Path, *args: str, token: str | None = "test-token",
        check: bool = True) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_TERMINAL_PROMPT": "0", "GIT_AUTHOR_NAME": "Pat", "GIT_AUTHOR_EMAIL": "p@x.invalid",
           "GIT_COMMITTER_NAME": "Pat", "GIT_COMMITTER_EMAIL": "p@x.invalid"}
    if token is not None:
        basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
        env.update(GIT_CONFIG_COUNT="1", GIT_CONFIG_KEY_0="http.extraHeader",
                   GIT_CONFIG_VALUE_0=f"Authorization: Basic {basic}")
    res = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True,
                         timeout=60, check=False)
    if check:
        assert res.returncode == 0, res.stderr
    return res


def test_clone_matches_the_rest_state_and_pull_refs_are_served(github_double: Any,
                                                                tmp_path: Path) -> None:
    d = github_double
    d.add_repo(REPO, {"campaigns/h3/campaign.toml": "id = 'h3'\n", "README.md": "hi\n"})
    pull = d.add_pull(REPO, 2, {"campaigns/h3/results/a.json": "{}\n"})
    git(tmp_path, "clone", "-q", d.git_url(REPO), "c")
    c = tmp_path / "c"
    assert (c / "campaigns/h3/campaign.toml").read_text() == "id = 'h3'\n"
    head = git(c, "rev-parse", "HEAD").stdout.strip()
    assert head == d.repo(REPO).refs["main"]  # REST SHAs are git SHAs
    git(c, "fetch", "-q", "origin", "refs/pull/2/head:pr2")
    assert git(c, "rev-parse", "pr2").stdout.strip() == pull.head_sha
    assert git(c, "show", "pr2:campaigns/h3/results/a.json").stdout == "{}\n"
    assert git(c, "rev-parse", "pr2^").stdout.strip() == head  # the PR's parent: the base
    # the contents API names the same blob and tree objects git has
    blob = git(c, "rev-parse", "HEAD:campaigns/h3/campaign.toml").stdout.strip()
    tree = git(c, "rev-parse", "HEAD:campaigns/h3").stdout.strip()
    gh = port(d)
    listing = gh.list_dir("campaigns/h3", "main")
    assert {e.path: e.sha for e in listing}["campaigns/h3/campaign.toml"] == blob
    assert {e.path: e.sha for e in gh.list_dir("campaigns", "main")}[
        "campaigns/h3"] == tree
    ops = [c.operation for c in d.calls if c.is_git]
    assert "git-info-refs" in ops and "git-upload-pack" in ops
    assert not [c for c in d.writes() if c.is_git]  # fetches are not writes


@pytest.mark.parametrize("token", [None, "ghs_not_issued"])
def test_git_refuses_without_a_valid_token(github_double: Any, tmp_path: Path,
                                           token: str | None) -> None:
    github_double.add_repo(REPO, {"a.txt": "a\n"})
    res = git(tmp_path, "clone", "-q", github_double.git_url(REPO), "c", token=token,
              check=False)
    assert res.returncode != 0
    assert "401" in res.stderr or "Authentication failed" in res.stderr or \
        "could not read Username" in res.stderr
    assert [c.status for c in github_double.calls if c.is_git] == [401]


def test_unknown_repository_is_404(github_double: Any, tmp_path: Path) -> None:
    res = git(tmp_path, "ls-remote", github_double.git_url("octo/nothing"), check=False)
    assert res.returncode != 0 and "not found" in res.stderr.lower()


def test_a_push_moves_the_branch_the_pull_and_fires_the_push_hooks(github_double: Any,
                                                                   tmp_path: Path) -> None:
    d = github_double
    d.add_repo(REPO, {"campaigns/h3/campaign.toml": "id = 'h3'\n"})
    pull = d.add_pull(REPO, 2, {"campaigns/h3/NOTES.md": "n\n"}, head_ref="topic")
    old = pull.head_sha
    seen: list[tuple[str, list[tuple[str, str, str]], str]] = []
    fired = threading.Event()

    def hook(double: Any, full: str, updates: list[tuple[str, str, str]], login: str) -> None:
        seen.append((full, updates, login))
        fired.set()

    d.push_hooks.append(hook)
    # an installation token
    token = d._op_access_token(Request("POST", "", {}, {}, b""), "1")[1]["token"]
    git(tmp_path, "clone", "-q", "-b", "topic", d.git_url(REPO), "c", token=token)
    c = tmp_path / "c"
    big = os.urandom(3 << 20)  # over git's 1 MiB post buffer: a chunked request body
    (c / "campaigns/h3/screens").mkdir(parents=True)
    (c / "campaigns/h3/screens/out.bin").write_bytes(big)
    git(c, "add", "-A")
    git(c, "commit", "-q", "-m", "screen S1")
    new = git(c, "rev-parse", "HEAD").stdout.strip()
    git(c, "push", "-q", "origin", "topic", "HEAD:refs/heads/campaign-bot/screens/PR-2",
        token=token)
    assert fired.wait(10)
    repo = d.repo(REPO)
    assert repo.refs["topic"] == new and repo.refs["campaign-bot/screens/PR-2"] == new
    assert repo.trees[new]["campaigns/h3/screens/out.bin"] == big
    assert pull.head_sha == new  # the PR follows its head branch
    assert {f["filename"] for f in pull.files} == {"campaigns/h3/NOTES.md",
                                                   "campaigns/h3/screens/out.bin"}
    full, updates, login = seen[0]
    assert (full, login) == (REPO, "campaign-bot[bot]")
    assert sorted(updates) == [("refs/heads/campaign-bot/screens/PR-2", ZERO, new),
                               ("refs/heads/topic", old, new)]
    # the REST API shows the pushed commit
    gh = port(d)
    assert gh.get_pull(2).head_sha == new
    listing = gh.list_dir("campaigns/h3/screens", "topic")
    assert [(e.path, e.size) for e in listing] == [("campaigns/h3/screens/out.bin", len(big))]
    assert [c.operation for c in d.writes()] == ["git-receive-pack"]
    # and git serves refs/pull/2/head at the new head
    out = git(c, "ls-remote", d.git_url(REPO), "refs/pull/2/head", token=token).stdout
    assert out.split()[0] == new


def test_rest_changes_show_in_git(github_double: Any, tmp_path: Path) -> None:
    d = github_double
    d.add_repo(REPO, {"a.txt": "a\n"})
    d.add_pull(REPO, 3, {"b.txt": "b\n"})
    git(tmp_path, "clone", "-q", d.git_url(REPO), "c")
    c = tmp_path / "c"
    sha = d.push(REPO, 3, {"b.txt": "b2\n"})
    git(c, "fetch", "-q", "origin", "refs/pull/3/head")
    assert git(c, "rev-parse", "FETCH_HEAD").stdout.strip() == sha
    assert git(c, "show", "FETCH_HEAD:b.txt").stdout == "b2\n"
    # a non-fast-forward push is refused by the client unless forced; the bot never forces
    (c / "x.txt").write_text("x\n")
    git(c, "add", "-A")
    git(c, "commit", "-q", "-m", "x")
    res = git(c, "push", "origin", "HEAD:refs/heads/topic", check=False)
    assert res.returncode != 0 and "rejected" in res.stderr
    assert d.repo(REPO).refs["topic"] == sha
