"""A :class:`bot.github.GitHubPort` for dry runs (``campaign-bot replay`` without
``--apply``): reads go to a real port, writes are recorded and never sent."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from bot.github.port import (
    Annotation,
    CheckAction,
    CheckRun,
    Comment,
    DispatchResult,
    GitHubError,
    GitHubPort,
    GitRemote,
    InlineComment,
    Review,
)


@dataclass
class IntendedWrite:
    """A write :class:`RecordingGitHub` did not make: ``op`` (the port method) and its
    arguments."""

    op: str
    args: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """One human line, e.g. ``create_issue_comment number=5 body='...'``."""
        parts = []
        for k, v in self.args.items():
            if isinstance(v, str) and len(v) > 80:
                v = v[:77] + "..."
            parts.append(f"{k}={v!r}")
        return f"{self.op} " + " ".join(parts)


class RecordingGitHub:
    """A :class:`GitHubPort` for dry runs: reads go to ``delegate`` (or raise
    :class:`GitHubError` when there is none); writes are recorded in :attr:`writes` and
    answered with placeholder objects (negative ids), never sent."""

    def __init__(self, delegate: GitHubPort | None = None, repo: str = "",
                 bot_login: str = "campaign-bot[bot]") -> None:
        self.delegate = delegate
        self.repo = delegate.repo if delegate is not None else repo
        self.bot_login = delegate.bot_login if delegate is not None else bot_login
        self.writes: list[IntendedWrite] = []
        self._next_id = -1

    def _id(self) -> int:
        self._next_id -= 1
        return self._next_id

    def _record(self, op: str, **args: Any) -> None:
        self.writes.append(IntendedWrite(op, args))

    def __getattr__(self, name: str) -> Any:
        # reads: every GitHubPort method not overridden below
        if name.startswith("_") or name not in _READS:
            raise AttributeError(name)

        def read(*args: Any, **kwargs: Any) -> Any:
            if self.delegate is None:
                raise GitHubError(f"{name}: dry run without GitHub access")
            return getattr(self.delegate, name)(*args, **kwargs)

        return read

    def edit_issue_body(self, number: int, body: str) -> None:
        """Record an issue body edit."""
        self._record("edit_issue_body", number=number, body=body)

    def create_issue_comment(self, number: int, body: str) -> Comment:
        """Record a new comment."""
        self._record("create_issue_comment", number=number, body=body)
        return Comment(self._id(), body, self.bot_login, "Bot")

    def edit_issue_comment(self, comment_id: int, body: str) -> Comment:
        """Record a comment edit."""
        self._record("edit_issue_comment", comment_id=comment_id, body=body)
        return Comment(comment_id, body, self.bot_login, "Bot")

    def add_reaction(self, comment_id: int, content: str) -> None:
        """Record a reaction."""
        self._record("add_reaction", comment_id=comment_id, content=content)

    def create_review(self, number: int, commit_sha: str, body: str,
                      comments: Sequence[InlineComment]) -> Review:
        """Record a review with its inline comments."""
        self._record("create_review", number=number, commit_sha=commit_sha, body=body,
                     comments=[asdict(c) for c in comments])
        return Review(self._id(), body, self.bot_login, commit_sha, "COMMENTED")

    def create_check_run(self, name: str, head_sha: str, *, status: str,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None, text: str | None = None,
                         external_id: str | None = None, details_url: str | None = None,
                         started_at: datetime | None = None,
                         actions: Sequence[CheckAction] | None = None) -> CheckRun:
        """Record a check run creation."""
        self._record("create_check_run", name=name, head_sha=head_sha, status=status,
                     conclusion=conclusion, title=title, summary=summary,
                     actions=[a.label for a in actions or []])
        return CheckRun(self._id(), name, head_sha, "completed" if conclusion else status,
                        conclusion, title, summary, external_id)

    def update_check_run(self, check_run_id: int, *, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None, text: str | None = None,
                         details_url: str | None = None,
                         annotations: Sequence[Annotation] | None = None,
                         actions: Sequence[CheckAction] | None = None) -> CheckRun:
        """Record a check run update."""
        self._record("update_check_run", check_run_id=check_run_id, status=status,
                     conclusion=conclusion, title=title, summary=summary,
                     annotations=len(annotations or []),
                     actions=None if actions is None else [a.label for a in actions])
        return CheckRun(check_run_id, "", "", "completed" if conclusion else status or "",
                        conclusion, title, summary)

    def ensure_label(self, name: str, color: str, description: str) -> bool:
        """Record a label creation (reported as created)."""
        self._record("ensure_label", name=name, color=color, description=description)
        return True

    def add_labels(self, number: int, names: Sequence[str]) -> None:
        """Record labels added to an issue or PR."""
        self._record("add_labels", number=number, names=list(names))

    def remove_label(self, number: int, name: str) -> None:
        """Record a label removed from an issue or PR."""
        self._record("remove_label", number=number, name=name)

    def dispatch_workflow(self, workflow_file: str, ref: str,
                          inputs: dict[str, str]) -> DispatchResult:
        """Record a workflow dispatch."""
        self._record("dispatch_workflow", workflow_file=workflow_file, ref=ref, inputs=inputs)
        return DispatchResult(None, None, None)

    def cancel_workflow_run(self, run_id: int) -> None:
        """Record a workflow run cancellation."""
        self._record("cancel_workflow_run", run_id=run_id)

    def git_remote(self, *, push: bool = False) -> GitRemote | None:
        """The delegate's remote for fetching; for a push, record it and answer None (the
        caller then pushes nothing)."""
        if push:
            self._record("git_push")
            return None
        if self.delegate is None:
            raise GitHubError("git_remote: dry run without GitHub access")
        return self.delegate.git_remote()


_READS = frozenset({
    "get_default_branch", "get_file", "list_dir", "get_pull", "list_pull_files",
    "branch_protected", "list_open_pulls",
    "get_permission", "get_issue", "list_issue_comments", "list_reviews",
    "list_review_comments", "list_check_runs", "get_workflow_run", "list_workflow_runs",
    "list_run_artifacts",
    "download_artifact",
})
