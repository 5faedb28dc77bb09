"""The GitHub double itself: URL rewriting, pagination, diff-hunk 422s, drift detection."""

from __future__ import annotations

import re

import pytest
from github import Auth, Github
from github_helpers import REPO, port

from sandbox.github_double import GitHubDouble
from sandbox.github_double.server import hunks_of


def _gh(double: GitHubDouble, lazy: bool = False) -> Github:
    return Github(base_url=double.base_url, auth=Auth.Token("test-token"), retry=None,
                  seconds_between_requests=None, seconds_between_writes=None, lazy=lazy)


def test_no_api_github_com_url_leaks(github_double) -> None:
    github_double.add_repo(REPO, {"a.txt": "1\n"})
    github_double.add_pull(REPO, 2, {"a.txt": "2\n"})
    repo = _gh(github_double).get_repo(REPO)  # non-lazy: follows url fields
    pr = repo.get_pull(2)
    pr.as_issue().create_comment("x").edit("y")  # PATCHes the url the double returned
    for c in github_double.calls:
        assert "api.github.com" not in repr(c.response)


def test_pagination_with_link_headers(github_double) -> None:
    github_double.add_repo(REPO, {"a.txt": "1\n"})
    github_double.add_issue(REPO, 7)
    for i in range(130):
        github_double.add_comment(REPO, 7, f"c{i}")
    comments = list(_gh(github_double).get_repo(REPO).get_issue(7).get_comments())
    assert [c.body for c in comments] == [f"c{i}" for i in range(130)]
    pages = [c for c in github_double.calls if c.path.endswith("/issues/7/comments")]
    assert len(pages) >= 2


@pytest.mark.parametrize(
    "patch,ranges",
    [
        ("@@ -1 +1,2 @@\n a\n+b", [(range(1, 2), range(1, 3))]),
        ("@@ -0,0 +1,3 @@\n+a\n+b\n+c", [(range(0, 0), range(1, 4))]),
        ("@@ -5,3 +5,4 @@\n x\n@@ -40,2 +41,0 @@", [(range(5, 8), range(5, 9)),
                                                   (range(40, 42), range(41, 41))]),
        (None, []),
    ],
    ids=["modified", "added", "two-hunks", "binary"],
)
def test_hunk_parsing(patch, ranges) -> None:
    assert hunks_of(patch) == ranges


def test_review_comment_rules_like_github(github_double) -> None:
    lines = "".join(f"line {i}\n" for i in range(1, 41))
    github_double.add_repo(REPO, {"f.txt": lines})
    github_double.add_pull(REPO, 2, {"f.txt": lines.replace("line 20\n", "LINE 20\n")})
    repo = _gh(github_double, lazy=True).get_repo(REPO)
    pr = repo.get_pull(2)
    commit = repo.get_commit(pr.head.sha)  # lazy: no GET /commits/{sha} (not in the subset)

    def review(comments):
        return pr.create_review(commit=commit, body="b", event="COMMENT", comments=comments)

    review([{"path": "f.txt", "line": 20, "side": "RIGHT", "body": "in hunk"}])
    review([{"path": "f.txt", "line": 18, "start_line": 17, "side": "RIGHT", "body": "range"}])
    bad = [
        ({"path": "f.txt", "line": 2, "side": "RIGHT", "body": "x"}, "part of the diff"),
        ({"path": "nope.txt", "line": 20, "body": "x"}, "could not be resolved"),
        ({"path": "f.txt", "line": 20, "start_line": 20, "body": "x"}, "precede"),
    ]
    for comment, msg in bad:
        with pytest.raises(Exception, match=msg):
            review([{"path": "f.txt", "line": 20, "body": "ok"}, comment])
    # all or nothing: the failed reviews left nothing behind
    assert len(github_double.repo(REPO).reviews) == 2
    assert len(github_double.repo(REPO).review_comments) == 2


def test_comment_body_limit(github_double) -> None:
    github_double.add_repo(REPO, {"a": "1"})
    github_double.add_issue(REPO, 3)
    with pytest.raises(Exception, match="too long"):
        port(github_double).create_issue_comment(3, "x" * 65537)


def test_drift_is_detected(github_double) -> None:
    api = github_double.openapi
    assert api.validate("GET", "/repos/o/r/issues/1", 200, {"number": "one"}, None)
    assert api.validate("GET", "/repos/o/r/branches", 200, [], None)  # not in the subset
    assert api.validate("POST", "/repos/o/r/check-runs", 200, {}, None)  # wrong status
    assert not api.validate("GET", "/repos/o/r/issues/1", 200, api.example("issue"), None)


def test_unauthenticated_requests_are_refused(github_double) -> None:
    github_double.add_repo(REPO, {"a": "1"})
    gh = Github(base_url=github_double.base_url, auth=Auth.Token("wrong"), retry=None)
    with pytest.raises(Exception, match="Bad credentials"):
        gh.get_repo(REPO)


def test_every_route_is_a_rest_operation_or_a_listed_web_page(github_double) -> None:
    """REST routes are operations of openapi-subset.json (the run cancel excepted, listed as
    unvalidated); github.com's web pages are listed in WEB_ROUTES and are none of them."""
    from sandbox.github_double.server import ROUTES, UNVALIDATED_PATH, WEB_PATH, WEB_ROUTES

    api = github_double.openapi
    for method, template, _name in ROUTES:
        path = re.sub(r"\{[^}]+\}", "x1", template)
        assert api.match(method, path) is not None or UNVALIDATED_PATH.match(
            path.replace("x1", "1")), (method, template)
    samples = {"/settings/apps/new", "/settings/apps/new/confirm",
               "/organizations/o/settings/apps/new", "/login/oauth/authorize",
               "/login/oauth/access_token"}
    for path in samples:
        assert WEB_PATH.match(path), path
        for method in ("GET", "POST"):
            assert api.match(method, path) is None, path
    assert {m for methods, _p, _w in WEB_ROUTES for m in methods.split()} <= {"GET", "POST"}
    assert all(w for _m, _p, w in WEB_ROUTES)
