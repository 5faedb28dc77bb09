"""The GitHub App manifest is generated from what the code uses: the events the composed
handlers subscribe to, and the permissions the port's methods need.  These tests fail when a
handler listens to an event, or the port sends a REST operation, that the manifest does not
grant."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from github_helpers import REPO, port

from bot.app import ExtraHandlersError, app_manifest
from bot.github.permissions import (
    ALWAYS_DELIVERED,
    APP_AUTH_OPERATIONS,
    EVENT_PERMISSIONS,
    PORT_NEEDS,
    UnknownEvent,
    grants,
)
from bot.github.port import GitHubPort, InlineComment
from bot.github.pygithub import PyGithubPort
from bot.github.recording import RecordingGitHub
from bot.manifest import ManifestError, build_manifest, permission_table
from bot.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
URL = "https://bot.example.org"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]


def _protocol_methods(cls: type) -> set[str]:
    return {n for n, v in vars(cls).items() if inspect.isfunction(v)
            and not n.startswith("_")}


def test_the_manifest_for_a_public_url() -> None:
    m = app_manifest(Settings(), URL + "/")
    assert m == {
        "name": "campaign-bot",
        "url": URL,
        "hook_attributes": {"url": URL + "/webhook", "active": True},
        "redirect_url": URL + "/setup/callback",
        "callback_urls": [URL + "/login/callback"],
        "setup_url": URL + "/setup/installed",
        "description": m["description"],
        "public": False,
        "default_permissions": {"actions": "write", "checks": "write", "contents": "write",
                                "issues": "write", "metadata": "read",
                                "pull_requests": "write"},
        "default_events": ["check_run", "check_suite", "issue_comment", "issues",
                           "pull_request", "push", "workflow_job", "workflow_run"],
    }


def test_every_port_method_is_annotated_and_only_those() -> None:
    assert _protocol_methods(GitHubPort) == set(PORT_NEEDS)
    assert _protocol_methods(PyGithubPort) == set(PORT_NEEDS)
    assert _protocol_methods(RecordingGitHub) <= set(PORT_NEEDS)
    for name, need in PORT_NEEDS.items():
        assert need.access in ("read", "write") and need.operations, name


def test_the_manifest_grants_every_port_call_and_every_subscribed_event() -> None:
    from github_helpers import APP

    m = app_manifest(Settings(), URL)
    perms = m["default_permissions"]
    for method, need in PORT_NEEDS.items():
        assert grants(perms, need.permission, need.access), method
    for event in APP.router.subscriptions():
        if event in ALWAYS_DELIVERED:
            continue
        assert event in m["default_events"], event
        assert grants(perms, EVENT_PERMISSIONS[event], "read"), event


def test_an_extra_handler_widens_the_manifest(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """A handler added through CAMPAIGN_BOT_EXTRA_HANDLERS for check_run: the manifest now
    subscribes to it and asks for Checks (already write); one for an event whose permission
    is unknown stops the manifest instead of producing one that does not grant it."""
    (tmp_path / "extra_checks.py").write_text(textwrap.dedent("""
        def register(app):
            def on_check(event, gh, config):
                return None
            app.router.on("check_run", "requested_action")(on_check)
    """))
    (tmp_path / "extra_deploy.py").write_text(textwrap.dedent("""
        def register(app):
            def on_deploy(event, gh, config):
                return None
            app.router.on("deployment_status")(on_deploy)
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    m = app_manifest(Settings(extra_handlers="extra_checks"), URL)
    assert "check_run" in m["default_events"] and m["default_permissions"]["checks"] == "write"
    with pytest.raises(UnknownEvent, match="'deployment_status' has no permission"):
        app_manifest(Settings(extra_handlers="extra_deploy"), URL)
    with pytest.raises(ExtraHandlersError):
        app_manifest(Settings(extra_handlers="no_such_module_here"), URL)


def test_a_method_without_annotation_cannot_be_granted() -> None:
    with pytest.raises(KeyError):
        build_manifest(URL, ["push"], methods=["get_file", "delete_repository"])
    small = build_manifest(URL, ["push"], methods=["get_file"])
    assert small["default_permissions"] == {"contents": "read", "metadata": "read"}
    assert small["default_events"] == ["push"]
    assert build_manifest(URL, ["installation", "ping"], methods=[])["default_events"] == []


@pytest.mark.parametrize("url,why", [
    ("http://bot.example.org", "must reach the bot over https"),
    ("bot.example.org", "not an absolute http\\(s\\) URL"),
    ("https://bot.example.org/?x=1", "base URL only"),
    ("ftp://bot.example.org", "not an absolute http\\(s\\) URL"),
])
def test_unusable_urls_are_refused(url: str, why: str) -> None:
    with pytest.raises(ManifestError, match=why):
        build_manifest(url, [])
    assert build_manifest("http://127.0.0.1:8080", [])["hook_attributes"]["url"] == \
        "http://127.0.0.1:8080/webhook"


