"""``/screen`` end to end with real processes: ``campaign-bot serve`` (SQLite) as a
subprocess, the GitHub double (a real HTTP server), and, when the bot dispatches the screen
workflow, the double plays the self-hosted runner: it runs ``campaign-bot screen`` as a real
subprocess against the stand-in model server (``runners.standin``), stores the signed bundle
as the run's artifact, and sends the signed ``workflow_job`` and ``workflow_run`` deliveries
GitHub would send.

Variants: the whole loop with two screens queued on one pool (the second waits, then runs)
and a third cancelled while queued; an unauthorised user; budget exhausted, then extended
by a requester and a dispatched screen cancelled; a bundle tampered after signing (refused);
the runner killed mid-screen (failed, charged, never counted).  The attacks on the trust
boundary (forged receipts beside a signed bundle, hostile artifacts, forged runs, errors
after writes, redelivered commands) are in ``tests/test_trust_boundary_e2e.py``, on the
same runner double.

The evidence loop: a verified bundle is committed to the PR's branch through git (the double
serves real git), GitHub's ``push`` and ``pull_request`` synchronize deliveries for that push
are sent back to the bot (:meth:`Runner.on_push`), the PR's evidence review runs on the new
head and verifies the committed bundle, and the campaign's status header shows the screen's
verdict; a fork's screen lands on the bot's branch instead.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import tomllib
import uuid
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psutil
import pytest
from screen_scope import toml_dumps
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session
from webhook_helpers import free_port, headers_for, wait_for

from bot.features.screen.queue import Screen

ROOT = Path(__file__).resolve().parents[1]
CAMPAIGN_SRC = ROOT / "tests" / "data" / "screen-campaign"
NPU_FIX = ROOT / "tests" / "fixtures" / "npu-smi"
DERIVED = ROOT / "tests" / "fixtures" / "github" / "webhooks-derived"
WEBHOOKS = ROOT / "tests" / "fixtures" / "github" / "webhooks"
SECRET = "e2e-secret"
REPO = "octo/standin-campaign"
PR = 7
CAMP_DIR = "campaigns/standin"
CLI = [sys.executable, "-c", "from evidence.cli import main; main()"]

pytestmark = pytest.mark.slow


def cli(*args: str, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=120, **kw)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("keys")
    res = cli("keygen", str(d / "runner.key"))
    assert res.returncode == 0, res.stderr
    return d / "runner.key", d / "runner.key.pub"


# ------------------------------------------------------------------------ the runner double


@dataclass
class Runner:
    """Plays GitHub Actions + the self-hosted runner for dispatched screen runs."""

    double: Any
    bot_url: str
    key: Path
    work: Path
    mode: dict[str, str] = field(default_factory=dict)  # request_id or "*" -> mode
    release: dict[str, threading.Event] = field(default_factory=dict)
    hold: bool = False
    runs: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    delivered: list[str] = field(default_factory=list)
    zips: list[bytes] = field(default_factory=list)  # uploaded as they are, one per run
    stopped: bool = False  # the test is over: held runs end without a word
    server_args: str = ""  # stand-in switches of the host's server command

    def deliver(self, event: str, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        delivery = str(uuid.uuid4())
        r = httpx.post(f"{self.bot_url}/webhook", content=body,
                       headers=headers_for(body, event, delivery, secret=SECRET), timeout=30)
        assert r.status_code == 202, r.text
        self.delivered.append(f"{event}.{payload.get('action')}")

    def on_dispatch(self, double: Any, repo: str, run: dict[str, Any]) -> None:
        try:
            self._run(double, repo, run)
        except Exception as exc:  # noqa: BLE001 - surfaced by the test
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def on_push(self, double: Any, repo: str, updates: list[tuple[str, str, str]],
                login: str) -> None:
        """GitHub's deliveries for a git push: ``push`` per moved ref, and ``pull_request``
        synchronize for an open same-repository PR whose head branch moved."""
        try:
            for ref, before, after in updates:
                self.deliver("push", push_payload(double, repo, ref, before, after, login))
                branch = ref.removeprefix("refs/heads/")
                for pull in double.repo(repo).pulls.values():
                    if pull.head_ref == branch and pull.head_repo == repo and \
                            pull.state == "open":
                        self.deliver("pull_request", sync_payload(repo, pull, before, login))
        except Exception as exc:  # noqa: BLE001 - surfaced by the test
            self.errors.append(f"push hook: {type(exc).__name__}: {exc}")

    def on_cancel(self, double: Any, repo: str, run: dict[str, Any]) -> None:
        ev = self.release.get(run["inputs"]["request_id"])
        if ev is not None:
            ev.set()

    def _run(self, double: Any, repo: str, run: dict[str, Any]) -> None:
        self.runs.append(run)
        inputs = run["inputs"]
        rid = inputs["request_id"]
        mode = self.mode.get(rid, self.mode.get("*", "ok"))
        ev = self.release.setdefault(rid, threading.Event())
        if self.hold:
            ev.wait(60)
        if self.stopped:
            return
        if run.get("cancel_requested"):
            self._complete(double, repo, run, "cancelled", started=None)
            return
        started = _now_s()
        double.set_run(repo, run["id"], status="in_progress", run_started_at=_iso(started))
        self.deliver("workflow_job", job_payload(repo, run, "in_progress", started))
        if self.zips:  # a hostile runner: its artifact is whatever it uploads
            double.add_artifact(repo, run["id"], f"screen-bundle-{rid}",
                                zip_bytes=self.zips.pop(0))
            self._complete(double, repo, run, "success", started)
            return
        # check out the approved head: the campaign directory at inputs.head_sha
        tree = double.repo(repo).trees[inputs["head_sha"]]
        camp = self.work / f"checkout-{run['id']}"
        for path, data in tree.items():
            if path.startswith(inputs["campaign"] + "/"):
                dst = camp / path[len(inputs["campaign"]) + 1:]
                dst.parent.mkdir(parents=True, exist_ok=True)
                dst.write_bytes(data)
        # ... and the default branch's campaign.toml at the run's commit, as the workflow's
        # second checkout does: the control comes from it (its blob pinned by the bot)
        frozen = self.work / f"scope-{run['id']}.toml"
        frozen.write_bytes(double.repo(repo).trees[run["head_sha"]][
            f"{inputs['campaign']}/campaign.toml"])
        out = self.work / f"bundle-{run['id']}"
        args = ["screen", "--campaign", str(camp), "--track", inputs["track"],
                "--out", str(out), "--signing-key", str(self.key), "--health-poll-s", "0.1"]
        if mode != "unpinned":  # "unpinned": an older workflow that runs the PR's own scope
            args += ["--frozen-scope", str(frozen), "--frozen-scope-blob", inputs["scope_blob"]]
        if inputs.get("candidate_revision"):  # a revision screen (/compare, /bisect)
            args += ["--control-revision", inputs["control_revision"],
                     "--candidate-revision", inputs["candidate_revision"]]
        elif inputs["candidate"] == "control":
            args.append("--control-only")
        else:
            args += ["--candidate", inputs["candidate"]]
        if inputs.get("sessions"):
            args += ["--sessions", inputs["sessions"]]
        if inputs.get("follow_up"):
            args += ["--follow-up", inputs["follow_up"]]
        env = runner_env(self.work, self.server_args)
        proc = subprocess.Popen([*CLI, *args], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, start_new_session=True)
        if mode == "die":
            # the runner dies mid-screen: killed once the first server is up
            wait_for(lambda: any(out.rglob("*.log")) or proc.poll() is not None, 60,
                     "the first session to start")
            time.sleep(0.3)
            # the model server runs in its own session, so it outlives the runner's group:
            # note the whole tree first and reap what is left after the kill (a test must not
            # leak servers that hold ports into later tests)
            tree = psutil.Process(proc.pid).children(recursive=True)
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
            gone, alive = psutil.wait_procs(tree, timeout=10)
            for p in alive:
                p.kill()
            psutil.wait_procs(alive, timeout=10)
        log, _ = proc.communicate(timeout=120)
        (self.work / f"runner-{run['id']}.log").write_bytes(log)
        rc = proc.returncode
        conclusion = "success" if rc in (0, 1) else "failure"
        files: dict[str, bytes] = {}
        if out.is_dir():
            if mode == "tamper":
                receipts = sorted((out / "data").rglob("*.json"))
                target = next(p for p in receipts if "receipt" in p.read_text()[:200]
                              or p.name.startswith("session"))
                doc = json.loads(target.read_text())
                doc["notes"] = "faster than it was"
                target.write_text(json.dumps(doc, indent=2))
            files = {p.relative_to(out).as_posix(): p.read_bytes()
                     for p in sorted(out.rglob("*")) if p.is_file()}
            if mode == "forge":  # after signing: 12 fast receipts where walkers do not look
                files.update(forged_receipts(files))
        if files:  # upload-artifact runs `if: always()`: a killed runner leaves partial files
            double.add_artifact(repo, run["id"], f"screen-bundle-{rid}", files)
        self._complete(double, repo, run, conclusion, started)

    def _complete(self, double: Any, repo: str, run: dict[str, Any], conclusion: str,
                  started: datetime | None) -> None:
        ended = _now_s()
        if started is not None and ended <= started:
            time.sleep(1)
            ended = _now_s()
        fields = {"status": "completed", "conclusion": conclusion, "updated_at": _iso(ended)}
        if started is not None:
            fields["run_started_at"] = _iso(started)
        double.set_run(repo, run["id"], **fields)
        self.deliver("workflow_run", run_payload(repo, double.repo(repo).runs[run["id"]]))


def forged_receipts(files: dict[str, bytes], n: int = 12) -> dict[str, bytes]:
    """``n`` receipts no runner signed, under ``node_modules/``: copies of the run's own
    receipts, alternating arms, each candidate's measured wall time cut to 5% of the
    control's (a ratio of 0.05 if anything read them)."""
    real = [json.loads(b) for p, b in sorted(files.items())
            if p.startswith("data/receipts/") and p.endswith(".json")]
    control = next(r for r in real if r["arm"] == "control")
    candidate = next(r for r in real if r["arm"] == "candidate")
    wall = next(q["client_wall_s"] for q in control["requests"] if q["kind"] == "measured")
    out = {}
    for i in range(n):
        doc = json.loads(json.dumps(control if i % 2 == 0 else candidate))
        doc["slot"] = 2 + i
        doc["session_id"] = f"forged-{i:02d}"
        if doc["arm"] == "candidate":
            for q in doc["requests"]:
                if q["kind"] == "measured":
                    q["client_wall_s"] = round(wall * 0.05, 3)
        out[f"node_modules/forged-{i:02d}.json"] = json.dumps(doc, indent=2).encode()
    return out


