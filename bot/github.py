"""The narrow GitHub port handlers use, and its one implementation on PyGithub 2.10.

Handlers depend on :class:`GitHubPort` (a Protocol, repository-scoped, async), never on
PyGithub objects (DESIGN.md style rule 2).  :class:`PyGithubPort` implements it; each call runs
PyGithub (synchronous, requests-based) in a worker thread so the event loop never blocks.

PyGithub traps handled here (GITHUB.md §4):

- ``PullRequest.create_review`` asserts a ``github.Commit.Commit``: we pass
  ``repo.get_commit(sha)`` built lazily (``lazy=True``: no request is made for it).
- ``Workflow.create_dispatch`` returns ``False`` on failure unless ``throw=True``: we always
  throw, and ask for ``return_run_details``.
- PyGithub's default ``GithubRetry`` re-sends POSTs on 5xx: a POST that GitHub performed but
  answered 502 would post a second comment.  :func:`make_retry` retries only GET/HEAD/OPTIONS;
  a failed write surfaces as :class:`GitHubRetryableError` and the delivery is retried as a
  whole, where handlers find their earlier write by its hidden marker instead of repeating it.
- Secondary rate limits (403/429 with ``Retry-After``): GETs back off (urllib3 honours
  ``Retry-After``; without it PyGithub waits ``secondary_rate_wait``), bounded by
  ``max_rate_limit_wait``; writes raise :class:`GitHubRetryableError` carrying ``retry_after``.
- There is no artifact download helper: :meth:`PyGithubPort.download_artifact` asks for the
  302 itself and fetches the short-lived URL without the ``Authorization`` header.

:func:`context_for` is the worker's per-event factory: ``(port, repo config)``.
:class:`RecordingGitHub` records intended writes for ``campaign-bot replay`` (dry run).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, runtime_checkable

import requests
from github import Auth, Github, GithubException, GithubIntegration, GithubRetry
from github.GithubException import RateLimitExceededExceedsMaxWait, RateLimitExceededException

from bot.metrics import metrics

if TYPE_CHECKING:
    from bot.repo_config import RepoConfig
    from bot.router import Event

log = logging.getLogger(__name__)

T = TypeVar("T")

READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
"""The only methods ever retried by the HTTP layer (writes are never blindly re-sent)."""
DEFAULT_MAX_ARTIFACT_BYTES = 512 * 1024 * 1024
"""Largest artifact zip downloaded (bytes); artifacts are untrusted data (GITHUB.md §5.3)."""


# ------------------------------------------------------------------------------ errors


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
    """An issue (or a PR seen as an issue)."""

    number: int
    title: str
    body: str
    author: str
    state: str
    is_pull: bool


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
class DispatchResult:
    """Result of a workflow dispatch; ``run_id``/URLs when GitHub returned run details."""

    run_id: int | None
    run_url: str | None
    html_url: str | None


@dataclass(frozen=True)
class WorkflowRunInfo:
    """A workflow run."""

    id: int
    head_sha: str
    status: str
    conclusion: str | None
    display_title: str
    event: str
    run_attempt: int


@dataclass(frozen=True)
class ArtifactInfo:
    """A workflow artifact; ``size_in_bytes`` of the zip."""

    id: int
    name: str
    size_in_bytes: int
    expired: bool


# --------------------------------------------------------------------------- the port


@runtime_checkable
class GitHubPort(Protocol):
    """Everything handlers may ask of GitHub, for one repository (``repo``, ``owner/name``).

    Reads return plain dataclasses.  Every method may raise :class:`GitHubRetryableError`
    (transient), :class:`GitHubNotFound`, :class:`GitHubValidationError` or
    :class:`GitHubError`.  ``bot_login`` is the login the port writes as; handlers match
    their own comments on it together with a hidden marker.
    """

    repo: str
    bot_login: str

    async def get_default_branch(self) -> str: ...
    async def get_file(self, path: str, ref: str) -> bytes | None: ...
    async def list_dir(self, path: str, ref: str) -> list[ContentEntry]: ...
    async def get_pull(self, number: int) -> PullInfo: ...
    async def list_pull_files(self, number: int) -> list[FileChange]: ...
    async def get_permission(self, login: str) -> str: ...
    async def get_issue(self, number: int) -> IssueInfo: ...
    async def edit_issue_body(self, number: int, body: str) -> None: ...
    async def list_issue_comments(self, number: int) -> list[Comment]: ...
    async def create_issue_comment(self, number: int, body: str) -> Comment: ...
    async def edit_issue_comment(self, comment_id: int, body: str) -> Comment: ...
    async def add_reaction(self, comment_id: int, content: str) -> None: ...
    async def list_reviews(self, number: int) -> list[Review]: ...
    async def list_review_comments(self, number: int) -> list[ReviewComment]: ...
    async def create_review(self, number: int, commit_sha: str, body: str,
                            comments: Sequence[InlineComment]) -> Review: ...
    async def list_check_runs(self, sha: str, name: str) -> list[CheckRun]: ...
    async def create_check_run(self, name: str, head_sha: str, *, status: str,
                               conclusion: str | None = None, title: str | None = None,
                               summary: str | None = None, text: str | None = None,
                               external_id: str | None = None) -> CheckRun: ...
    async def update_check_run(self, check_run_id: int, *, status: str | None = None,
                               conclusion: str | None = None, title: str | None = None,
                               summary: str | None = None, text: str | None = None) -> CheckRun: ...
    async def dispatch_workflow(self, workflow_file: str, ref: str,
                                inputs: dict[str, str]) -> DispatchResult: ...
    async def get_workflow_run(self, run_id: int) -> WorkflowRunInfo: ...
    async def list_run_artifacts(self, run_id: int, name: str | None = None
                                 ) -> list[ArtifactInfo]: ...
    async def download_artifact(self, artifact_id: int,
                                max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES) -> bytes: ...


# ----------------------------------------------------------------- PyGithub adapter


class BoundedGithubRetry(GithubRetry):
    """``GithubRetry`` whose ``Retry-After`` sleeps are bounded too.

    PyGithub applies ``max_rate_limit_wait`` to rate-limit resets only; a 403/429 carrying
    ``Retry-After`` is slept by urllib3 for whatever the header says.  Here a longer wait
    raises ``RateLimitExceededExceedsMaxWait`` (mapped to :class:`GitHubRetryableError` with
    ``retry_after``), so the delivery is retried later instead of a worker sleeping.
    """

    def get_retry_after(self, response: Any) -> float | None:  # type: ignore[override]
        wait = super().get_retry_after(response)
        limit = self.max_rate_limit_wait
        if wait is not None and limit is not None and wait > limit:
            raise RateLimitExceededExceedsMaxWait(
                response.status, {"message": "Retry-After exceeds max_rate_limit_wait"},
                dict(response.headers), wait=wait)
        return wait


def make_retry(
    *,
    total: int = 4,
    backoff_factor: float = 1.0,
    secondary_rate_wait: float = 60.0,
    max_rate_limit_wait: float = 120.0,
) -> GithubRetry:
    """A :class:`BoundedGithubRetry` that retries reads only.

    ``total`` attempts after the first; ``backoff_factor`` seconds grow exponentially
    between 5xx retries; a secondary rate limit without ``Retry-After`` waits
    ``secondary_rate_wait`` s (GitHub: "wait at least one minute", GITHUB.md §9.2); a wait
    longer than ``max_rate_limit_wait`` s raises instead of sleeping (so a webhook worker
    does not sleep for an hour; the delivery is retried later instead).
    """
    return BoundedGithubRetry(
        total=total,
        backoff_factor=backoff_factor,
        allowed_methods=READ_METHODS,
        secondary_rate_wait=secondary_rate_wait,
        max_rate_limit_wait=max_rate_limit_wait,
    )


def make_client(
    base_url: str,
    auth: Auth.Auth,
    *,
    retry: GithubRetry | None = None,
    throttle: bool = True,
    timeout: float = 30.0,
) -> Github:
    """A PyGithub client: lazy objects, 100 per page, read-only retries.

    ``throttle`` paces requests: 1 s between writes (GitHub's best practices ask for at least
    1 s between mutating requests, GITHUB.md §9.3) and 0.05 s between any two requests
    (PyGithub's default 0.25 s made one review of a 30-file campaign take 18 s, of which
    15 s idle; 20 reads/s stays far below the 900 points/min per-endpoint secondary limit).
    Tests turn it off.
    """
    kwargs: dict[str, Any] = {"seconds_between_requests": 0.05, "seconds_between_writes": 1.0}
    if not throttle:
        kwargs.update(seconds_between_requests=None, seconds_between_writes=None)
    return Github(
        auth=auth,
        base_url=base_url.rstrip("/"),
        lazy=True,
        per_page=100,
        retry=retry if retry is not None else make_retry(),
        timeout=int(timeout),
        **kwargs,
    )


def _retry_after(exc: GithubException) -> float | None:
    headers = {k.lower(): v for k, v in (exc.headers or {}).items()}
    ra = headers.get("retry-after")
    if ra is not None:
        try:
            return float(ra)
        except ValueError:
            return None
    if headers.get("x-ratelimit-remaining") == "0" and headers.get("x-ratelimit-reset"):
        try:
            return max(0.0, float(headers["x-ratelimit-reset"]) - time.time()) + 1.0
        except ValueError:
            return None
    return None


def map_exception(exc: BaseException, what: str) -> GitHubError:
    """Translate a PyGithub / requests exception into this module's error types."""
    if isinstance(exc, GitHubError):
        return exc
    if isinstance(exc, RateLimitExceededExceedsMaxWait):
        return GitHubRetryableError(f"{what}: rate limited by GitHub", exc.status,
                                    retry_after=getattr(exc, "wait", None))
    if isinstance(exc, RateLimitExceededException):
        return GitHubRetryableError(f"{what}: rate limited by GitHub", exc.status,
                                    retry_after=_retry_after(exc))
    if isinstance(exc, GithubException):
        msg = exc.message or (exc.data.get("message") if isinstance(exc.data, dict) else None)
        errors = exc.data.get("errors") if isinstance(exc.data, dict) else None
        text = f"{what}: GitHub answered {exc.status}: {msg or ''}".rstrip(": ")
        if errors:
            text += f" ({errors})"
        if exc.status == 429 or (exc.status is not None and exc.status >= 500):
            return GitHubRetryableError(text, exc.status, retry_after=_retry_after(exc))
        if exc.status == 403 and _retry_after(exc) is not None:
            return GitHubRetryableError(text, exc.status, retry_after=_retry_after(exc))
        if exc.status == 404:
            return GitHubNotFound(text, 404)
        if exc.status == 422:
            return GitHubValidationError(text, 422)
        return GitHubError(text, exc.status)
    if isinstance(exc, requests.exceptions.RequestException):
        return GitHubRetryableError(f"{what}: {type(exc).__name__}: {exc}")
    return GitHubError(f"{what}: {type(exc).__name__}: {exc}")


