"""The GitHub operations the /screen flow needs, as a narrow Protocol, and its PyGithub
implementation (DESIGN.md style rule 2: handlers depend on a port, never on PyGithub).

PyGithub traps handled here (GITHUB.md section 4): ``create_dispatch`` returns False unless
``throw=True``; ``return_run_details=True`` (new in 2.10) gives the run id at once; there is
no artifact download helper (:mod:`bot.artifacts` fetches the zip, following the redirect
without the token); check-run datetimes must be UTC.  All calls are blocking: handlers run
them with ``asyncio.to_thread``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from bot.artifacts import Limits, download_zip


@dataclass(frozen=True)
class PullHead:
    """A PR's head commit and where it comes from (``head_repo`` None: fork deleted)."""

    number: int
    head_sha: str
    head_repo: str | None
    base_repo: str
    state: str = "open"

    @property
    def from_fork(self) -> bool:
        """True when the head lives in another repository than the base."""
        return self.head_repo != self.base_repo


@dataclass(frozen=True)
class RunRef:
    """A dispatched workflow run: id and web URL."""

    id: int
    html_url: str


@dataclass(frozen=True)
class RunInfo:
    """What the bot reads of a workflow run (times UTC; None when GitHub has none yet)."""

    id: int
    status: str
    conclusion: str | None
    display_title: str
    html_url: str
    run_started_at: datetime | None
    updated_at: datetime | None


@dataclass(frozen=True)
class ArtifactInfo:
    """One artifact of a run (``size_in_bytes`` as GitHub reports it)."""

    id: int
    name: str
    size_in_bytes: int
    archive_download_url: str
    expired: bool


class ScreenGitHub(Protocol):
    """GitHub operations of the /screen flow (all blocking; raise on HTTP errors)."""

    def permission(self, repo: str, login: str) -> str:
        """``admin``, ``write``, ``read`` or ``none`` (a 404 is ``none``)."""
        ...

    def pull(self, repo: str, number: int) -> PullHead:
        """The PR's head."""
        ...

    def default_branch(self, repo: str) -> str:
        """The repository's default branch name."""
        ...

    def read_file(self, repo: str, path: str, ref: str) -> bytes | None:
        """File content at ``ref``; None when absent."""
        ...

    def create_comment(self, repo: str, number: int, body: str) -> int:
        """Post an issue/PR comment; returns its id."""
        ...

    def edit_comment(self, repo: str, comment_id: int, body: str) -> None:
        """Replace a comment's body."""
        ...

    def dispatch(self, repo: str, workflow: str, ref: str, inputs: dict[str, str]) -> RunRef:
        """``workflow_dispatch`` with ``return_run_details``; returns the run."""
        ...

    def cancel_run(self, repo: str, run_id: int) -> None:
        """Cancel a workflow run."""
        ...

    def get_run(self, repo: str, run_id: int) -> RunInfo | None:
        """A workflow run; None when it does not exist."""
        ...

    def artifacts(self, repo: str, run_id: int) -> list[ArtifactInfo]:
        """The run's artifacts."""
        ...

    def download(self, art: ArtifactInfo, limits: Limits) -> bytes:
        """The artifact's zip bytes (capped; :class:`bot.artifacts.ArtifactError`)."""
        ...

    def create_check_run(self, repo: str, name: str, head_sha: str, *, status: str,
                         external_id: str, details_url: str | None, title: str,
                         summary: str) -> int:
        """Create a check run; returns its id."""
        ...

    def update_check_run(self, repo: str, check_run_id: int, *, status: str | None = None,
                         conclusion: str | None = None, details_url: str | None = None,
                         title: str | None = None, summary: str | None = None) -> None:
        """Update a check run (``conclusion`` completes it)."""
        ...


def _utc(v: Any) -> datetime | None:
    if v is None:
        return None
    if isinstance(v, datetime):
        return v if v.tzinfo else v.replace(tzinfo=UTC)
    return datetime.fromisoformat(str(v).replace("Z", "+00:00"))