def _now_s() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def _iso(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def runner_env(work: Path, server_args: str = "") -> dict[str, str]:
    npu = work / "npu"
    if not npu.exists():
        npu.mkdir(parents=True)
        shutil.copy(NPU_FIX / "info-a3-idle.txt", npu / "info.txt")
        shutil.copy(NPU_FIX / "proc-mem-idle.txt", npu / "proc-mem.txt")
    env = dict(os.environ)
    env["CAMPAIGN_BOT_SERVER_CMD"] = f"{sys.executable} -m runners.standin {server_args}"
    env["PATH"] = f"{ROOT / 'tests' / 'bin'}{os.pathsep}{env['PATH']}"
    env["FAKE_NPU_SMI_DIR"] = str(npu)
    env["COLUMNS"] = "200"
    return env


# ---------------------------------------------------------------------------- deliveries


def _base(repo: str) -> dict[str, Any]:
    return {"repository": {"id": 1, "name": repo.split("/")[1], "full_name": repo,
                           "private": False, "owner": {"login": repo.split("/")[0]}},
            "installation": {"id": 1}}


def comment_payload(repo: str, login: str, body: str, cid: int,
                    number: int = PR) -> dict[str, Any]:
    p = json.loads((DERIVED / "issue_comment" / "created.on-pull-request.json").read_text())
    p.update(_base(repo))
    p["action"] = "created"
    p["issue"]["number"] = number
    if number != PR:  # a campaign issue, not the pull request
        p["issue"].pop("pull_request", None)
    p["comment"].update(id=cid, body=body)
    p["comment"]["user"] = {**p["comment"]["user"], "login": login, "type": "User"}
    p["comment"].pop("performed_via_github_app", None)
    p["sender"] = {**p["sender"], "login": login, "type": "User"}
    return p


def _bot(login: str) -> dict[str, Any]:
    return {"login": login, "id": 41898282, "type": "Bot" if login.endswith("[bot]") else "User"}


def push_payload(double: Any, repo: str, ref: str, before: str, after: str,
                 login: str) -> dict[str, Any]:
    """A ``push`` delivery as GitHub sends it for a git push (commits with their files)."""
    p = json.loads((WEBHOOKS / "push" / "payload.json").read_text())
    p.update(_base(repo))
    state = double.repo(repo)
    old = state.trees.get(before, {})
    new = state.trees.get(after, {})
    commit = {"id": after, "message": "push", "timestamp": "2026-01-01T00:00:00Z",
              "added": sorted(set(new) - set(old)), "removed": sorted(set(old) - set(new)),
              "modified": sorted(f for f in set(new) & set(old) if new[f] != old[f]),
              "author": {"name": login, "email": "bot@example.invalid"},
              "committer": {"name": login, "email": "bot@example.invalid"},
              "distinct": True, "tree_id": "0" * 40, "url": "https://github.com/x"}
    p.update(ref=ref, before=before, after=after, created=before == "0" * 40, deleted=False,
             forced=False, base_ref=None, commits=[commit] if after != "0" * 40 else [],
             head_commit=commit if after != "0" * 40 else None)
    p["repository"]["default_branch"] = state.default_branch
    p["pusher"] = {"name": login, "email": None}
    p["sender"] = _bot(login)
    return p


def sync_payload(repo: str, pull: Any, before: str, login: str) -> dict[str, Any]:
    """A ``pull_request`` synchronize delivery for PR ``pull`` (head moved from ``before``)."""
    p = json.loads((WEBHOOKS / "pull_request" / "synchronize.payload.json").read_text())
    p.update(_base(repo))
    p.update(action="synchronize", number=pull.number, before=before, after=pull.head_sha)
    pr = p["pull_request"]
    pr.update(number=pull.number, state="open", title=pull.title)
    pr["head"].update(sha=pull.head_sha, ref=pull.head_ref)
    pr["base"].update(ref=pull.base_ref, sha=pull.base_sha)
    for side in (pr["head"], pr["base"]):
        side["repo"] = {**side["repo"], "full_name": repo, "name": repo.split("/")[1]}
    p["sender"] = _bot(login)
    return p


def job_payload(repo: str, run: dict[str, Any], action: str, started: datetime) -> dict:
    p = json.loads(sorted((WEBHOOKS / "workflow_job").glob("*.json"))[0].read_text())
    p.update(_base(repo))
    p["action"] = action
    p["workflow_job"].update(run_id=run["id"], status=action, runner_name="standin-runner-1",
                             started_at=_iso(started), workflow_name="screen")
    return p


def run_payload(repo: str, run: dict[str, Any]) -> dict[str, Any]:
    p = json.loads((DERIVED / "workflow_run" / "completed.workflow-dispatch.json").read_text())
    p.update(_base(repo))
    p["action"] = "completed"
    p["workflow_run"].update(
        id=run["id"], status="completed", conclusion=run["conclusion"],
        display_title=run["display_title"], head_sha=run["head_sha"],
        path=f".github/workflows/{run['workflow']}", head_branch=run["head_branch"],
        event=run["event"],
        run_started_at=run.get("run_started_at") or run.get("created_at"),
        updated_at=run["updated_at"],
    )
    return p


# --------------------------------------------------------------------------- the service


@dataclass
class Env:
    double: Any
    url: str
    runner: Runner
    db: Path
    proc: subprocess.Popen[bytes]
    cid: int = 5000

    def say(self, login: str, text: str, number: int = PR) -> int:
        self.cid += 1
        self.runner.deliver("issue_comment", comment_payload(REPO, login, text, self.cid,
                                                             number))
        return self.cid

    def comments(self) -> list[str]:
        cs = self.double.repo(REPO).comments.values()
        return [c["body"] for c in sorted(cs, key=lambda c: c["id"])]

    def screens(self) -> list[Screen]:
        eng = create_engine(f"sqlite:///{self.db}")
        try:
            with Session(eng) as s:
                out = list(s.scalars(select(Screen).order_by(Screen.id)))
                s.expunge_all()
                return out
        finally:
            eng.dispose()

    def screen(self, n: int) -> Screen:
        return next(s for s in self.screens() if s.id == n)

    def reply_to(self, cid: int) -> str:
        return next(b for b in self.comments() if f"campaign-bot:reply comment={cid} " in b)

    def checks(self, prefix: str = "campaign-bot/screen: ") -> list[dict[str, Any]]:
        """Check runs named ``prefix...`` (the screens' by default), oldest first."""
        return sorted((c for c in self.double.repo(REPO).check_runs.values()
                       if c["name"].startswith(prefix)), key=lambda c: c["id"])


ISSUE = 3
"""The campaign issue of the evidence-loop tests (its status header)."""


def campaign_files(budget: dict[str, float], pub: bytes, *, screen_toml: str = "",
                   issue: int | None = None,
                   scope_update: Callable[[dict[str, Any]], None] | None = None,
                   ) -> dict[str, bytes | str]:
    scope = tomllib.loads((CAMPAIGN_SRC / "campaign.toml").read_text())
    scope["budget"].update(budget)
    if issue is not None:
        scope["issue"] = issue
    if scope_update is not None:  # a test's own campaign: protocol, serving, candidates
        scope_update(scope)
    return {
        ".github/campaign-bot.toml": (
            '[campaigns]\npaths = ["campaigns/*"]\n\n[screen]\nworkflow = "screen.yml"\n'
            f'{screen_toml}\n'),
        ".github/workflows/screen.yml": (ROOT / ".github/workflows/screen.yml").read_text(),
        f"{CAMP_DIR}/campaign.toml": toml_dumps(scope),
        f"{CAMP_DIR}/ref.mp4": (CAMPAIGN_SRC / "ref.mp4").read_bytes(),
        f"{CAMP_DIR}/ref.wav": (CAMPAIGN_SRC / "ref.wav").read_bytes(),
        f"{CAMP_DIR}/trusted-keys.pem": pub,
    }


def start_service(double: Any, tmp: Path, keys: tuple[Path, Path],
                  budget: dict[str, float], *, screen_toml: str = "", issue: int | None = None,
                  fork: str | None = None,
                  scope_update: Callable[[dict[str, Any]], None] | None = None) -> Env:
    double.add_repo(REPO, campaign_files(budget, keys[1].read_bytes(), screen_toml=screen_toml,
                                         issue=issue, scope_update=scope_update))
    double.add_workflow(REPO, "screen.yml")
    if issue is not None:
        double.add_issue(REPO, issue, "Campaign: stand-in screen", "Human text.\r\n")
    double.add_pull(REPO, PR, {f"{CAMP_DIR}/NOTES.md": "candidate notes\n"}, fork=fork)
    double.set_permission(REPO, "maint", "write")
    double.set_permission(REPO, "eve", "read")
    double.set_permission(REPO, "tester", "read")  # a requester of the campaign
    port = free_port()
    db = tmp / "bot.sqlite3"
    env = dict(os.environ)
    env.update({
        "CAMPAIGN_BOT_WEBHOOK_SECRET": SECRET, "CAMPAIGN_BOT_TOKEN": "test-token",
        "CAMPAIGN_BOT_GITHUB_API_URL": double.base_url, "CAMPAIGN_BOT_PORT": str(port),
        "CAMPAIGN_BOT_DATABASE_URL": f"sqlite:///{db}", "CAMPAIGN_BOT_GITHUB_THROTTLE": "false",
        "CAMPAIGN_BOT_SCREEN_DEBOUNCE_S": "0", "CAMPAIGN_BOT_RETRY_DELAYS": "1",
        "CAMPAIGN_BOT_SCREEN_WATCHDOG_INTERVAL_S": "3600",
        "CAMPAIGN_BOT_BOT_LOGIN": "campaign-bot[bot]", "PYTHONFAULTHANDLER": "1",
        "CAMPAIGN_BOT_GIT_CACHE_DIR": str(tmp / "git-mirrors"),
    })
    log = open(tmp / "serve.log", "wb")  # noqa: SIM115 - closed with the process
    proc = subprocess.Popen([*CLI, "serve"], cwd=tmp, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def up() -> bool:
        if proc.poll() is not None:
            pytest.fail("serve exited:\n" + (tmp / "serve.log").read_text()[-3000:])
        try:
            return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "campaign-bot serve /healthz")
    runner = Runner(double, url, keys[0], tmp / "runner")
    runner.work.mkdir()
    double.dispatch_hooks.append(runner.on_dispatch)
    double.cancel_hooks.append(runner.on_cancel)
    double.push_hooks.append(runner.on_push)
    return Env(double, url, runner, db, proc)


@pytest.fixture
def service(github_double: Any, tmp_path: Path, keys: tuple[Path, Path],
            request: pytest.FixtureRequest) -> Iterator[Env]:
    param = dict(getattr(request, "param", {}))  # budget hours and start_service options
    budget = {k: param.pop(k) for k in ("wall_hours", "device_hours") if k in param} or \
        {"wall_hours": 4.0, "device_hours": 8.0}
    env = start_service(github_double, tmp_path, keys, budget, **param)
    try:
        yield env
    finally:
        (tmp_path / "calls.txt").write_text("\n".join(
            f"{c.method} {c.path} {c.status}" for c in github_double.calls))
        stop_service(env, github_double)


def stop_service(env: Env, double: Any) -> None:
    """Stop ``serve`` (SIGTERM, then SIGKILL after 20 s) and the runner double, drop the
    double's hooks, and fail on any error the runner double recorded."""
    env.runner.stopped = True
    for ev in env.runner.release.values():
        ev.set()
    env.proc.send_signal(signal.SIGTERM)
    try:
        env.proc.wait(20)
    except subprocess.TimeoutExpired:
        env.proc.kill()
    double.dispatch_hooks.clear()
    double.cancel_hooks.clear()
    double.push_hooks.clear()
    assert not env.runner.errors, env.runner.errors


def receipts_of(double: Any, run_id: int) -> list[dict[str, Any]]:
    art = next(a for a in double.repo(REPO).artifacts.values() if a["run_id"] == run_id)
    zf = zipfile.ZipFile(io.BytesIO(art["zip"]))
    out = []
    for n in zf.namelist():
        if n.endswith(".json"):
            doc = json.loads(zf.read(n))
            if isinstance(doc, dict) and doc.get("schema") == "campaign-bot/receipt@1":
                out.append(doc)
    return sorted(out, key=lambda r: r["slot"])


def charged_h(run: dict[str, Any], devices: int = 2) -> float:
    t0 = datetime.fromisoformat(run["run_started_at"].replace("Z", "+00:00"))
    t1 = datetime.fromisoformat(run["updated_at"].replace("Z", "+00:00"))
    return (t1 - t0).total_seconds() * devices / 3600


# ----------------------------------------------------------------------------- the tests


def test_two_screens_on_one_pool_cancel_and_results(service: Env) -> None:
    e = service
    e.runner.hold = True
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: len(e.runner.runs) == 1, 30, "the first dispatch")
    e.say("maint", "/screen control")
    e.say("maint", "/screen candidate noop sessions=4")
    wait_for(lambda: len(e.screens()) == 3 and len(e.comments()) == 3, 30, "two queued")
    s1, s2, s3 = e.screens()
    assert [(s.state, s.kind, s.session_order) for s in (s1, s2, s3)] == [
        ("dispatched", "candidate", "AB"), ("queued", "control", "AB"),
        ("queued", "candidate", "ABAB")]
    assert len(e.runner.runs) == 1  # the pool is busy: the others wait in the bot's queue
    status2 = e.comments()[1]
    assert status2.startswith(
        "<!-- campaign-bot:screen-status screen=S2 -->\n"
        "### ⏳ Screen S2: `control` on `1s-lossless`: queued\n")
    assert "| queue | position 1 in `standin-x2`, estimated start " in status2
    assert "| queue | position 2 in `standin-x2` (1 ahead), estimated start " in e.comments()[2]
    # cancel while queued: the record stays, the screen never runs
    e.say("maint", "/screen cancel S3")
    wait_for(lambda: e.screen(3).state == "cancelled", 30, "S3 cancelled")
    s3 = e.screen(3)
    assert s3.cancelled_by == "maint" and s3.run_id is None
    assert "### 🚫 Screen S3: `noop` on `1s-lossless`: cancelled" in e.comments()[2]
    # let S1 run: the result is posted and S2 is dispatched
    e.runner.release[e.runner.runs[0]["inputs"]["request_id"]].set()
    wait_for(lambda: len(e.runner.runs) == 2, 90, "S2 dispatched after S1 finished")
    e.runner.release[e.runner.runs[1]["inputs"]["request_id"]].set()
    wait_for(lambda: e.screen(2).state in ("finished", "failed"), 90, "S2 reported")
    s1, s2 = e.screen(1), e.screen(2)
    assert (s1.state, s1.verdict, s1.runner_name) == ("finished", s1.verdict, "standin-runner-1")
    assert s2.state == "finished"
    reasons = s2.summary["reasons"]
    assert reasons[0].startswith("control sessions "), reasons  # equal output: repeatable
    if s2.verdict == "UNPROVEN":  # ... unless a session's lifecycle did not qualify (runner)
        assert any(r.startswith("session ") for r in reasons[1:]), reasons
    else:
        assert s2.verdict == "REPEATABLE", reasons
    runs = [e.double.repo(REPO).runs[r["id"]] for r in e.runner.runs]
    assert [r["inputs"]["candidate"] for r in runs] == ["noop", "control"]
    assert [r["inputs"]["sessions"] for r in runs] == ["2", "2"]
    # the result comment of S1, from the bundle's own receipts
    result = next(b for b in e.comments() if "campaign-bot:screen-result screen=S1" in b)
    rec = receipts_of(e.double, runs[0]["id"])
    assert [r["arm"] for r in rec] == ["control", "candidate"]
    for r in rec:
        wall = next(q["client_wall_s"] for q in r["requests"] if q["kind"] == "measured")
        assert (f"| {r['slot'] + 1} | {r['arm']} | `{r['session_id']}` | {wall:.3f} | 200 | "
                "clean |") in result
    assert f"**Verdict: {s1.verdict}**" in result
    assert "Manifests: " in result and "signed by trusted runner key sha256:" in result
    assert 'x-axis ["1A", "2B"]' in result and "xychart-beta" in result
    h1 = charged_h(runs[0])
    assert f"Device time charged: **{h1:.2f} device-hours**" in result
    # check runs: one per screen that ran, completed
    checks = e.checks()
    assert [(c["name"], c["status"]) for c in checks] == [
        ("campaign-bot/screen: noop", "completed"), ("campaign-bot/screen: control", "completed")]
    assert checks[0]["conclusion"] == {"SUPPORTED": "success", "FAILED": "failure"}.get(
        s1.verdict, "neutral")
    assert checks[0]["external_id"] == s1.request_id
    # budget left, as /screen status says it
    cid = e.say("maint", "/screen status")
    wait_for(lambda: any(f"reply comment={cid} " in b for b in e.comments()), 30, "status")
    used = charged_h(runs[0]) + charged_h(runs[1])
    assert (f"Campaign `standin-screen` budget: {used:.2f} of 8.00 device-hours charged "
            f"(0.00 reserved), {used / 2:.2f} of 4.00 wall-hours, 1 of 8 candidate "
            "directions, 0 failed run(s) charged.") in e.reply_to(cid)
    assert "No screen of this PR is queued or running." in e.reply_to(cid)


