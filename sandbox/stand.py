"""The sandbox's moving parts on one machine: the GitHub double, a campaign repository on it,
``campaign-bot serve`` and a runner that executes screens on the stand-in model server.

:class:`Stand` starts them in order and stops them in reverse; the web page
(:mod:`sandbox.page`) only calls :meth:`Stand.comment` and reads :meth:`Stand.state`.  The bot
and the runner are driven through their command lines (``campaign-bot serve``,
``campaign-bot keygen``, ``campaign-bot screen``) as subprocesses, the way a deployment runs
them, never imported.

What GitHub does around them is played here, as GitHub documents it ("Webhook events and
payloads", GitHub Docs): a comment written on the page is stored on the double and sent to the
bot as a signed ``issue_comment`` delivery; a workflow dispatch runs the screen on this
machine and sends ``workflow_job`` and ``workflow_run``; a git push of the bot's evidence
commit sends ``push`` and ``pull_request`` ``synchronize``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import tomllib
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from .github_double import GitHubDouble, OpenAPISubset, default_openapi_path

HERE = Path(__file__).resolve().parent
CAMPAIGN_SRC = HERE / "campaign"
CLI = [sys.executable, "-c", "from evidence.launch import main; main()"]
"""``campaign-bot`` as the console script runs it, under this interpreter."""
REPO = "octo-org/h3-sandbox"
CAMP_DIR = "campaigns/standin"
CAMP_ID = tomllib.loads((CAMPAIGN_SRC / "campaign.toml").read_text(encoding="utf-8"))["id"]
"""The campaign's id (``campaign.toml``'s ``id``): the live pages are addressed by it,
``/c/OWNER/REPO/ID/``, not by the campaign's folder."""
ISSUE = 1
"""The campaign issue: its body carries the status header the bot keeps."""
PR = 2
"""The pull request where screens are asked for (PRs and issues share numbers on GitHub)."""
USERS = {"maintainer": "write", "requester": "read", "visitor": "read"}
"""The people on the page: a maintainer (write access), a requester named in campaign.toml
(read access; requesters may /screen), and a visitor (read access only: refused)."""
BOT_LOGIN = "campaign-bot[bot]"
SCREEN_WORKFLOW = "screen.yml"


class StandError(RuntimeError):
    """A part of the sandbox did not start; the message says which and why (with the tail of
    its log when it has one)."""


def free_port(host: str = "127.0.0.1") -> int:
    """An unused TCP port on ``host`` (the kernel's choice)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _clean_env() -> dict[str, str]:
    """This process's environment without any ``CAMPAIGN_BOT_*`` setting: a deployment's
    settings on this machine must not leak into the sandbox."""
    return {k: v for k, v in os.environ.items() if not k.startswith("CAMPAIGN_BOT_")}


def campaign_files(trusted_key: bytes) -> dict[str, bytes]:
    """The campaign repository's files: the repository config, the screen workflow that
    ``campaign-bot init`` writes, and the stand-in campaign with the sandbox runner's public
    key as its only trusted key."""
    from importlib.resources import files

    tpl = files("templates") / "repo"
    out = {
        ".github/campaign-bot.toml": (tpl / "campaign-bot.toml").read_bytes(),
        f".github/workflows/{SCREEN_WORKFLOW}": (tpl / "screen.yml").read_bytes(),
        f"{CAMP_DIR}/trusted-keys.pem": trusted_key,
    }
    for p in sorted(CAMPAIGN_SRC.iterdir()):
        if p.is_file() and p.name != "SOURCE.md":
            out[f"{CAMP_DIR}/{p.name}"] = p.read_bytes()
    return out


def candidates() -> list[dict[str, str]]:
    """The stand-in campaign's candidates (name, description), from its campaign.toml."""
    scope = tomllib.loads((CAMPAIGN_SRC / "campaign.toml").read_text())
    return [{"name": c["name"], "description": c.get("description", "")}
            for c in scope.get("candidates", [])]