class PyGithubPort:
    """:class:`GitHubPort` on PyGithub for repository ``repo``.

    ``client`` is a :func:`make_client` Github; ``auth`` is the same Auth object (used for the
    artifact download, which PyGithub has no helper for); ``base_url`` the REST base URL.
    """

    def __init__(self, client: Github, repo: str, bot_login: str, *, auth: Auth.Auth,
                 base_url: str) -> None:
        self.client = client
        self.repo = repo
        self.bot_login = bot_login
        self._auth = auth
        self.base_url = base_url.rstrip("/")
        self._repo_obj: Any = None

    # -- plumbing -------------------------------------------------------------------------

    def _r(self) -> Any:
        if self._repo_obj is None:
            self._repo_obj = self.client.get_repo(self.repo)  # lazy: no request
        return self._repo_obj

    def _comment(self, comment_id: int) -> Any:
        """A lazy IssueComment (no GET): PyGithub has no repo-level getter by id."""
        from github.IssueComment import IssueComment

        return IssueComment(self.client.requester,
                            url=f"{self._r().url}/issues/comments/{comment_id}")

    async def _call(self, what: str, method: str, fn: Callable[[], T]) -> T:
        def run() -> T:
            try:
                out = fn()
            except Exception as exc:  # noqa: BLE001 - translated, never swallowed
                err = map_exception(exc, what)
                self._count(method)
                raise err from exc
            self._count(method)
            return out

        return await asyncio.to_thread(run)

    def _count(self, method: str) -> None:
        remaining = self.client.requester.rate_limiting[0]
        metrics.github_call(method, remaining if remaining >= 0 else None)

    # -- contents --------------------------------------------------------------------------

    async def get_default_branch(self) -> str:
        """The repository's default branch name."""
        return await self._call("get repository", "GET", lambda: self._r().default_branch)

    async def get_file(self, path: str, ref: str) -> bytes | None:
        """File bytes at ``ref`` (branch, tag or SHA); None when absent.  Files over 1 MB
        (the contents API limit) raise :class:`GitHubError`."""

        def fn() -> bytes | None:
            try:
                c = self._r().get_contents(path, ref=ref)
            except GithubException as exc:
                if exc.status == 404:
                    return None
                raise
            if isinstance(c, list):
                raise GitHubError(f"{path} is a directory at {ref}")
            if c.encoding != "base64":
                raise GitHubError(f"{path} at {ref}: {c.size} bytes, too large for the "
                                  "contents API (1 MB)")
            return bytes(c.decoded_content)

        return await self._call(f"get {path}@{ref}", "GET", fn)

    async def list_dir(self, path: str, ref: str) -> list[ContentEntry]:
        """Entries of directory ``path`` at ``ref``; [] when absent."""

        def fn() -> list[ContentEntry]:
            try:
                c = self._r().get_contents(path, ref=ref)
            except GithubException as exc:
                if exc.status == 404:
                    return []
                raise
            items = c if isinstance(c, list) else [c]
            return [ContentEntry(i.path, i.type, i.size or 0, i.sha or "") for i in items]

        return await self._call(f"list {path}@{ref}", "GET", fn)

    # -- pulls and issues --------------------------------------------------------------------

    async def get_pull(self, number: int) -> PullInfo:
        """PR ``number`` (head SHA, base, fork flag)."""

        def fn() -> PullInfo:
            p = self._r().get_pull(number)
            head_repo = p.head.repo.full_name if p.head.repo is not None else None
            base_repo = p.base.repo.full_name
            return PullInfo(number=p.number, title=p.title or "", author=p.user.login,
                            state=p.state, head_sha=p.head.sha, head_ref=p.head.ref,
                            head_repo=head_repo, base_ref=p.base.ref, base_sha=p.base.sha,
                            base_repo=base_repo, is_fork=head_repo != base_repo)

        return await self._call(f"get PR #{number}", "GET", fn)

    async def list_pull_files(self, number: int) -> list[FileChange]:
        """Changed files of PR ``number`` with their patches (GitHub lists at most 3000)."""
        return await self._call(
            f"list files of PR #{number}", "GET",
            lambda: [FileChange(f.filename, f.status, f.patch)
                     for f in self._r().get_pull(number).get_files()])

    async def get_permission(self, login: str) -> str:
        """``admin``, ``write``, ``read`` or ``none``; a 404 (not a collaborator) is ``none``
        (GITHUB.md §3.3)."""

        def fn() -> str:
            try:
                return str(self._r().get_collaborator_permission(login))
            except GithubException as exc:
                if exc.status == 404:
                    return "none"
                raise

        return await self._call(f"permission of {login}", "GET", fn)

    async def get_issue(self, number: int) -> IssueInfo:
        """Issue (or PR) ``number``."""

        def fn() -> IssueInfo:
            i = self._r().get_issue(number)
            return IssueInfo(i.number, i.title or "", i.body or "", i.user.login, i.state,
                             i.pull_request is not None)

        return await self._call(f"get issue #{number}", "GET", fn)

    async def edit_issue_body(self, number: int, body: str) -> None:
        """Replace the body of issue ``number`` (PATCH sends only ``body``)."""
        await self._call(f"edit issue #{number}", "PATCH",
                         lambda: self._r().get_issue(number).edit(body=body))

    async def list_issue_comments(self, number: int) -> list[Comment]:
        """Conversation comments of issue/PR ``number``, oldest first."""
        return await self._call(
            f"list comments of #{number}", "GET",
            lambda: [Comment(c.id, c.body or "", c.user.login, c.user.type, c.html_url)
                     for c in self._r().get_issue(number).get_comments()])

    async def create_issue_comment(self, number: int, body: str) -> Comment:
        """Post a comment on issue/PR ``number`` (never retried by the HTTP layer)."""

        def fn() -> Comment:
            c = self._r().get_issue(number).create_comment(body)
            return Comment(c.id, c.body or "", c.user.login, c.user.type, c.html_url)

        out = await self._call(f"comment on #{number}", "POST", fn)
        if out.user != self.bot_login:
            # the bot finds its own comments by login: a wrong setting means duplicates
            log.error("GitHub says this bot writes as %r but CAMPAIGN_BOT_BOT_LOGIN is %r: "
                      "set it to %r, or the bot will not find (and so repeat) its comments",
                      out.user, self.bot_login, out.user)
        return out

    async def edit_issue_comment(self, comment_id: int, body: str) -> Comment:
        """Replace comment ``comment_id``'s body."""

        def fn() -> Comment:
            c = self._comment(comment_id)
            c.edit(body)
            return Comment(c.id, body, c.user.login, c.user.type, c.html_url)

        # get_issue_comment is lazy: only the PATCH is sent
        return await self._call(f"edit comment {comment_id}", "PATCH", fn)

    async def add_reaction(self, comment_id: int, content: str) -> None:
        """React to a comment (e.g. ``eyes`` to acknowledge a command)."""
        await self._call(f"react to comment {comment_id}", "POST",
                         lambda: self._comment(comment_id).create_reaction(content))

    # -- reviews ---------------------------------------------------------------------------

    async def list_reviews(self, number: int) -> list[Review]:
        """Submitted reviews of PR ``number``."""
        return await self._call(
            f"list reviews of PR #{number}", "GET",
            lambda: [Review(r.id, r.body or "", r.user.login if r.user else "", r.commit_id,
                            r.state) for r in self._r().get_pull(number).get_reviews()])

    async def list_review_comments(self, number: int) -> list[ReviewComment]:
        """Inline review comments of PR ``number``."""
        return await self._call(
            f"list review comments of PR #{number}", "GET",
            lambda: [ReviewComment(c.id, c.body or "", c.user.login if c.user else "",
                                   c.path, c.line, c.commit_id)
                     for c in self._r().get_pull(number).get_review_comments()])

    async def create_review(self, number: int, commit_sha: str, body: str,
                            comments: Sequence[InlineComment]) -> Review:
        """One ``COMMENT`` review pinned to ``commit_sha`` with inline ``comments``.  One
        comment outside the diff fails the whole call with :class:`GitHubValidationError`."""

        def fn() -> Review:
            repo = self._r()
            pr = repo.get_pull(number)
            commit = repo.get_commit(commit_sha)  # lazy Commit object: PyGithub asserts type
            payload: list[dict[str, Any]] = []
            for c in comments:
                item: dict[str, Any] = {"path": c.path, "line": c.line, "side": c.side,
                                        "body": c.body}
                if c.start_line is not None:
                    item.update(start_line=c.start_line, start_side=c.side)
                payload.append(item)
            r = pr.create_review(commit=commit, body=body, event="COMMENT",
                                 comments=payload)  # type: ignore[arg-type]
            return Review(r.id, r.body or "", r.user.login if r.user else "", r.commit_id,
                          r.state)

        return await self._call(f"review PR #{number}", "POST", fn)

    # -- check runs --------------------------------------------------------------------------

    @staticmethod
    def _check(r: Any) -> CheckRun:
        out = r.output
        return CheckRun(r.id, r.name, r.head_sha, r.status, r.conclusion,
                        out.title if out else None, out.summary if out else None,
                        r.external_id or None)

    @staticmethod
    def _output(title: str | None, summary: str | None, text: str | None) -> dict[str, str]:
        out: dict[str, str] = {}
        if title is not None:
            out["title"] = title
        if summary is not None:
            out["summary"] = summary
        if text is not None:
            out["text"] = text
        return out

    async def list_check_runs(self, sha: str, name: str) -> list[CheckRun]:
        """Check runs called ``name`` on commit ``sha``."""
        return await self._call(
            f"list check runs {name}@{sha[:12]}", "GET",
            lambda: [self._check(r) for r in
                     self._r().get_commit(sha).get_check_runs(check_name=name)])

    async def create_check_run(self, name: str, head_sha: str, *, status: str,
                               conclusion: str | None = None, title: str | None = None,
                               summary: str | None = None, text: str | None = None,
                               external_id: str | None = None) -> CheckRun:
        """Create a check run (needs an App with checks:write)."""

        def fn() -> CheckRun:
            kw: dict[str, Any] = {"status": status}
            if conclusion is not None:
                kw.update(conclusion=conclusion, completed_at=datetime.now(UTC))
            if external_id is not None:
                kw["external_id"] = external_id
            out = self._output(title, summary, text)
            if out:
                kw["output"] = out
            return self._check(self._r().create_check_run(name, head_sha, **kw))

        return await self._call(f"create check run {name}", "POST", fn)

    async def update_check_run(self, check_run_id: int, *, status: str | None = None,
                               conclusion: str | None = None, title: str | None = None,
                               summary: str | None = None, text: str | None = None) -> CheckRun:
        """Update check run ``check_run_id`` (a conclusion completes it)."""

        def fn() -> CheckRun:
            kw: dict[str, Any] = {}
            if status is not None:
                kw["status"] = status
            if conclusion is not None:
                kw.update(conclusion=conclusion, completed_at=datetime.now(UTC))
            out = self._output(title, summary, text)
            if out:
                kw["output"] = out
            r = self._r().get_check_run(check_run_id)  # lazy: only the PATCH is sent
            r.edit(**kw)
            return self._check(r)

        return await self._call(f"update check run {check_run_id}", "PATCH", fn)

    # -- actions ---------------------------------------------------------------------------

    async def dispatch_workflow(self, workflow_file: str, ref: str,
                                inputs: dict[str, str]) -> DispatchResult:
        """``workflow_dispatch`` of ``.github/workflows/WORKFLOW_FILE`` on branch/tag ``ref``
        (GitHub refuses a SHA).  Raises on failure (``throw=True``); returns the run id when
        GitHub gives run details (``return_run_details``)."""

        def fn() -> DispatchResult:
            wf = self._r().get_workflow(workflow_file)
            out = wf.create_dispatch(ref=ref, inputs=inputs, throw=True,
                                     return_run_details=True)
            if out is True or out is False or out is None:
                return DispatchResult(None, None, None)
            return DispatchResult(out.id, out.url, out.html_url)

        return await self._call(f"dispatch {workflow_file}@{ref}", "POST", fn)

    async def get_workflow_run(self, run_id: int) -> WorkflowRunInfo:
        """Workflow run ``run_id``."""

        def fn() -> WorkflowRunInfo:
            r = self._r().get_workflow_run(run_id)
            return WorkflowRunInfo(r.id, r.head_sha, r.status, r.conclusion,
                                   r.display_title or "", r.event, r.run_attempt or 1)

        return await self._call(f"get run {run_id}", "GET", fn)

    async def list_run_artifacts(self, run_id: int, name: str | None = None
                                 ) -> list[ArtifactInfo]:
        """Artifacts of run ``run_id`` (optionally only those called ``name``)."""

        def fn() -> list[ArtifactInfo]:
            arts = self._r().get_workflow_run(run_id).get_artifacts()
            return [ArtifactInfo(a.id, a.name, a.size_in_bytes, a.expired) for a in arts
                    if name is None or a.name == name]

        return await self._call(f"list artifacts of run {run_id}", "GET", fn)

    async def download_artifact(self, artifact_id: int,
                                max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES) -> bytes:
        """The artifact's zip bytes.  GitHub answers 302 to a URL valid for one minute; it is
        fetched without our token (another host).  More than ``max_bytes`` raises
        :class:`GitHubError`; an expired artifact (410) raises :class:`GitHubNotFound`."""

        def fn() -> bytes:
            url = f"{self.base_url}/repos/{self.repo}/actions/artifacts/{artifact_id}/zip"
            token = getattr(self._auth, "token", None)
            headers = {"Accept": "application/vnd.github+json"}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            r = requests.get(url, headers=headers, allow_redirects=False, timeout=30)
            if r.status_code == 410:
                raise GitHubNotFound(f"artifact {artifact_id} has expired", 410)
            if r.status_code != 302 or "Location" not in r.headers:
                raise GithubException(r.status_code, _json_or_text(r), dict(r.headers))
            with requests.get(r.headers["Location"], stream=True, timeout=60) as blob:
                if blob.status_code != 200:
                    raise GithubException(blob.status_code, {"message": "artifact blob"},
                                          dict(blob.headers))
                out = bytearray()
                for chunk in blob.iter_content(1 << 16):
                    out += chunk
                    if len(out) > max_bytes:
                        raise GitHubError(f"artifact {artifact_id} exceeds {max_bytes} bytes")
                return bytes(out)

        return await self._call(f"download artifact {artifact_id}", "GET", fn)