def test_unauthorised_user_gets_one_reply_and_nothing_runs(service: Env) -> None:
    e = service
    cid = e.say("eve", "/screen candidate noop")
    wait_for(lambda: len(e.comments()) == 1, 30, "the refusal")
    assert e.comments() == [
        f"<!-- campaign-bot:reply comment={cid} line=1 -->\n"
        "eve: I did not run `/screen candidate noop`: it may be used by users with "
        "write or admin permission, the campaign's requesters, and logins listed in "
        "`[screen] allowed`. Ask a maintainer to run it, or to give you write access.\n"
    ]
    assert not e.runner.runs and not e.checks() and not e.screens()


@pytest.mark.parametrize("service", [{"wall_hours": 1.0, "device_hours": 1.0}],
                         indirect=True)
def test_budget_exhausted_then_extended_then_cancelled_while_dispatched(service: Env) -> None:
    e = service
    e.runner.hold = True
    cid = e.say("maint", "/screen candidate noop")
    wait_for(lambda: len(e.comments()) == 1, 30, "the refusal")
    # per session 600 s start + 2 x 165 s + 3 s shutdown + 0.2 s idle = 933.2 s; 2 sessions
    # on 2 devices = 1.04 device-hours > 1.00
    assert e.reply_to(cid) == (
        f"<!-- campaign-bot:reply comment={cid} line=1 -->\n"
        "Screen refused: the budget of campaign `standin-screen` does not cover it.\n\n"
        "- device-hours: this screen needs ~1.04 h, 1.00 h left of 1.00 h (0.00 h charged, "
        "0.00 h reserved)\n\n"
        "Estimated cost of this request: 1.04 device-hours, 0.52 wall-hours (protocol "
        "(1 warmup + 1 measured per session, ~165 s per request, 600 s start)). A requester "
        "can raise the budget with `/campaign budget extend device-hours=H wall-hours=H "
        "directions=N reason=...`.\n")
    cid = e.say("maint", "/campaign budget extend device-hours=1")
    wait_for(lambda: len(e.comments()) == 2, 30, "the extension refusal")
    assert "only the campaign's requesters may extend its budget" in e.reply_to(cid)
    cid = e.say("tester", "/campaign budget extend device-hours=1 reason=second round")
    wait_for(lambda: len(e.comments()) == 3, 30, "the extension")
    assert e.reply_to(cid).endswith(
        "Budget of campaign `standin-screen` extended by `tester`: +0 candidate directions, "
        "+0.00 wall-hours, +1.00 device-hours (second round). Now: 2.00 device-hours, "
        "1.00 wall-hours and 8 directions left.\n")
    e.say("tester", "/screen candidate noop")  # a requester without write permission
    wait_for(lambda: len(e.runner.runs) == 1, 30, "the dispatch")
    wait_for(lambda: e.screen(1).state == "dispatched", 30, "dispatched")
    e.say("maint", "/screen cancel S1")
    wait_for(lambda: e.screen(1).state == "failed", 60, "the cancelled run reported")
    s1 = e.screen(1)
    assert (s1.conclusion, s1.cancelled_by, s1.charged_device_s) == ("cancelled", "maint", 0.0)
    checks = e.checks()
    assert [(c["name"], c["conclusion"]) for c in checks] == [
        ("campaign-bot/screen: noop", "cancelled")]
    status = next(b for b in e.comments() if "campaign-bot:screen-status screen=S1" in b)
    assert "### ❌ Screen S1: `noop` on `1s-lossless`: failed" in status
    assert "| cancelled | by `maint` at " in status
    assert "| charged | 0.00 wall-hours, 0.00 device-hours |" in status


