"""A read-only :class:`bot.github.GitHubPort` that never touches the network: every read is
answered from one webhook delivery's own payload, or empty.  ``campaign-bot replay`` uses it
(wrapped in :class:`bot.github.recording.RecordingGitHub`, which records the writes) when no
GitHub credentials are configured, with ``--offline``, or when GitHub cannot be reached.

What the payload answers (GitHub Docs, "Webhook events and payloads"):

* ``get_default_branch``: ``repository.default_branch`` (else ``main``);
* ``get_issue`` / ``get_pull``: ``issue`` / ``pull_request`` of the payload when the number
  matches (a comment on a PR carries ``issue.pull_request``), else :class:`GitHubNotFound`;
* ``list_issue_comments``: the delivery's own ``comment`` when it belongs to that issue;
* ``get_permission``: inferred from the commenter's ``author_association`` (``OWNER`` is
  ``admin``, ``MEMBER`` and ``COLLABORATOR`` are ``write``, anyone else ``read``); a login
  the payload does not describe is ``none``;
* ``get_workflow_run``: the payload's ``workflow_run`` when the id matches;
* files, directories, reviews, check runs, artifacts: nothing (``None`` or empty lists).

Writes raise :class:`GitHubError`: wrap the port in a recorder to see them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from types import MappingProxyType
from typing import Any

from bot.github.port import (
    DEFAULT_MAX_ARTIFACT_BYTES,
    Annotation,
    ArtifactInfo,
    CheckAction,
    CheckRun,
    Comment,
    ContentEntry,
    DispatchResult,
    FileChange,
    GitHubError,
    GitHubNotFound,
    GitRemote,
    InlineComment,
    IssueInfo,
    PullInfo,
    Review,
    ReviewComment,
    WorkflowRunInfo,
)

ASSOCIATION_PERMISSION = MappingProxyType(
    {"OWNER": "admin", "MEMBER": "write", "COLLABORATOR": "write"})
"""``author_association`` (GitHub's ``AuthorAssociation`` enum) -> the permission assumed
offline; any other association reads as ``read``."""


def _obj(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def _login(v: Any) -> str:
    return str(_obj(v).get("login") or "")


class OfflineGitHub:
    """Reads from ``payload`` (a webhook delivery's parsed JSON object) for repository
    ``repo`` (``owner/name``); see the module docstring.  Never raises for a missing or
    oddly typed field: it answers as if GitHub had nothing."""

    def __init__(self, payload: Mapping[str, Any], repo: str = "",
                 bot_login: str = "campaign-bot[bot]") -> None:
        self.payload = payload
        self.repo = repo or str(_obj(payload.get("repository")).get("full_name") or "")
        self.bot_login = bot_login

    # -- reads ------------------------------------------------------------------------

    def get_default_branch(self) -> str:
        """``repository.default_branch`` of the payload, else ``main``."""
        return str(_obj(self.payload.get("repository")).get("default_branch") or "main")

    def git_remote(self, *, push: bool = False) -> GitRemote | None:
        """None: offline there is no git access (a review says the evidence was not read)."""
        return None

    def get_file(self, path: str, ref: str) -> bytes | None:
        """None: the payload carries no file contents."""
        return None

    def list_dir(self, path: str, ref: str) -> list[ContentEntry]:
        """An empty listing."""
        return []

    def get_pull(self, number: int) -> PullInfo:
        """The payload's ``pull_request`` numbered ``number``; raises GitHubNotFound."""
        p = _obj(self.payload.get("pull_request"))
        if p.get("number") != number:
            raise GitHubNotFound(f"PR #{number}: not in the delivery's payload (offline)", 404)
        head, base = _obj(p.get("head")), _obj(p.get("base"))
        head_repo = _obj(head.get("repo")).get("full_name")
        base_repo = str(_obj(base.get("repo")).get("full_name") or self.repo)
        return PullInfo(number=number, title=str(p.get("title") or ""),
                        author=_login(p.get("user")), state=str(p.get("state") or "open"),
                        head_sha=str(head.get("sha") or ""), head_ref=str(head.get("ref") or ""),
                        head_repo=str(head_repo) if head_repo else None,
                        base_ref=str(base.get("ref") or ""), base_sha=str(base.get("sha") or ""),
                        base_repo=base_repo, is_fork=head_repo != base_repo)

    def list_pull_files(self, number: int) -> list[FileChange]:
        """Empty: webhook payloads carry no diff."""
        return []

    def branch_protected(self, branch: str) -> bool:
        """True: offline nothing says a branch is unprotected, so it is taken as protected
        (the bot's own branch is used; offline nothing is pushed anyway)."""
        return True

    def list_open_pulls(self, *, head: str | None = None,
                        base: str | None = None) -> list[PullInfo]:
        """Empty: webhook payloads list no other pull requests."""
        return []

    def get_permission(self, login: str) -> str:
        """Inferred from ``author_association`` of the comment, review, issue or PR the
        payload shows ``login`` writing; ``none`` for a login it does not describe."""
        for key in ("comment", "review", "issue", "pull_request"):
            o = _obj(self.payload.get(key))
            if _login(o.get("user")) == login and login:
                return ASSOCIATION_PERMISSION.get(str(o.get("author_association")), "read")
        return "none"

    def get_issue(self, number: int) -> IssueInfo:
        """The payload's ``issue`` (or ``pull_request``) numbered ``number``; raises
        GitHubNotFound."""
        for key in ("issue", "pull_request"):
            i = _obj(self.payload.get(key))
            if i.get("number") == number:
                return IssueInfo(number, str(i.get("title") or ""), str(i.get("body") or ""),
                                 _login(i.get("user")), str(i.get("state") or "open"),
                                 key == "pull_request" or "pull_request" in i)
        raise GitHubNotFound(f"issue #{number}: not in the delivery's payload (offline)", 404)

    def list_issue_comments(self, number: int) -> list[Comment]:
        """The delivery's own ``comment`` when it is on issue/PR ``number``, else empty."""
        c = _obj(self.payload.get("comment"))
        on = _obj(self.payload.get("issue")).get("number")
        if on != number or not isinstance(c.get("id"), int):
            return []
        user = _obj(c.get("user"))
        return [Comment(c["id"], str(c.get("body") or ""), _login(user),
                        str(user.get("type") or "User"), str(c.get("html_url") or ""))]

    def list_reviews(self, number: int) -> list[Review]:
        """Empty."""
        return []

    def list_review_comments(self, number: int) -> list[ReviewComment]:
        """Empty."""
        return []

    def list_check_runs(self, sha: str, name: str) -> list[CheckRun]:
        """Empty."""
        return []

    def get_workflow_run(self, run_id: int) -> WorkflowRunInfo:
        """The payload's ``workflow_run`` with id ``run_id``; raises GitHubNotFound."""
        r = _obj(self.payload.get("workflow_run"))
        if r.get("id") != run_id:
            raise GitHubNotFound(f"workflow run {run_id}: not in the delivery's payload "
                                 "(offline)", 404)
        return WorkflowRunInfo(
            id=run_id, head_sha=str(r.get("head_sha") or ""), status=str(r.get("status") or ""),
            conclusion=r.get("conclusion") if isinstance(r.get("conclusion"), str) else None,
            display_title=str(r.get("display_title") or ""), event=str(r.get("event") or ""),
            run_attempt=int(r["run_attempt"]) if isinstance(r.get("run_attempt"), int) else 1,
            html_url=str(r.get("html_url") or ""))

    def list_workflow_runs(self, workflow_file: str, *, branch: str, event: str,
                           created_after: datetime | None = None,
                           limit: int = 100) -> list[WorkflowRunInfo]:
        """Empty: a delivery's payload carries no run list (its own ``workflow_run`` is
        reached by id through :meth:`get_workflow_run`)."""
        return []

    def list_run_artifacts(self, run_id: int, name: str | None = None
                           ) -> list[ArtifactInfo]:
        """Empty."""
        return []

    def download_artifact(self, artifact_id: int,
                          max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
                          size_in_bytes: int | None = None) -> bytes:
        """Raises GitHubNotFound: no artifact is reachable offline."""
        raise GitHubNotFound(f"artifact {artifact_id}: not available offline", 404)

    # -- writes: refused (a recorder in front of this port records them) ----------------

    def _refuse(self, op: str) -> GitHubError:
        return GitHubError(f"{op}: the offline port is read-only")

    def edit_issue_body(self, number: int, body: str) -> None:
        """Raises GitHubError."""
        raise self._refuse("edit_issue_body")

    def create_issue_comment(self, number: int, body: str) -> Comment:
        """Raises GitHubError."""
        raise self._refuse("create_issue_comment")

    def edit_issue_comment(self, comment_id: int, body: str) -> Comment:
        """Raises GitHubError."""
        raise self._refuse("edit_issue_comment")

    def add_reaction(self, comment_id: int, content: str) -> None:
        """Raises GitHubError."""
        raise self._refuse("add_reaction")

    def create_review(self, number: int, commit_sha: str, body: str,
                      comments: Sequence[InlineComment]) -> Review:
        """Raises GitHubError."""
        raise self._refuse("create_review")

    def create_check_run(self, name: str, head_sha: str, *, status: str,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None, text: str | None = None,
                         external_id: str | None = None, details_url: str | None = None,
                         started_at: datetime | None = None,
                         actions: Sequence[CheckAction] | None = None) -> CheckRun:
        """Raises GitHubError."""
        raise self._refuse("create_check_run")

    def update_check_run(self, check_run_id: int, *, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None, text: str | None = None,
                         details_url: str | None = None,
                         annotations: Sequence[Annotation] | None = None,
                         actions: Sequence[CheckAction] | None = None) -> CheckRun:
        """Raises GitHubError."""
        raise self._refuse("update_check_run")

    def ensure_label(self, name: str, color: str, description: str) -> bool:
        """Raises GitHubError."""
        raise self._refuse("ensure_label")

    def add_labels(self, number: int, names: Sequence[str]) -> None:
        """Raises GitHubError."""
        raise self._refuse("add_labels")

    def remove_label(self, number: int, name: str) -> None:
        """Raises GitHubError."""
        raise self._refuse("remove_label")

    def dispatch_workflow(self, workflow_file: str, ref: str,
                          inputs: dict[str, str]) -> DispatchResult:
        """Raises GitHubError."""
        raise self._refuse("dispatch_workflow")

    def cancel_workflow_run(self, run_id: int) -> None:
        """Raises GitHubError."""
        raise self._refuse("cancel_workflow_run")
