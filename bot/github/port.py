"""The one GitHub port every feature uses: a narrow, repository-scoped, synchronous
Protocol (:class:`GitHubPort`), the plain value types it returns, and its errors.

Handlers and jobs depend on this Protocol, never on PyGithub objects; the one implementation
on PyGithub is :class:`bot.github.pygithub.PyGithubPort`, and
:class:`bot.github.recording.RecordingGitHub` records writes for dry runs.  Every call
blocks (PyGithub, and the ``git`` command line behind it, are blocking): the worker runs
handlers and jobs on its thread pool, and nothing on an event loop calls a port.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol, runtime_checkable

DEFAULT_MAX_ARTIFACT_BYTES = 512 * 1024 * 1024
"""Largest artifact zip downloaded (bytes); artifacts are untrusted data."""

# ------------------------------------------------------------------------------ errors


def parse_timestamp(value: Any) -> datetime | None:
    """A timestamp of GitHub's REST API or webhook payloads (ISO 8601, ``Z`` or an offset,
    e.g. ``"2026-12-01T16:37:24Z"``) as an aware datetime in UTC; None for anything else
    (absent, not a string, not a timestamp).  A value without an offset is taken as UTC."""
    if not isinstance(value, str):
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t.astimezone(UTC) if t.tzinfo else t.replace(tzinfo=UTC)


class GitHubError(Exception):
    """A GitHub call failed.  ``status`` is the HTTP status (None for transport errors)."""

    retryable = False

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class GitHubRetryableError(GitHubError):
    """Transient: 5xx, rate limits, connection errors.  The delivery should be retried later,
    after ``retry_after`` seconds when GitHub said so (``Retry-After`` / rate-limit reset)."""

    retryable = True

    def __init__(self, message: str, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message, status)
        self.retry_after = retry_after


class GitHubNotConfigured(GitHubError):
    """The service has no GitHub credentials (neither App id and private key nor a token):
    every call would fail the same way until the settings change, so a delivery that needs
    GitHub is not retried."""


class GitHubNotFound(GitHubError):
    """404: the object does not exist or the installation cannot see it."""


class GitHubValidationError(GitHubError):
    """422: GitHub refused the request (e.g. a review line outside the diff)."""


# ------------------------------------------------------------------------ value types


@dataclass(frozen=True)
class ContentEntry:
    """One entry of a directory listing: ``type`` is ``file``, ``dir``, ``symlink`` or
    ``submodule``; ``size`` in bytes."""

    path: str
    type: str
    size: int
    sha: str = ""
    """Git object SHA (blob for a file, tree for a directory: it changes whenever anything
    below the directory changes); "" when unknown."""


@dataclass(frozen=True)
class PullInfo:
    """What handlers need of a PR.  ``head_repo`` is None when the fork was deleted;
    ``is_fork`` is True when head and base repositories differ (or head is gone)."""

    number: int
    title: str
    author: str
    state: str
    head_sha: str
    head_ref: str
    head_repo: str | None
    base_ref: str
    base_sha: str
    base_repo: str
    is_fork: bool


@dataclass(frozen=True)
class FileChange:
    """One changed file of a PR: ``status`` (added, modified, removed, renamed...) and the
    unified-diff ``patch`` (None for binary or very large files)."""

    filename: str
    status: str
    patch: str | None


@dataclass(frozen=True)
class IssueInfo:
    """An issue (or a PR seen as an issue); ``labels``: the names of its labels."""

    number: int
    title: str
    body: str
    author: str
    state: str
    is_pull: bool
    labels: tuple[str, ...] = ()


@dataclass(frozen=True)
class Comment:
    """An issue/PR conversation comment; ``user_type`` is ``User`` or ``Bot``."""

    id: int
    body: str
    user: str
    user_type: str
    html_url: str = ""


@dataclass(frozen=True)
class Review:
    """A submitted PR review."""

    id: int
    body: str
    user: str
    commit_id: str
    state: str


@dataclass(frozen=True)
class ReviewComment:
    """An inline PR review comment."""

    id: int
    body: str
    user: str
    path: str
    line: int | None
    commit_id: str


@dataclass(frozen=True)
class InlineComment:
    """A comment to post on ``path`` at ``line`` (1-based, in the new file: side RIGHT).
    ``start_line`` makes it a range and must be smaller than ``line`` in the same hunk."""

    path: str
    line: int
    body: str
    side: Literal["RIGHT", "LEFT"] = "RIGHT"
    start_line: int | None = None


@dataclass(frozen=True)
class CheckRun:
    """A check run."""

    id: int
    name: str
    head_sha: str
    status: str
    conclusion: str | None
    title: str | None = None
    summary: str | None = None
    external_id: str | None = None


@dataclass(frozen=True)
class Annotation:
    """One check-run annotation: ``path`` (repository path), lines ``start_line`` to
    ``end_line`` (1-based, in the file at the check run's head SHA), ``level`` (``notice``,
    ``warning`` or ``failure``), ``message`` (at most 64 KB), ``title`` (at most 255
    characters) and ``raw_details`` (at most 64 KB).  Limits: GitHub REST, "Update a check
    run" (``output.annotations``; at most 50 per request, appended to those already there)."""

    path: str
    start_line: int
    end_line: int
    level: Literal["notice", "warning", "failure"]
    message: str
    title: str | None = None
    raw_details: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The annotation as the Checks API's ``output.annotations[]`` item."""
        out: dict[str, Any] = {"path": self.path, "start_line": self.start_line,
                               "end_line": self.end_line, "annotation_level": self.level,
                               "message": self.message}
        if self.title is not None:
            out["title"] = self.title
        if self.raw_details is not None:
            out["raw_details"] = self.raw_details
        return out


