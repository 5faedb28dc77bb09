"""A local GitHub double: a real HTTP server on 127.0.0.1 for PyGithub to talk to.

It implements the REST operations of ``openapi-subset.json`` (beside this module) that
campaign-bot calls, keeps their state in memory, and answers with bodies built from the
official examples in that file (so fields we do not model are present and well-typed).

GitHub behaviours it reproduces, because the bot must cope with them (GITHUB.md):

- every ``https://api.github.com`` URL in a body or ``Link`` header is rewritten to the
  double's own base URL (PyGithub follows ``url`` fields and refuses foreign hosts);
- a review comment whose ``line`` is outside the PR's diff hunks fails the whole review
  with 422 "Pull request review thread line must be part of the diff";
- bodies over 65,536 characters (comments, issues) and check-run texts over 65,535 fail
  with 422; a workflow dispatch with a SHA as ``ref`` or more than 25 inputs fails with 422;
- ``return_run_details`` answers 200 with run details, otherwise 204;
- artifact downloads answer 302 to a short-lived blob URL on the same server;
- list endpoints paginate with ``per_page``/``page`` and a ``Link`` header;
- ``x-ratelimit-*`` headers count down.

Fault injection (:meth:`GitHubDouble.inject`) makes chosen requests answer 500, a 403
secondary rate limit with ``Retry-After``, or 422, optionally *after* performing the write
(GitHub sometimes does the work and still answers 5xx: the case where a blind retry posts a
second comment).  Every request is logged (:attr:`GitHubDouble.calls`); ``writes()`` lists
the mutating ones, for exact-write assertions.

github.com's web pages (the App manifest flow, the OAuth web flow of sign-in) are served
too; they are not REST, are listed in :data:`WEB_ROUTES`, and are not validated.

Adding an endpoint: write a method ``def _op_NAME(self, req, **params)`` and register it in
``ROUTES`` with its method and OpenAPI path template (see README.md in this folder).
"""

from __future__ import annotations

import base64
import copy
import difflib
import fnmatch
import hashlib
import io
import itertools
import json
import re
import threading
import time
import zipfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from .git_http import GitHTTP, object_sha
from .openapi import OpenAPISubset

API = "https://api.github.com"
MAX_BODY = 65536
MAX_CHECK_TEXT = 65535
HUNK_RE = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
SECONDARY_MESSAGE = (
    "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
)
WRITE_METHODS = {"POST", "PATCH", "PUT", "DELETE"}
UNVALIDATED_PATH = re.compile(r"^/repos/[^/]+/[^/]+/actions/runs/\d+/cancel$")
WEB_ROUTES: list[tuple[str, str, str]] = [
    # (methods, path pattern, what it is and where GitHub documents it)
    ("POST", r"/settings/apps/new(/confirm)?",
     "App manifest flow: the 'Create GitHub App' page (GitHub Docs, 'Registering a GitHub "
     "App from a manifest')"),
    ("POST", r"/organizations/[^/]+/settings/apps/new(/confirm)?",
     "the same for an organization"),
    ("GET POST", r"/login/oauth/authorize",
     "user authorization page of the OAuth web flow: GET shows it, POST is its buttons "
     "(GitHub Docs, 'Generating a user access token for a GitHub App', step 1)"),
    ("POST", r"/login/oauth/access_token",
     "the code exchange of the OAuth web flow (same page, step 2); answers JSON with "
     "Accept: application/json"),
]
"""github.com's web endpoints the double serves.  They are not part of the REST API (they live
on ``github.com``, not ``api.github.com``), so GitHub's REST description, and
``openapi-subset.json`` cut from it, do not describe them: their answers are never validated
against it.  Every other route of the double is a REST operation of that description."""
WEB_PATH = re.compile("^(" + "|".join(p for _m, p, _w in WEB_ROUTES) + ")$")
OAUTH_CODE_TTL_S = 600.0
"""An OAuth web flow code expires after ten minutes (GitHub Docs, "Generating a user access
token for a GitHub App")."""
USER_TOKEN_TTL_S = 8 * 3600
"""User access tokens expire after eight hours (GitHub Docs, "Refreshing user access
tokens")."""
APP_JWT_PATH = re.compile(r"^/repos/[^/]+/[^/]+/installation$")
"""Repository operations GitHub serves to the App itself (a JWT), not only to tokens."""
MANIFEST_CODE_TTL_S = 3600.0
"""A manifest flow code is valid for one hour (GitHub Docs, "Registering a GitHub App from a
manifest": "You must complete all three steps ... within one hour")."""
"""Operations the double serves that openapi-subset.json lacks (GitHub answers 202 ``{}``)."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _sha(data: bytes | str) -> str:
    if isinstance(data, str):
        data = data.encode()
    return hashlib.sha1(data).hexdigest()


def hunks_of(patch: str | None) -> list[tuple[range, range]]:
    """``(old_lines, new_lines)`` ranges of each hunk of a unified-diff ``patch``."""
    out = []
    for line in (patch or "").splitlines():
        m = HUNK_RE.match(line)
        if m:
            a, b, c, d = (int(x) if x is not None else 1 for x in m.groups())
            out.append((range(a, a + b), range(c, c + d)))
    return out


class HTTPError(Exception):
    """Raised inside an operation to answer ``status`` with a GitHub error body."""

    def __init__(self, status: int, message: str, errors: list[Any] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.errors = errors


@dataclass
class Request:
    """One parsed request as operations see it."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        """The JSON body (empty object when absent); 400 on malformed JSON."""
        if not self.body:
            return {}
        try:
            return json.loads(self.body)
        except ValueError as exc:
            raise HTTPError(400, "Problems parsing JSON") from exc


@dataclass
class Call:
    """One logged request/response pair."""

    method: str
    path: str
    query: dict[str, str]
    operation: str | None
    status: int
    request: Any
    response: Any
    content_type: str | None
    injected: bool = False
    at: float = field(default_factory=time.monotonic)
    """When the double answered (``time.monotonic()`` seconds): for assertions on waits."""
    git_write: bool = False

    @property
    def is_write(self) -> bool:
        """A mutating repository call (token minting under ``/app`` is not counted; of the
        git requests, only a push that moved a ref)."""
        if self.operation is not None and self.operation.startswith("git-"):
            return self.git_write
        return self.method in WRITE_METHODS and not self.path.startswith("/app/")

    @property
    def is_git(self) -> bool:
        """A git smart-HTTP request (``git fetch``/``git push`` traffic), not REST."""
        return self.operation is not None and self.operation.startswith("git-")


@dataclass
class Fault:
    """An injected failure for requests matching ``method`` and the ``path`` glob."""

    method: str
    path: str
    status: int
    times: int = 1
    retry_after: float | None = None
    message: str | None = None
    after_write: bool = False
    hits: int = 0


@dataclass
class Pull:
    """A pull request: base/head refs and SHAs, author, fork flag, and its diff."""

    number: int
    title: str
    body: str
    user: str
    base_ref: str
    base_sha: str
    head_ref: str
    head_sha: str
    head_repo: str | None
    state: str = "open"
    files: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RepoState:
    """Everything the double stores for one repository."""

    full_name: str
    id: int
    default_branch: str = "main"
    private: bool = False
    refs: dict[str, str] = field(default_factory=dict)
    trees: dict[str, dict[str, bytes]] = field(default_factory=dict)
    permissions: dict[str, str] = field(default_factory=dict)
    protected: set[str] = field(default_factory=set)
    """Names of protected branches (``protect_branch``)."""
    issues: dict[int, dict[str, Any]] = field(default_factory=dict)
    pulls: dict[int, Pull] = field(default_factory=dict)
    comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    reviews: dict[int, dict[str, Any]] = field(default_factory=dict)
    review_comments: dict[int, dict[str, Any]] = field(default_factory=dict)
    check_runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    labels: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Repository labels by lower-cased name (GitHub's label names are case-insensitive)."""
    workflows: dict[str, dict[str, Any]] = field(default_factory=dict)
    runs: dict[int, dict[str, Any]] = field(default_factory=dict)
    artifacts: dict[int, dict[str, Any]] = field(default_factory=dict)
    installation_id: int = 1


ROUTES: list[tuple[str, str, str]] = [
    # (method, OpenAPI path template, handler method suffix)
    ("POST", "/app/installations/{installation_id}/access_tokens", "access_token"),
    ("GET", "/app/installations", "list_installations"),
    ("POST", "/app-manifests/{code}/conversions", "manifest_conversion"),
    ("GET", "/app/hook/deliveries", "list_hook_deliveries"),
    ("POST", "/app/hook/deliveries/{delivery_id}/attempts", "redeliver"),
    ("GET", "/rate_limit", "rate_limit"),
    ("GET", "/user", "authenticated_user"),
    ("GET", "/repos/{owner}/{repo}", "get_repo"),
    ("GET", "/repos/{owner}/{repo}/installation", "get_installation"),
    ("GET", "/repos/{owner}/{repo}/contents/{path}", "get_content"),
    ("GET", "/repos/{owner}/{repo}/collaborators/{username}/permission", "permission"),
    ("GET", "/repos/{owner}/{repo}/issues/comments/{comment_id}", "get_comment"),
    ("PATCH", "/repos/{owner}/{repo}/issues/comments/{comment_id}", "edit_comment"),
    ("POST", "/repos/{owner}/{repo}/issues/comments/{comment_id}/reactions", "reaction"),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}", "get_issue"),
    ("PATCH", "/repos/{owner}/{repo}/issues/{issue_number}", "edit_issue"),
    ("GET", "/repos/{owner}/{repo}/issues/{issue_number}/comments", "list_comments"),
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/comments", "create_comment"),
    ("GET", "/repos/{owner}/{repo}/branches/{branch}", "get_branch"),
    ("GET", "/repos/{owner}/{repo}/pulls", "list_pulls"),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}", "get_pull"),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/files", "list_files"),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews", "list_reviews"),
    ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews", "create_review"),
    ("GET", "/repos/{owner}/{repo}/pulls/{pull_number}/comments", "list_review_comments"),
    ("POST", "/repos/{owner}/{repo}/pulls/{pull_number}/comments", "create_review_comment"),
    ("POST", "/repos/{owner}/{repo}/labels", "create_label"),
    ("POST", "/repos/{owner}/{repo}/issues/{issue_number}/labels", "add_labels"),
    ("DELETE", "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}", "remove_label"),
    ("POST", "/repos/{owner}/{repo}/check-runs", "create_check_run"),
    ("PATCH", "/repos/{owner}/{repo}/check-runs/{check_run_id}", "update_check_run"),
    ("GET", "/repos/{owner}/{repo}/commits/{ref}/check-runs", "list_check_runs"),
    ("GET", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}", "get_workflow"),
    ("POST", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/dispatches", "dispatch"),
    ("GET", "/repos/{owner}/{repo}/actions/workflows/{workflow_id}/runs", "list_runs"),
    ("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}", "get_run"),
    # not in openapi-subset.json (the screen flow cancels runs); its responses are not validated
    ("POST", "/repos/{owner}/{repo}/actions/runs/{run_id}/cancel", "cancel_run"),
    ("GET", "/repos/{owner}/{repo}/actions/runs/{run_id}/artifacts", "list_artifacts"),
    ("GET", "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}", "get_artifact"),
    (
        "GET",
        "/repos/{owner}/{repo}/actions/artifacts/{artifact_id}/{archive_format}",
        "download_artifact",
    ),
]