def _json_or_text(r: requests.Response) -> Any:
    try:
        return r.json()
    except ValueError:
        return {"message": r.text[:200]}


# ------------------------------------------------------------------- context factory


class GitHubSettings(Protocol):
    """The settings :func:`context_for` reads (``bot.settings.Settings`` satisfies it)."""

    app_id: int | None
    github_api_url: str
    bot_login: str

    def private_key_pem(self) -> str | None: ...


def _token_of(settings: Any) -> str | None:
    tok = getattr(settings, "token", None) or getattr(settings, "github_token", None)
    if tok is None:
        return None
    return tok.get_secret_value() if hasattr(tok, "get_secret_value") else str(tok)


class NoRepositoryPort:
    """Port for events that concern no repository (``installation``, ``ping``): every call
    raises :class:`GitHubError`."""

    repo = ""

    def __init__(self, bot_login: str) -> None:
        self.bot_login = bot_login

    def __getattr__(self, name: str) -> Any:
        async def refuse(*args: Any, **kwargs: Any) -> Any:
            raise GitHubError(f"{name}: this event concerns no repository")

        return refuse


def context_for(
    settings: Any,
    *,
    retry: GithubRetry | None = None,
    throttle: bool = True,
) -> Callable[[Event], Awaitable[tuple[GitHubPort, RepoConfig | None]]]:
    """The worker's factory: for each event, a port for its repository (GitHub App
    installation auth when ``settings.app_id`` and a private key are set, else token auth)
    and the repository's ``.github/campaign-bot.toml`` from the default branch (None when
    absent or broken; see :mod:`bot.repo_config`).

    Clients are cached per installation (installation tokens refresh themselves).  The
    factory raises :class:`GitHubError` for an event when neither App credentials nor a token
    are configured (the service still starts: deliveries are stored and can be retried).
    """
    from bot import repo_config

    base_url = str(getattr(settings, "github_api_url", "https://api.github.com"))
    bot_login = str(getattr(settings, "bot_login", "campaign-bot[bot]"))
    app_id = getattr(settings, "app_id", None) or getattr(settings, "github_app_id", None)
    pem = settings.private_key_pem() if hasattr(settings, "private_key_pem") else \
        getattr(settings, "github_private_key", None)
    token = _token_of(settings)
    clients: dict[Any, tuple[Github, Auth.Auth]] = {}
    app_auth = Auth.AppAuth(int(app_id), pem) if app_id and pem else None

    def client_for(event: Event) -> tuple[Github, Auth.Auth]:
        if app_auth is None:
            key: Any = "token"
            if key not in clients:
                auth: Auth.Auth = Auth.Token(token)  # type: ignore[arg-type]
                clients[key] = (make_client(base_url, auth, retry=retry, throttle=throttle),
                                auth)
            return clients[key]
        inst = event.installation_id
        if inst is None:
            owner, name = (event.repo_full_name or "/").split("/", 1)
            gi = GithubIntegration(auth=app_auth, base_url=base_url)
            inst = gi.get_repo_installation(owner, name).id
        if inst not in clients:
            auth = app_auth.get_installation_auth(inst)
            clients[inst] = (make_client(base_url, auth, retry=retry, throttle=throttle), auth)
        return clients[inst]

    async def factory(event: Event) -> tuple[GitHubPort, RepoConfig | None]:
        if not event.repo_full_name:
            return NoRepositoryPort(bot_login), None  # type: ignore[return-value]
        if app_auth is None and not token:
            raise GitHubError("no GitHub credentials: set CAMPAIGN_BOT_APP_ID and "
                              "CAMPAIGN_BOT_PRIVATE_KEY(_FILE), or CAMPAIGN_BOT_TOKEN")
        try:
            client, auth = await asyncio.to_thread(client_for, event)
        except Exception as exc:  # noqa: BLE001 - translated
            raise map_exception(exc, f"installation for {event.repo_full_name}") from exc
        port = PyGithubPort(client, event.repo_full_name, bot_login, auth=auth,
                            base_url=base_url)
        loaded = await repo_config.load(port)
        return port, loaded.config

    return factory