@dataclass(frozen=True)
class CheckAction:
    """A button on a check run (``requested_action``): ``label`` (at most 20 characters),
    ``description`` (at most 40) and ``identifier`` (at most 20), which GitHub sends back in
    ``check_run.requested_action`` when someone clicks it.  At most three per check run
    (GitHub REST, "Create a check run", ``actions``)."""

    label: str
    description: str
    identifier: str

    def as_json(self) -> dict[str, str]:
        """The action as the Checks API's ``actions[]`` item."""
        return {"label": self.label, "description": self.description,
                "identifier": self.identifier}


@dataclass(frozen=True)
class DispatchResult:
    """Result of a workflow dispatch; ``run_id``/URLs when GitHub returned run details."""

    run_id: int | None
    run_url: str | None
    html_url: str | None


@dataclass(frozen=True)
class WorkflowRunInfo:
    """A workflow run (times UTC; None when GitHub has none yet)."""

    id: int
    head_sha: str
    status: str
    conclusion: str | None
    display_title: str
    event: str
    run_attempt: int
    html_url: str = ""
    run_started_at: datetime | None = None
    updated_at: datetime | None = None
    path: str = ""
    """The workflow file, e.g. ``.github/workflows/screen.yml`` ("" when unknown)."""
    head_branch: str = ""
    """The branch the run ran on (for ``workflow_dispatch``: the dispatch ``ref``)."""
    created_at: datetime | None = None


@dataclass(frozen=True)
class ArtifactInfo:
    """A workflow artifact; ``size_in_bytes`` of the zip."""

    id: int
    name: str
    size_in_bytes: int
    expired: bool


@dataclass(frozen=True)
class GitRemote:
    """Where git fetches a repository from and the token it sends (GitHub's HTTPS git: Basic
    auth with the installation token): ``url`` holds no credentials, ``token`` never
    appears in ``repr``."""

    url: str
    token: str = field(repr=False)


# --------------------------------------------------------------------------- the port


@runtime_checkable
class GitHubPort(Protocol):
    """Everything handlers may ask of GitHub, for one repository (``repo``, ``owner/name``).

    Reads return plain dataclasses.  Every method may raise :class:`GitHubRetryableError`
    (transient), :class:`GitHubNotFound`, :class:`GitHubValidationError` or
    :class:`GitHubError`.  ``bot_login`` is the login the port writes as; handlers match
    their own comments on it together with a hidden marker.

    ``git_remote`` gives what git needs to fetch the repository (its HTTPS URL and a
    token; no REST call); with ``push=True`` it is asked for a write, and a port that must
    not write (a dry run) answers None.
    """

    repo: str
    bot_login: str

    def get_default_branch(self) -> str: ...
    def git_remote(self, *, push: bool = False) -> GitRemote | None: ...
    def get_file(self, path: str, ref: str) -> bytes | None: ...
    def list_dir(self, path: str, ref: str) -> list[ContentEntry]: ...
    def get_pull(self, number: int) -> PullInfo: ...
    def list_pull_files(self, number: int) -> list[FileChange]: ...
    def branch_protected(self, branch: str) -> bool: ...
    def list_open_pulls(self, *, head: str | None = None,
                        base: str | None = None) -> list[PullInfo]: ...
    def get_permission(self, login: str) -> str: ...
    def get_issue(self, number: int) -> IssueInfo: ...
    def edit_issue_body(self, number: int, body: str) -> None: ...
    def list_issue_comments(self, number: int) -> list[Comment]: ...
    def create_issue_comment(self, number: int, body: str) -> Comment: ...
    def edit_issue_comment(self, comment_id: int, body: str) -> Comment: ...
    def add_reaction(self, comment_id: int, content: str) -> None: ...
    def list_reviews(self, number: int) -> list[Review]: ...
    def list_review_comments(self, number: int) -> list[ReviewComment]: ...
    def create_review(self, number: int, commit_sha: str, body: str,
                      comments: Sequence[InlineComment]) -> Review: ...
    def list_check_runs(self, sha: str, name: str) -> list[CheckRun]: ...
    def create_check_run(self, name: str, head_sha: str, *, status: str,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None, text: str | None = None,
                         external_id: str | None = None, details_url: str | None = None,
                         started_at: datetime | None = None,
                         actions: Sequence[CheckAction] | None = None) -> CheckRun: ...
    def update_check_run(self, check_run_id: int, *, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None, text: str | None = None,
                         details_url: str | None = None,
                         annotations: Sequence[Annotation] | None = None,
                         actions: Sequence[CheckAction] | None = None) -> CheckRun: ...
    def ensure_label(self, name: str, color: str, description: str) -> bool: ...
    def add_labels(self, number: int, names: Sequence[str]) -> None: ...
    def remove_label(self, number: int, name: str) -> None: ...
    def dispatch_workflow(self, workflow_file: str, ref: str,
                          inputs: dict[str, str]) -> DispatchResult: ...
    def get_workflow_run(self, run_id: int) -> WorkflowRunInfo: ...
    def list_workflow_runs(self, workflow_file: str, *, branch: str, event: str,
                           created_after: datetime | None = None,
                           limit: int = 100) -> list[WorkflowRunInfo]: ...
    def cancel_workflow_run(self, run_id: int) -> None: ...
    def list_run_artifacts(self, run_id: int, name: str | None = None
                           ) -> list[ArtifactInfo]: ...
    def download_artifact(self, artifact_id: int,
                          max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
                          size_in_bytes: int | None = None) -> bytes: ...
