"""The PyGithub port against the GitHub double: retries, rate limits, 422s, dispatch, artifacts,
App auth, dry-run recording, metrics."""

from __future__ import annotations

import time
import zipfile
from io import BytesIO

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from github import Auth, GithubRetry
from github_helpers import BOT, REPO, fixture, port

from bot.app import github_context
from bot.github import (
    GitHubNotFound,
    GitHubPort,
    GitHubRetryableError,
    GitHubValidationError,
    InlineComment,
)
from bot.github.client import make_client
from bot.github.pygithub import PyGithubPort
from bot.github.recording import RecordingGitHub
from bot.inbox.router import Event
from bot.metrics import Metrics
from bot.settings import Settings


@pytest.fixture
def gh_repo(github_double):
    github_double.add_repo(REPO, {"README.md": "hello\n"})
    github_double.add_pull(REPO, 2, {"README.md": "hello\nworld\n"})
    return github_double


def _posts(double, path_suffix: str) -> list:
    return [c for c in double.calls if c.method == "POST" and c.path.endswith(path_suffix)]


def test_port_satisfies_protocol(gh_repo) -> None:
    assert isinstance(port(gh_repo), GitHubPort)
    assert isinstance(RecordingGitHub(), GitHubPort)


def test_get_is_retried_after_500(gh_repo) -> None:
    gh_repo.inject("GET", f"/repos/{REPO}/pulls/2", 500)
    pr = port(gh_repo).get_pull(2)
    assert pr.number == 2 and pr.base_ref == "main" and not pr.is_fork
    gets = [c for c in gh_repo.calls if c.path == f"/repos/{REPO}/pulls/2"]
    assert [c.status for c in gets] == [500, 200]


def test_post_is_never_resent_after_a_5xx(gh_repo) -> None:
    # GitHub stored the comment, then answered 502: a blind retry would post it twice
    gh_repo.inject("POST", f"/repos/{REPO}/issues/2/comments", 502, after_write=True)
    with pytest.raises(GitHubRetryableError) as err:
        port(gh_repo).create_issue_comment(2, "hello")
    assert err.value.status == 502 and err.value.retryable
    assert len(_posts(gh_repo, "/issues/2/comments")) == 1
    assert [c["body"] for c in gh_repo.repo(REPO).comments.values()] == ["hello"]


def test_pygithub_default_retry_would_duplicate(gh_repo) -> None:
    """The trap the port avoids: PyGithub's default GithubRetry re-sends the POST."""
    gh_repo.inject("POST", f"/repos/{REPO}/issues/2/comments", 502, after_write=True)
    auth = Auth.Token("test-token")
    client = make_client(gh_repo.base_url, auth, retry=GithubRetry(total=2, backoff_factor=0),
                         throttle=False)
    p = PyGithubPort(client, REPO, BOT, auth=auth, base_url=gh_repo.base_url)
    p.create_issue_comment(2, "hello")
    assert len(gh_repo.repo(REPO).comments) == 2  # duplicated


def test_secondary_rate_limit_on_get_waits_retry_after(gh_repo) -> None:
    gh_repo.inject("GET", f"/repos/{REPO}/pulls/2/files", 403, retry_after=1)
    t0 = time.monotonic()
    files = port(gh_repo).list_pull_files(2)
    assert time.monotonic() - t0 >= 1.0
    assert [f.filename for f in files] == ["README.md"]


def test_secondary_rate_limit_without_retry_after_waits_secondary_wait(gh_repo) -> None:
    gh_repo.inject("GET", f"/repos/{REPO}/pulls/2", 403)  # message-only secondary limit
    t0 = time.monotonic()
    port(gh_repo).get_pull(2)
    assert time.monotonic() - t0 >= 0.2  # fast_retry's secondary_rate_wait


def test_long_retry_after_is_not_slept_but_retryable(gh_repo) -> None:
    gh_repo.inject("GET", f"/repos/{REPO}/pulls/2", 429, retry_after=3600, message="slow down")
    t0 = time.monotonic()
    with pytest.raises(GitHubRetryableError) as err:
        port(gh_repo).get_pull(2)
    assert time.monotonic() - t0 < 2
    assert err.value.retry_after == 3600


def test_rate_limited_write_is_retryable_with_retry_after(gh_repo) -> None:
    gh_repo.inject("POST", f"/repos/{REPO}/issues/2/comments", 403, retry_after=30)
    with pytest.raises(GitHubRetryableError) as err:
        port(gh_repo).create_issue_comment(2, "x")
    assert err.value.retry_after == 30
    assert len(_posts(gh_repo, "/issues/2/comments")) == 1
    assert gh_repo.repo(REPO).comments == {}


