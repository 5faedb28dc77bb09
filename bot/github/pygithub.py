"""The PyGithub 2.10 adapter of :class:`bot.github.GitHubPort`, and the clients it runs on.

Each port call runs PyGithub (synchronous, requests-based) on the caller's thread: the
worker's thread pool, never an event loop.  Only PyGithub's public API is used
(``Github.requester`` is its documented way to call endpoints it has no method for).

PyGithub traps handled here (read in its 2.10.0 source):

- ``PullRequest.create_review`` asserts a ``github.Commit.Commit``: we pass
  ``repo.get_commit(sha)`` built lazily (``lazy=True``: no request is made for it).
- ``Workflow.create_dispatch`` returns ``False`` on failure unless ``throw=True``: we always
  throw, and ask for ``return_run_details``.
- PyGithub's default ``GithubRetry`` re-sends POSTs on 5xx: a POST that GitHub performed but
  answered 502 would post a second comment.  :func:`bot.github.client.make_retry` retries only
  GET/HEAD/OPTIONS; a failed write surfaces as :class:`GitHubRetryableError` and the delivery
  is retried as a whole, where handlers find their earlier write by its hidden marker instead
  of repeating it.
- Secondary rate limits (403/429 with ``Retry-After``): GETs back off (urllib3 honours
  ``Retry-After``; without it PyGithub waits ``secondary_rate_wait``), bounded by
  ``max_rate_limit_wait``; writes raise :class:`GitHubRetryableError` carrying ``retry_after``.
- There is no artifact download helper (PyGithub/PyGithub#1985):
  :meth:`PyGithubPort.download_artifact` asks for the 302 itself and fetches the short-lived
  URL without the ``Authorization`` header.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, TypeVar

from github import Auth, Github, GithubException, GithubIntegration, GithubRetry

from bot.github.artifacts import ArtifactError, ArtifactTooLarge, Limits, download_zip
from bot.github.client import make_client, map_exception
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
    GitHubNotConfigured,
    GitHubNotFound,
    GitHubRetryableError,
    GitRemote,
    InlineComment,
    IssueInfo,
    PullInfo,
    Review,
    ReviewComment,
    WorkflowRunInfo,
)

if TYPE_CHECKING:
    from bot.metrics import Metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

class PyGithubPort:
    """:class:`GitHubPort` on PyGithub for repository ``repo``.

    ``client`` is a :func:`make_client` Github; ``auth`` is the same Auth object (its token
    authorises the artifact download, which PyGithub has no helper for); ``base_url`` the
    REST base URL; ``metrics`` counts every request (none counted when None), its rate limit
    under ``installation`` (the App installation id, or ``token``).
    """

    def __init__(self, client: Github, repo: str, bot_login: str, *, auth: Auth.Auth,
                 base_url: str, metrics: Metrics | None = None,
                 installation: str = "token") -> None:
        self.client = client
        self.installation = installation
        self.repo = repo
        self.bot_login = bot_login
        self._auth = auth
        self.base_url = base_url.rstrip("/")
        self.metrics = metrics
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

    def _call(self, what: str, method: str, fn: Callable[[], T], *,
              route: str = "other") -> T:
        """Run the blocking PyGithub call ``fn`` (on the caller's thread); count it on
        ``metrics`` with its ``route`` family (:data:`bot.metrics.ROUTE_CLASSES`) and GitHub's
        status (200 when it succeeded, the error's status, None when no answer came);
        translate its error."""
        try:
            out = fn()
        except Exception as exc:  # noqa: BLE001 - translated, never swallowed
            err = map_exception(exc, what)
            status = exc.status if isinstance(exc, GithubException) else None
            self._count(method, route, status)
            raise err from exc
        self._count(method, route, 200)
        return out

    def _count(self, method: str, route: str, status: int | None) -> None:
        if self.metrics is None:
            return
        remaining = self.client.requester.rate_limiting[0]
        self.metrics.github_call(method, remaining if remaining >= 0 else None, route=route,
                                 status=status, installation=self.installation)

    # -- contents --------------------------------------------------------------------------

    def get_default_branch(self) -> str:
        """The repository's default branch name."""
        return self._call("get repository", "GET", lambda: self._r().default_branch,
                          route="repos")

    def get_file(self, path: str, ref: str) -> bytes | None:
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

        return self._call(f"get {path}@{ref}", "GET", fn, route="contents")

    def list_dir(self, path: str, ref: str) -> list[ContentEntry]:
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

        return self._call(f"list {path}@{ref}", "GET", fn, route="contents")

    def git_remote(self, *, push: bool = False) -> GitRemote:
        """The repository's HTTPS git URL (from the REST base URL: ``api.github.com`` ->
        ``github.com``, ``HOST/api/v3`` -> ``HOST``) and this port's token (an installation
        token is refreshed by PyGithub when it is about to expire); no REST call."""
        from bot.github.git import remote_url

        token = str(self._auth.token)  # type: ignore[attr-defined]
        return GitRemote(remote_url(self.base_url, self.repo), token)

    # -- pulls and issues --------------------------------------------------------------------

    def get_pull(self, number: int) -> PullInfo:
        """PR ``number`` (head SHA, base, fork flag)."""

        def fn() -> PullInfo:
            p = self._r().get_pull(number)
            head_repo = p.head.repo.full_name if p.head.repo is not None else None
            base_repo = p.base.repo.full_name
            return PullInfo(number=p.number, title=p.title or "", author=p.user.login,
                            state=p.state, head_sha=p.head.sha, head_ref=p.head.ref,
                            head_repo=head_repo, base_ref=p.base.ref, base_sha=p.base.sha,
                            base_repo=base_repo, is_fork=head_repo != base_repo)

        return self._call(f"get PR #{number}", "GET", fn, route="pulls")

    def list_pull_files(self, number: int) -> list[FileChange]:
        """Changed files of PR ``number`` with their patches (GitHub lists at most 3000)."""
        return self._call(
            f"list files of PR #{number}", "GET",
            lambda: [FileChange(f.filename, f.status, f.patch)
               for f in self._r().get_pull(number).get_files()], route="pulls")

    def branch_protected(self, branch: str) -> bool:
        """Whether ``branch`` of the repository is protected (``protected`` of GitHub's "Get
        a branch", which needs Contents read; no admin rights are needed for the flag)."""
        return self._call(f"get branch {branch}", "GET",
                          lambda: bool(self._r().get_branch(branch).protected), route="repos")

    def list_open_pulls(self, *, head: str | None = None,
                        base: str | None = None) -> list[PullInfo]:
        """Open PRs of the repository whose head is branch ``head`` of this repository
        (GitHub's ``head=OWNER:BRANCH`` filter) and/or whose base is ``base``."""
        owner = self.repo.split("/", 1)[0]
        kw: dict[str, str] = {"state": "open"}
        if head is not None:
            kw["head"] = f"{owner}:{head}"
        if base is not None:
            kw["base"] = base

        def fn() -> list[PullInfo]:
            out = []
            for p in self._r().get_pulls(**kw):
                head_repo = p.head.repo.full_name if p.head.repo is not None else None
                base_repo = p.base.repo.full_name
                out.append(PullInfo(
                    number=p.number, title=p.title or "", author=p.user.login, state=p.state,
                    head_sha=p.head.sha, head_ref=p.head.ref, head_repo=head_repo,
                    base_ref=p.base.ref, base_sha=p.base.sha, base_repo=base_repo,
                    is_fork=head_repo != base_repo))
            return out

        return self._call("list open PRs", "GET", fn, route="pulls")

    def get_permission(self, login: str) -> str:
        """``admin``, ``write``, ``read`` or ``none``; a 404 (not a collaborator) is ``none``
        (GitHub REST, "Get repository permissions for a user")."""

        def fn() -> str:
            try:
                return str(self._r().get_collaborator_permission(login))
            except GithubException as exc:
                if exc.status == 404:
                    return "none"
                raise

        return self._call(f"permission of {login}", "GET", fn, route="collaborators")

    def get_issue(self, number: int) -> IssueInfo:
        """Issue (or PR) ``number``."""

        def fn() -> IssueInfo:
            i = self._r().get_issue(number)
            return IssueInfo(i.number, i.title or "", i.body or "", i.user.login, i.state,
                             i.pull_request is not None,
                             tuple(lb.name for lb in (i.labels or [])))

        return self._call(f"get issue #{number}", "GET", fn, route="issues")

    def edit_issue_body(self, number: int, body: str) -> None:
        """Replace the body of issue ``number`` (PATCH sends only ``body``)."""
        self._call(f"edit issue #{number}", "PATCH",
                   lambda: self._r().get_issue(number).edit(body=body), route="issues")

    def list_issue_comments(self, number: int) -> list[Comment]:
        """Conversation comments of issue/PR ``number``, oldest first."""
        return self._call(
            f"list comments of #{number}", "GET",
            lambda: [Comment(c.id, c.body or "", c.user.login, c.user.type, c.html_url)
               for c in self._r().get_issue(number).get_comments()], route="issues")

    def create_issue_comment(self, number: int, body: str) -> Comment:
        """Post a comment on issue/PR ``number`` (never retried by the HTTP layer)."""

        def fn() -> Comment:
            c = self._r().get_issue(number).create_comment(body)
            return Comment(c.id, c.body or "", c.user.login, c.user.type, c.html_url)

        out = self._call(f"comment on #{number}", "POST", fn, route="issues")
        if out.user != self.bot_login:
            # the bot finds its own comments by login: a wrong setting means duplicates
            log.error("GitHub says this bot writes as %r but CAMPAIGN_BOT_BOT_LOGIN is %r: "
                      "set it to %r, or the bot will not find (and so repeat) its comments",
                      out.user, self.bot_login, out.user)
        return out

    def edit_issue_comment(self, comment_id: int, body: str) -> Comment:
        """Replace comment ``comment_id``'s body."""

        def fn() -> Comment:
            c = self._comment(comment_id)
            c.edit(body)
            return Comment(c.id, body, c.user.login, c.user.type, c.html_url)

        # get_issue_comment is lazy: only the PATCH is sent
        return self._call(f"edit comment {comment_id}", "PATCH", fn, route="issues")

    def add_reaction(self, comment_id: int, content: str) -> None:
        """React to a comment (e.g. ``eyes`` to acknowledge a command)."""
        self._call(f"react to comment {comment_id}", "POST",
                   lambda: self._comment(comment_id).create_reaction(content), route="issues")

    # -- reviews ---------------------------------------------------------------------------

    def list_reviews(self, number: int) -> list[Review]:
        """Submitted reviews of PR ``number``."""
        return self._call(
            f"list reviews of PR #{number}", "GET",
            lambda: [Review(r.id, r.body or "", r.user.login if r.user else "", r.commit_id,
                      r.state) for r in self._r().get_pull(number).get_reviews()],
                      route="pulls")

    def list_review_comments(self, number: int) -> list[ReviewComment]:
        """Inline review comments of PR ``number``."""
        return self._call(
            f"list review comments of PR #{number}", "GET",
            lambda: [ReviewComment(c.id, c.body or "", c.user.login if c.user else "",
                             c.path, c.line, c.commit_id)
               for c in self._r().get_pull(number).get_review_comments()], route="pulls")

    def create_review(self, number: int, commit_sha: str, body: str,
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

        return self._call(f"review PR #{number}", "POST", fn, route="pulls")

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

    def list_check_runs(self, sha: str, name: str) -> list[CheckRun]:
        """Check runs called ``name`` on commit ``sha``."""
        return self._call(
            f"list check runs {name}@{sha[:12]}", "GET",
            lambda: [self._check(r) for r in
               self._r().get_commit(sha).get_check_runs(check_name=name)], route="checks")

    def create_check_run(self, name: str, head_sha: str, *, status: str,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None, text: str | None = None,
                         external_id: str | None = None, details_url: str | None = None,
                         started_at: datetime | None = None,
                         actions: Sequence[CheckAction] | None = None) -> CheckRun:
        """Create a check run (needs an App with checks:write); times are UTC; ``actions``:
        its buttons (at most three)."""

        def fn() -> CheckRun:
            kw: dict[str, Any] = {"status": status}
            if conclusion is not None:
                kw.update(conclusion=conclusion, completed_at=datetime.now(UTC))
            if external_id is not None:
                kw["external_id"] = external_id
            if details_url:
                kw["details_url"] = details_url
            if started_at is not None:
                kw["started_at"] = started_at
            if actions is not None:
                kw["actions"] = [a.as_json() for a in actions]
            out = self._output(title, summary, text)
            if out:
                kw["output"] = out
            return self._check(self._r().create_check_run(name, head_sha, **kw))

        return self._call(f"create check run {name}", "POST", fn, route="checks")

    def update_check_run(self, check_run_id: int, *, status: str | None = None,
                         conclusion: str | None = None, title: str | None = None,
                         summary: str | None = None, text: str | None = None,
                         details_url: str | None = None,
                         annotations: Sequence[Annotation] | None = None,
                         actions: Sequence[CheckAction] | None = None) -> CheckRun:
        """Update check run ``check_run_id`` (a conclusion completes it).  ``annotations``
        (at most 50: GitHub appends them to those already there) need ``title`` and
        ``summary`` in the same request; ``actions`` replace the run's buttons (``[]``
        removes them)."""
        if annotations and (title is None or summary is None):
            raise ValueError("annotations need the output's title and summary")
        if annotations and len(annotations) > 50:
            raise ValueError("at most 50 annotations per request")

        def fn() -> CheckRun:
            kw: dict[str, Any] = {}
            if status is not None:
                kw["status"] = status
            if conclusion is not None:
                kw.update(conclusion=conclusion, completed_at=datetime.now(UTC))
            if details_url:
                kw["details_url"] = details_url
            if actions is not None:
                kw["actions"] = [a.as_json() for a in actions]
            out: dict[str, Any] = dict(self._output(title, summary, text))
            if annotations:
                out["annotations"] = [a.as_json() for a in annotations]
            if out:
                kw["output"] = out
            r = self._r().get_check_run(check_run_id)  # lazy: only the PATCH is sent
            r.edit(**kw)
            return self._check(r)

        return self._call(f"update check run {check_run_id}", "PATCH", fn, route="checks")

    # -- labels ----------------------------------------------------------------------------

    def ensure_label(self, name: str, color: str, description: str) -> bool:
        """Create label ``name`` in the repository (``color``: 6 hex digits, no ``#``);
        True when created, False when it already existed (GitHub answers 422
        ``already_exists``: one request either way, no read first)."""

        def fn() -> bool:
            try:
                self._r().create_label(name, color, description)
            except GithubException as exc:
                errors = (exc.data or {}).get("errors") if isinstance(exc.data, dict) else None
                if exc.status == 422 and any(isinstance(e, dict) and
                                             e.get("code") == "already_exists"
                                             for e in errors or []):
                    return False
                raise
            return True

        return self._call(f"create label {name!r}", "POST", fn, route="issues")

    def _issue(self, number: int) -> Any:
        """A lazy Issue (no GET)."""
        from github.Issue import Issue

        return Issue(self.client.requester, url=f"{self._r().url}/issues/{number}")

    def add_labels(self, number: int, names: Sequence[str]) -> None:
        """Add labels ``names`` to issue/PR ``number`` (labels already on it stay)."""
        self._call(f"label #{number}", "POST",
                   lambda: self._issue(number).add_to_labels(*names), route="issues")

    def remove_label(self, number: int, name: str) -> None:
        """Remove label ``name`` from issue/PR ``number``; a label not on it is no error
        (GitHub answers 404)."""

        def fn() -> None:
            try:
                self._issue(number).remove_from_labels(name)
            except GithubException as exc:
                if exc.status != 404:
                    raise

        self._call(f"unlabel #{number}", "DELETE", fn, route="issues")

    # -- actions ---------------------------------------------------------------------------

    def dispatch_workflow(self, workflow_file: str, ref: str,
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

        try:
            out = self._call(f"dispatch {workflow_file}@{ref}", "POST", fn,
                             route="actions")
        except GitHubError as exc:
            if self.metrics is not None:
                from bot.metrics import dispatch_outcome

                limited = exc.status in (403, 429) and \
                    getattr(exc, "retry_after", None) is not None  # a rate limit's reset
                self.metrics.workflow_dispatch(dispatch_outcome(exc.status,
                                                                rate_limited=limited))
            raise
        if self.metrics is not None:
            self.metrics.workflow_dispatch("dispatched")
        return out

    def get_workflow_run(self, run_id: int) -> WorkflowRunInfo:
        """Workflow run ``run_id``."""

        return self._call(f"get run {run_id}", "GET",
                          lambda: _run_info(self._r().get_workflow_run(run_id)),
                          route="actions")

    def list_workflow_runs(self, workflow_file: str, *, branch: str, event: str,
                           created_after: datetime | None = None,
                           limit: int = 100) -> list[WorkflowRunInfo]:
        """The newest runs (at most ``limit``, newest first) of ``.github/workflows/FILE``
        on ``branch`` triggered by ``event``, created at or after ``created_after`` (UTC):
        how a dispatch that GitHub answered with an error is looked up by its request id."""

        def fn() -> list[WorkflowRunInfo]:
            kw: dict[str, Any] = {"branch": branch, "event": event}
            if created_after is not None:
                kw["created"] = ">=" + created_after.astimezone(UTC).strftime(
                    "%Y-%m-%dT%H:%M:%SZ")
            runs = self._r().get_workflow(workflow_file).get_runs(**kw)
            return [_run_info(r) for r in itertools.islice(runs, limit)]

        return self._call(f"list runs of {workflow_file}", "GET", fn, route="actions")

    def cancel_workflow_run(self, run_id: int) -> None:
        """Ask GitHub to cancel workflow run ``run_id`` (one POST; PyGithub's
        ``WorkflowRun.cancel`` would first GET the run and ignore a refusal)."""
        self._call(
            f"cancel run {run_id}", "POST",
            lambda: self.client.requester.requestJsonAndCheck(
          "POST", f"{self._r().url}/actions/runs/{run_id}/cancel"), route="actions")

    def list_run_artifacts(self, run_id: int, name: str | None = None
                           ) -> list[ArtifactInfo]:
        """Artifacts of run ``run_id`` (optionally only those called ``name``)."""

        def fn() -> list[ArtifactInfo]:
            arts = self._r().get_workflow_run(run_id).get_artifacts()
            return [ArtifactInfo(a.id, a.name, a.size_in_bytes, a.expired) for a in arts
                    if name is None or a.name == name]

        return self._call(f"list artifacts of run {run_id}", "GET", fn, route="actions")

    def download_artifact(self, artifact_id: int,
                          max_bytes: int = DEFAULT_MAX_ARTIFACT_BYTES,
                          size_in_bytes: int | None = None) -> bytes:
        """The artifact's zip bytes (:func:`bot.github.artifacts.download_zip`: GitHub answers
        302 to a short-lived URL on another host, fetched without our token).  A zip over
        ``max_bytes`` (by GitHub's ``size_in_bytes`` when given, else while streaming) raises
        :class:`GitHubError`; an expired artifact (410) :class:`GitHubNotFound`."""

        def fn() -> bytes:
            url = f"{self.base_url}/repos/{self.repo}/actions/artifacts/{artifact_id}/zip"
            token = getattr(self._auth, "token", None)  # Auth.Token / installation auth
            try:
                return download_zip(url, token, size_in_bytes, Limits(max_compressed=max_bytes))
            except ArtifactTooLarge:
                raise GitHubError(f"artifact {artifact_id} exceeds {max_bytes} bytes") from None
            except ArtifactError as exc:
                if exc.status == 410:
                    raise GitHubNotFound(f"artifact {artifact_id} has expired", 410) from None
                if (exc.status is not None and exc.status >= 500) or (
                        exc.status is None and exc.__cause__ is not None):  # transport error
                    raise GitHubRetryableError(f"artifact {artifact_id}: {exc}",
                                               exc.status) from None
                raise GitHubError(f"artifact {artifact_id}: {exc}", exc.status) from None

        return self._call(f"download artifact {artifact_id}", "GET", fn, route="actions")


def _run_info(r: Any) -> WorkflowRunInfo:
    """A PyGithub ``WorkflowRun`` as the port's value type."""
    return WorkflowRunInfo(r.id, r.head_sha, r.status, r.conclusion, r.display_title or "",
                           r.event, r.run_attempt or 1, r.html_url or "",
                           _utc(r.run_started_at), _utc(r.updated_at), r.path or "",
                           r.head_branch or "", _utc(r.created_at))


def _utc(v: datetime | None) -> datetime | None:
    if v is None or v.tzinfo is not None:
        return v
    return v.replace(tzinfo=UTC)


class GitHubClients:
    """PyGithub ports on one set of credentials: GitHub App installation auth when ``app_id``
    and a PEM key are given, else ``token``.  Clients are cached per installation (installation
    tokens refresh themselves) for the lifetime of this object.

    ``throttle`` keeps PyGithub's request pacing (:func:`bot.github.client.make_client`);
    ``retry`` overrides the read retries; every request is counted on ``metrics``.
    """

    def __init__(self, *, base_url: str, bot_login: str, app_id: int | None = None,
                 private_key_pem: str | None = None, token: str | None = None,
                 throttle: bool = True, retry: GithubRetry | None = None,
                 metrics: Metrics | None = None) -> None:
        self.base_url = base_url.rstrip("/")
        self.bot_login = bot_login
        self.token = token
        self.throttle = throttle
        self.retry = retry
        self.metrics = metrics
        self.app_auth = (Auth.AppAuth(int(app_id), private_key_pem)
                         if app_id and private_key_pem else None)
        self._clients: dict[Any, tuple[Github, Auth.Auth]] = {}
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        """True when App credentials or a token are set."""
        return self.app_auth is not None or bool(self.token)

    def port(self, repo: str, installation_id: int | None = None) -> PyGithubPort:
        """A port for ``repo`` (blocking: may ask GitHub for the repository's installation).

        Raises :class:`GitHubError` without credentials, or as GitHub answered."""
        if not self.configured:
            raise GitHubNotConfigured("no GitHub credentials: set CAMPAIGN_BOT_APP_ID and "
                              "CAMPAIGN_BOT_PRIVATE_KEY(_FILE), or CAMPAIGN_BOT_TOKEN")
        try:
            client, auth, key = self._client(repo, installation_id)
        except Exception as exc:  # noqa: BLE001 - translated
            raise map_exception(exc, f"installation for {repo}") from exc
        return PyGithubPort(client, repo, self.bot_login, auth=auth, base_url=self.base_url,
                            metrics=self.metrics, installation=str(key))

    def _client(self, repo: str,
                installation_id: int | None) -> tuple[Github, Auth.Auth, Any]:
        if self.app_auth is None:
            key: Any = "token"
            auth: Auth.Auth = Auth.Token(self.token)  # type: ignore[arg-type]
        else:
            if installation_id is None:
                owner, name = (repo or "/").split("/", 1)
                gi = GithubIntegration(auth=self.app_auth, base_url=self.base_url)
                installation_id = gi.get_repo_installation(owner, name).id
            key = installation_id
            auth = self.app_auth.get_installation_auth(installation_id)
        with self._lock:
            if key not in self._clients:
                self._clients[key] = (make_client(self.base_url, auth, retry=self.retry,
                                                  throttle=self.throttle), auth)
            return (*self._clients[key], key)


class NoRepositoryPort:
    """Port for events that concern no repository (``installation``, ``ping``): every call
    raises :class:`GitHubError`."""

    repo = ""

    def __init__(self, bot_login: str) -> None:
        self.bot_login = bot_login

    def __getattr__(self, name: str) -> Any:
        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise GitHubError(f"{name}: this event concerns no repository")

        return refuse