def test_tampered_bundle_is_refused(service: Env) -> None:
    e = service
    e.runner.mode["*"] = "tamper"
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: e.screens() and e.screen(1).state in ("finished", "failed"), 90,
             "the screen reported")
    s1 = e.screen(1)
    assert (s1.state, s1.verdict, s1.conclusion) == ("failed", "REFUSED", "success")
    run = e.double.repo(REPO).runs[e.runner.runs[0]["id"]]
    assert s1.charged_device_s == pytest.approx(charged_h(run) * 3600)  # charged all the same
    body = next(b for b in e.comments() if "campaign-bot:screen-result screen=S1" in b)
    # nothing of an unverifiable bundle is shown as a result: only why it was refused
    assert body.startswith(
        "<!-- campaign-bot:screen-result screen=S1 -->\n"
        "Screen S1 (noop on 1s-lossless) ended success: REFUSED. the bundle did not verify; "
        "manifest check failed: 1 mismatched, 0 missing, 0 extra, 0 unsafe, 0 malformed; ")
    assert ("signature: manifest-sha256.txt: data/receipts/session-00-control.json: SHA-256 "
            "mismatch (edited after signing)") in body
    assert body.endswith(f"Charged {charged_h(run):.2f} device-hours.\n")
    assert "Sessions in run order" not in body
    assert [(c["name"], c["conclusion"]) for c in e.checks()] == [
        ("campaign-bot/screen: noop", "failure")]