# ------------------------------------------------------------------- recording port


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

        async def read(*args: Any, **kwargs: Any) -> Any:
            if self.delegate is None:
                raise GitHubError(f"{name}: dry run without GitHub access")
            return await getattr(self.delegate, name)(*args, **kwargs)

        return read

    async def edit_issue_body(self, number: int, body: str) -> None:
        """Record an issue body edit."""
        self._record("edit_issue_body", number=number, body=body)

    async def create_issue_comment(self, number: int, body: str) -> Comment:
        """Record a new comment."""
        self._record("create_issue_comment", number=number, body=body)
        return Comment(self._id(), body, self.bot_login, "Bot")

    async def edit_issue_comment(self, comment_id: int, body: str) -> Comment:
        """Record a comment edit."""
        self._record("edit_issue_comment", comment_id=comment_id, body=body)
        return Comment(comment_id, body, self.bot_login, "Bot")

    async def add_reaction(self, comment_id: int, content: str) -> None:
        """Record a reaction."""
        self._record("add_reaction", comment_id=comment_id, content=content)

    async def create_review(self, number: int, commit_sha: str, body: str,
                            comments: Sequence[InlineComment]) -> Review:
        """Record a review with its inline comments."""
        self._record("create_review", number=number, commit_sha=commit_sha, body=body,
                     comments=[asdict(c) for c in comments])
        return Review(self._id(), body, self.bot_login, commit_sha, "COMMENTED")

    async def create_check_run(self, name: str, head_sha: str, *, status: str,
                               conclusion: str | None = None, title: str | None = None,
                               summary: str | None = None, text: str | None = None,
                               external_id: str | None = None) -> CheckRun:
        """Record a check run creation."""
        self._record("create_check_run", name=name, head_sha=head_sha, status=status,
                     conclusion=conclusion, title=title, summary=summary)
        return CheckRun(self._id(), name, head_sha, "completed" if conclusion else status,
                        conclusion, title, summary, external_id)

    async def update_check_run(self, check_run_id: int, *, status: str | None = None,
                               conclusion: str | None = None, title: str | None = None,
                               summary: str | None = None, text: str | None = None) -> CheckRun:
        """Record a check run update."""
        self._record("update_check_run", check_run_id=check_run_id, status=status,
                     conclusion=conclusion, title=title, summary=summary)
        return CheckRun(check_run_id, "", "", "completed" if conclusion else status or "",
                        conclusion, title, summary)

    async def dispatch_workflow(self, workflow_file: str, ref: str,
                                inputs: dict[str, str]) -> DispatchResult:
        """Record a workflow dispatch."""
        self._record("dispatch_workflow", workflow_file=workflow_file, ref=ref, inputs=inputs)
        return DispatchResult(None, None, None)


_READS = frozenset({
    "get_default_branch", "get_file", "list_dir", "get_pull", "list_pull_files",
    "get_permission", "get_issue", "list_issue_comments", "list_reviews",
    "list_review_comments", "list_check_runs", "get_workflow_run", "list_run_artifacts",
    "download_artifact",
})
