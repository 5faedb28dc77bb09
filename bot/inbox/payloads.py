"""Typed views of the webhook payloads handlers read: ``issue_comment`` and ``pull_request``.

Only the fields the bot uses are declared; every model accepts unknown fields
(``extra="allow"``) because GitHub keeps adding them, and most are optional because the
octokit/webhooks examples of older payloads lack newer fields.  Parsed from
``Event.payload`` with :func:`parse`; a payload that does not fit raises pydantic's
``ValidationError`` (the handler logs it with the delivery id and ignores the delivery).

:func:`check_shape` is what the worker runs on every delivery before any handler: the
blocks every handler or the delivery key reads (``repository``, ``installation``,
``action``, ``sender``) and, for the events with a model here or in :data:`SHAPES`, the
fields the handlers read, must have the types GitHub documents when present ("Webhook events and
payloads", GitHub Docs).  A payload that does not fit raises :class:`PayloadShapeError`
naming the field; it is a permanent failure (retrying the same bytes cannot succeed), so the
delivery is marked failed at once with that reason instead of a handler's raw
``AttributeError`` or ``TypeError`` after three attempts.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

GitHubId = Annotated[int, Field(ge=0, le=2**63 - 1)]
"""A GitHub object id (comment, run, job, installation, user): stored as a signed 64-bit
``BIGINT``; a larger one is refused as a permanent payload error, never an ``OverflowError``
retried at the database."""
GitHubNumber = Annotated[int, Field(ge=0, le=2**31 - 1)]
"""An issue or pull request number (stored as ``INTEGER``)."""

REQUIRED_WHEN_PRESENT = frozenset({("repository", "full_name")})
"""Fields missing from a block that is present, refused like a wrong type: every handler and
the delivery key read the repository by its ``full_name``."""


class PayloadShapeError(ValueError):
    """A webhook payload field has the wrong type or is missing.  ``field`` is its dotted
    path (``pull_request.head.sha``); the message names it and what was expected.  Permanent:
    the worker does not retry the delivery."""

    def __init__(self, event_name: str, field: str, problem: str) -> None:
        super().__init__(f"{event_name} payload: {field}: {problem}")
        self.field = field


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class User(_Lenient):
    """A user or bot account."""

    login: str
    id: GitHubId | None = None
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

    id: GitHubId


class IssueRef(_Lenient):
    """The issue (or PR-as-issue) of an ``issue_comment``; ``pull_request`` is present
    exactly when the comment is on a PR (GitHub Docs, "Webhook events and payloads")."""

    number: GitHubNumber
    title: str | None = None
    user: User | None = None
    state: str | None = None
    pull_request: dict[str, Any] | None = None

    @property
    def is_pull(self) -> bool:
        """True when the issue is a pull request."""
        return self.pull_request is not None


class IssueComment(_Lenient):
    """A conversation comment.  ``user`` is None when GitHub sends ``"user": null`` (its
    published schema allows it: the author's account was deleted, shown as "ghost")."""

    id: GitHubId
    body: str | None = None
    user: User | None
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

    number: GitHubNumber
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
    number: GitHubNumber
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


class _Common(_Lenient):
    """What every event's payload may carry, each optional."""

    action: str | None = None
    repository: Repository | None = None
    installation: Installation | None = None
    sender: User | None = None


class _Commit(_Lenient):
    id: str | None = None
    added: list[str] | None = None
    removed: list[str] | None = None
    modified: list[str] | None = None


class PushPayload(_Common):
    """``push``: the fields the configuration drift check reads."""

    ref: str
    after: str | None = None
    deleted: bool | None = None
    commits: list[_Commit] | None = None


class _WorkflowRunRef(_Lenient):
    id: GitHubId
    name: str | None = None
    path: str | None = None
    display_title: str | None = None
    status: str | None = None
    conclusion: str | None = None
    head_sha: str | None = None
    event: str | None = None


class WorkflowRunPayload(_Common):
    """``workflow_run``: the run the screen flow matches to a dispatched screen."""

    workflow_run: _WorkflowRunRef


class _WorkflowJobRef(_Lenient):
    id: GitHubId
    run_id: GitHubId
    status: str | None = None
    conclusion: str | None = None
    labels: list[str] | None = None
    runner_name: str | None = None


class WorkflowJobPayload(_Common):
    """``workflow_job``: the job whose runner the screen flow records."""

    workflow_job: _WorkflowJobRef


class IssuesPayload(_Common):
    """``issues``: the issue the status header follows."""

    issue: IssueRef


SHAPES: Mapping[str, type[BaseModel]] = MappingProxyType({
    **MODELS,
    "push": PushPayload,
    "workflow_run": WorkflowRunPayload,
    "workflow_job": WorkflowJobPayload,
    "issues": IssuesPayload,
})
"""Event name -> the model :func:`check_shape` holds its payload to (every other event:
only the common blocks)."""


def check_shape(event_name: str, payload: Mapping[str, Any]) -> None:
    """Raise :class:`PayloadShapeError` naming the first field of ``payload`` that is present
    but does not have the type the handlers read it as (see the module docstring).  Unknown
    fields are accepted, and so are missing ones (handlers check what they need; a handler
    that reads a missing key fails permanently with ``KeyError``)."""
    model = SHAPES.get(event_name, _Common)
    errors = []
    for m in (model, _Common) if model is not _Common else (model,):
        try:
            m.model_validate(payload)
        except ValidationError as exc:
            errors += [e for e in exc.errors() if e["type"] != "missing"
                       or tuple(e["loc"]) in REQUIRED_WHEN_PRESENT]
    if errors:
        err = errors[0]
        where = ".".join(str(x) for x in err["loc"]) or "(the payload)"
        got = err.get("input")
        shown = type(got).__name__ if not isinstance(got, str | int | float | bool) or \
            got is None else repr(got)[:60]
        raise PayloadShapeError(event_name, where, f"{err['msg']} (got {shown})")