def test_a_pr_that_redefines_its_control_never_gets_supported(service: Env) -> None:
    """A pull request that slows the control down in its own campaign.toml, screened by a
    runner that ran the PR's scope instead of the default branch's (an older workflow):
    the signed bundle verifies, and is still REFUSED, with the reason; no ratio is shown."""
    e = service
    e.runner.mode["*"] = "unpinned"
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: e.screens() and e.screen(1).state in ("finished", "failed"), 120,
             "the screen reported")
    s1 = e.screen(1)
    assert (s1.state, s1.verdict) == ("failed", "REFUSED")
    body = next(b for b in e.comments() if "campaign-bot:screen-result screen=S1" in b)
    assert "the runner did not take the control from the default branch's campaign.toml" in body
    assert "not pinned at dispatch" in body and "Sessions in run order" not in body


def test_runner_killed_mid_screen_is_reported_charged_and_not_counted(service: Env) -> None:
    e = service
    e.runner.mode["*"] = "die"
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: e.screens() and e.screen(1).state in ("finished", "failed"), 90,
             "the screen reported")
    s1 = e.screen(1)
    assert (s1.state, s1.conclusion, s1.verdict) == ("failed", "failure", "NOT COUNTED")
    run = e.double.repo(REPO).runs[e.runner.runs[0]["id"]]
    assert s1.charged_device_s == pytest.approx(charged_h(run) * 3600)
    body = next(b for b in e.comments() if "campaign-bot:screen-result screen=S1" in b)
    assert ("**Verdict: NOT COUNTED**\n\n"
            "- the workflow run ended failure: charged, never counted as a sample\n"
            "- the bundle did not verify\n"
            "- the bundle carries no manifest\n"
            "- signature: attestation.dsse.json: cannot read signed envelope: "
            "No such file or directory\n") in body
    assert "| control | 0 | none |\n| candidate | 0 | none |" in body
    assert f"Device time charged: **{charged_h(run):.2f} device-hours**" in body
    assert e.checks()[0]["conclusion"] == "failure"
    status = next(b for b in e.comments() if "campaign-bot:screen-status screen=S1" in b)
    assert "### ❌ Screen S1: `noop` on `1s-lossless`: failed" in status
    assert "| runner | `standin-runner-1` since " in status