def _compile(template: str) -> re.Pattern[str]:
    rx = ""
    for part in re.split(r"(\{[^}]+\})", template):
        if part.startswith("{"):
            name = part[1:-1]
            # a file path and a branch name (release/1.0) may hold slashes
            rx += f"(?P<{name}>.+)" if name in ("path", "branch") else f"(?P<{name}>[^/]+)"
        else:
            rx += re.escape(part)
    return re.compile(f"^{rx}$")


_COMPILED = sorted(
    [(m, _compile(t), t, h) for m, t, h in ROUTES], key=lambda r: r[2].count("{")
)


class GitHubDouble:
    """The double's state and request handling; :meth:`start` serves it on 127.0.0.1.

    Seed state with :meth:`add_repo`, :meth:`add_pull`, :meth:`add_issue`,
    :meth:`add_comment`, :meth:`set_permission`, :meth:`add_workflow`, :meth:`add_run`,
    :meth:`add_artifact`; inspect it with :meth:`writes`, :meth:`repo` and :attr:`calls`.
    """

    def __init__(self, openapi: OpenAPISubset) -> None:
        self.openapi = openapi
        self._lock = threading.RLock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self.base_url = ""
        self.web_url = "https://github.com"
        """Base of the web (``html_url``) links in answers, GitHub's own by default; the
        sandbox points it at its page, which serves those links itself."""
        self.reset()

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> str:
        """Serve on an ephemeral port of 127.0.0.1 in a daemon thread; returns the base URL."""
        double = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # else 40 ms delayed-ACK stalls per request

            def log_message(self, *args: Any) -> None:  # silence stderr
                return None

            def _serve(self) -> None:
                if GitHTTP.matches(self.path):
                    double.git.serve(self)
                    return
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                status, headers, data = double.handle(
                    self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body
                )
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if data:
                    self.wfile.write(data)

            do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self.base_url

    def stop(self) -> None:
        """Stop serving and remove the bare repositories."""
        if self._server:
            self._server.shutdown()
            self._server.server_close()
        self.git.close()

    def git_url(self, full_name: str) -> str:
        """The HTTPS-style clone URL of ``full_name`` on the double (git smart HTTP)."""
        return f"{self.base_url}/{full_name}.git"

    def reset(self) -> None:
        """Forget every repository, fault, token and logged call."""
        with getattr(self, "_lock", threading.RLock()):
            self.repos: dict[str, RepoState] = {}
            self.calls: list[Call] = []
            self.faults: list[Fault] = []
            self.tokens: set[str] = {"test-token"}
            self.blobs: dict[str, bytes] = {}
            # callables (double, repo full name, run dict) run on a new thread after a
            # workflow dispatch / a run cancel was answered: tests play the runner with them
            self.dispatch_hooks: list[Any] = []
            self.cancel_hooks: list[Any] = []
            # callables (double, repo full name, [(ref, before, after)], pusher login) run on
            # a new thread after a git push moved refs (git_http.py): tests send the push /
            # pull_request deliveries GitHub would send with them
            self.push_hooks: list[Any] = []
            self.git_errors: list[str] = []
            old = getattr(self, "git", None)
            if old is not None:
                old.close()
            self.git = GitHTTP(self)
            self.rate_remaining = 5000
            self._ids = itertools.count(1000)
            # GitHub Apps registered through the manifest flow: id -> app record, and the
            # one-hour, single-use codes of the flow's redirect
            self.apps: dict[int, dict[str, Any]] = {}
            self.manifest_codes: dict[str, tuple[int, float]] = {}
            self.token_apps: dict[str, int] = {}  # installation token -> App id
            # the OAuth web flow: single-use codes -> (App id, login, redirect_uri, time),
            # and user access tokens -> (login, expiry epoch seconds)
            self.oauth_codes: dict[str, tuple[int, str, str, float]] = {}
            self.user_tokens: dict[str, tuple[str, float]] = {}
            # the App's webhook: where send_webhook posts, and every delivery attempt made
            # (hook-delivery-item dicts, oldest first) with what was sent
            self.webhook_url: str | None = None
            # when set, asked for the URL of each delivery and redelivery instead: the load
            # balancer in front of several replicas (None: nothing answers)
            self.webhook_router: Callable[[], str | None] | None = None
            self.webhook_secret = b""
            self.hook_deliveries: list[dict[str, Any]] = []
            self._hook_sent: dict[int, tuple[str, bytes]] = {}
            self._hook_ids = itertools.count(90_000_001)

    # ---------------------------------------------------------------------- seeding

    def add_repo(
        self,
        full_name: str,
        files: dict[str, bytes | str] | None = None,
        default_branch: str = "main",
        installation_id: int = 1,
    ) -> RepoState:
        """Create a repository whose default branch holds ``files``."""
        with self._lock:
            repo = RepoState(full_name, next(self._ids), default_branch)
            repo.installation_id = installation_id
            self.repos[full_name] = repo
            self.set_branch(full_name, default_branch, files or {})
            return repo

    def set_branch(
        self, full_name: str, branch: str, files: Mapping[str, bytes | str | None],
        parent: str | None = None
    ) -> str:
        """Point ``branch`` at a new commit holding ``files`` (over ``parent``'s tree)."""
        with self._lock:
            repo = self.repos[full_name]
            tree = dict(repo.trees[repo.refs[parent]]) if parent else {}
            for p, data in files.items():
                if data is None:
                    tree.pop(p, None)
                else:
                    tree[p] = data.encode() if isinstance(data, str) else data
            parent_sha = repo.refs.get(parent) if parent else None
            sha = self.git.commit(full_name, tree, parent_sha, f"Update {branch}")
            repo.trees[sha] = tree
            repo.refs[branch] = sha
            return sha

    def protect_branch(self, full_name: str, branch: str) -> None:
        """Mark ``branch`` protected (what "Get a branch" answers in ``protected``)."""
        with self._lock:
            self.repos[full_name].protected.add(branch)

    def set_permission(self, full_name: str, login: str, permission: str) -> None:
        """Give ``login`` a legacy base role (admin, write, read, none) on the repository."""
        with self._lock:
            self.repos[full_name].permissions[login] = permission

    def add_issue(self, full_name: str, number: int, title: str = "Campaign", body: str = "",
                  user: str = "octocat") -> dict[str, Any]:
        """Create issue ``number``."""
        with self._lock:
            issue = {"number": number, "title": title, "body": body, "user": user,
                     "state": "open", "pull": False, "id": next(self._ids)}
            self.repos[full_name].issues[number] = issue
            return issue

    def add_pull(
        self,
        full_name: str,
        number: int,
        changes: dict[str, bytes | str | None],
        *,
        user: str = "contributor",
        head_ref: str = "topic",
        title: str = "Candidate",
        body: str = "",
        fork: str | None = None,
        base_ref: str | None = None,
    ) -> Pull:
        """Open PR ``number`` whose head is its base (``base_ref``, default: the default
        branch) plus ``changes`` (None deletes a file); its file list and patches are
        computed with difflib."""
        with self._lock:
            repo = self.repos[full_name]
            base_ref = base_ref or repo.default_branch
            base_sha = repo.refs[base_ref]
            head_sha = self.set_branch(full_name, head_ref, changes, parent=base_ref)
            pull = Pull(number, title, body, user, base_ref, base_sha, head_ref, head_sha,
                        fork or full_name)
            repo.pulls[number] = pull
            repo.issues[number] = {"number": number, "title": title, "body": body,
                                   "user": user, "state": "open", "pull": True,
                                   "id": next(self._ids)}
            self._diff(repo, pull)
            return pull

    def push(self, full_name: str, number: int, changes: dict[str, bytes | str | None]) -> str:
        """Add a commit to PR ``number``'s head (a ``synchronize``); returns the new SHA."""
        with self._lock:
            repo = self.repos[full_name]
            pull = repo.pulls[number]
            pull.head_sha = self.set_branch(full_name, pull.head_ref, changes,
                                            parent=pull.head_ref)
            self._diff(repo, pull)
            return pull.head_sha

    def _diff(self, repo: RepoState, pull: Pull) -> None:
        base, head = repo.trees[pull.base_sha], repo.trees[pull.head_sha]
        files = []
        for p in sorted(set(base) | set(head)):
            a, b = base.get(p), head.get(p)
            if a == b:
                continue
            status = "added" if a is None else "removed" if b is None else "modified"
            al = (a or b"").decode(errors="replace").splitlines()
            bl = (b or b"").decode(errors="replace").splitlines()
            diff = list(difflib.unified_diff(al, bl, lineterm="", n=3))[2:]
            files.append({
                "filename": p, "status": status, "sha": object_sha("blob", b or b""),
                "additions": sum(1 for x in diff if x.startswith("+")),
                "deletions": sum(1 for x in diff if x.startswith("-")),
                "patch": "\n".join(diff),
            })
        pull.files = files

    def add_comment(self, full_name: str, number: int, body: str, user: str = "octocat",
                    user_type: str = "User") -> dict[str, Any]:
        """Add an issue comment as ``user`` (e.g. a pre-existing bot comment)."""
        with self._lock:
            c: dict[str, Any] = {"id": next(self._ids), "issue": number, "body": body, "user": user,
                 "user_type": user_type, "created_at": _now(), "updated_at": _now()}
            self.repos[full_name].comments[c["id"]] = c
            return c

    def add_workflow(self, full_name: str, file: str, name: str = "screen") -> dict[str, Any]:
        """Declare ``.github/workflows/FILE`` as a dispatchable workflow."""
        with self._lock:
            wf = {"id": next(self._ids), "file": file, "name": name}
            self.repos[full_name].workflows[file] = wf
            return wf

    def add_run(self, full_name: str, workflow: str, head_sha: str, *, status: str = "completed",
                conclusion: str | None = "success", display_title: str = "screen",
                event: str = "workflow_dispatch") -> dict[str, Any]:
        """Add a workflow run of ``workflow`` (a declared workflow file)."""
        with self._lock:
            repo = self.repos[full_name]
            run: dict[str, Any] = {
                   "id": next(self._ids), "workflow": workflow, "head_sha": head_sha,
                   "status": status, "conclusion": conclusion, "display_title": display_title,
                   "event": event, "head_branch": repo.default_branch, "run_attempt": 1,
                   "inputs": {}}
            repo.runs[run["id"]] = run
            return run

    def add_artifact(self, full_name: str, run_id: int, name: str,
                     files: Mapping[str, bytes | str] | None = None, expired: bool = False,
                     zip_bytes: bytes | None = None) -> dict[str, Any]:
        """Attach a zip artifact holding ``files`` to run ``run_id``, or ``zip_bytes`` as
        they are (hostile archives: clashing, overlong or malformed entries)."""
        with self._lock:
            if zip_bytes is None:
                buf = io.BytesIO()
                with zipfile.ZipFile(buf, "w") as zf:
                    for p, data in (files or {}).items():
                        zf.writestr(p, data)
                zip_bytes = buf.getvalue()
            art: dict[str, Any] = {"id": next(self._ids), "run_id": run_id, "name": name,
                   "zip": zip_bytes, "expired": expired}
            self.repos[full_name].artifacts[art["id"]] = art
            return art

    def inject(self, method: str, path: str, status: int, *, times: int = 1,
               retry_after: float | None = None, message: str | None = None,
               after_write: bool = False) -> Fault:
        """Make the next ``times`` requests matching ``method`` and the ``path`` glob fail.

        ``status`` 403 with no ``message`` is a secondary rate limit; ``retry_after`` adds a
        ``Retry-After`` header; ``after_write`` performs the operation first, then fails.
        """
        f = Fault(method.upper(), path, status, times, retry_after, message, after_write)
        with self._lock:
            self.faults.append(f)
        return f

    # ------------------------------------------------------------------ webhook sender

    def send_webhook(self, event: str, payload: dict[str, Any], *, guid: str | None = None,
                     delivered_at: datetime | None = None) -> dict[str, Any]:
        """POST one signed webhook delivery to :attr:`webhook_url` as GitHub does and record
        the attempt in the App's delivery log (``GET /app/hook/deliveries``).

        A connection failure is recorded as GitHub shows it (``status_code`` 0, ``status``
        "failed to connect"); a non-2xx answer with its code.  ``guid`` (default a new one)
        is the ``X-GitHub-Delivery``; ``delivered_at`` backdates the record (redelivery
        window tests).  Returns the recorded hook-delivery item."""
        import uuid

        body = json.dumps(payload, separators=(",", ":")).encode()
        return self._deliver(event, body, guid or str(uuid.uuid4()), redelivery=False,
                             delivered_at=delivered_at)

    def _deliver(self, event: str, body: bytes, guid: str, *, redelivery: bool,
                 delivered_at: datetime | None = None) -> dict[str, Any]:
        import hmac
        import urllib.error
        import urllib.request

        payload = json.loads(body)
        sig = hmac.new(self.webhook_secret, body, hashlib.sha256).hexdigest()
        headers = {"Content-Type": "application/json", "X-GitHub-Event": event,
                   "X-GitHub-Delivery": guid, "X-Hub-Signature-256": f"sha256={sig}",
                   "User-Agent": "GitHub-Hookshot/double"}
        t0 = time.monotonic()
        code, status = 0, "failed to connect"
        url = self.webhook_router() if self.webhook_router is not None else self.webhook_url
        if url:
            req = urllib.request.Request(url, data=body, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310 - loopback
                    code = resp.status
            except urllib.error.HTTPError as err:
                code = err.code
            except (OSError, urllib.error.URLError):
                code = 0
            if code:
                status = "OK" if 200 <= code < 300 else f"Invalid HTTP Response: {code}"
        inst = payload.get("installation") if isinstance(payload, dict) else None
        repo = payload.get("repository") if isinstance(payload, dict) else None
        action = payload.get("action") if isinstance(payload, dict) else None
        item: dict[str, Any] = {
            "id": next(self._hook_ids), "guid": guid,
            "delivered_at": (delivered_at or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "redelivery": redelivery, "duration": round(time.monotonic() - t0, 3),
            "status": status, "status_code": code, "event": event,
            "action": action if isinstance(action, str) else None,
            "installation_id": inst.get("id") if isinstance(inst, dict) else None,
            "repository_id": repo.get("id") if isinstance(repo, dict) else None,
            "throttled_at": None,
        }
        with self._lock:
            self.hook_deliveries.append(item)
            self._hook_sent[item["id"]] = (event, body)
        return item

    def hook_attempts(self, guid: str) -> list[dict[str, Any]]:
        """Every recorded attempt (first delivery and redeliveries) of ``guid``, oldest first."""
        with self._lock:
            return [d for d in self.hook_deliveries if d["guid"] == guid]

    # --------------------------------------------------------------------- inspection

    def repo(self, full_name: str) -> RepoState:
        """The stored state of ``full_name``."""
        return self.repos[full_name]

    def writes(self, include_failed: bool = False) -> list[Call]:
        """Mutating repository calls, in order (successful ones unless ``include_failed``)."""
        return [c for c in self.calls
                if c.is_write and (include_failed or (200 <= c.status < 300 and not c.injected))]

    def write_summary(self) -> list[tuple[str, str]]:
        """``(operation id, path)`` of each successful write, for compact assertions."""
        return [(c.operation or "?", c.path) for c in self.writes()]

    def validation_problems(self, start: int = 0) -> list[str]:
        """Responses that do not conform to openapi-subset.json (injected faults excepted,
        beyond the GitHub error shape), of the calls from index ``start`` of :attr:`calls`
        on (a caller that checks as it goes passes how many it checked already)."""
        problems = []
        for c in list(self.calls)[start:]:
            if c.path.startswith("/_blob/") or UNVALIDATED_PATH.match(c.path) \
                    or WEB_PATH.match(c.path) or c.is_git:
                continue
            if c.injected:
                if not (isinstance(c.response, dict) and "message" in c.response):
                    problems.append(f"{c.method} {c.path}: injected fault without message")
                continue
            problems += self.openapi.validate(c.method, c.path, c.status, c.response,
                                              c.content_type)
        return problems

    # ----------------------------------------------------------------------- serving

    def handle(self, method: str, raw_path: str, headers: dict[str, str],
               body: bytes) -> tuple[int, dict[str, str], bytes]:
        """Answer one HTTP request: ``(status, headers, body bytes)``."""
        split = urlsplit(raw_path)
        path = unquote(split.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        req = Request(method, path, query, headers, body)
        if WEB_PATH.match(path):
            if path.startswith("/login/oauth/"):
                return self._oauth(req)
            return self._web(req)
        if path == "/favicon.ico":  # a browser on the manifest pages asks; GitHub has one
            return 404, {"Content-Type": "text/plain"}, b""
        if path.startswith("/_blob/"):
            data = self.blobs.get(path.split("/")[-1])
            with self._lock:
                self.calls.append(Call(method, path, query, None, 200 if data else 404, None,
                                       None, "application/zip"))
            if data is None:
                return 404, {}, b""
            auth_leak = "authorization" in headers
            return 200, {"Content-Type": "application/zip",
                         "X-Auth-Received": str(auth_leak).lower()}, data
        route = None
        for m, rx, template, handler in _COMPILED:
            match = rx.match(path)
            if m == method and match:
                route = (template, handler, match.groupdict())
                break
        op = self.openapi.match(method, path)
        opid = op.operation_id if op else None
        extra_headers: dict[str, str] = {}
        injected = False
        with self._lock:
            self.rate_remaining = max(0, self.rate_remaining - 1)
            fault = self._fault_for(method, path)
            try:
                if route is None:
                    raise HTTPError(404, "Not Found")
                self._check_auth(req)
                if fault and not fault.after_write:
                    raise HTTPError(fault.status, "")
                status, payload, extra_headers = self._run(route[1], req, route[2])
                if fault:
                    raise HTTPError(fault.status, "")
            except HTTPError as err:
                if fault and err.message == "":
                    injected = True
                    status, payload, extra_headers = self._fault_response(fault)
                else:
                    status = err.status
                    payload = {"message": err.message,
                               "documentation_url": "https://docs.github.com/rest"}
                    if err.errors is not None:
                        payload["errors"] = err.errors
                    if err.status == 422:
                        payload["status"] = "422"
            ctype = "application/json; charset=utf-8" if payload is not None else None
            text = json.dumps(payload).replace(API, self.base_url) if payload is not None else ""
            logged = json.loads(text) if text else None
            self.calls.append(Call(method, path, query, opid, status,
                                   self._safe_json(body), logged, ctype, injected))
            out_headers = {
                "X-RateLimit-Limit": "5000",
                "X-RateLimit-Remaining": str(self.rate_remaining),
                "X-RateLimit-Reset": str(int(time.time()) + 3600),
                "X-RateLimit-Used": str(5000 - self.rate_remaining),
                "X-RateLimit-Resource": "core",
            }
            if ctype:
                out_headers["Content-Type"] = ctype
            for k, v in extra_headers.items():
                out_headers[k] = v.replace(API, self.base_url)
            return status, out_headers, text.encode()

    @staticmethod
    def _safe_json(body: bytes) -> Any:
        try:
            return json.loads(body) if body else None
        except ValueError:
            return body.decode(errors="replace")

    def _fault_for(self, method: str, path: str) -> Fault | None:
        for f in self.faults:
            if f.hits < f.times and f.method == method and fnmatch.fnmatch(path, f.path):
                f.hits += 1
                return f
        return None

    def _fault_response(self, f: Fault) -> tuple[int, Any, dict[str, str]]:
        headers: dict[str, str] = {}
        if f.retry_after is not None:
            headers["Retry-After"] = str(int(f.retry_after)) if float(f.retry_after).is_integer() \
                else str(f.retry_after)
        if f.status == 403 and f.message is None:
            message = SECONDARY_MESSAGE
        elif f.status == 422 and f.message is None:
            message = "Validation Failed"
        else:
            message = f.message or "Server Error"
        return f.status, {"message": message,
                          "documentation_url": "https://docs.github.com/rest"}, headers

    def _check_auth(self, req: Request) -> None:
        auth = req.headers.get("authorization", "")
        if req.path.startswith("/app-manifests/"):
            return  # the conversion needs no authentication: the code is the secret
        if req.path.startswith("/app/") or (APP_JWT_PATH.match(req.path)
                                            and auth.count(".") == 2):
            if not auth.startswith("Bearer ") or auth.count(".") != 2:
                raise HTTPError(401, "A JSON web token could not be decoded")
            self._verify_app_jwt(auth.split(" ", 1)[1])
            return
        scheme, _, token = auth.partition(" ")
        user = self.user_tokens.get(token)
        if scheme.lower() in ("token", "bearer") and user is not None:
            if user[1] <= time.time():
                raise HTTPError(401, "Bad credentials")
            return
        if scheme.lower() not in ("token", "bearer") or token not in self.tokens:
            raise HTTPError(401, "Bad credentials")

    def _user_login(self, req: Request) -> str | None:
        """The login of the user access token authorising ``req``, if it is one."""
        user = self.user_tokens.get(req.headers.get("authorization", "").partition(" ")[2])
        return user[0] if user is not None else None

    def can_read(self, repo: RepoState, login: str) -> bool:
        """Whether ``login`` can read ``repo`` (public, or a permission other than none)."""
        return not repo.private or repo.permissions.get(login, "none") != "none"

    def _run(self, handler: str, req: Request,
             params: dict[str, str]) -> tuple[int, Any, dict[str, str]]:
        fn = getattr(self, f"_op_{handler}")
        if "owner" in params:
            full = f"{params.pop('owner')}/{params.pop('repo')}"
            repo = self.repos.get(full)
            if repo is None:
                raise HTTPError(404, "Not Found")
            login = self._user_login(req)
            if login is not None and not self.can_read(repo, login):
                # a user access token reaches only what the user can read: GitHub answers a
                # private repository the user cannot see as if it did not exist
                raise HTTPError(404, "Not Found")
            params["repo"] = repo  # type: ignore[assignment]
        out = fn(req, **params)
        if len(out) == 2:
            return out[0], out[1], {}
        return out

    # ------------------------------------------------------------------ body builders

    def ex(self, name: str) -> Any:
        """A fresh copy of an OpenAPI example."""
        return copy.deepcopy(self._examples_cache(name))

    def _examples_cache(self, name: str) -> Any:
        cache = self.__dict__.setdefault("_excache", {})
        if name not in cache:
            cache[name] = self.openapi.example(name)
        return cache[name]

    def _user(self, login: str, user_type: str = "User") -> dict[str, Any]:
        u = self.ex("issue")["user"]
        uid = int(hashlib.sha1(login.encode()).hexdigest()[:6], 16)
        u.update(login=login, id=uid, type=user_type,
                 url=f"{API}/users/{login}", html_url=f"{self.web_url}/{login}",
                 node_id=f"U_{uid}")
        for k in list(u):
            if k.endswith("_url") and k not in ("avatar_url", "html_url"):
                u[k] = re.sub(r"/users/[^/{]+", f"/users/{login}", u[k])
        return u

    def _repo_body(self, repo: RepoState) -> dict[str, Any]:
        r = self.ex("full-repository-default-response")
        owner, name = repo.full_name.split("/")
        prefix = f"{API}/repos/{repo.full_name}"
        r = json.loads(json.dumps(r).replace(f"{API}/repos/octocat/Hello-World", prefix))
        r.update(id=repo.id, name=name, full_name=repo.full_name, private=repo.private,
                 default_branch=repo.default_branch, url=prefix, language=None,
                 html_url=f"{self.web_url}/{repo.full_name}")
        r["owner"] = self._user(owner)
        for k in ("source", "parent", "organization", "template_repository"):
            r.pop(k, None)
        return r

    def _issue_body(self, repo: RepoState, issue: dict[str, Any]) -> dict[str, Any]:
        b = self.ex("issue")
        n = issue["number"]
        prefix = f"{API}/repos/{repo.full_name}"
        b.update(id=issue["id"], number=n, title=issue["title"], body=issue["body"],
                 state=issue["state"], user=self._user(issue["user"]),
                 url=f"{prefix}/issues/{n}", repository_url=prefix,
                 comments_url=f"{prefix}/issues/{n}/comments",
                 events_url=f"{prefix}/issues/{n}/events",
                 labels_url=f"{prefix}/issues/{n}/labels{{/name}}",
                 html_url=f"{self.web_url}/{repo.full_name}/issues/{n}",
                 assignee=None, assignees=[], milestone=None, closed_by=None,
                 labels=[self._label_body(repo, repo.labels[n.lower()])
                         for n in issue.get("labels", []) if n.lower() in repo.labels],
                 comments=sum(1 for c in repo.comments.values() if c["issue"] == n))
        if issue["pull"]:
            b["pull_request"] = {
                "url": f"{prefix}/pulls/{n}", "merged_at": None,
                "html_url": f"{self.web_url}/{repo.full_name}/pull/{n}",
                "diff_url": f"{self.web_url}/{repo.full_name}/pull/{n}.diff",
                "patch_url": f"{self.web_url}/{repo.full_name}/pull/{n}.patch"}
        else:
            b.pop("pull_request", None)
        return b

    def _comment_body(self, repo: RepoState, c: dict[str, Any]) -> dict[str, Any]:
        b = self.ex("issue-comment")
        prefix = f"{API}/repos/{repo.full_name}"
        b.update(id=c["id"], body=c["body"], user=self._user(c["user"], c["user_type"]),
                 url=f"{prefix}/issues/comments/{c['id']}",
                 issue_url=f"{prefix}/issues/{c['issue']}",
                 html_url=f"{self.web_url}/{repo.full_name}/issues/{c['issue']}"
                          f"#issuecomment-{c['id']}",
                 created_at=c["created_at"], updated_at=c["updated_at"],
                 author_association="NONE")
        return b

    def _pull_body(self, repo: RepoState, p: Pull) -> dict[str, Any]:
        b = self.ex("pull-request")
        prefix = f"{API}/repos/{repo.full_name}"
        base_repo = self._repo_body(repo)
        b.update(number=p.number, id=repo.issues[p.number]["id"], title=p.title, body=p.body,
                 state=p.state, user=self._user(p.user), url=f"{prefix}/pulls/{p.number}",
                 html_url=f"{self.web_url}/{repo.full_name}/pull/{p.number}",
                 issue_url=f"{prefix}/issues/{p.number}",
                 comments_url=f"{prefix}/issues/{p.number}/comments",
                 review_comments_url=f"{prefix}/pulls/{p.number}/comments",
                 commits_url=f"{prefix}/pulls/{p.number}/commits",
                 statuses_url=f"{prefix}/statuses/{p.head_sha}",
                 requested_teams=[], requested_reviewers=[], assignees=[], assignee=None,
                 labels=[], milestone=None, changed_files=len(p.files),
                 merged=False, mergeable=True, merge_commit_sha=None)
        b["base"].update(ref=p.base_ref, sha=p.base_sha, repo=base_repo,
                         label=f"{repo.full_name.split('/')[0]}:{p.base_ref}")
        b["base"]["user"] = base_repo["owner"]
        if p.head_repo is None:
            b["head"].update(ref=p.head_ref, sha=p.head_sha, repo=None)
        else:
            head_repo = copy.deepcopy(base_repo)
            if p.head_repo != repo.full_name:
                owner, name = p.head_repo.split("/")
                head_repo = json.loads(json.dumps(head_repo).replace(repo.full_name, p.head_repo))
                head_repo.update(fork=True, id=repo.id + 1, name=name)
                head_repo["owner"] = self._user(owner)
            b["head"].update(ref=p.head_ref, sha=p.head_sha, repo=head_repo,
                             label=f"{p.head_repo.split('/')[0]}:{p.head_ref}")
            b["head"]["user"] = head_repo["owner"]
        b["_links"] = json.loads(json.dumps(b["_links"]).replace(
            f"{API}/repos/octocat/Hello-World/pulls/1347", f"{prefix}/pulls/{p.number}"))
        return b

    def _review_body(self, repo: RepoState, r: dict[str, Any]) -> dict[str, Any]:
        b = self.ex("pull-request-review")
        prefix = f"{API}/repos/{repo.full_name}"
        b.update(id=r["id"], body=r["body"], state=r["state"], commit_id=r["commit_id"],
                 user=self._user(r["user"], r["user_type"]), author_association="NONE",
                 html_url=f"{self.web_url}/{repo.full_name}/pull/{r['pull']}"
                          f"#pullrequestreview-{r['id']}",
                 pull_request_url=f"{prefix}/pulls/{r['pull']}", submitted_at=r["submitted_at"])
        b["_links"] = {"html": {"href": b["html_url"]},
                       "pull_request": {"href": b["pull_request_url"]}}
        return b

    def _review_comment_body(self, repo: RepoState, c: dict[str, Any]) -> dict[str, Any]:
        b = self.ex("pull-request-review-comment-example-for-a-multi-line-comment")
        prefix = f"{API}/repos/{repo.full_name}"
        b.update(id=c["id"], pull_request_review_id=c["review_id"], body=c["body"],
                 path=c["path"], line=c["line"], original_line=c["line"], side=c["side"],
                 start_line=c.get("start_line"), original_start_line=c.get("start_line"),
                 start_side=c.get("start_side") if c.get("start_line") else None,
                 commit_id=c["commit_id"], original_commit_id=c["commit_id"],
                 diff_hunk=c["diff_hunk"], position=1, original_position=1,
                 user=self._user(c["user"], c["user_type"]), author_association="NONE",
                 url=f"{prefix}/pulls/comments/{c['id']}",
                 pull_request_url=f"{prefix}/pulls/{c['pull']}",
                 html_url=f"{self.web_url}/{repo.full_name}/pull/{c['pull']}"
                          f"#discussion_r{c['id']}", subject_type="line")
        b.pop("in_reply_to_id", None)
        b["_links"] = {"self": {"href": b["url"]}, "html": {"href": b["html_url"]},
                       "pull_request": {"href": b["pull_request_url"]}}
        return b

    def _label_body(self, repo: RepoState, label: dict[str, Any]) -> dict[str, Any]:
        b = self.ex("label")
        b.update(id=label["id"], node_id=f"LA_{label['id']}", name=label["name"],
                 color=label["color"], description=label.get("description"), default=False,
                 url=f"{API}/repos/{repo.full_name}/labels/{label['name']}")
        return b

    def _check_run_body(self, repo: RepoState, r: dict[str, Any]) -> dict[str, Any]:
        b = self.ex("check-run")
        prefix = f"{API}/repos/{repo.full_name}"
        b.update(id=r["id"], name=r["name"], head_sha=r["head_sha"], status=r["status"],
                 conclusion=r["conclusion"], external_id=r.get("external_id") or "",
                 details_url=r.get("details_url"), started_at=r["started_at"],
                 completed_at=r.get("completed_at"), url=f"{prefix}/check-runs/{r['id']}",
                 html_url=f"{self.web_url}/{repo.full_name}/runs/{r['id']}",
                 pull_requests=[], node_id=f"CR_{r['id']}")
        out = r.get("output") or {}
        b["output"] = {"title": out.get("title"), "summary": out.get("summary"),
                       "text": out.get("text"),
                       "annotations_count": len(r.get("annotations") or []),
                       "annotations_url": f"{prefix}/check-runs/{r['id']}/annotations"}
        return b

    def _run_body(self, repo: RepoState, run: dict[str, Any]) -> dict[str, Any]:
        b = self.ex("workflow-run")
        prefix = f"{API}/repos/{repo.full_name}"
        b = json.loads(json.dumps(b).replace(f"{API}/repos/octo-org/octo-repo", prefix))
        wf = repo.workflows.get(run["workflow"], {"id": 0, "name": run["workflow"]})
        b.update(id=run["id"], head_sha=run["head_sha"], status=run["status"],
                 conclusion=run["conclusion"], display_title=run["display_title"],
                 event=run["event"], head_branch=run["head_branch"],
                 run_attempt=run["run_attempt"], workflow_id=wf["id"], name=wf["name"],
                 path=f".github/workflows/{run['workflow']}", pull_requests=[],
                 url=f"{prefix}/actions/runs/{run['id']}",
                 html_url=f"{self.web_url}/{repo.full_name}/actions/runs/{run['id']}",
                 artifacts_url=f"{prefix}/actions/runs/{run['id']}/artifacts",
                 jobs_url=f"{prefix}/actions/runs/{run['id']}/jobs",
                 workflow_url=f"{prefix}/actions/workflows/{wf['id']}")
        b.update({k: run[k] for k in ("run_started_at", "updated_at", "created_at")
                  if run.get(k)})
        return b

    def _artifact_body(self, repo: RepoState, a: dict[str, Any]) -> dict[str, Any]:
        b = self.ex("artifact")
        prefix = f"{API}/repos/{repo.full_name}"
        b.update(id=a["id"], name=a["name"], size_in_bytes=len(a["zip"]),
                 expired=a["expired"], node_id=f"A_{a['id']}",
                 url=f"{prefix}/actions/artifacts/{a['id']}",
                 archive_download_url=f"{prefix}/actions/artifacts/{a['id']}/zip",
                 digest="sha256:" + hashlib.sha256(a["zip"]).hexdigest())
        b["workflow_run"] = {**b.get("workflow_run", {}), "id": a["run_id"]}
        return b

    def _paginate(self, req: Request, items: list[Any],
                  wrap: str | None = None) -> tuple[int, Any, dict[str, str]]:
        per_page = max(1, min(100, int(req.query.get("per_page", 30))))
        page = max(1, int(req.query.get("page", 1)))
        chunk = items[(page - 1) * per_page: page * per_page]
        last = max(1, -(-len(items) // per_page))
        headers = {}
        if last > 1:
            links = []
            q = {k: v for k, v in req.query.items() if k != "page"}

            def url(n: int) -> str:
                qs = "&".join(f"{k}={v}" for k, v in {**q, "page": str(n)}.items())
                return f"<{API}{req.path}?{qs}>"

            if page < last:
                links += [f'{url(page + 1)}; rel="next"', f'{url(last)}; rel="last"']
            if page > 1:
                links += [f'{url(1)}; rel="first"', f'{url(page - 1)}; rel="prev"']
            headers["Link"] = ", ".join(links)
        body = {"total_count": len(items), wrap: chunk} if wrap else chunk
        return 200, body, headers

    # -------------------------------------------------------------------- operations

    def _op_access_token(self, req: Request, installation_id: str) -> tuple[int, Any]:
        token = f"ghs_double_{next(self._ids)}"
        self.tokens.add(token)
        app_id = self._jwt_app(req)
        if app_id is not None:
            self.token_apps[token] = app_id
        b = self.ex("installation-token")
        exp = (datetime.now(UTC) + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        b.update(token=token, expires_at=exp)
        b.pop("repositories", None)
        return 201, b

    def _jwt_app(self, req: Request) -> int | None:
        """The registered App whose (verified) JWT authorised ``req``, if any."""
        import jwt

        token = req.headers.get("authorization", "").partition(" ")[2]
        try:
            iss = str(jwt.decode(token, options={"verify_signature": False}).get("iss", ""))
        except jwt.PyJWTError:
            return None
        return int(iss) if iss.isdigit() and int(iss) in self.apps else None

    def _verify_app_jwt(self, token: str) -> None:
        """A JWT whose ``iss`` is an App registered here must carry a valid RS256 signature
        of that App's key (other issuers are accepted unchecked, as before Apps existed
        here)."""
        import jwt

        try:
            claims = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError as exc:
            raise HTTPError(401, "A JSON web token could not be decoded") from exc
        app = self.apps.get(int(claims.get("iss", 0) or 0)) if str(
            claims.get("iss", "")).isdigit() else None
        if app is None:
            return
        try:
            jwt.decode(token, app["public_pem"], algorithms=["RS256"])
        except jwt.PyJWTError as exc:
            raise HTTPError(401, f"'Expiration time' claim ('exp') or signature invalid: "
                            f"{type(exc).__name__}") from exc

    def _op_list_installations(self, req: Request) -> tuple[int, Any, dict[str, str]]:
        ids = sorted({r.installation_id for r in self.repos.values()})
        items = []
        for iid in ids:
            b = self.ex("installation")
            b["id"] = iid
            items.append(b)
        return self._paginate(req, items, None)

    def _op_manifest_conversion(self, req: Request, code: str) -> tuple[int, Any]:
        entry = self.manifest_codes.pop(code, None)
        if entry is None or time.time() - entry[1] > MANIFEST_CODE_TTL_S:
            raise HTTPError(404, "Not Found")
        app = self.apps[entry[0]]
        b = self.ex("integration-from-manifest")
        b.update(id=app["id"], slug=app["slug"], name=app["name"], client_id=app["client_id"],
                 client_secret=app["client_secret"], webhook_secret=app["webhook_secret"],
                 pem=app["pem"], html_url=f"{self.web_url}/apps/{app['slug']}",
                 permissions=app["permissions"], events=app["events"],
                 description=app["manifest"].get("description") or "",
                 external_url=app["manifest"].get("url") or "https://example.com",
                 node_id=f"A_{app['id']}", created_at=_now(), updated_at=_now())
        b["owner"] = self._user(app["owner"], "Organization" if app["org"] else "User")
        return 201, b

    # ----------------------------------------------------- github.com: the manifest flow

    def _web(self, req: Request) -> tuple[int, dict[str, str], bytes]:
        """The two github.com pages of the manifest flow: ``POST /settings/apps/new?state=S``
        (or ``/organizations/ORG/settings/apps/new``) with the form field ``manifest`` shows
        the "Create GitHub App" page; its button posts to ``.../new/confirm``, which registers
        the App and redirects to the manifest's ``redirect_url`` with ``code`` and ``state``.
        """
        import html

        with self._lock:
            self.calls.append(Call(req.method, req.path, req.query, None, 200, None, None,
                                   "text/html"))
        if req.method != "POST":
            return 405, {"Content-Type": "text/plain"}, b"POST the manifest form\n"
        form = {k: v[-1] for k, v in parse_qs(req.body.decode(errors="replace")).items()}
        org = req.path.split("/")[2] if req.path.startswith("/organizations/") else None
        owner = org or form.get("owner") or "octocat"
        try:
            manifest = json.loads(form.get("manifest", ""))
            if not isinstance(manifest, dict) or not manifest.get("url"):
                raise ValueError("the manifest needs a url")
        except ValueError as exc:
            page = f"<h1>Invalid GitHub App manifest</h1><p>{html.escape(str(exc))}</p>"
            return 422, {"Content-Type": "text/html; charset=utf-8"}, page.encode()
        state = req.query.get("state", "")
        if not req.path.endswith("/confirm"):
            action = req.path + "/confirm?" + (f"state={state}" if state else "")
            page = (
                "<!doctype html><title>Create GitHub App</title>"
                f"<h1>Create GitHub App for {html.escape(owner)}</h1>"
                f'<form method="post" action="{html.escape(action)}">'
                f'<input type="hidden" name="manifest" value="{html.escape(json.dumps(manifest))}">'
                f'<input type="hidden" name="owner" value="{html.escape(owner)}">'
                '<label>GitHub App name <input name="name" value="'
                f'{html.escape(str(manifest.get("name") or ""))}"></label>'
                '<button type="submit">Create GitHub App</button></form>')
            return 200, {"Content-Type": "text/html; charset=utf-8"}, page.encode()
        app = self.register_app(manifest, owner=owner, org=org is not None,
                                name=form.get("name") or None)
        code = hashlib.sha1(f"{app['id']}-{time.time()}-{len(self.apps)}".encode()).hexdigest()
        with self._lock:
            self.manifest_codes[code] = (app["id"], time.time())
        target = manifest.get("redirect_url") or manifest["url"]
        sep = "&" if "?" in target else "?"
        loc = f"{target}{sep}code={code}" + (f"&state={state}" if state else "")
        return 302, {"Location": loc, "Content-Type": "text/html"}, b""

    # -------------------------------------------------- github.com: the OAuth web flow

    def _oauth(self, req: Request) -> tuple[int, dict[str, str], bytes]:
        """The user authorization of a GitHub App (OAuth web flow).

        ``GET /login/oauth/authorize?client_id=&redirect_uri=&state=`` shows the
        authorization page of the App with that client id (400 for an unknown one, or a
        ``redirect_uri`` that is none of the App's ``callback_urls``): a form with the GitHub
        login of the person (the double has no GitHub session) and the buttons Authorize and
        Cancel, POSTed back to the same path.  Authorize redirects to ``redirect_uri`` with a
        single-use ``code`` (ten minutes) and the ``state`` unchanged; Cancel with
        ``error=access_denied``.  ``POST /login/oauth/access_token`` (form or JSON:
        ``client_id``, ``client_secret``, ``code``, optional ``redirect_uri``) answers 200
        with the token (``ghu_...``, eight hours, and a ``ghr_...`` refresh token) or, as
        GitHub does, 200 with ``error`` (``incorrect_client_credentials``,
        ``bad_verification_code``, ``redirect_uri_mismatch``)."""
        import html
        from urllib.parse import urlencode

        with self._lock:
            self.calls.append(Call(req.method, req.path, req.query, None, 200, None, None,
                                   "text/html"))
        ctype = req.headers.get("content-type", "")
        if req.method == "POST" and "json" in ctype:
            form = {k: str(v) for k, v in (req.json() or {}).items()}
        elif req.method == "POST":
            form = {k: v[-1] for k, v in parse_qs(req.body.decode(errors="replace")).items()}
        else:
            form = {}
        page_type = {"Content-Type": "text/html; charset=utf-8"}
        if req.path == "/login/oauth/access_token":
            if req.method != "POST":
                return 404, {"Content-Type": "text/plain"}, b""
            return self._oauth_exchange(form)
        params = {**req.query, **form}
        app = next((a for a in self.apps.values()
                    if a["client_id"] == params.get("client_id")), None)
        if app is None:
            return 404, page_type, b"<h1>Not Found</h1><p>No application with this client id.</p>"
        callbacks = list(app["manifest"].get("callback_urls") or [])
        redirect = params.get("redirect_uri") or (callbacks[0] if callbacks else "")
        if redirect not in callbacks:
            return 400, page_type, (b"<h1>Be careful!</h1><p>The redirect_uri is not associated "
                                    b"with this application.</p>")
        state = params.get("state", "")
        if req.method == "GET":
            page = (
                '<!doctype html><title>Authorize application</title><link rel="icon" href="data:,">'
                f"<h1>Authorize {html.escape(app['name'])}</h1>"
                f'<form method="post" action="/login/oauth/authorize">'
                f'<input type="hidden" name="client_id" value="{html.escape(app["client_id"])}">'
                f'<input type="hidden" name="redirect_uri" value="{html.escape(redirect)}">'
                f'<input type="hidden" name="state" value="{html.escape(state)}">'
                '<label>GitHub login <input name="login" value="octocat"></label>'
                '<button type="submit" name="decision" value="authorize">Authorize</button>'
                '<button type="submit" name="decision" value="cancel">Cancel</button></form>')
            return 200, page_type, page.encode()
        sep = "&" if "?" in redirect else "?"
        if params.get("decision") != "authorize":
            q = {"error": "access_denied", "error_description": "The user has denied your "
                 "application access.", "state": state}
            return 302, {"Location": f"{redirect}{sep}{urlencode(q)}"}, b""
        login = params.get("login") or "octocat"
        import secrets

        code = f"double_code_{next(self._ids)}_{secrets.token_hex(4)}"
        with self._lock:
            self.oauth_codes[code] = (app["id"], login, redirect, time.time())
        q = {"code": code, **({"state": state} if state else {})}
        return 302, {"Location": f"{redirect}{sep}{urlencode(q)}"}, b""

    def _oauth_exchange(self, form: dict[str, str]) -> tuple[int, dict[str, str], bytes]:
        def answer(body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
            return 200, {"Content-Type": "application/json; charset=utf-8"}, \
                json.dumps(body).encode()

        app = next((a for a in self.apps.values()
                    if a["client_id"] == form.get("client_id")), None)
        if app is None or form.get("client_secret") != app["client_secret"]:
            return answer({"error": "incorrect_client_credentials",
                           "error_description": "The client_id and/or client_secret passed "
                           "are incorrect."})
        with self._lock:
            entry = self.oauth_codes.pop(form.get("code", ""), None)
        if entry is None or entry[0] != app["id"] \
                or time.time() - entry[3] > OAUTH_CODE_TTL_S:
            return answer({"error": "bad_verification_code",
                           "error_description": "The code passed is incorrect or expired."})
        if form.get("redirect_uri") and form["redirect_uri"] != entry[2]:
            return answer({"error": "redirect_uri_mismatch",
                           "error_description": "The redirect_uri MUST match the registered "
                           "callback URL for this application."})
        token = f"ghu_double_{next(self._ids)}"
        with self._lock:
            self.user_tokens[token] = (entry[1], time.time() + USER_TOKEN_TTL_S)
        return answer({"access_token": token, "expires_in": USER_TOKEN_TTL_S,
                       "refresh_token": f"ghr_double_{next(self._ids)}",
                       "refresh_token_expires_in": 15897600, "scope": "",
                       "token_type": "bearer"})

    def register_app(self, manifest: dict[str, Any], *, owner: str = "octocat",
                     org: bool = False, name: str | None = None) -> dict[str, Any]:
        """Register a GitHub App from ``manifest`` (as the manifest flow's confirm does): a
        fresh RSA key, webhook secret and client secret; returns the App record."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        pem = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.TraditionalOpenSSL,
                                serialization.NoEncryption()).decode()
        pub = key.public_key().public_bytes(serialization.Encoding.PEM,
                                            serialization.PublicFormat.SubjectPublicKeyInfo)
        with self._lock:
            app_id = next(self._ids)
            title = name or str(manifest.get("name") or f"app-{app_id}")
            slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or f"app-{app_id}"
            app = {"id": app_id, "slug": slug, "name": title, "owner": owner, "org": org,
                   "manifest": manifest, "pem": pem, "public_pem": pub,
                   "webhook_secret": hashlib.sha256(pem.encode()).hexdigest()[:40],
                   "client_id": f"Iv1.{hashlib.sha1(pem.encode()).hexdigest()[:16]}",
                   "client_secret": hashlib.sha1(pem[::-1].encode()).hexdigest(),
                   "hook_url": (manifest.get("hook_attributes") or {}).get("url"),
                   "permissions": dict(manifest.get("default_permissions") or {}),
                   "events": list(manifest.get("default_events") or [])}
            self.apps[app_id] = app
            return app

    def deliver(self, app_id: int, event: str, payload: dict[str, Any],
                delivery: str | None = None) -> int:
        """Send a webhook delivery to App ``app_id``'s hook URL as GitHub does: the JSON body
        signed with the App's webhook secret (``X-Hub-Signature-256``), ``X-GitHub-Event``,
        ``X-GitHub-Delivery``; an event the App is not subscribed to is not sent (returns 0).
        Returns the HTTP status the hook answered."""
        import hmac
        import uuid

        import httpx

        app = self.apps[app_id]
        if event not in app["events"] and event not in ("ping", "installation"):
            return 0
        body = json.dumps(payload).encode()
        sig = "sha256=" + hmac.new(app["webhook_secret"].encode(), body,
                                   hashlib.sha256).hexdigest()
        headers = {"Content-Type": "application/json", "X-GitHub-Event": event,
                   "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
                   "X-Hub-Signature-256": sig, "User-Agent": "GitHub-Hookshot/double",
                   "X-GitHub-Hook-Installation-Target-Type": "integration",
                   "X-GitHub-Hook-Installation-Target-ID": str(app_id)}
        r = httpx.post(app["hook_url"], content=body, headers=headers, timeout=30)
        return r.status_code
    def _op_list_hook_deliveries(self, req: Request) -> tuple[int, Any, dict[str, str]]:
        """Newest first; ``cursor`` pagination as GitHub's: the ``Link`` header's ``next``
        carries ``cursor=v1_<id>`` of the first item of the next page."""
        per_page = max(1, min(100, int(req.query.get("per_page", 30))))
        items = list(reversed(self.hook_deliveries))
        if "redelivery" in req.query:
            want = req.query["redelivery"].lower() == "true"
            items = [d for d in items if d["redelivery"] is want]
        cursor = req.query.get("cursor")
        if cursor:
            if not re.fullmatch(r"v1_\d+", cursor):
                raise HTTPError(400, "Bad cursor")
            start = int(cursor[3:])
            items = [d for d in items if d["id"] <= start]
        page, rest = items[:per_page], items[per_page:]
        headers = {}
        if rest:
            q = {k: v for k, v in req.query.items() if k != "cursor"}
            qs = "&".join(f"{k}={v}" for k, v in {**q, "cursor": f"v1_{rest[0]['id']}"}.items())
            headers["Link"] = f'<{API}{req.path}?{qs}>; rel="next"'
        return 200, copy.deepcopy(page), headers

    def _op_redeliver(self, req: Request, delivery_id: str) -> tuple[int, Any]:
        """202 at once; the redelivery (same ``X-GitHub-Delivery``) is sent on a new thread,
        as GitHub sends it after answering.  Older than 3 days: 422, as GitHub refuses."""
        if not delivery_id.isdigit() or int(delivery_id) not in self._hook_sent:
            raise HTTPError(404, "Not Found")
        item = next(d for d in self.hook_deliveries if d["id"] == int(delivery_id))
        age = datetime.now(UTC) - datetime.strptime(
            item["delivered_at"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
        if age > timedelta(days=3):
            raise HTTPError(422, "Validation Failed", errors=[
                {"resource": "HookDelivery", "code": "custom",
                 "message": "Delivery is older than the redelivery window"}])
        event, body = self._hook_sent[int(delivery_id)]
        threading.Thread(target=self._deliver, args=(event, body, item["guid"]),
                         kwargs={"redelivery": True}, daemon=True).start()
        return 202, {}

    def _op_rate_limit(self, req: Request) -> tuple[int, Any]:
        b = self.ex("rate-limit-overview")
        b["resources"]["core"]["remaining"] = self.rate_remaining
        b["rate"]["remaining"] = self.rate_remaining
        return 200, b

    def _op_authenticated_user(self, req: Request) -> tuple[int, Any]:
        """``GET /user`` with a user access token: that user (the description's public-profile
        example with the login, id and URLs of the user).  An installation token is not a
        user: GitHub answers 403 "Resource not accessible by integration"."""
        login = self._user_login(req)
        if login is None:
            raise HTTPError(403, "Resource not accessible by integration")
        b = self.ex("private-user-response-with-public-profile-information")
        b.update({k: v for k, v in self._user(login).items() if k in b})
        b.update(name=None, email=None, company=None, blog="", location=None, bio=None)
        return 200, b

    def _op_get_repo(self, req: Request, repo: RepoState) -> tuple[int, Any]:
        body = self._repo_body(repo)
        login = self._user_login(req)
        if login is not None:  # the authenticated user's permissions, as GitHub adds them
            perm = repo.permissions.get(login, "none" if repo.private else "read")
            body["permissions"] = {"admin": perm == "admin", "maintain": perm == "admin",
                                   "push": perm in ("admin", "write"),
                                   "triage": perm in ("admin", "write"),
                                   "pull": perm != "none"}
        return 200, body

    def _op_get_installation(self, req: Request, repo: RepoState) -> tuple[int, Any]:
        b = self.ex("installation")
        b["id"] = repo.installation_id
        return 200, b

    def _resolve_ref(self, repo: RepoState, ref: str | None) -> dict[str, bytes]:
        ref = ref or repo.default_branch
        sha = repo.refs.get(ref, ref)
        if sha not in repo.trees:
            raise HTTPError(404, f"No commit found for the ref {ref}")
        return repo.trees[sha]

    def _op_get_content(self, req: Request, repo: RepoState, path: str) -> tuple[int, Any]:
        tree = self._resolve_ref(repo, req.query.get("ref"))
        path = path.strip("/")
        prefix = f"{API}/repos/{repo.full_name}/contents"
        ref = req.query.get("ref") or repo.default_branch

        def tree_sha(d: str) -> str:
            # the directory's git tree SHA (changes whenever anything below it changes)
            return self.git.tree_sha(repo.full_name, {q[len(d) + 1:]: b for q, b in tree.items()
                                                      if q.startswith(d + "/")})

        def entry(p: str, kind: str, data: bytes | None) -> dict[str, Any]:
            return {"type": kind, "size": len(data) if data is not None else 0,
                    "name": p.rsplit("/", 1)[-1], "path": p,
                    "sha": object_sha("blob", data or b"") if kind == "file" else tree_sha(p),
                    "url": f"{prefix}/{p}?ref={ref}", "git_url": None,
                    "html_url": f"{self.web_url}/{repo.full_name}/blob/{ref}/{p}",
                    "download_url": None,
                    "_links": {"self": f"{prefix}/{p}?ref={ref}", "git": None,
                               "html": f"{self.web_url}/{repo.full_name}/blob/{ref}/{p}"}}

        if path in tree:
            data = tree[path]
            b = entry(path, "file", data)
            b.update(encoding="base64", content=base64.encodebytes(data).decode())
            return 200, b
        children: dict[str, str] = {}
        for p in tree:
            if path == "" or p.startswith(path + "/"):
                rest = p[len(path) + 1:] if path else p
                head = rest.split("/", 1)[0]
                full = f"{path}/{head}" if path else head
                children[full] = "file" if "/" not in rest else "dir"
        if not children:
            raise HTTPError(404, "Not Found")
        return 200, [entry(p, k, tree.get(p) if k == "file" else None)
                     for p, k in sorted(children.items())]

    def _op_permission(self, req: Request, repo: RepoState, username: str) -> tuple[int, Any]:
        perm = repo.permissions.get(username)
        if perm is None:
            raise HTTPError(404, f"{username} is not a user")
        b = self.ex("repository-collaborator-permission-response-if-user-has-admin-permissions")
        role = {"admin": "admin", "write": "write", "read": "read", "none": "none"}[perm]
        b.update(permission=perm, role_name=role)
        b["user"] = {**self._user(username), "permissions": {
            "admin": perm == "admin", "maintain": perm == "admin",
            "push": perm in ("admin", "write"), "triage": perm != "none",
            "pull": perm != "none"}, "role_name": role}
        return 200, b

    def _get_issue(self, repo: RepoState, number: str) -> dict[str, Any]:
        issue = repo.issues.get(int(number))
        if issue is None:
            raise HTTPError(404, "Not Found")
        return issue

    def _get_comment(self, repo: RepoState, comment_id: str) -> dict[str, Any]:
        c = repo.comments.get(int(comment_id))
        if c is None:
            raise HTTPError(404, "Not Found")
        return c

    def _author(self, req: Request) -> tuple[str, str]:
        """The login writes are attributed to: the bot for installation tokens."""
        token = req.headers.get("authorization", "").partition(" ")[2]
        if token in self.user_tokens:
            return self.user_tokens[token][0], "User"
        if token in self.token_apps:  # minted for an App registered here: SLUG[bot]
            return f"{self.apps[self.token_apps[token]]['slug']}[bot]", "Bot"
        if token.startswith("ghs_"):
            return self.app_login, "Bot"
        return self.token_login, "User" if not self.token_login.endswith("[bot]") else "Bot"

    app_login = "campaign-bot[bot]"
    token_login = "campaign-bot[bot]"

    def _check_body(self, body: Any, field_name: str = "body", required: bool = True) -> str:
        if not isinstance(body, str) or (required and not body):
            raise HTTPError(422, "Validation Failed",
                            [{"resource": "Issue", "code": "missing_field", "field": field_name}])
        if len(body) > MAX_BODY:
            raise HTTPError(422, "Validation Failed", [{
                "resource": "IssueComment", "code": "custom", "field": field_name,
                "message": f"{field_name} is too long (maximum is {MAX_BODY} characters)"}])
        return body

    def _op_get_comment(self, req: Request, repo: RepoState, comment_id: str) -> tuple[int, Any]:
        return 200, self._comment_body(repo, self._get_comment(repo, comment_id))

    def _op_edit_comment(self, req: Request, repo: RepoState, comment_id: str) -> tuple[int, Any]:
        c = self._get_comment(repo, comment_id)
        c["body"] = self._check_body(req.json().get("body"))
        c["updated_at"] = _now()
        return 200, self._comment_body(repo, c)

    def _op_reaction(self, req: Request, repo: RepoState, comment_id: str) -> tuple[int, Any]:
        self._get_comment(repo, comment_id)
        content = req.json().get("content")
        allowed = {"+1", "-1", "laugh", "confused", "heart", "hooray", "rocket", "eyes"}
        if content not in allowed:
            raise HTTPError(422, "Validation Failed", [{"field": "content", "code": "invalid"}])
        b = self.ex("reaction")
        login, kind = self._author(req)
        b.update(id=next(self._ids), content=content, user=self._user(login, kind))
        return 201, b

    def _op_get_issue(self, req: Request, repo: RepoState, issue_number: str) -> tuple[int, Any]:
        return 200, self._issue_body(repo, self._get_issue(repo, issue_number))

    def _op_edit_issue(self, req: Request, repo: RepoState, issue_number: str) -> tuple[int, Any]:
        issue = self._get_issue(repo, issue_number)
        data = req.json()
        if "body" in data:
            issue["body"] = self._check_body(data["body"], required=False)
        for k in ("title", "state"):
            if k in data:
                issue[k] = data[k]
        return 200, self._issue_body(repo, issue)

    def _op_list_comments(self, req: Request, repo: RepoState,
                          issue_number: str) -> tuple[int, Any, dict[str, str]]:
        n = self._get_issue(repo, issue_number)["number"]
        items = [self._comment_body(repo, c) for c in sorted(repo.comments.values(),
                                                             key=lambda c: c["id"])
                 if c["issue"] == n]
        return self._paginate(req, items)

    def _op_create_comment(self, req: Request, repo: RepoState,
                           issue_number: str) -> tuple[int, Any]:
        n = self._get_issue(repo, issue_number)["number"]
        login, kind = self._author(req)
        c = {"id": next(self._ids), "issue": n, "body": self._check_body(req.json().get("body")),
             "user": login, "user_type": kind, "created_at": _now(), "updated_at": _now()}
        repo.comments[c["id"]] = c
        return 201, self._comment_body(repo, c)

    def _get_pull(self, repo: RepoState, number: str) -> Pull:
        p = repo.pulls.get(int(number))
        if p is None:
            raise HTTPError(404, "Not Found")
        return p

    def _op_get_branch(self, req: Request, repo: RepoState, branch: str) -> tuple[int, Any]:
        name = branch  # the request path is already percent-decoded
        sha = repo.refs.get(name)
        if sha is None:
            raise HTTPError(404, "Branch not found")
        b = self.ex("branch-get")
        prefix = f"{API}/repos/{repo.full_name}"
        b.update(name=name, protected=name in repo.protected,
                 protection_url=f"{prefix}/branches/{branch}/protection")
        b["commit"].update(sha=sha, url=f"{prefix}/commits/{sha}")
        b["_links"] = {"html": f"{self.web_url}/{repo.full_name}/tree/{name}",
                       "self": f"{prefix}/branches/{branch}"}
        if name not in repo.protected:
            b["protection"] = {"enabled": False, "required_status_checks": {
                "enforcement_level": "off", "contexts": [], "checks": []}}
        return 200, b

    def _op_list_pulls(self, req: Request, repo: RepoState) -> tuple[int, Any, dict[str, str]]:
        """``state`` (open, closed, all), ``head`` (``OWNER:BRANCH``) and ``base`` filters,
        newest first (GitHub's default sort is ``created``, ``desc``), each item a
        ``pull-request-simple`` (the full pull request's fields that schema lists)."""
        state = req.query.get("state", "open")
        head, base = req.query.get("head"), req.query.get("base")
        keys = self.openapi.doc["components"]["schemas"]["pull-request-simple"]["properties"]
        items = []
        for p in sorted(repo.pulls.values(), key=lambda x: -x.number):
            if state != "all" and p.state != state:
                continue
            owner = (p.head_repo or "").split("/", 1)[0]
            if head is not None and head != f"{owner}:{p.head_ref}":
                continue
            if base is not None and base != p.base_ref:
                continue
            full = self._pull_body(repo, p)
            items.append({k: v for k, v in full.items() if k in keys})
        return self._paginate(req, items)

    def _op_get_pull(self, req: Request, repo: RepoState, pull_number: str) -> tuple[int, Any]:
        return 200, self._pull_body(repo, self._get_pull(repo, pull_number))

    def _op_list_files(self, req: Request, repo: RepoState,
                       pull_number: str) -> tuple[int, Any, dict[str, str]]:
        p = self._get_pull(repo, pull_number)
        prefix = f"{self.web_url}/{repo.full_name}"
        items = [{**f, "changes": f["additions"] + f["deletions"],
                  "blob_url": f"{prefix}/blob/{p.head_sha}/{f['filename']}",
                  "raw_url": f"{prefix}/raw/{p.head_sha}/{f['filename']}",
                  "contents_url": f"{API}/repos/{repo.full_name}/contents/{f['filename']}"
                                  f"?ref={p.head_sha}"} for f in p.files]
        return self._paginate(req, items)

    def _op_list_reviews(self, req: Request, repo: RepoState,
                         pull_number: str) -> tuple[int, Any, dict[str, str]]:
        n = self._get_pull(repo, pull_number).number
        items = [self._review_body(repo, r) for r in repo.reviews.values() if r["pull"] == n]
        return self._paginate(req, items)

    def _validate_line(self, p: Pull, c: dict[str, Any]) -> str:
        """The diff hunk text a comment sits in; 422 when the line is outside the diff."""
        f = next((f for f in p.files if f["filename"] == c.get("path")), None)
        if f is None:
            raise HTTPError(422, "Unprocessable Entity",
                            ["Path could not be resolved"])
        if c.get("subject_type") == "file":
            return ""
        line = c.get("line")
        if not isinstance(line, int):
            raise HTTPError(422, "Unprocessable Entity", ["Line could not be resolved"])
        side = c.get("side") or "RIGHT"
        hunks = hunks_of(f["patch"])
        idx = next((i for i, (old, new) in enumerate(hunks)
                    if line in (new if side == "RIGHT" else old)), None)
        if idx is None:
            raise HTTPError(422, "Unprocessable Entity",
                            ["Pull request review thread line must be part of the diff"])
        start = c.get("start_line")
        if start is not None:
            if start >= line:
                raise HTTPError(422, "Unprocessable Entity",
                                ["Pull request review thread start line must precede the end line"])
            old, new = hunks[idx]
            if start not in (new if (c.get("start_side") or side) == "RIGHT" else old):
                raise HTTPError(422, "Unprocessable Entity", [
                    "Pull request review thread start line must be part of the same hunk as "
                    "the line."])
        return f["patch"]

    def _op_create_review(self, req: Request, repo: RepoState,
                          pull_number: str) -> tuple[int, Any]:
        p = self._get_pull(repo, pull_number)
        data = req.json()
        event = data.get("event")
        body = data.get("body")
        if event in ("COMMENT", "REQUEST_CHANGES") and not body:
            raise HTTPError(422, "Unprocessable Entity",
                            ["Body is required when using COMMENT or REQUEST_CHANGES"])
        if body is not None:
            self._check_body(body, required=False)
        commit = data.get("commit_id") or p.head_sha
        if commit not in repo.trees:
            raise HTTPError(422, "Unprocessable Entity", ["commit_sha is not part of the pull"])
        comments = data.get("comments") or []
        hunks = [self._validate_line(p, c) for c in comments]  # all or nothing, like GitHub
        login, kind = self._author(req)
        r: dict[str, Any] = {"id": next(self._ids), "pull": p.number, "body": body or "",
             "state": {"COMMENT": "COMMENTED", "APPROVE": "APPROVED",
                       "REQUEST_CHANGES": "CHANGES_REQUESTED"}.get(event, "PENDING"),
             "commit_id": commit, "user": login, "user_type": kind, "submitted_at": _now()}
        repo.reviews[r["id"]] = r
        for c, hunk in zip(comments, hunks, strict=True):
            cid = next(self._ids)
            repo.review_comments[cid] = {
                "id": cid, "review_id": r["id"], "pull": p.number, "body": c.get("body", ""),
                "path": c["path"], "line": c.get("line"), "side": c.get("side") or "RIGHT",
                "start_line": c.get("start_line"), "start_side": c.get("start_side"),
                "commit_id": commit, "diff_hunk": hunk or "@@", "user": login,
                "user_type": kind}
        return 200, self._review_body(repo, r)

    def _op_list_review_comments(self, req: Request, repo: RepoState,
                                 pull_number: str) -> tuple[int, Any, dict[str, str]]:
        n = self._get_pull(repo, pull_number).number
        items = [self._review_comment_body(repo, c) for c in repo.review_comments.values()
                 if c["pull"] == n]
        return self._paginate(req, items)

    def _op_create_review_comment(self, req: Request, repo: RepoState,
                                  pull_number: str) -> tuple[int, Any]:
        p = self._get_pull(repo, pull_number)
        data = req.json()
        hunk = self._validate_line(p, data)
        login, kind = self._author(req)
        cid = next(self._ids)
        c = {"id": cid, "review_id": next(self._ids), "pull": p.number,
             "body": self._check_body(data.get("body")), "path": data["path"],
             "line": data.get("line"), "side": data.get("side") or "RIGHT",
             "start_line": data.get("start_line"), "start_side": data.get("start_side"),
             "commit_id": data.get("commit_id") or p.head_sha, "diff_hunk": hunk or "@@",
             "user": login, "user_type": kind}
        repo.review_comments[cid] = c
        return 201, self._review_comment_body(repo, c)

    def _check_output(self, data: dict[str, Any]) -> None:
        out = data.get("output") or {}
        for k in ("summary", "text"):
            if isinstance(out.get(k), str) and len(out[k]) > MAX_CHECK_TEXT:
                raise HTTPError(422, "Invalid request.", [
                    f"output.{k} is too long (maximum is {MAX_CHECK_TEXT} characters)"])
        annotations = out.get("annotations") or []
        if len(annotations) > 50:
            raise HTTPError(422, "Invalid request.", ["at most 50 annotations per request"])
        for k in ("title", "summary"):  # both "Required" when output is given
            if out and not isinstance(out.get(k), str):
                raise HTTPError(422, "Invalid request.", [f"output.{k} is required"])
        for a in annotations:
            missing = [k for k in ("path", "start_line", "end_line", "annotation_level",
                                   "message") if a.get(k) in (None, "")]
            if missing or a["annotation_level"] not in ("notice", "warning", "failure"):
                raise HTTPError(422, "Invalid request.", [
                    f"annotation {a!r}: {missing or 'annotation_level'} invalid"])
            if a["end_line"] < a["start_line"] or len(a["message"].encode()) > 65536 or \
                    len(a.get("title") or "") > 255:
                raise HTTPError(422, "Invalid request.", [f"annotation {a!r} is invalid"])
        actions = data.get("actions")
        if actions is not None:
            if len(actions) > 3:
                raise HTTPError(422, "Invalid request.", ["at most 3 actions"])
            for a in actions:
                if (len(a.get("label") or "") not in range(1, 21)
                        or len(a.get("identifier") or "") not in range(1, 21)
                        or len(a.get("description") or "") not in range(1, 41)):
                    raise HTTPError(422, "Invalid request.", [
                        f"action {a!r}: label and identifier 1-20 characters, description "
                        "1-40"])
        if data.get("status") == "completed" and not data.get("conclusion"):
            raise HTTPError(422, "Invalid request.",
                            ["conclusion is required when status is completed"])

    def _op_create_check_run(self, req: Request, repo: RepoState) -> tuple[int, Any]:
        data = req.json()
        if not data.get("name") or not data.get("head_sha"):
            raise HTTPError(422, "Invalid request.", ["name and head_sha are required"])
        if data["head_sha"] not in repo.trees:
            raise HTTPError(422, "No commit found for SHA: " + data["head_sha"])
        self._check_output(data)
        status = "completed" if data.get("conclusion") else data.get("status", "queued")
        r = {"id": next(self._ids), "name": data["name"], "head_sha": data["head_sha"],
             "status": status, "conclusion": data.get("conclusion"),
             "external_id": data.get("external_id"), "details_url": data.get("details_url"),
             "started_at": data.get("started_at") or _now(),
             "completed_at": data.get("completed_at") or (_now() if status == "completed"
                                                           else None),
             "output": data.get("output"), "actions": data.get("actions") or [],
             "annotations": list((data.get("output") or {}).get("annotations") or [])}
        repo.check_runs[r["id"]] = r
        return 201, self._check_run_body(repo, r)

    def _op_update_check_run(self, req: Request, repo: RepoState,
                             check_run_id: str) -> tuple[int, Any]:
        r = repo.check_runs.get(int(check_run_id))
        if r is None:
            raise HTTPError(404, "Not Found")
        data = req.json()
        self._check_output(data)
        for k in ("name", "status", "conclusion", "external_id", "details_url", "output",
                  "started_at", "completed_at", "actions"):
            if k in data:
                r[k] = data[k]
        # "Each time you update the check run, annotations are appended" (checks/update)
        r.setdefault("annotations", []).extend((data.get("output") or {}).get("annotations")
                                               or [])
        if data.get("conclusion"):
            r["status"] = "completed"
            r["completed_at"] = r.get("completed_at") or _now()
        return 200, self._check_run_body(repo, r)

    def _op_list_check_runs(self, req: Request, repo: RepoState,
                            ref: str) -> tuple[int, Any, dict[str, str]]:
        sha = repo.refs.get(ref, ref)
        name = req.query.get("check_name")
        items = [self._check_run_body(repo, r) for r in repo.check_runs.values()
                 if r["head_sha"] == sha and (name is None or r["name"] == name)]
        return self._paginate(req, items, "check_runs")

    def _op_create_label(self, req: Request, repo: RepoState) -> tuple[int, Any]:
        data = req.json()
        name, color = data.get("name"), str(data.get("color") or "").lstrip("#")
        if not isinstance(name, str) or not name.strip():
            raise HTTPError(422, "Validation Failed", [{"resource": "Label", "field": "name",
                                                        "code": "missing_field"}])
        if not re.fullmatch(r"[0-9a-fA-F]{6}", color):
            raise HTTPError(422, "Validation Failed", [{"resource": "Label", "field": "color",
                                                        "code": "invalid"}])
        if name.lower() in repo.labels:
            raise HTTPError(422, "Validation Failed", [{"resource": "Label", "field": "name",
                                                        "code": "already_exists"}])
        label = {"id": next(self._ids), "name": name, "color": color.lower(),
                 "description": data.get("description")}
        repo.labels[name.lower()] = label
        return 201, self._label_body(repo, label)

    def _op_add_labels(self, req: Request, repo: RepoState,
                       issue_number: str) -> tuple[int, Any]:
        issue = self._get_issue(repo, issue_number)
        data = req.json()
        names = data.get("labels") if isinstance(data, dict) else data
        if not isinstance(names, list) or not names:
            raise HTTPError(422, "Validation Failed", [{"resource": "Label", "field": "labels",
                                                        "code": "invalid"}])
        names = [n["name"] if isinstance(n, dict) else n for n in names]
        have = issue.setdefault("labels", [])
        for n in names:
            if n.lower() not in repo.labels:  # GitHub creates a missing label (grey)
                repo.labels[n.lower()] = {"id": next(self._ids), "name": n,
                                          "color": "ededed", "description": None}
            if n.lower() not in {h.lower() for h in have}:
                have.append(repo.labels[n.lower()]["name"])
        return 200, [self._label_body(repo, repo.labels[h.lower()]) for h in have]

    def _op_remove_label(self, req: Request, repo: RepoState, issue_number: str,
                         name: str) -> tuple[int, Any]:
        issue = self._get_issue(repo, issue_number)
        have = issue.setdefault("labels", [])
        if name.lower() not in {h.lower() for h in have}:
            raise HTTPError(404, "Label does not exist")
        issue["labels"] = [h for h in have if h.lower() != name.lower()]
        return 200, [self._label_body(repo, repo.labels[h.lower()]) for h in issue["labels"]]

    def _get_workflow(self, repo: RepoState, workflow_id: str) -> dict[str, Any]:
        for wf in repo.workflows.values():
            if workflow_id in (wf["file"], str(wf["id"])):
                return wf
        raise HTTPError(404, "Not Found")

    def _workflow_body(self, repo: RepoState, wf: dict[str, Any]) -> dict[str, Any]:
        b = self.ex("workflow")
        prefix = f"{API}/repos/{repo.full_name}"
        b.update(id=wf["id"], name=wf["name"], path=f".github/workflows/{wf['file']}",
                 state="active", url=f"{prefix}/actions/workflows/{wf['id']}",
                 html_url=f"{self.web_url}/{repo.full_name}/blob/{repo.default_branch}/"
                          f".github/workflows/{wf['file']}",
                 badge_url=f"{self.web_url}/{repo.full_name}/workflows/{wf['name']}/badge.svg")
        return b

    def _op_get_workflow(self, req: Request, repo: RepoState, workflow_id: str) -> tuple[int, Any]:
        return 200, self._workflow_body(repo, self._get_workflow(repo, workflow_id))

    def _op_dispatch(self, req: Request, repo: RepoState, workflow_id: str) -> tuple[int, Any]:
        wf = self._get_workflow(repo, workflow_id)
        data = req.json()
        ref = data.get("ref")
        if not isinstance(ref, str) or ref not in repo.refs:
            # GitHub accepts a branch or tag name only, never a SHA
            raise HTTPError(422, f"No ref found for: {ref}")
        inputs = data.get("inputs") or {}
        if len(inputs) > 25:
            raise HTTPError(422, "inputs are too large (maximum is 25 properties)")
        run = self.add_run(repo.full_name, wf["file"], repo.refs[ref], status="queued",
                           conclusion=None, display_title=str(inputs.get("request_id", wf["name"])))
        run["inputs"] = inputs
        run["head_branch"] = ref
        run["created_at"] = run["updated_at"] = _now()
        for hook in self.dispatch_hooks:
            threading.Thread(target=hook, args=(self, repo.full_name, run), daemon=True).start()
        if data.get("return_run_details"):
            prefix = f"{API}/repos/{repo.full_name}"
            return 200, {"workflow_run_id": run["id"],
                         "run_url": f"{prefix}/actions/runs/{run['id']}",
                         "html_url": f"{self.web_url}/{repo.full_name}/actions/runs/"
                                     f"{run['id']}"}
        return 204, None

    def _op_list_runs(self, req: Request, repo: RepoState,
                      workflow_id: str) -> tuple[int, Any, dict[str, str]]:
        wf = self._get_workflow(repo, workflow_id)
        q = req.query
        since = q.get("created", "")[2:] if q.get("created", "").startswith(">=") else ""
        items = [self._run_body(repo, r) for r in sorted(repo.runs.values(),
                                                         key=lambda r: -r["id"])
                 if r["workflow"] == wf["file"]
                 and q.get("branch", r["head_branch"]) == r["head_branch"]
                 and q.get("event", r["event"]) == r["event"]
                 and (not since or r.get("created_at", _now()) >= since)]
        return self._paginate(req, items, "workflow_runs")

    def _op_get_run(self, req: Request, repo: RepoState, run_id: str) -> tuple[int, Any]:
        run = repo.runs.get(int(run_id))
        if run is None:
            raise HTTPError(404, "Not Found")
        return 200, self._run_body(repo, run)

    def _op_cancel_run(self, req: Request, repo: RepoState, run_id: str) -> tuple[int, Any]:
        run = repo.runs.get(int(run_id))
        if run is None:
            raise HTTPError(404, "Not Found")
        if run["status"] == "completed":
            raise HTTPError(409, "Cannot cancel a workflow run that is completed.")
        run["cancel_requested"] = True
        for hook in self.cancel_hooks:
            threading.Thread(target=hook, args=(self, repo.full_name, run), daemon=True).start()
        return 202, {}

    def set_run(self, full_name: str, run_id: int, **fields: Any) -> dict[str, Any]:
        """Update a run's ``status``, ``conclusion``, ``run_started_at``, ``updated_at``..."""
        with self._lock:
            run = self.repos[full_name].runs[run_id]
            run.update(fields)
            return run

    def _op_list_artifacts(self, req: Request, repo: RepoState,
                           run_id: str) -> tuple[int, Any, dict[str, str]]:
        name = req.query.get("name")
        items = [self._artifact_body(repo, a) for a in repo.artifacts.values()
                 if a["run_id"] == int(run_id) and (name is None or a["name"] == name)]
        return self._paginate(req, items, "artifacts")

    def _get_artifact(self, repo: RepoState, artifact_id: str) -> dict[str, Any]:
        a = repo.artifacts.get(int(artifact_id))
        if a is None:
            raise HTTPError(404, "Not Found")
        return a

    def _op_get_artifact(self, req: Request, repo: RepoState, artifact_id: str) -> tuple[int, Any]:
        return 200, self._artifact_body(repo, self._get_artifact(repo, artifact_id))

    def _op_download_artifact(self, req: Request, repo: RepoState, artifact_id: str,
                              archive_format: str) -> tuple[int, Any, dict[str, str]]:
        a = self._get_artifact(repo, artifact_id)
        if archive_format != "zip":
            raise HTTPError(404, "Not Found")
        if a["expired"]:
            raise HTTPError(410, "Artifact has expired")
        key = hashlib.sha1(f"{a['id']}-{time.time()}".encode()).hexdigest()
        self.blobs[key] = a["zip"]
        # a different host name for the same server: clients must drop Authorization
        blob_base = self.base_url.replace("127.0.0.1", "localhost")
        return 302, None, {"Location": f"{blob_base}/_blob/{key}"}


def default_openapi_path() -> Path:
    """``openapi-subset.json`` beside this module: GitHub's REST description cut to the
    operations the bot calls (vendored; its origin and licence are in SOURCE.md here)."""
    return Path(__file__).resolve().parent / "openapi-subset.json"