@dataclass
class Stand:
    """Everything ``campaign-bot sandbox`` runs, under ``work`` (a folder it owns).

    ``log`` receives one line per event worth telling the user (a part started, a screen
    dispatched, a delivery refused).  :meth:`start` raises :class:`StandError` when a part
    does not come up; :meth:`stop` is safe to call at any time, more than once.
    """

    work: Path
    log: Callable[[str], None] = print
    web_url: str | None = None
    """Where GitHub's web links point (run, check run, pull request, evidence tree), e.g. the
    sandbox page's URL, which serves them (:mod:`sandbox.page`); None: github.com's, as the
    double answers by default."""
    double: GitHubDouble | None = None
    bot_url: str = ""
    proc: subprocess.Popen[bytes] | None = None
    secret: str = field(default_factory=lambda: secrets.token_hex(16))
    events: list[dict[str, Any]] = field(default_factory=list)
    runs: list[dict[str, Any]] = field(default_factory=list)
    _children: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stopping: bool = False
    _checked: int = 0
    _problems: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------ lifecycle

    def start(self, *, serve_timeout_s: float = 60.0) -> None:
        """Start the double, seed the repository, start ``serve`` and wait for its
        ``/healthz``, then hook the runner and the push deliveries to the double."""
        self.work.mkdir(parents=True, exist_ok=True)
        key = self.work / "runner" / "runner.key"
        key.parent.mkdir(parents=True, exist_ok=True)
        res = subprocess.run([*CLI, "keygen", str(key)], capture_output=True, text=True,
                             env=_clean_env(), timeout=120)
        if res.returncode != 0:
            raise StandError(f"campaign-bot keygen failed: {res.stderr.strip()}")
        self.key = key
        d = self.double = GitHubDouble(OpenAPISubset(default_openapi_path()))
        if self.web_url:
            d.web_url = self.web_url.rstrip("/")
        d.start()
        self.log(f"local GitHub (the double) at {d.base_url}")
        d.add_repo(REPO, dict(campaign_files(key.with_suffix(".key.pub").read_bytes())))
        d.add_workflow(REPO, SCREEN_WORKFLOW)
        d.add_issue(REPO, ISSUE, "Campaign: stand-in screen", "The campaign's own text.\n",
                    user="maintainer")
        d.add_pull(REPO, PR, {f"{CAMP_DIR}/NOTES.md": "A candidate to screen.\n"},
                   user="maintainer", head_ref="try-noop", title="Try the noop candidate")
        for login, perm in USERS.items():
            d.set_permission(REPO, login, perm)
        self.log(f"campaign repository {REPO} (real git: {d.git_url(REPO)})")
        self._start_serve(serve_timeout_s)
        d.dispatch_hooks.append(self._on_dispatch)
        d.push_hooks.append(self._on_push)
        # the campaign issue gets its status header the way a maintainer asks for one
        self.comment("maintainer", ISSUE, "/campaign refresh")

    def _start_serve(self, timeout_s: float) -> None:
        assert self.double is not None
        port = free_port()
        env = _clean_env()
        env.update({
            "CAMPAIGN_BOT_WEBHOOK_SECRET": self.secret, "CAMPAIGN_BOT_TOKEN": "test-token",
            "CAMPAIGN_BOT_GITHUB_API_URL": self.double.base_url,
            "CAMPAIGN_BOT_HOST": "127.0.0.1", "CAMPAIGN_BOT_PORT": str(port),
            "CAMPAIGN_BOT_DATABASE_URL": f"sqlite:///{self.work / 'bot.sqlite3'}",
            "CAMPAIGN_BOT_GITHUB_THROTTLE": "false", "CAMPAIGN_BOT_SCREEN_DEBOUNCE_S": "0",
            "CAMPAIGN_BOT_RETRY_DELAYS": "1", "CAMPAIGN_BOT_BOT_LOGIN": BOT_LOGIN,
            "CAMPAIGN_BOT_GIT_CACHE_DIR": str(self.work / "git-mirrors"),
            "CAMPAIGN_BOT_PUBLIC_URL": f"http://127.0.0.1:{port}",
            "CAMPAIGN_BOT_GITHUB_URL": self.double.web_url,
        })
        self.serve_log = self.work / "serve.log"
        with open(self.serve_log, "wb") as log:
            self.proc = subprocess.Popen([*CLI, "serve"], cwd=self.work, env=env, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        self.bot_url = f"http://127.0.0.1:{port}"
        end = time.monotonic() + timeout_s
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                raise StandError("campaign-bot serve exited at start:\n"
                                 + self.serve_log.read_text(errors="replace")[-2000:])
            try:
                if httpx.get(f"{self.bot_url}/healthz", timeout=1).status_code == 200:
                    self.log(f"the bot (campaign-bot serve) at {self.bot_url}")
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise StandError(f"campaign-bot serve did not answer /healthz in {timeout_s:g} s:\n"
                         + self.serve_log.read_text(errors="replace")[-2000:])

    def stop(self) -> None:
        """Stop the runner's screens, ``serve`` (SIGTERM, then SIGKILL after 20 s) and the
        double.  Idempotent."""
        self._stopping = True
        with self._lock:
            children = list(self._children)
        for p in children:
            _terminate(p, 10)
        if self.proc is not None:
            _terminate(self.proc, 20)
            self.proc = None
        if self.double is not None:
            self.double.dispatch_hooks.clear()
            self.double.push_hooks.clear()
            self.double.stop()
            self.double = None

    # ------------------------------------------------------------------ what the page does

    def comment(self, login: str, number: int, body: str) -> dict[str, Any]:
        """Write ``body`` as ``login`` on issue or PR ``number`` (stored on the double, as
        GitHub stores it) and send the bot the ``issue_comment`` ``created`` delivery.
        Returns the stored comment.  Raises ValueError for an unknown user or number, or an
        empty or over-long body (GitHub's 65,536 characters)."""
        d = self._double()
        if login not in USERS:
            raise ValueError(f"unknown user {login!r}; one of {', '.join(USERS)}")
        if number not in (ISSUE, PR):
            raise ValueError(f"no issue or pull request #{number}; #{ISSUE} or #{PR}")
        if not body.strip() or len(body) > 65536:
            raise ValueError("a comment needs 1 to 65,536 characters")
        c = d.add_comment(REPO, number, body, user=login)
        self.deliver("issue_comment", comment_payload(c, login, number))
        return c

    def deliver(self, event: str, payload: dict[str, Any]) -> int:
        """POST one webhook delivery to the bot, signed as GitHub signs it (HMAC-SHA256 of the
        body with the webhook secret, ``X-Hub-Signature-256``; GitHub Docs, "Validating
        webhook deliveries").  Returns the status the bot answered (202 when stored)."""
        body = json.dumps(payload).encode()
        sig = "sha256=" + hmac.new(self.secret.encode(), body, hashlib.sha256).hexdigest()
        headers = {"Content-Type": "application/json", "X-GitHub-Event": event,
                   "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": sig,
                   "User-Agent": "GitHub-Hookshot/sandbox"}
        try:
            r = httpx.post(f"{self.bot_url}/webhook", content=body, headers=headers,
                           timeout=30)
            status = r.status_code
        except httpx.HTTPError as exc:
            status = 0
            self.log(f"delivery {event} not sent: {exc}")
        with self._lock:
            action = f".{payload['action']}" if payload.get("action") else ""
            self.events.append({"at": _iso(_now()),
                                "what": f"webhook {event}{action} -> {status}"})
        return status

    def state(self) -> dict[str, Any]:
        """What the page shows, as JSON-ready data: the issue's body (status header), the
        comments of the issue and the PR, the PR's check runs, the evidence files committed
        on the PR's branch, the workflow runs and the sandbox's event log."""
        d = self._double()
        with d._lock:
            repo = d.repo(REPO)
            pull = repo.pulls[PR]
            comments = [{"id": c["id"], "number": c["issue"], "user": c["user"],
                         "body": c["body"], "at": c["created_at"]}
                        for c in sorted(repo.comments.values(), key=lambda c: c["id"])]
            checks = [{"id": c["id"], "name": c["name"], "status": c["status"],
                       "conclusion": c.get("conclusion"),
                       "title": (c.get("output") or {}).get("title"),
                       "summary": (c.get("output") or {}).get("summary")}
                      for c in sorted(repo.check_runs.values(), key=lambda c: c["id"])]
            tree = repo.trees[pull.head_sha]
            evidence = sorted(p for p in tree if p.startswith(f"{CAMP_DIR}/screens/"))
            runs = [{"id": r["id"], "status": r["status"], "conclusion": r.get("conclusion"),
                     "inputs": r.get("inputs", {})}
                    for r in sorted(repo.runs.values(), key=lambda r: r["id"])]
            header = repo.issues[ISSUE]["body"]
            n_calls = len(d.calls)
        problems = self.rest_problems(n_calls)
        with self._lock:
            events = list(self.events[-50:])
        return {"repo": REPO, "issue": ISSUE, "pr": PR, "head_sha": pull.head_sha,
                "campaign": CAMP_DIR, "issue_body": header, "comments": comments,
                "checks": checks, "evidence": evidence, "runs": runs, "events": events,
                "rest_calls": n_calls, "rest_problems": problems,
                "live_pages": f"{self.bot_url}/c/{REPO}/{CAMP_ID}/"}

    def rest_problems(self, upto: int) -> list[str]:
        """Every answer of the double so far (its first ``upto`` calls) that does not conform
        to GitHub's REST description (:meth:`GitHubDouble.validation_problems`), checked once
        each: the REST checks the test suite runs, kept on while the sandbox runs."""
        d = self._double()
        with self._lock:
            start = self._checked
            self._checked = max(start, upto)
        if upto > start:
            found = d.validation_problems(start)
            # calls answered after ``upto`` are checked again next time: harmless repeats
            with self._lock:
                self._problems += [p for p in found if p not in self._problems]
        with self._lock:
            return list(self._problems)

    def _double(self) -> GitHubDouble:
        if self.double is None:
            raise StandError("the sandbox is not running")
        return self.double

    # ------------------------------------------------------------------ GitHub's side

    def _on_dispatch(self, double: GitHubDouble, repo: str, run: dict[str, Any]) -> None:
        """The self-hosted runner: what the screen workflow's steps do, on this machine."""
        try:
            self._run_screen(double, repo, run)
        except Exception as exc:  # noqa: BLE001 - told on the page, never a dead thread
            self.log(f"runner: run {run['id']} failed: {type(exc).__name__}: {exc}")
            if not self._stopping:
                self._complete(double, repo, run, "failure", None)

    def _run_screen(self, double: GitHubDouble, repo: str, run: dict[str, Any]) -> None:
        inputs = run["inputs"]
        camp_path = str(inputs.get("campaign", ""))
        if not re.fullmatch(r"[\w.-]+(/[\w.-]+)*", camp_path) or ".." in camp_path.split("/"):
            raise ValueError(f"campaign input {camp_path!r} is not a repository path")
        self.log(f"runner: run {run['id']}: screen {inputs.get('candidate')} on "
                 f"{inputs.get('track')} (request {inputs.get('request_id')})")
        with self._lock:
            self.runs.append(run)
        started = _now()
        double.set_run(repo, run["id"], status="in_progress", run_started_at=_iso(started))
        self.deliver("workflow_job", job_payload(repo, run, started))
        # "Check out the approved head": the campaign directory at inputs.head_sha
        work = self.work / "runner" / f"run-{run['id']}"
        tree = double.repo(repo).trees[str(inputs["head_sha"])]
        camp = work / "checkout"
        for path, data in tree.items():
            if path.startswith(camp_path + "/"):
                dst = camp / path[len(camp_path) + 1:]
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(data)
        # "Check out the default branch's campaign scope": campaign.toml at the run's commit
        frozen = work / "scope-campaign.toml"
        frozen.write_bytes(double.repo(repo).trees[str(run["head_sha"])][
            f"{camp_path}/campaign.toml"])
        # "Run the screen": campaign-bot screen, the stand-in server as the model server
        out = work / "bundle"
        args = ["screen", "--campaign", str(camp), "--track", str(inputs["track"]),
                "--out", str(out), "--signing-key", str(self.key), "--device-tool", "none",
                "--health-poll-s", "0.1", "--frozen-scope", str(frozen),
                "--frozen-scope-blob", str(inputs.get("scope_blob", ""))]
        if inputs.get("candidate") == "control":
            args.append("--control-only")
        else:
            args += ["--candidate", str(inputs["candidate"])]
        if inputs.get("sessions"):
            args += ["--sessions", str(inputs["sessions"])]
        if inputs.get("follow_up"):
            args += ["--follow-up", str(inputs["follow_up"])]
        env = _clean_env()
        env.update({"CAMPAIGN_BOT_SERVER_CMD": f"{sys.executable} -m runners.standin",
                    "COLUMNS": "100"})
        with open(work / "screen.log", "wb") as log:
            proc = subprocess.Popen([*CLI, *args], env=env, stdout=log,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            with self._lock:
                self._children.append(proc)
            rc = proc.wait()
            with self._lock:
                self._children.remove(proc)
        if self._stopping:
            return
        self.log(f"runner: run {run['id']}: campaign-bot screen exited {rc} "
                 f"(log: {work / 'screen.log'})")
        # "Upload the signed bundle": the run's artifact
        files = {p.relative_to(out).as_posix(): p.read_bytes()
                 for p in sorted(out.rglob("*")) if p.is_file()} if out.is_dir() else {}
        if files:
            double.add_artifact(repo, run["id"], f"screen-bundle-{inputs['request_id']}",
                                files)
        self._complete(double, repo, run, "success" if rc in (0, 1) else "failure", started)

    def _complete(self, double: GitHubDouble, repo: str, run: dict[str, Any],
                  conclusion: str, started: datetime | None) -> None:
        ended = _now()
        if started is not None and ended <= started:
            time.sleep(1)  # GitHub's times are whole seconds; a run lasts at least one
            ended = _now()
        fields = {"status": "completed", "conclusion": conclusion, "updated_at": _iso(ended)}
        if started is not None:
            fields["run_started_at"] = _iso(started)
        double.set_run(repo, run["id"], **fields)
        self.deliver("workflow_run", run_payload(repo, double.repo(repo).runs[run["id"]],
                                                 double.web_url))

    def _on_push(self, double: GitHubDouble, repo: str, updates: list[tuple[str, str, str]],
                 login: str) -> None:
        """GitHub's deliveries for a git push: ``push`` per moved ref, and ``pull_request``
        ``synchronize`` for an open PR whose head branch moved."""
        for ref, before, after in updates:
            self.deliver("push", push_payload(double, repo, ref, before, after, login))
            branch = ref.removeprefix("refs/heads/")
            for pull in list(double.repo(repo).pulls.values()):
                if pull.head_ref == branch and pull.state == "open":
                    self.deliver("pull_request", sync_payload(repo, pull, before, login))


def _terminate(p: subprocess.Popen[bytes], grace_s: float) -> None:
    """SIGTERM ``p``'s process group, SIGKILL it after ``grace_s``."""
    if p.poll() is not None:
        return
    try:
        os.killpg(p.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        p.terminate()
    try:
        p.wait(grace_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            p.kill()
        p.wait(10)


# ------------------------------------------------------------------------ deliveries
# The fields the bot reads of each event, as GitHub documents them ("Webhook events and
# payloads", GitHub Docs); the rest of GitHub's payload is left out.


def _base(repo: str) -> dict[str, Any]:
    owner, name = repo.split("/")
    return {"repository": {"id": 1, "name": name, "full_name": repo, "private": False,
                           "default_branch": "main",
                           "owner": {"login": owner, "type": "Organization"}},
            "installation": {"id": 1}}


def _user(login: str) -> dict[str, Any]:
    return {"login": login, "id": int(hashlib.sha1(login.encode()).hexdigest()[:7], 16),
            "type": "Bot" if login.endswith("[bot]") else "User"}


def comment_payload(c: dict[str, Any], login: str, number: int) -> dict[str, Any]:
    """``issue_comment`` ``created`` for comment ``c`` on issue or PR ``number``."""
    issue: dict[str, Any] = {"number": number, "state": "open", "user": _user("maintainer"),
                             "title": "Try the noop candidate" if number == PR
                             else "Campaign: stand-in screen"}
    if number == PR:
        issue["pull_request"] = {"url": f"https://api.github.com/repos/{REPO}/pulls/{PR}"}
    return {**_base(REPO), "action": "created", "issue": issue,
            "comment": {"id": c["id"], "body": c["body"], "user": _user(login),
                        "author_association": "MEMBER", "created_at": c["created_at"],
                        "updated_at": c["updated_at"]},
            "sender": _user(login)}


def job_payload(repo: str, run: dict[str, Any], started: datetime) -> dict[str, Any]:
    """``workflow_job`` ``in_progress``: the runner picked the run's job up."""
    return {**_base(repo), "action": "in_progress", "sender": _user("github-actions[bot]"),
            "workflow_job": {"id": run["id"] + 1, "run_id": run["id"], "status": "in_progress",
                             "conclusion": None, "labels": ["self-hosted", "standin"],
                             "runner_name": "sandbox-runner-1", "started_at": _iso(started),
                             "workflow_name": "screen"}}


def run_payload(repo: str, run: dict[str, Any], web_url: str = "https://github.com"
                ) -> dict[str, Any]:
    """``workflow_run`` ``completed`` for ``run`` (the double's run record); its link under
    ``web_url`` (GitHub's web base)."""
    return {**_base(repo), "action": "completed", "sender": _user("github-actions[bot]"),
            "workflow_run": {
                "id": run["id"], "name": "screen", "status": "completed",
                "conclusion": run["conclusion"], "display_title": run["display_title"],
                "head_sha": run["head_sha"], "head_branch": run["head_branch"],
                "path": f".github/workflows/{run['workflow']}", "event": run["event"],
                "run_attempt": 1, "created_at": run.get("created_at"),
                "run_started_at": run.get("run_started_at") or run.get("created_at"),
                "updated_at": run["updated_at"], "pull_requests": [],
                "html_url": f"{web_url}/{repo}/actions/runs/{run['id']}"}}


def push_payload(double: GitHubDouble, repo: str, ref: str, before: str, after: str,
                 login: str) -> dict[str, Any]:
    """``push`` for a git push that moved ``ref`` from ``before`` to ``after``."""
    state = double.repo(repo)
    old = state.trees.get(before, {})
    new = state.trees.get(after, {})
    zero = "0" * 40
    commit = {"id": after, "message": "push", "timestamp": _iso(_now()), "distinct": True,
              "added": sorted(set(new) - set(old)), "removed": sorted(set(old) - set(new)),
              "modified": sorted(f for f in set(new) & set(old) if new[f] != old[f]),
              "author": {"name": login, "email": "bot@example.invalid"},
              "committer": {"name": login, "email": "bot@example.invalid"}}
    return {**_base(repo), "ref": ref, "before": before, "after": after,
            "created": before == zero, "deleted": after == zero, "forced": False,
            "base_ref": None, "commits": [commit] if after != zero else [],
            "head_commit": commit if after != zero else None,
            "pusher": {"name": login, "email": None}, "sender": _user(login)}


def sync_payload(repo: str, pull: Any, before: str, login: str) -> dict[str, Any]:
    """``pull_request`` ``synchronize``: PR ``pull``'s head moved from ``before``."""
    side = _base(repo)["repository"]
    return {**_base(repo), "action": "synchronize", "number": pull.number, "before": before,
            "after": pull.head_sha, "sender": _user(login),
            "pull_request": {"number": pull.number, "state": "open", "title": pull.title,
                             "user": _user(pull.user),
                             "head": {"ref": pull.head_ref, "sha": pull.head_sha,
                                      "repo": side},
                             "base": {"ref": pull.base_ref, "sha": pull.base_sha,
                                      "repo": side}}}
