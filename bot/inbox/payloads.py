"""Typed views of the webhook payloads handlers read: ``issue_comment`` and ``pull_request``.

Only the fields the bot uses are declared; every model accepts unknown fields
(``extra="allow"``) because GitHub keeps adding them, and most are optional because the
octokit/webhooks examples of older payloads lack newer fields.  Parsed from
``Event.payload`` with :func:`parse`; a payload that does not fit raises pydantic's
``ValidationError`` (the handler logs it with the delivery id and ignores the delivery).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class User(_Lenient):
    """A user or bot account."""

    login: str
    id: int | None = None
    type: str = "User"

    @property
    def is_bot(self) -> bool:
        """``type: Bot`` or an App login ``name[bot]``."""
        return self.type == "Bot" or self.login.endswith("[bot]")


class Repository(_Lenient):
    """The repository a payload concerns."""

    full_name: str
    default_branch: str | None = None
    private: bool | None = None


class Installation(_Lenient):
    """GitHub App installation block (absent for plain repository webhooks)."""

    id: int


class IssueRef(_Lenient):
    """The issue (or PR-as-issue) of an ``issue_comment``; ``pull_request`` is present
    exactly when the comment is on a PR (GitHub Docs, "Webhook events and payloads")."""

    number: int
    title: str | None = None
    user: User | None = None
    state: str | None = None
    pull_request: dict[str, Any] | None = None

    @property
    def is_pull(self) -> bool:
        """True when the issue is a pull request."""
        return self.pull_request is not None


class IssueComment(_Lenient):
    """A conversation comment."""

    id: int
    body: str | None = None
    user: User
    author_association: str | None = Field(
        default=None, description="Shown only; never used to authorize (rust-lang/triagebot#2094).")
    performed_via_github_app: dict[str, Any] | None = None


class BodyChange(_Lenient):
    """``changes.body`` of an edit: the previous text."""

    from_: str | None = Field(default=None, alias="from")


class Changes(_Lenient):
    """``changes`` of an ``edited`` action."""

    body: BodyChange | None = None


class IssueCommentPayload(_Lenient):
    """``issue_comment`` created / edited / deleted."""

    action: str
    issue: IssueRef
    comment: IssueComment
    repository: Repository
    sender: User
    installation: Installation | None = None
    changes: Changes | None = None


class GitRef(_Lenient):
    """``head`` or ``base`` of a PR; ``repo`` is None when a fork was deleted."""

    ref: str
    sha: str
    repo: Repository | None = None


class PullRequest(_Lenient):
    """The PR object of a ``pull_request`` payload."""

    number: int
    state: str | None = None
    user: User | None = None
    head: GitRef
    base: GitRef

    @property
    def is_fork(self) -> bool:
        """Head and base repositories differ (or the head repository is gone)."""
        base = self.base.repo.full_name if self.base.repo else None
        head = self.head.repo.full_name if self.head.repo else None
        return head is None or head != base


class PullRequestPayload(_Lenient):
    """``pull_request`` opened / synchronize / reopened / closed ..."""

    action: str
    number: int
    pull_request: PullRequest
    repository: Repository
    sender: User
    installation: Installation | None = None


MODELS: Mapping[str, type[BaseModel]] = MappingProxyType({
    "issue_comment": IssueCommentPayload,
    "pull_request": PullRequestPayload,
})
"""Event name -> payload model, for the events handlers read field by field."""


def parse(event_name: str, payload: dict[str, Any]) -> BaseModel | None:
    """The typed payload of ``event_name`` (None for events without a model)."""
    model = MODELS.get(event_name)
    return model.model_validate(payload) if model else None
