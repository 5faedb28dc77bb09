"""A stand-in for GitHub Actions and one self-hosted runner, for end-to-end tests: when the bot
dispatches a workflow on the GitHub double, this reads the workflow file from the repository's
default branch (as GitHub does), checks the dispatch against its declared inputs, routes the
job by its ``runs-on`` labels (a job no registered runner matches stays queued, as on GitHub),
and executes the job's steps on this machine:

* ``run:`` steps run as real ``bash -e`` scripts with the job's and the step's ``env:``
  (expressions evaluated), ``GITHUB_OUTPUT``, ``GITHUB_WORKSPACE`` and ``RUNNER_TEMP``;
* ``actions/checkout`` writes the tree of its ``ref`` (a commit SHA, ``refs/pull/N/head`` or a
  branch) into the workspace (or its ``path`` there) (a ``git``
  shim answers ``git rev-parse HEAD`` with the checked-out commit: the double holds no git
  objects);
* ``actions/upload-artifact`` zips ``with.path`` into the run's artifact on the double.

It sends the ``workflow_job`` and ``workflow_run`` deliveries GitHub sends to the App, signed
with the App's webhook secret.  Supported expressions: ``inputs.X``, ``runner.temp``,
``github.sha``,
``steps.ID.outputs.X``, ``fromJSON(...)``, ``always()``, ``success()``, ``failure()``,
``&&``, ``||``, ``==``, ``!=`` and string literals: what the screen workflow uses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

EXPR = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


class WorkflowError(Exception):
    """What GitHub would refuse or never run (unknown input, no matching runner)."""


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass
class Context:
    """Expression context of one job."""

    inputs: dict[str, str]
    runner_temp: str
    steps: dict[str, dict[str, str]] = field(default_factory=dict)
    failed: bool = False
    sha: str = ""

    def lookup(self, path: str) -> Any:
        parts = path.split(".")
        if parts[0] == "inputs":
            return self.inputs.get(parts[1], "")
        if parts == ["runner", "temp"]:
            return self.runner_temp
        if parts == ["github", "sha"]:
            return self.sha
        if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
            return self.steps.get(parts[1], {}).get(parts[3], "")
        raise WorkflowError(f"unsupported expression context {path!r}")

    def eval(self, expr: str) -> Any:
        tokens = re.findall(r"'(?:[^']|'')*'|&&|\|\||==|!=|\(|\)|,|[A-Za-z_][\w.-]*", expr)
        pos = 0

        def peek() -> str | None:
            return tokens[pos] if pos < len(tokens) else None

        def take() -> str:
            nonlocal pos
            pos += 1
            return tokens[pos - 1]

        def primary() -> Any:
            t = take()
            if t.startswith("'"):
                return t[1:-1].replace("''", "'")
            if t == "(":
                v = disj()
                take()
                return v
            if peek() == "(":
                take()
                args = []
                while peek() != ")":
                    args.append(disj())
                    if peek() == ",":
                        take()
                take()
                return self.call(t, args)
            if t in ("true", "false"):
                return t == "true"
            return self.lookup(t)

        def comp() -> Any:
            v = primary()
            while peek() in ("==", "!="):
                op = take()
                w = primary()
                v = (v == w) if op == "==" else (v != w)
            return v

        def conj() -> Any:
            v = comp()
            while peek() == "&&":
                take()
                w = comp()
                v = v and w
            return v

        def disj() -> Any:
            v = conj()
            while peek() == "||":
                take()
                w = conj()
                v = v or w
            return v

        out = disj()
        if pos != len(tokens):
            raise WorkflowError(f"cannot evaluate {expr!r}")
        return out

    def call(self, name: str, args: list[Any]) -> Any:
        if name == "fromJSON":
            return json.loads(args[0])
        if name == "always":
            return True
        if name == "success":
            return not self.failed
        if name == "failure":
            return self.failed
        raise WorkflowError(f"unsupported function {name}()")

    def render(self, value: Any) -> str:
        """A string with every ``${{ }}`` replaced."""
        return EXPR.sub(lambda m: str(self.eval(m.group(1))), str(value))

    def value(self, text: str) -> Any:
        """A whole-expression value (``runs-on: ${{ fromJSON(...) }}``) or a rendered string."""
        m = EXPR.fullmatch(text.strip())
        return self.eval(m.group(1)) if m else self.render(text)


@dataclass
class ActionsRunner:
    """GitHub Actions plus one self-hosted runner with ``labels``, on ``work``; ``env`` is
    the runner service's environment (PATH, runner config...)."""

    double: Any
    app_id: int
    labels: list[str]
    work: Path
    env: dict[str, str]
    name: str = "standin-runner-1"
    runs: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    logs: dict[int, str] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event)

    def on_dispatch(self, double: Any, repo: str, run: dict[str, Any]) -> None:
        """The double's dispatch hook (its own thread)."""
        try:
            self._run(repo, run)
        except Exception as exc:  # noqa: BLE001 - surfaced by the test
            self.errors.append(f"{type(exc).__name__}: {exc}")
        finally:
            self.done.set()

    def _payload(self, repo: str) -> dict[str, Any]:
        r = self.double.repo(repo)
        owner, name = repo.split("/")
        return {"repository": {"id": r.id, "name": name, "full_name": repo, "private": False,
                               "owner": {"login": owner}, "default_branch": r.default_branch},
                "installation": {"id": r.installation_id},
                "sender": {"login": "github-actions[bot]", "type": "Bot"}}

    def _run(self, repo: str, run: dict[str, Any]) -> None:
        self.runs.append(run)
        state = self.double.repo(repo)
        tree = state.trees[state.refs[run["head_branch"]]]
        wf = yaml.safe_load(tree[f".github/workflows/{run['workflow']}"])
        on = wf.get("on") or wf.get(True)  # YAML 1.1 reads a bare `on` key as True
        declared = on["workflow_dispatch"].get("inputs") or {}
        unknown = sorted(set(run["inputs"]) - set(declared))
        if unknown:
            raise WorkflowError(f"Unexpected inputs provided: {unknown}")
        inputs = {k: str(run["inputs"].get(k, spec.get("default", "")))
                  for k, spec in declared.items()}
        for k, spec in declared.items():
            if spec.get("required") and not run["inputs"].get(k):
                raise WorkflowError(f"Required input '{k}' not provided")
        (job_id, job), = wf["jobs"].items()
        ws = self.work / f"run-{run['id']}" / "workspace"
        temp = self.work / f"run-{run['id']}" / "temp"
        ws.mkdir(parents=True)
        temp.mkdir()
        ctx = Context(inputs, str(temp), sha=state.runs[run["id"]]["head_sha"])
        runs_on = ctx.value(job["runs-on"])
        runs_on = [runs_on] if isinstance(runs_on, str) else list(runs_on)
        if not set(runs_on) <= set(self.labels):
            raise WorkflowError(f"no runner has labels {runs_on} (this one: {self.labels}): "
                                "the job would wait in the queue")
        started = _now()
        self.double.set_run(repo, run["id"], status="in_progress", run_started_at=started)
        job_payload = self._payload(repo) | {"action": "in_progress", "workflow_job": {
            "id": run["id"] + 1, "run_id": run["id"], "status": "in_progress",
            "runner_name": self.name, "labels": runs_on, "started_at": started,
            "workflow_name": wf.get("name", "")}}
        self.double.deliver(self.app_id, "workflow_job", job_payload)
        job_env = {k: ctx.render(v) for k, v in (job.get("env") or {}).items()}
        log: list[str] = []
        for i, step in enumerate(job["steps"]):
            cond = step.get("if")
            if cond is None:
                go = not ctx.failed
            else:
                go = bool(ctx.eval(EXPR.fullmatch(cond).group(1) if EXPR.fullmatch(cond)
                                   else cond))
            if not go:
                log.append(f"--- skipped: {step.get('name')}")
                continue
            log.append(f"--- {step.get('name')}")
            uses = step.get("uses", "")
            if uses.startswith("actions/checkout@"):
                ref = ctx.render(step["with"]["ref"])
                m = re.fullmatch(r"refs/pull/(\d+)/head", ref)
                sha = (state.pulls[int(m.group(1))].head_sha if m else
                       ref if re.fullmatch(r"[0-9a-f]{40}", ref) else state.refs[ref])
                sub = step["with"].get("path")
                for path, data in state.trees[sha].items():
                    dst = (ws / sub if sub else ws) / path
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    dst.write_bytes(data)
                if not sub:  # `git rev-parse HEAD` in the workspace answers this checkout
                    (self.work / f"run-{run['id']}" / "HEAD").write_text(sha)
            elif uses.startswith("actions/upload-artifact@"):
                w = {k: ctx.render(v) for k, v in step["with"].items()}
                root = Path(w["path"])
                files = {p.relative_to(root).as_posix(): p.read_bytes()
                         for p in sorted(root.rglob("*")) if p.is_file()} if root.is_dir() else {}
                if files:
                    self.double.add_artifact(repo, run["id"], w["name"], files)
                log.append(f"uploaded {len(files)} file(s) as {w['name']}")
            elif "run" in step:
                out_file = temp / f"output-{i}"
                out_file.write_text("")
                env = {**self.env, **job_env,
                       **{k: ctx.render(v) for k, v in (step.get("env") or {}).items()},
                       "GITHUB_OUTPUT": str(out_file), "GITHUB_WORKSPACE": str(ws),
                       "RUNNER_TEMP": str(temp), "CI": "true", "GITHUB_ACTIONS": "true",
                       "CHECKOUT_HEAD_FILE": str(self.work / f"run-{run['id']}" / "HEAD")}
                script = temp / f"step-{i}.sh"
                script.write_text(step["run"])
                p = subprocess.run(["bash", "--noprofile", "--norc", "-e", str(script)],
                                   cwd=ws, env=env, capture_output=True, text=True,
                                   timeout=600)
                log.append(p.stdout + p.stderr + f"(exit {p.returncode})")
                outputs = dict(line.split("=", 1) for line in out_file.read_text().splitlines()
                               if "=" in line)
                if step.get("id"):
                    ctx.steps[step["id"]] = outputs
                if p.returncode != 0:
                    ctx.failed = True
            else:
                raise WorkflowError(f"unsupported step {step}")
        self.logs[run["id"]] = "\n".join(log)
        conclusion = "failure" if ctx.failed else "success"
        ended = _now()
        if ended <= started:
            import time

            time.sleep(1.1)
            ended = _now()
        self.double.set_run(repo, run["id"], status="completed", conclusion=conclusion,
                            updated_at=ended)
        r = state.runs[run["id"]]
        run_payload = self._payload(repo) | {"action": "completed", "workflow_run": {
            "id": run["id"], "name": wf.get("name", ""), "event": "workflow_dispatch",
            "status": "completed", "conclusion": conclusion, "head_sha": r["head_sha"],
            "head_branch": r["head_branch"], "display_title": r["display_title"],
            "run_attempt": 1, "run_started_at": started, "updated_at": ended,
            "created_at": r.get("created_at") or started,
            "path": f".github/workflows/{run['workflow']}", "pull_requests": []}}
        self.double.deliver(self.app_id, "workflow_run", run_payload)


def shims(bin_dir: Path, python: str) -> None:
    """``campaign-bot`` (this checkout's CLI under ``python``) and ``git`` (``rev-parse HEAD``
    answers the checked-out commit; anything else runs the real git) in ``bin_dir``."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    real_git = next((str(Path(d) / "git") for d in os.environ.get("PATH", "").split(os.pathsep)
                     if (Path(d) / "git").is_file()), "/usr/bin/git")
    (bin_dir / "campaign-bot").write_text(
        f'#!/bin/sh\nexec "{python}" -c "from evidence.cli import main; main()" "$@"\n')
    (bin_dir / "git").write_text(
        '#!/bin/sh\nif [ "$1 $2" = "rev-parse HEAD" ] && [ -n "$CHECKOUT_HEAD_FILE" ]; then\n'
        '  exec cat "$CHECKOUT_HEAD_FILE"\nfi\n'
        f'exec "{real_git}" "$@"\n')
    for f in ("campaign-bot", "git"):
        (bin_dir / f).chmod(0o755)
