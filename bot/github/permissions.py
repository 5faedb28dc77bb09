"""What the bot needs of a GitHub App installation: the permission each call of the port needs,
and the permission each webhook event needs.  The App manifest (:mod:`bot.manifest`) is
generated from these tables, so what the App asks for is exactly what the code uses; tests
check that every :class:`bot.github.port.GitHubPort` method has an entry and that every REST
operation the PyGithub adapter sends is listed under some method.

Sources:

* permissions of REST operations: GitHub Docs, "Permissions required for GitHub Apps" (each
  operation lists the repository permission and access it needs); the ones this bot uses are
  summarised in GitHub's App permission table for this bot (Pull requests, Issues, Checks,
  Actions, Contents: write; Metadata: read);
* permissions of webhook events: the ``x-webhooks`` summaries of GitHub's REST description
  ("To subscribe to this event, a GitHub App must have at least read-level access for the
  'Issues' repository permission", and so on).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

Access = Literal["read", "write"]


@dataclass(frozen=True)
class Need:
    """One port method's needs: the repository ``permission`` (manifest key, e.g.
    ``pull_requests``), its ``access``, and the REST ``operations`` (operation ids of GitHub's
    REST description) the adapter sends for it."""

    permission: str
    access: Access
    operations: tuple[str, ...]


PORT_NEEDS: Mapping[str, Need] = MappingProxyType({
    "get_default_branch": Need("metadata", "read", ("repos/get",)),
    "get_file": Need("contents", "read", ("repos/get-content",)),
    "list_dir": Need("contents", "read", ("repos/get-content",)),
    "get_pull": Need("pull_requests", "read", ("pulls/get",)),
    "list_pull_files": Need("pull_requests", "read", ("pulls/get", "pulls/list-files")),
    # "Get a branch" is listed under Contents (read) for GitHub Apps; its ``protected``
    # flag needs no Administration permission (reading the protection rules would)
    "branch_protected": Need("contents", "read", ("repos/get-branch",)),
    "list_open_pulls": Need("pull_requests", "read", ("pulls/list",)),
    "get_permission": Need("metadata", "read", ("repos/get-collaborator-permission-level",)),
    "get_issue": Need("issues", "read", ("issues/get",)),
    "edit_issue_body": Need("issues", "write", ("issues/get", "issues/update")),
    "list_issue_comments": Need("issues", "read", ("issues/get", "issues/list-comments")),
    "create_issue_comment": Need("issues", "write", ("issues/get", "issues/create-comment")),
    "edit_issue_comment": Need("issues", "write", ("issues/update-comment",)),
    "add_reaction": Need("issues", "write", ("reactions/create-for-issue-comment",)),
    "list_reviews": Need("pull_requests", "read", ("pulls/get", "pulls/list-reviews")),
    "list_review_comments": Need("pull_requests", "read",
                                 ("pulls/get", "pulls/list-review-comments")),
    "create_review": Need("pull_requests", "write", ("pulls/get", "pulls/create-review")),
    "list_check_runs": Need("checks", "read", ("checks/list-for-ref",)),
    "create_check_run": Need("checks", "write", ("checks/create",)),
    "update_check_run": Need("checks", "write", ("checks/update",)),
    # labels of a PR or issue: GitHub's "Permissions required for GitHub Apps" lists the
    # label operations under Issues (write) for issues and under Pull requests for PRs; a
    # label is created in the repository under Issues
    "ensure_label": Need("issues", "write", ("issues/create-label",)),
    "add_labels": Need("issues", "write", ("issues/add-labels",)),
    "remove_label": Need("issues", "write", ("issues/remove-label",)),
    "dispatch_workflow": Need("actions", "write", ("actions/get-workflow",
                                                   "actions/create-workflow-dispatch")),
    "list_workflow_runs": Need("actions", "read", ("actions/get-workflow",
                                                   "actions/list-workflow-runs")),
    "get_workflow_run": Need("actions", "read", ("actions/get-workflow-run",)),
    "cancel_workflow_run": Need("actions", "write", ("actions/cancel-workflow-run",)),
    "list_run_artifacts": Need("actions", "read", ("actions/get-workflow-run",
                                                   "actions/list-workflow-run-artifacts")),
    "download_artifact": Need("actions", "read", ("actions/download-artifact",)),
    # git over HTTPS with the installation token (bot.github.git): fetching evidence needs
    # Contents read, pushing verified screen bundles Contents write (GitHub Docs,
    # "Permissions required for GitHub Apps": Contents covers the repository's git data); the
    # "operations" are git's smart-HTTP services, not REST operations
    "git_remote": Need("contents", "write", ("git-info-refs", "git-upload-pack",
                                             "git-receive-pack")),
})
"""Port method name -> :class:`Need`."""

APP_AUTH_OPERATIONS = ("apps/get-repo-installation", "apps/create-installation-access-token")
"""Operations made as the App itself (JWT) to find an installation and mint its token: they
need no repository permission."""

EVENT_PERMISSIONS: Mapping[str, str] = MappingProxyType({
    "issue_comment": "issues",
    "issues": "issues",
    "pull_request": "pull_requests",
    "pull_request_review": "pull_requests",
    "pull_request_review_comment": "pull_requests",
    "push": "contents",
    "workflow_run": "actions",
    "workflow_job": "actions",
    "check_run": "checks",
    "check_suite": "checks",
})
"""Webhook event -> the repository permission (at least read) an App needs to subscribe."""

ALWAYS_DELIVERED = frozenset({"installation", "installation_repositories", "ping", "meta",
                              "github_app_authorization"})
"""Events GitHub sends every App without a subscription (they cannot be subscribed to)."""

MANDATORY = MappingProxyType({"metadata": "read"})
"""Every GitHub App has read access to repository metadata."""


class UnknownEvent(Exception):
    """A handler subscribes to an event whose permission is not in :data:`EVENT_PERMISSIONS`
    (add it, from the event's ``x-webhooks`` summary)."""


def _stronger(a: str | None, b: str) -> str:
    return "write" if "write" in (a, b) else "read"


def permissions_for(methods: Iterable[str], events: Iterable[str]) -> dict[str, str]:
    """``{permission: access}`` covering port ``methods`` and webhook ``events`` (write beats
    read; metadata read always).  Raises ``KeyError`` for a method without a :data:`PORT_NEEDS`
    entry and :class:`UnknownEvent` for an event without a :data:`EVENT_PERMISSIONS` entry."""
    out: dict[str, str] = dict(MANDATORY)
    for m in methods:
        need = PORT_NEEDS[m]
        out[need.permission] = _stronger(out.get(need.permission), need.access)
    for e in events:
        if e in ALWAYS_DELIVERED:
            continue
        perm = EVENT_PERMISSIONS.get(e)
        if perm is None:
            raise UnknownEvent(f"webhook event {e!r} has no permission in "
                               "bot.github.permissions.EVENT_PERMISSIONS")
        out.setdefault(perm, "read")
    return dict(sorted(out.items()))


def grants(permissions: Mapping[str, str], permission: str, access: str) -> bool:
    """True when ``permissions`` (manifest form) give at least ``access`` on ``permission``."""
    have = permissions.get(permission)
    return have == "write" or (have == "read" and access == "read")