class PyGithubScreenPort:
    """:class:`ScreenGitHub` over a ``github.Github`` client; ``token`` (or a callable
    returning one) authorises artifact downloads, which PyGithub cannot do."""

    def __init__(self, gh: Any, token: Any) -> None:
        # lazy: objects built from URLs make no GET until an attribute is read
        self.gh = gh.withLazy(True)
        self._token = token

    def _repo(self, repo: str) -> Any:
        return self.gh.get_repo(repo)

    def token(self) -> str | None:
        """The current API token (installation tokens refresh; call each time)."""
        t = self._token() if callable(self._token) else self._token
        return str(t) if t else None

    def permission(self, repo: str, login: str) -> str:
        from github import UnknownObjectException

        try:
            return str(self._repo(repo).get_collaborator_permission(login))
        except UnknownObjectException:
            return "none"

    def pull(self, repo: str, number: int) -> PullHead:
        p = self._repo(repo).get_pull(number)
        head_repo = p.head.repo.full_name if p.head.repo is not None else None
        return PullHead(number, p.head.sha, head_repo, p.base.repo.full_name, p.state)

    def default_branch(self, repo: str) -> str:
        return str(self.gh.get_repo(repo).default_branch)

    def read_file(self, repo: str, path: str, ref: str) -> bytes | None:
        from github import UnknownObjectException

        try:
            c = self._repo(repo).get_contents(path, ref=ref)
        except UnknownObjectException:
            return None
        if isinstance(c, list):
            return None
        return bytes(c.decoded_content)

    def create_comment(self, repo: str, number: int, body: str) -> int:
        return int(self._repo(repo).get_issue(number).create_comment(body).id)

    def edit_comment(self, repo: str, comment_id: int, body: str) -> None:
        r = self._repo(repo)
        # one PATCH, no GET of the comment first (PATCH is never retried by PyGithub)
        r._requester.requestJsonAndCheck(
            "PATCH", f"{r.url}/issues/comments/{comment_id}", input={"body": body}
        )

    def dispatch(self, repo: str, workflow: str, ref: str, inputs: dict[str, str]) -> RunRef:
        wf = self._repo(repo).get_workflow(workflow)
        res = wf.create_dispatch(ref=ref, inputs=inputs, throw=True, return_run_details=True)
        if res is True or res is False or res is None:
            raise RuntimeError("workflow dispatch returned no run details")
        return RunRef(int(res.id), str(res.html_url))

    def cancel_run(self, repo: str, run_id: int) -> None:
        r = self._repo(repo)
        r._requester.requestJsonAndCheck("POST", f"{r.url}/actions/runs/{run_id}/cancel")

    def get_run(self, repo: str, run_id: int) -> RunInfo | None:
        from github import UnknownObjectException

        try:
            run = self._repo(repo).get_workflow_run(run_id)
            return RunInfo(
                int(run.id), str(run.status), run.conclusion, str(run.display_title or ""),
                str(run.html_url), _utc(run.run_started_at), _utc(run.updated_at),
            )
        except UnknownObjectException:
            return None

    def artifacts(self, repo: str, run_id: int) -> list[ArtifactInfo]:
        run = self._repo(repo).get_workflow_run(run_id)
        return [
            ArtifactInfo(int(a.id), str(a.name), int(a.size_in_bytes),
                         str(a.archive_download_url), bool(a.expired))
            for a in run.get_artifacts()
        ]

    def download(self, art: ArtifactInfo, limits: Limits) -> bytes:
        return download_zip(art.archive_download_url, self.token(), art.size_in_bytes, limits)

    def create_check_run(self, repo: str, name: str, head_sha: str, *, status: str,
                         external_id: str, details_url: str | None, title: str,
                         summary: str) -> int:
        kw: dict[str, Any] = dict(
            name=name, head_sha=head_sha, status=status, external_id=external_id,
            started_at=datetime.now(UTC), output={"title": title, "summary": summary},
        )
        if details_url:
            kw["details_url"] = details_url
        return int(self._repo(repo).create_check_run(**kw).id)

    def update_check_run(self, repo: str, check_run_id: int, *, status: str | None = None,
                         conclusion: str | None = None, details_url: str | None = None,
                         title: str | None = None, summary: str | None = None) -> None:
        data: dict[str, Any] = {}
        if status:
            data["status"] = status
        if conclusion:
            data["conclusion"] = conclusion
            data["completed_at"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        if details_url:
            data["details_url"] = details_url
        if title is not None and summary is not None:
            data["output"] = {"title": title, "summary": summary}
        r = self._repo(repo)
        r._requester.requestJsonAndCheck("PATCH", f"{r.url}/check-runs/{check_run_id}",
                                         input=data)