# --------------------------------------------------------------------- the evidence loop


def tree_at(double: Any, sha: str, prefix: str) -> dict[str, bytes]:
    return {p[len(prefix) + 1:]: b for p, b in double.repo(REPO).trees[sha].items()
            if p.startswith(prefix + "/")}


def commit_text(double: Any, sha: str) -> str:
    path = double.git.state(REPO).path
    return subprocess.run(["git", "-C", str(path), "cat-file", "commit", sha], check=True,
                          capture_output=True, text=True).stdout


SMALL_FILES = "max_committed_file_bytes = 4096\n"
"""A threshold under the stand-in's output MP4s, so the test sees files kept outside."""


@pytest.mark.parametrize("service", [{"screen_toml": SMALL_FILES, "issue": ISSUE}],
                         indirect=True)
def test_verified_bundle_is_committed_reviewed_and_shown_in_the_header(service: Env) -> None:
    e = service
    d = e.double
    head0 = d.repo(REPO).pulls[PR].head_sha
    # the campaign issue gets its status header (the bot learns the campaign from it)
    e.say("maint", "/campaign refresh", number=ISSUE)
    wait_for(lambda: "campaign-bot:header" in d.repo(REPO).issues[ISSUE]["body"], 30,
             "the first status header")
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: e.screens() and e.screen(1).state in ("finished", "failed"), 120,
             "the screen reported")
    s1 = e.screen(1)
    assert s1.state == "finished", s1.detail
    # committed to the PR's head branch, in one commit over the approved head
    pull = d.repo(REPO).pulls[PR]
    wait_for(lambda: pull.head_sha != head0, 30, "the evidence commit")
    new = pull.head_sha
    assert d.repo(REPO).refs["topic"] == new
    msg = commit_text(d, new)
    assert f"parent {head0}" in msg
    assert f"\n\nScreen S1: noop on track 1s-lossless: {s1.verdict}\n" in msg
    assert "campaign-bot[bot] <campaign-bot[bot]@users.noreply.github.com>" in msg
    files = tree_at(d, new, f"{CAMP_DIR}/screens/S1")
    art = next(a for a in d.repo(REPO).artifacts.values() if a["run_id"] == s1.run_id)
    bundle = {n: zipfile.ZipFile(io.BytesIO(art["zip"])).read(n)
              for n in zipfile.ZipFile(io.BytesIO(art["zip"])).namelist()}
    big = {n for n, b in bundle.items() if len(b) > 4096 and not n.endswith(".json")}
    assert big, "the stand-in's outputs should be over the 4 KiB threshold"
    assert set(files) == (set(bundle) - big) | {"external-artifacts.json"}
    assert all(files[n] == bundle[n] for n in set(bundle) - big)  # byte for byte
    ext = json.loads(files["external-artifacts.json"])["external"]
    assert set(ext) == big
    for n in big:
        assert ext[n]["size"] == len(bundle[n]) and ext[n]["run_id"] == s1.run_id
        assert ext[n]["sha256"] == hashlib.sha256(bundle[n]).hexdigest()
        assert ext[n]["artifact"] == f"screen-bundle-{s1.request_id}"
    assert s1.summary["evidence"]["state"] == "committed"
    result = next(b for b in e.comments() if "campaign-bot:screen-result screen=S1" in b)
    assert (f"**Evidence committed:** the verified bundle is in [{CAMP_DIR}/screens/S1]("
            in result)
    assert f"on branch `topic`, commit [{new[:7]}](" in result
    # GitHub's deliveries for the bot's push came back: the review ran on the new head
    wait_for(lambda: any(c["head_sha"] == new and c["status"] == "completed"
                         for c in e.checks("campaign-bot/evidence")), 60,
             "the evidence review of the new head")
    assert "push.None" in e.runner.delivered and "pull_request.synchronize" in \
        e.runner.delivered
    run = next(c for c in e.checks("campaign-bot/evidence") if c["head_sha"] == new)
    summary = next(b for b in e.comments() if "<!-- campaign-bot:summary pr=7 -->" in b)
    assert f"Commit {new[:7]}" in summary
    assert "Kept outside the repository" not in summary  # that is for Git LFS pointers
    # every signed file verified (the large ones external, their signed digests recorded);
    # what the review still says is about the evidence itself: one lossless screen cannot
    # show control repeatability (P2), so the check fails on that alone
    assert (f"every file present is covered; {len(big)} signed payload file(s) kept outside "
            "the bundle (external, digest recorded, not verifiable here)") in summary
    assert "| P0 | blocks | 0 |" in summary and "| P1 | wrong evidence | 0 |" in summary
    rules = re.findall(r"^\| P\d \| ([A-Z\\_]+) \|", summary, re.M)
    assert sorted(rules) == ["LOSSLESS\\_UNPROVEN", "SIGNATURE\\_VERIFIED"], summary
    assert run["conclusion"] == "failure"
    assert run["output"]["summary"].startswith("Checked ")
    # the status header shows the screen's verdict, read from the committed receipts
    wait_for(lambda: f"| noop | #{PR} | `{new[:8]}` |" in d.repo(REPO).issues[ISSUE]["body"],
             60, "the header's candidate row of PR #7 at the new head")
    body = d.repo(REPO).issues[ISSUE]["body"]
    assert body.endswith("Human text.\r\n")
    row = next(x for x in body.splitlines() if x.startswith(f"| noop | #{PR} |"))
    assert row.endswith(f"| {s1.verdict} | - |")  # the verdict of the committed receipts
    assert f"Latest screen: S1, noop on 1s-lossless (PR #{PR}, head {head0[:8]})" in body
    # nothing loops: one commit by the bot, whatever came back
    time.sleep(2)
    assert d.repo(REPO).pulls[PR].head_sha == new
    assert [c.operation for c in d.writes() if c.is_git] == ["git-receive-pack"]