def test_review_line_outside_diff_is_a_validation_error(gh_repo) -> None:
    p = port(gh_repo)
    pr = p.get_pull(2)
    with pytest.raises(GitHubValidationError, match="must be part of the diff"):
        p.create_review(2, pr.head_sha, "body", [InlineComment("README.md", 9, "x")])
    review = p.create_review(2, pr.head_sha, "body", [InlineComment("README.md", 2, "y")])
    assert review.commit_id == pr.head_sha and review.user == BOT
    (rc,) = p.list_review_comments(2)
    assert (rc.path, rc.line, rc.body) == ("README.md", 2, "y")


def test_permission_404_is_none(gh_repo) -> None:
    gh_repo.set_permission(REPO, "maint", "write")
    p = port(gh_repo)
    assert p.get_permission("maint") == "write"
    assert p.get_permission("stranger") == "none"


def test_dispatch_returns_run_details_and_raises_on_sha_ref(gh_repo) -> None:
    gh_repo.add_workflow(REPO, "campaign-screen.yml")
    p = port(gh_repo)
    res = p.dispatch_workflow("campaign-screen.yml", "main", {"request_id": "r-1"})
    assert res.run_id is not None
    run = p.get_workflow_run(res.run_id)
    assert run.status == "queued" and run.display_title == "r-1"
    sha = gh_repo.repo(REPO).refs["main"]
    with pytest.raises(GitHubValidationError):  # throw=True: never a silent False
        p.dispatch_workflow("campaign-screen.yml", sha, {})
    with pytest.raises(GitHubNotFound):
        p.dispatch_workflow("missing.yml", "main", {})


def test_artifact_download_follows_redirect_without_token(gh_repo) -> None:
    sha = gh_repo.repo(REPO).refs["main"]
    run = gh_repo.add_run(REPO, "campaign-screen.yml", sha)
    art = gh_repo.add_artifact(REPO, run["id"], "receipts", {"r.json": "{}"})
    gone = gh_repo.add_artifact(REPO, run["id"], "old", {"x": "y"}, expired=True)
    p = port(gh_repo)
    arts = p.list_run_artifacts(run["id"])
    assert {a.name for a in arts} == {"receipts", "old"}
    data = p.download_artifact(art["id"])
    assert zipfile.ZipFile(BytesIO(data)).read("r.json") == b"{}"
    assert [c.response for c in gh_repo.calls if c.path.startswith("/_blob/")] == [None]
    with pytest.raises(GitHubNotFound):
        p.download_artifact(gone["id"])
    with pytest.raises(Exception, match="exceeds"):
        p.download_artifact(art["id"], max_bytes=10)


def test_app_installation_auth_through_context_for(gh_repo) -> None:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption()).decode()
    settings = Settings(webhook_secret="s", app_id=42, private_key=pem,
                        github_api_url=gh_repo.base_url, bot_login=BOT)
    factory = github_context(settings, throttle=False)
    payload = fixture("webhooks-derived/issue_comment/created.on-pull-request.json")
    gh, config = factory(Event("d", "issue_comment", payload))
    assert config is not None and config.campaigns.paths == ["campaigns/*"]
    assert (gh.get_pull(2)).number == 2
    token_calls = [c for c in gh_repo.calls if c.path == "/app/installations/1/access_tokens"]
    assert len(token_calls) == 1 and token_calls[0].status == 201
    # the second event of the installation reuses the client and its token
    (factory(Event("d2", "issue_comment", payload)))[0].get_pull(2)
    assert len([c for c in gh_repo.calls if c.path.startswith("/app/")]) == 1


def test_context_without_credentials_is_refused() -> None:
    payload = fixture("webhooks-derived/issue_comment/created.on-pull-request.json")
    factory = github_context(Settings(webhook_secret="s"))
    with pytest.raises(Exception, match="CAMPAIGN_BOT_TOKEN"):
        factory(Event("d", "issue_comment", payload))


def test_recording_port_reads_through_and_records_writes(gh_repo) -> None:
    rec = RecordingGitHub(port(gh_repo))
    pr = rec.get_pull(2)
    c = rec.create_issue_comment(2, "would post")
    rec.create_review(2, pr.head_sha, "b", [InlineComment("README.md", 2, "x")])
    assert c.id < 0 and [w.op for w in rec.writes] == ["create_issue_comment",
                                                               "create_review"]
    assert "would post" in rec.writes[0].describe()
    assert gh_repo.writes() == []
    with pytest.raises(Exception, match="dry run"):
        RecordingGitHub(repo=REPO).get_pull(2)


def test_wrong_bot_login_setting_is_reported(gh_repo, caplog) -> None:
    p = port(gh_repo)
    p.bot_login = "someone-else[bot]"
    p.create_issue_comment(2, "x")
    assert "CAMPAIGN_BOT_BOT_LOGIN" in caplog.text and BOT in caplog.text


def test_api_calls_and_rate_limit_are_counted(gh_repo) -> None:
    metrics = Metrics()
    port(gh_repo, metrics=metrics).get_pull(2)
    snap = metrics.snapshot()
    assert snap["github_calls"] == {"GET": 1}
    assert snap["github_rate_limit_remaining"] == gh_repo.rate_remaining
