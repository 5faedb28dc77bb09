"""One server session's process: command line, start in its own process session, readiness,
worker snapshot, the shutdown ladder and the lifecycle record.

Facts used (vLLM-Omni 0.30.0 and vLLM 0.30.0 source files):

* ``vllm serve MODEL --omni ...`` (``vllm_omni/entrypoints/cli/main.py``); readiness is the
  first ``GET /health`` 200, connections are refused while loading (``omni_run_server_worker``
  binds the socket early, uvicorn accepts only in ``serve_http``);
* worker titles ``vLLM-Omni::DiffusionWorker...`` (``diffusion/worker/diffusion_worker.py``,
  ``set_process_title``); SIGTERM to the main pid only, never the process group, because a
  signalled worker exits 128+signum instead of completing its own shutdown;
* ladder markers "Calling terminate on diffusion worker", "Calling kill on", "cleanup
  incomplete" and "died unexpectedly" (``diffusion/executor/multiproc_executor.py``); workers
  log "Worker N: Shutdown complete." before exit 0 and "Shutdown signal received" before exit
  128+signum (``diffusion_worker.py``);
* an engine death is logged as "EngineDeadError: ..." (``entrypoints/serve/utils/errors.py``)
  and vLLM then ends its own server, exit 0 (``vllm/entrypoints/launchers/launcher.py``,
  ``terminate_if_errored``): a server that exited before the runner asked is recorded as such.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import psutil

from evidence.models import Candidate, Lifecycle, Serving, WorkerExit
from runners.isolation import enter

SERVER_CMD_ENV = "CAMPAIGN_BOT_SERVER_CMD"
"""Environment variable that replaces the ``vllm serve`` prefix of the server command."""
DEFAULT_SERVER_CMD = "vllm serve"
WORKER_TITLE = re.compile(r"DiffusionWorker|StageDiffusionProc|EngineCore|VLLMWorker|Worker_")
CONTAINER_EXIT = re.compile(r"campaign-bot-entrypoint: server exited with code (-?\d+)")

MARK_TERMINATE = re.compile(r"Calling terminate on (?:diffusion worker )?(\S+) \(pid=(\d+)\)")
MARK_KILL = re.compile(r"Calling kill on (?:diffusion worker )?(\S+) \(pid=(\d+)\)")
MARK_OLD_TERMINATE = re.compile(r"Terminating diffusion worker (\S+) after timeout")
MARK_INCOMPLETE = re.compile(r"cleanup incomplete")
MARK_DIED = re.compile(r"died unexpectedly: \[(.*)\]")
MARK_PREFIX_PID = re.compile(r"\((\S+) pid=(\d+)\)")
MARK_COMPLETE = re.compile(r"Worker (\d+): Shutdown complete")
MARK_SIGNALLED = re.compile(r"Worker (\d+): Shutdown signal received")
MARK_ENGINE_DEAD = re.compile(r"EngineDeadError: orchestrator_alive=")


def _alive(proc: psutil.Process | None) -> bool:
    """True when ``proc`` still runs (a zombie or a vanished process is not alive)."""
    if proc is None:
        return False
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


class ServerStartError(RuntimeError):
    """The server exited or did not answer /health 200 within the init timeout."""


def _flag_key(item: str) -> str:
    toks = shlex.split(item)
    return toks[0].split("=", 1)[0] if toks else item


def merge_flags(control: Sequence[str], cand: Candidate | None) -> list[str]:
    """The arm's flag items: control flags minus ``remove_flags`` (matched on the flag name,
    ``--usp`` removes ``--usp 4``), plus ``add_flags`` (replacing an item of the same name)."""
    items = list(control)
    if cand is None:
        return items
    drop = {_flag_key(x) for x in cand.remove_flags} | {_flag_key(x) for x in cand.add_flags}
    items = [x for x in items if _flag_key(x) not in drop]
    return items + list(cand.add_flags)


def build_command(
    serving: Serving, cand: Candidate | None, *, host: str, port: int,
    server_cmd: str | None = None,
) -> list[str]:
    """argv of one session's server: ``<server_cmd> MODEL --omni FLAGS --host H --port P``.

    ``server_cmd`` (or ``$CAMPAIGN_BOT_SERVER_CMD``, default ``vllm serve``) is split with
    shlex; flag items are shlex-split too, so ``"--usp 4"`` and ``"--usp", "4"`` both work."""
    prefix = shlex.split(server_cmd or os.environ.get(SERVER_CMD_ENV) or DEFAULT_SERVER_CMD)
    argv = prefix + [serving.model]
    flags = merge_flags(serving.flags, cand)
    if "--omni" not in [_flag_key(f) for f in flags]:
        argv.append("--omni")
    for item in flags:
        argv += shlex.split(item)
    return argv + ["--host", host, "--port", str(port)]


def build_env(
    serving: Serving, cand: Candidate | None, *, device_ids: Sequence[int],
    request_timeout_s: float, device_tool: str,
) -> dict[str, str]:
    """The environment *changes* for the server (applied over the runner's environment):
    scope env, device visibility, ``VLLM_WORKER_MULTIPROC_METHOD=spawn``,
    ``VLLM_OMNI_VIDEO_SYNC_TIMEOUT`` = request timeout + 60 s (so the client's timeout fires
    first and the server's 504 never cuts a request the protocol allows), then the
    candidate's env."""
    env = dict(serving.env)
    if device_ids:
        ids = ",".join(str(d) for d in device_ids)
        env.setdefault("ASCEND_RT_VISIBLE_DEVICES", ids)
        if device_tool == "nvidia-smi":
            env.setdefault("CUDA_VISIBLE_DEVICES", ids)
    env.setdefault("VLLM_WORKER_MULTIPROC_METHOD", "spawn")
    env.setdefault("VLLM_OMNI_VIDEO_SYNC_TIMEOUT", str(int(request_timeout_s + 60)))
    if cand is not None:
        env.update(cand.env)
    return env


def config_digest(argv: Sequence[str], env: dict[str, str]) -> str:
    """SHA-256 of the canonical JSON of the server argv (port excluded) and env changes."""
    cut = list(argv)
    if "--port" in cut:
        i = cut.index("--port")
        del cut[i : i + 2]
    blob = json.dumps({"argv": cut, "env": dict(sorted(env.items()))}, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


def become_subreaper() -> bool:
    """Make this process a child subreaper (``PR_SET_CHILD_SUBREAPER``), so workers orphaned
    by a dying server are re-parented here and their exit status can be read with waitpid.
    Linux only; returns False elsewhere."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


@dataclass
class WorkerInfo:
    """A worker seen in the post-readiness snapshot."""

    pid: int
    title: str
    rank: int | None
    proc: psutil.Process | None = None


@dataclass
class ServerProcess:
    """One server process lifetime.  ``env`` is its whole environment
    (:func:`runners.isolation.server_environment`), ``launch`` the preexec function that puts
    it into its account and isolation (None: :func:`runners.isolation.enter` without an account,
    only the parent-death signal), ``cwd`` its working directory; ``log_path`` receives its
    stdout and stderr."""

    argv: list[str]
    env: dict[str, str]
    log_path: Path
    port: int
    launch: Callable[[], None] | None = None
    cwd: Path | None = None
    host: str = "127.0.0.1"
    container: bool = False
    popen: subprocess.Popen[bytes] | None = None
    workers: list[WorkerInfo] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    forced: list[str] = field(default_factory=list)
    runner_terminate: int = 0
    runner_kill: int = 0
    exited_at: float | None = None
    exited_unasked: bool = False

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        """Start the server in its own process session (``start_new_session``), so a
        terminal's Ctrl-C never reaches its workers, with the environment ``env`` (whole:
        nothing of the runner's is inherited) and the ``launch`` preexec function
        (:func:`runners.isolation.enter`: the server's account and isolation).  Raises
        ServerStartError when the command cannot be executed or the isolation not entered."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        try:
            self.popen = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=self.env, cwd=self.cwd, start_new_session=True,
                preexec_fn=self.launch or enter(None))
        except (OSError, subprocess.SubprocessError) as exc:
            raise ServerStartError(f"cannot start {self.argv[0]!r}: {exc} (log: "
                                   f"{self.log_path.name})") from exc
        finally:
            log.close()

    def wait_ready(self, init_timeout_s: float, poll_s: float = 0.5,
                   cancelled: Callable[[], bool] = lambda: False) -> float:
        """Poll ``GET /health`` until 200; returns seconds waited.  Raises ServerStartError
        when the process exits first or ``init_timeout_s`` passes."""
        assert self.popen is not None
        t0 = time.monotonic()
        with httpx.Client(timeout=5.0) as client:
            while True:
                rc = self.popen.poll()
                if rc is not None:
                    self.exited_at = time.monotonic()
                    raise ServerStartError(f"server exited with code {rc} before /health "
                                           f"answered 200 (log: {self.log_path.name})")
                try:
                    if client.get(self.base_url + "/health").status_code == 200:
                        return time.monotonic() - t0
                except httpx.TransportError:
                    pass
                if time.monotonic() - t0 > init_timeout_s:
                    raise ServerStartError(
                        f"/health did not answer 200 within the init timeout {init_timeout_s:g} s")
                if cancelled():
                    raise KeyboardInterrupt
                time.sleep(poll_s)

    def snapshot_workers(self) -> None:
        """Record the server's worker processes (pid, title) with psutil; other descendants
        (resource tracker, helpers) go to ``others``."""
        assert self.popen is not None
        try:
            kids = psutil.Process(self.popen.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return
        found: list[WorkerInfo] = []
        for p in kids:
            try:
                title = " ".join(p.cmdline()).strip() or p.name()
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
            if WORKER_TITLE.search(title):
                m = re.search(r"(?:_SP|_TP|-|Worker)(\d+)\b", title)
                found.append(WorkerInfo(p.pid, title, int(m.group(1)) if m else None, p))
            else:
                self.others.append(f"{p.pid} {title[:120]}")
        self.workers = sorted(found, key=lambda w: (w.rank if w.rank is not None else 1 << 30,
                                                    w.pid))

    def _tree(self) -> list[psutil.Process]:
        procs: dict[int, psutil.Process] = {}
        if self.popen is not None:
            try:
                main = psutil.Process(self.popen.pid)
                for p in [main, *main.children(recursive=True)]:
                    procs[p.pid] = p
            except psutil.NoSuchProcess:
                pass
        for w in self.workers:
            if w.proc is not None and _alive(w.proc):
                procs.setdefault(w.pid, w.proc)
        return list(procs.values())

    def shutdown(self, shutdown_timeout_s: float) -> None:
        """SIGTERM to the main pid only; after ``shutdown_timeout_s`` SIGKILL every process of
        the tree (main, descendants, snapshot workers) and record each forced action.  A main
        process that had already exited is recorded in ``exited_unasked``."""
        assert self.popen is not None
        if self.popen.poll() is not None:
            self.exited_unasked = True
        else:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=shutdown_timeout_s)
            except subprocess.TimeoutExpired:
                pass
        survivors: list[str] = []
        if self.popen.poll() is None:
            for p in self._tree():
                try:
                    title = " ".join(p.cmdline()).strip() or p.name()
                    p.kill()
                except psutil.NoSuchProcess:
                    continue
                self.runner_kill += 1
                self.forced.append(f"runner: SIGKILL pid {p.pid} ({title[:80]}) after shutdown "
                                   f"timeout {shutdown_timeout_s:g} s")
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                survivors.append(f"main pid {self.popen.pid}")
        else:
            # The main process is gone; workers that outlived it are orphans: kill them too.
            orphans = [w for w in self.workers if _alive(w.proc)]
            if orphans:
                time.sleep(0.5)
            for w in orphans:
                if _alive(w.proc):
                    try:
                        assert w.proc is not None
                        w.proc.kill()
                    except psutil.NoSuchProcess:
                        continue
                    self.runner_kill += 1
                    self.forced.append(f"runner: SIGKILL orphaned worker pid {w.pid} "
                                       f"({w.title[:80]}) after the server exited")
        self.exited_at = time.monotonic()
        self.forced += [f"runner: could not end {s}" for s in survivors]

    def kill_now(self) -> None:
        """SIGKILL the whole tree at once (used when a start fails half-way)."""
        for p in self._tree():
            try:
                p.kill()
            except psutil.NoSuchProcess:
                pass
        if self.popen is not None:
            try:
                self.popen.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        self.exited_at = time.monotonic()

    def lifecycle(self) -> Lifecycle:
        """Build the :class:`Lifecycle` from the exit status, the worker snapshot (waitpid for
        workers re-parented to this subreaper, else psutil) and the server's log markers."""
        text = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        markers: list[str] = []
        term_pids: set[int] = set()
        kill_pids: set[int] = set()
        terminate = kill = 0
        complete: dict[int, set[int]] = {}
        signalled: dict[int, set[int]] = {}
        died: dict[str, int] = {}
        forced = list(self.forced)
        container_code: int | None = None
        engine_died = False
        for line in text.splitlines():
            if MARK_ENGINE_DEAD.search(line):
                engine_died = True
                markers.append(line.strip())
                continue
            m = MARK_TERMINATE.search(line) or MARK_OLD_TERMINATE.search(line)
            if m:
                terminate += 1
                markers.append(line.strip())
                forced.append(f"server ladder: terminate {m.group(1)}")
                if m.lastindex and m.lastindex >= 2:
                    term_pids.add(int(m.group(2)))
                continue
            m = MARK_KILL.search(line)
            if m:
                kill += 1
                kill_pids.add(int(m.group(2)))
                markers.append(line.strip())
                forced.append(f"server ladder: kill {m.group(1)} (pid {m.group(2)})")
                continue
            if MARK_INCOMPLETE.search(line) or MARK_DIED.search(line):
                markers.append(line.strip())
                for name, code in re.findall(r"(\S+?)\(exitcode=(-?\d+)", line):
                    died[name.strip("'\"")] = int(code)
                continue
            pm = MARK_PREFIX_PID.search(line)
            pid = int(pm.group(2)) if pm else -1
            m = MARK_COMPLETE.search(line)
            if m:
                complete.setdefault(int(m.group(1)), set()).add(pid)
                markers.append(line.strip())
                continue
            m = MARK_SIGNALLED.search(line)
            if m:
                signalled.setdefault(int(m.group(1)), set()).add(pid)
                markers.append(line.strip())
                continue
            m = CONTAINER_EXIT.search(line)
            if m:
                container_code = int(m.group(1))
        workers = [self._worker_exit(w, complete, signalled, died, term_pids, kill_pids)
                   for w in self.workers]
        rc = self.popen.returncode if self.popen is not None else None
        server_code = rc if rc is not None and rc >= 0 else None
        server_sig = -rc if rc is not None and rc < 0 else None
        cont = None
        if self.container:
            cont, server_code = server_code, container_code
        return Lifecycle(
            workers=workers, terminate_actions=terminate + self.runner_terminate,
            kill_actions=kill + self.runner_kill, forced_actions=forced, log_markers=markers,
            server_exit_code=server_code, server_signal=server_sig,
            container_exit_code=cont, server_exited_unasked=self.exited_unasked,
            engine_died=engine_died)

    def _worker_exit(self, w: WorkerInfo, complete: dict[int, set[int]],
                     signalled: dict[int, set[int]], died: dict[str, int],
                     term_pids: set[int], kill_pids: set[int]) -> WorkerExit:
        # 1. A worker re-parented to this subreaper: its real exit status.
        try:
            pid, status = os.waitpid(w.pid, os.WNOHANG)
            if pid == w.pid:
                if os.WIFSIGNALED(status):
                    return WorkerExit(rank=w.rank, pid=w.pid, name=w.title, state="exited",
                                      signal=os.WTERMSIG(status), source="waitpid")
                return WorkerExit(rank=w.rank, pid=w.pid, name=w.title, state="exited",
                                  exit_code=os.WEXITSTATUS(status), source="waitpid")
        except ChildProcessError:
            pass
        if _alive(w.proc):
            return WorkerExit(rank=w.rank, pid=w.pid, name=w.title, state="alive",
                              source="psutil: still running after the shutdown timeout")
        # 2. The executor's report of an unexpected death, e.g. DiffusionWorker-3(exitcode=-9).
        for name, code in died.items():
            if w.rank is not None and name.endswith(f"-{w.rank}"):
                return WorkerExit(rank=w.rank, pid=w.pid, name=w.title, state="exited",
                                  exit_code=code if code >= 0 else None,
                                  signal=-code if code < 0 else None,
                                  source="log: died unexpectedly")
        forced = w.pid in term_pids or w.pid in kill_pids

        def _said(table: dict[int, set[int]]) -> bool:
            pids = table.get(w.rank, set()) if w.rank is not None else set()
            return w.pid in pids or (-1 in pids)

        # 3. The worker's own last words, when no ladder action touched it.
        if not forced and _said(signalled):
            return WorkerExit(rank=w.rank, pid=w.pid, name=w.title, state="exited",
                              exit_code=128 + signal.SIGTERM,
                              source="log: 'Shutdown signal received' (exit 128+SIGTERM)")
        if not forced and _said(complete):
            return WorkerExit(rank=w.rank, pid=w.pid, name=w.title, state="exited",
                              exit_code=0, source="log: 'Shutdown complete.' and process gone")
        return WorkerExit(rank=w.rank, pid=w.pid, name=w.title, state="gone",
                          source="psutil: gone, exit status unreadable"
                          + ("; ladder terminate/kill seen" if forced else ""))