@pytest.mark.parametrize("service", [{"fork": "evil/standin-campaign"}], indirect=True)
def test_fork_screen_evidence_lands_on_the_bot_branch(service: Env) -> None:
    e = service
    d = e.double
    pull = d.repo(REPO).pulls[PR]
    head = pull.head_sha
    e.say("maint", f"/screen candidate noop sha={head}")
    wait_for(lambda: e.screens() and e.screen(1).state in ("finished", "failed"), 120,
             "the screen reported")
    s1 = e.screen(1)
    assert s1.state == "finished", s1.detail
    branch = "campaign-bot/screens/PR-7"
    wait_for(lambda: branch in d.repo(REPO).refs, 30, "the bot's branch")
    sha = d.repo(REPO).refs[branch]
    assert pull.head_sha == head  # the fork is never pushed to
    tree = d.repo(REPO).trees[sha]
    main = d.repo(REPO).trees[d.repo(REPO).refs["main"]]
    # made from the base branch: the fork's files are not in it, only the screen's evidence
    assert f"{CAMP_DIR}/NOTES.md" not in tree
    assert {p for p in tree if p not in main} == {
        p for p in tree if p.startswith(f"{CAMP_DIR}/screens/S1/")}
    assert f"{CAMP_DIR}/screens/S1/attestation.dsse.json" in tree
    assert f"parent {d.repo(REPO).refs['main']}" in commit_text(d, sha)
    result = next(b for b in e.comments() if "campaign-bot:screen-result screen=S1" in b)
    assert f"on branch `{branch}`" in result
    assert "This pull request comes from a fork" in result
    assert f"git fetch {d.base_url}/{REPO}.git {branch}\n" in result
    assert f"git checkout FETCH_HEAD -- {CAMP_DIR}/screens/S1\n" in result