def test_the_cli_prints_the_manifest_and_the_table() -> None:
    res = subprocess.run([*CLI, "app-manifest", "--url", URL, "--name", "my-campaign-bot"],
                         capture_output=True, text=True, timeout=60, cwd="/")
    assert res.returncode == 0, res.stderr
    m = json.loads(res.stdout)
    assert m["name"] == "my-campaign-bot" and m["hook_attributes"]["url"] == URL + "/webhook"
    res = subprocess.run([*CLI, "app-manifest", "--url", URL, "--table"], capture_output=True,
                         text=True, timeout=60, cwd="/")
    assert res.stdout == permission_table(m)
    assert "| Actions | Write | `cancel_workflow_run`, `dispatch_workflow`" in res.stdout
    res = subprocess.run([*CLI, "app-manifest", "--url", "http://bot.example.org"],
                         capture_output=True, text=True, timeout=60, cwd="/")
    assert res.returncode == 2 and "must reach the bot over https" in res.stderr


# ------------------------------------------------- the REST operations each method really sends


def _each_method(d: Any, work: Path) -> dict[str, list[str]]:
    """Call every port method against the double; the operations it sent, per method."""
    from bot.github.git import GitMirrors

    d.add_repo(REPO, {"campaigns/a/campaign.toml": "x = 1\n", "README.md": "hi\n"})
    pull = d.add_pull(REPO, 2, {"README.md": "hi\nthere\n"})
    d.add_issue(REPO, 7, body="campaign")
    d.set_permission(REPO, "maint", "write")
    d.add_workflow(REPO, "screen.yml")
    run = d.add_run(REPO, "screen.yml", pull.head_sha, status="in_progress", conclusion=None)
    art = d.add_artifact(REPO, run["id"], "bundle", {"a.txt": "x"})
    gh = port(d)
    made: dict[str, list[str]] = {}

    def call(name: str, *args: Any, **kw: Any) -> Any:
        n = len(d.calls)
        out = getattr(gh, name)(*args, **kw)
        made[name] = [c.operation or ("actions/cancel-workflow-run" if c.path.endswith(
            "/cancel") else f"? {c.method} {c.path}") for c in d.calls[n:]
            if not c.path.startswith("/_blob/")]
        return out

    call("get_default_branch")
    call("get_file", "README.md", "main")
    call("list_dir", "campaigns", "main")
    call("get_pull", 2)
    call("list_pull_files", 2)
    assert call("branch_protected", "main") is False
    assert [p.number for p in call("list_open_pulls", head="topic")] == [2]
    call("get_permission", "maint")
    call("get_issue", 7)
    call("edit_issue_body", 7, "new body")
    call("list_issue_comments", 7)
    c = call("create_issue_comment", 7, "hello")
    call("edit_issue_comment", c.id, "hello again")
    call("add_reaction", c.id, "eyes")
    call("ensure_label", "screen:supported", "0e8a16", "a screen supports the candidate")
    call("add_labels", 2, ["screen:supported"])
    call("remove_label", 2, "screen:supported")
    call("list_reviews", 2)
    call("list_review_comments", 2)
    call("create_review", 2, pull.head_sha, "looks fine",
         [InlineComment("README.md", 2, "new line")])
    ck = call("create_check_run", "campaign-bot/screen: x", pull.head_sha,
              status="in_progress")
    call("update_check_run", ck.id, conclusion="success", title="t", summary="s")
    call("list_check_runs", pull.head_sha, "campaign-bot/screen: x")
    call("dispatch_workflow", "screen.yml", "main", {"campaign": "a"})
    call("get_workflow_run", run["id"])
    call("list_workflow_runs", "screen.yml", branch="main", event="workflow_dispatch")
    call("list_run_artifacts", run["id"])
    call("download_artifact", art["id"])
    call("cancel_workflow_run", run["id"])
    # git_remote makes no REST call: what it is for (a fetch and a push through the double's
    # git transport with its token) is what it needs
    remote = gh.git_remote(push=True)
    assert remote is not None
    n = len(d.calls)
    git = GitMirrors(work / "git")
    tip = git.fetch(remote, REPO, ["refs/heads/main"])["refs/heads/main"]
    (work / "note.txt").write_text("pushed by the bot\n")
    sha = git.commit_files(REPO, tip, {"notes/note.txt": work / "note.txt"}, "a note")
    git.push(remote, REPO, sha, "main", expect=tip)
    made["git_remote"] = [c.operation or "?" for c in d.calls[n:]]
    assert d.repo(REPO).refs["main"] == sha
    return made


def test_every_operation_sent_is_declared_and_granted(github_double: Any,
                                                      tmp_path: Path) -> None:
    made = _each_method(github_double, tmp_path)
    assert set(made) == set(PORT_NEEDS)  # every method exercised
    perms = app_manifest(Settings(), URL)["default_permissions"]
    for method, ops in made.items():
        need = PORT_NEEDS[method]
        undeclared = [o for o in ops if o not in need.operations + APP_AUTH_OPERATIONS]
        assert not undeclared, f"{method} sent {undeclared}, declares {need.operations}"
        assert ops, method
        assert grants(perms, need.permission, need.access)