# ------------------------------------------------------------------------------ reproduce


def reproduce_blocks(body: str) -> tuple[list[str], list[str]]:
    """The two shell blocks of a result's "Reproduce this result" section: (runner, check)."""
    part = body.split("<summary>Reproduce this result</summary>", 1)[1]
    blocks = re.findall(r"```sh\n(.*?)```", part, re.S)
    assert len(blocks) == 2, part
    return blocks[0].splitlines(), blocks[1].splitlines()


def run_printed(lines: list[str], cwd: Path, env: dict[str, str]) -> list[str]:
    """Run each printed line, as printed, in one bash (``cd`` carries over); returns the
    output of each line, and fails on the first line exiting other than 0 (the last, a
    ``campaign-bot`` command, may exit 1: problems found, the bundle says what)."""
    outs = []
    script = ""
    for i, line in enumerate(lines):
        script += f"{line}\nrc=$?; echo \"@@rc{i}=$rc\"\n"
        if i < len(lines) - 1:
            script += "[ $rc -eq 0 ] || exit 99\n"
    res = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True,
                         text=True, timeout=300)
    rcs = re.findall(r"^@@rc(\d+)=(\d+)$", res.stdout, re.M)
    assert len(rcs) == len(lines), (res.stdout[-3000:], res.stderr[-3000:])
    assert all(int(rc) == 0 for _, rc in rcs[:-1]), res.stderr[-3000:]
    assert int(rcs[-1][1]) in (0, 1), (res.stdout[-3000:], res.stderr[-3000:])
    outs = re.split(r"^@@rc\d+=\d+$", res.stdout, flags=re.M)
    return outs


def user_env(work: Path, key: Path) -> dict[str, str]:
    """A user's shell on a runner host: ``campaign-bot`` on PATH, the host's signing key and
    server command (what the runner config supplies), and git credentials for the private
    repository as a credential helper would give them (the double's token)."""
    env = runner_env(work)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}"
    env["CAMPAIGN_BOT_SIGNING_KEY"] = str(key)
    basic = __import__("base64").b64encode(b"x-access-token:test-token").decode()
    env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                "GIT_CONFIG_VALUE_0": f"Authorization: Basic {basic}",
                "GIT_TERMINAL_PROMPT": "0"})
    return env


def test_reproduce_commands_run_as_printed(service: Env, tmp_path: Path) -> None:
    """The result comment and the check run carry the commands that run the screen again on
    a runner and re-check its committed bundle offline; both blocks run as printed: the
    re-check verifies the committed bundle's signature and reaches the same verdict, and the
    screen run again leaves a signed bundle that verifies against the campaign's keys."""
    e = service
    e.say("maint", "/screen candidate noop")
    wait_for(lambda: e.screens() and e.screen(1).state in ("finished", "failed"), 120,
             "the screen reported")
    s1 = e.screen(1)
    assert s1.state == "finished", s1.detail
    body = next(b for b in e.comments() if "campaign-bot:screen-result screen=S1" in b)
    runner_lines, check_lines = reproduce_blocks(body)
    check_run = e.checks()[0]
    assert "campaign-bot check" in check_run["output"]["text"]
    assert reproduce_blocks(check_run["output"]["text"]) == (runner_lines, check_lines)
    sha = s1.summary["evidence"]["sha"]
    assert check_lines[-1] == (f"campaign-bot check {CAMP_DIR}/screens/S1 --campaign "
                               f"{CAMP_DIR} --trusted-keys trusted-keys.pem")
    assert f"git checkout --quiet --detach {sha}" in check_lines
    env = user_env(tmp_path / "user", e.runner.key)
    # offline: the committed bundle verifies and is judged to the same verdict
    (tmp_path / "offline").mkdir()
    out = run_printed(check_lines, tmp_path / "offline", env)[-2]
    assert re.search(r"integrity: checked \d+ hashes in 2 manifests, 0 errors;", out), out
    assert "signatures: 1 verified, 0 refused, 0 unsigned bundle(s)" in out, out
    assert re.search(rf"^1s-lossless +noop +{s1.verdict} ", out, re.M), out
    # on a runner: the same screen again, a new signed bundle
    (tmp_path / "again").mkdir()
    run_printed(runner_lines, tmp_path / "again", env)
    again = tmp_path / "again" / "S1-repro" / "bundle"
    receipts = sorted((again / "data" / "receipts").glob("*.json"))
    assert [json.loads(p.read_text())["arm"] for p in receipts] == ["control", "candidate"]
    shown = json.loads((again / "data" / "screen.json").read_text())
    assert shown["scope"] == {"blob": s1_blob(e), "frozen": True}
    res = cli("check", str(again), "--campaign", str(tmp_path / "offline" / "S1-check" /
                                                     CAMP_DIR),
              "--trusted-keys", str(tmp_path / "offline" / "S1-check" / "trusted-keys.pem"))
    assert res.returncode in (0, 1), res.stderr
    assert "signatures: 1 verified, 0 refused, 0 unsigned bundle(s)" in res.stdout, res.stdout
    assert re.search(r"^1s-lossless +noop +[A-Z]+ ", res.stdout, re.M), res.stdout


def s1_blob(e: Env) -> str:
    """Git blob SHA of the default branch's campaign.toml (the frozen scope of S1)."""
    main = e.double.repo(REPO).refs["main"]
    data = e.double.repo(REPO).trees[main][f"{CAMP_DIR}/campaign.toml"]
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
