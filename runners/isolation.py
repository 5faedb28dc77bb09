"""Privilege separation of the screened server from the runner that signs its evidence.

A screen runs a pull request's candidate: its flags and environment reach the model server,
and through them (a plug-in flag, a model directory with remote code) arbitrary code may run
in the server.  The runner beside it holds the signing key and writes the bundle it signs.
Every session's server is therefore started:

* as a dedicated unprivileged account (``[isolation] user`` of ``runner.toml``): a different
  uid cannot read the key file (mode 0600, the runner's), cannot ``ptrace`` the runner nor
  read its ``/proc/<pid>/mem`` or ``environ`` (ptrace(2) "Ptrace access mode checking"), and
  cannot write into the bundle folder (the runner's, mode 0755);
* with no capabilities and ``PR_SET_NO_NEW_PRIVS`` (a set-user-ID program cannot give any
  back; prctl(2));
* in its own mount namespace whose ``/proc`` is a fresh procfs mounted with
  ``hidepid=2`` (proc(5)): the server sees only its own account's processes, so not the
  runner's command line or ``/proc/<ppid>/*`` at all.  Device nodes, the model weights and
  the engine's installation are the host's, unchanged: ``/dev/davinci*`` (Ascend) and
  ``/dev/nvidia*`` (CUDA) stay usable when the account may open them (the ``HwHiAiUser``
  group for Ascend, whatever group owns the nodes otherwise), which ``doctor runner`` checks;
* with an environment built from an allow-list (:func:`server_environment`): nothing of the
  runner's reaches it but ``PATH``, the locale and what the host's ``runner.toml`` names
  (``[server] pass_env`` and ``env``); never ``GITHUB_*``, ``ACTIONS_*``, runner tokens,
  ``PYTHONPATH`` or ``LD_*`` unless the host's administrator passes them;
* in a scratch folder of its own (``HOME``, ``TMPDIR``, working directory) outside the bundle.

Why this mechanism: a uid switch is the kernel's oldest and best-understood boundary and keeps
the devices and the installed engine exactly as they are (bubblewrap or a user namespace map
the server back to the runner's own uid unless given a second account anyway, and need each
device node bound in).  It needs ``CAP_SETUID``, ``CAP_SETGID`` and ``CAP_SYS_ADMIN`` (for
the mount namespace) in the runner: root, or a runner service given those as ambient
capabilities (``docs/security.md``).  The switch itself is done here in the forked child
before ``exec`` (``preexec_fn``), so no program runs with the server's environment while
still privileged, and the runner checks the result on every screen (:func:`probe`) before
the first session: a screen whose server could read the key does not start.
"""

from __future__ import annotations

import ctypes
import fnmatch
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REC, MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_NO_NEW_PRIVS = 1, 4, 38

DEFAULT_PASS_ENV = ("PATH", "LANG", "LANGUAGE", "LC_*", "TZ", "TERM")
"""Runner variables every server keeps: where programs are and how text is shown."""

DEVICE_GLOBS = ("davinci[0-9]*", "davinci_manager", "devmm_svm", "hisi_hdc", "nvidia[0-9]*",
                "nvidiactl", "nvidia-uvm")
"""Accelerator device nodes under ``/dev`` the server must be able to open (Ascend driver
nodes as the CANN container guides bind them; NVIDIA's as the container toolkit does)."""

PROBE_SCRIPT = r"""
key=$1; pid=$2; shift 2
echo "uid $(id -u)"
if [ -n "$key" ] && [ -r "$key" ]; then echo "problem the signing key $key is readable"; fi
if [ -e "/proc/$pid" ]; then echo "problem the runner's /proc/$pid is visible"; fi
while [ $# -gt 0 ]; do
  case $1 in
    --no-write) if [ -e "$2" ] && [ -w "$2" ]; then echo "problem $2 is writable"; fi;;
    --device) if [ ! -r "$2" ] || [ ! -w "$2" ]; then
                echo "device $2 cannot be opened for read and write"; fi;;
  esac
  shift 2
done
echo done
"""
"""Run by :func:`probe` as the server account, in the server's isolation (POSIX sh)."""


class IsolationError(Exception):
    """The server's account or isolation cannot be set up, or does not hold; the message says
    which check failed and how to fix it."""


@dataclass(frozen=True)
class ServerIdentity:
    """The account the screened server runs as: its name, uid, primary gid and the
    supplementary groups of ``/etc/group`` (where device access usually comes from)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...] = ()


def resolve_identity(user: str) -> ServerIdentity:
    """The account named ``user`` (a name, or a numeric uid).  Raises IsolationError when it
    does not exist, is root, or is the account this runner runs as (no separation)."""
    try:
        ent = pwd.getpwuid(int(user)) if user.isdigit() else pwd.getpwnam(user)
    except (KeyError, OverflowError):
        raise IsolationError(f"[isolation] user {user!r}: no such account on this host; create "
                           "it (`useradd --system --no-create-home --shell /usr/sbin/nologin "
                           "campaign-bot-server`)") from None
    if ent.pw_uid == 0:
        raise IsolationError(f"[isolation] user {user!r} is root: the server would keep every "
                           "privilege; name an unprivileged account")
    if ent.pw_uid == os.geteuid():
        raise IsolationError(f"[isolation] user {user!r} is the runner's own account (uid "
                           f"{ent.pw_uid}): the server could read the signing key; name a "
                           "separate account")
    try:
        groups = tuple(g for g in os.getgrouplist(ent.pw_name, ent.pw_gid) if g != 0)
    except OSError:
        groups = (ent.pw_gid,)
    return ServerIdentity(ent.pw_name, ent.pw_uid, ent.pw_gid, groups)


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def server_environment(changes: Mapping[str, str], *, host_env: Mapping[str, str],
                       pass_env: Sequence[str] = (), fixed: Mapping[str, str] | None = None,
                       identity: ServerIdentity | None = None,
                       scratch: Path | None = None) -> dict[str, str]:
    """The whole environment of one server: the runner's variables named by
    :data:`DEFAULT_PASS_ENV` or ``pass_env`` (names, or prefixes ending in ``*``), then the
    host's ``fixed`` values, then (isolated) ``HOME``/``TMPDIR`` = ``scratch`` and
    ``USER``/``LOGNAME`` = the account, then the campaign's ``changes`` (already refused when
    they name a loader, interpreter or runner variable: :mod:`evidence.env_rules`).  Nothing
    else of the runner's environment (tokens, ``GITHUB_*``, ``PYTHONPATH``) reaches it."""
    patterns = (*DEFAULT_PASS_ENV, *pass_env)
    env = {k: v for k, v in host_env.items() if _matches(k, patterns)}
    env.update(fixed or {})
    if identity is not None:
        env["USER"] = env["LOGNAME"] = identity.name
    if scratch is not None:
        env["HOME"] = env["TMPDIR"] = str(scratch)
    env.update(changes)
    return env


def _fail(what: str) -> None:
    """In the child before exec: say what failed on the server's log (fd 2), then raise so
    that Popen fails in the runner."""
    err = ctypes.get_errno()
    os.write(2, f"campaign-bot server isolation: {what} failed: {os.strerror(err)}\n".encode())
    raise OSError(err, f"{what} failed")


def enter(identity: ServerIdentity | None, *, pdeathsig: bool = True) -> Callable[[], None]:
    """A ``preexec_fn`` for the server: with an ``identity``, a private mount namespace, a
    fresh ``/proc`` with ``hidepid=2``, the account's groups, gid and uid (which drops every
    capability), then ``PR_SET_NO_NEW_PRIVS``; in every case ``PR_SET_PDEATHSIG`` = SIGTERM
    (set after the uid switch, which clears it), so a runner killed outright still starts the
    server's own graceful shutdown.  Failures are written to the child's stderr (the session
    log) and make Popen raise."""

    def _child() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        if identity is not None:
            if libc.unshare(CLONE_NEWNS) != 0:
                _fail("unshare(CLONE_NEWNS) (needs CAP_SYS_ADMIN)")
            if libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
                _fail("making / a private mount")
            if libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                          b"hidepid=2") != 0:
                _fail("mounting /proc with hidepid=2")
            os.setgroups(list(identity.groups))
            os.setresgid(identity.gid, identity.gid, identity.gid)
            os.setresuid(identity.uid, identity.uid, identity.uid)
        if pdeathsig:
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
        if identity is not None and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            _fail("prctl(PR_SET_NO_NEW_PRIVS)")

    return _child


def harden_runner() -> None:
    """Make this (the runner's) process non-dumpable (``PR_SET_DUMPABLE`` = 0): its
    ``/proc/<pid>`` files become root's and no process of its own uid may ptrace it, while it
    holds the signing key in memory.  Linux only; a no-op elsewhere."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def make_scratch(identity: ServerIdentity) -> Path:
    """A new folder (mode 0700) owned by the server account, for its ``HOME``, ``TMPDIR`` and
    working directory; outside the bundle.  Remove it with :func:`remove_scratch`."""
    path = Path(tempfile.mkdtemp(prefix="campaign-bot-server-"))
    os.chown(path, identity.uid, identity.gid)
    return path


def remove_scratch(path: Path) -> None:
    """Remove a scratch folder and everything the server left there (as the runner)."""
    shutil.rmtree(path, ignore_errors=True)


def device_nodes(dev: Path = Path("/dev")) -> list[Path]:
    """The accelerator device nodes present on this host (:data:`DEVICE_GLOBS`)."""
    found: set[Path] = set()
    for pattern in DEVICE_GLOBS:
        found.update(dev.glob(pattern))
    return sorted(found)


@dataclass
class Isolation:
    """What :func:`probe` saw as the server account: ``problems`` break the separation (the
    screen does not start), ``device_problems`` would stop the engine from using a device."""

    identity: ServerIdentity
    problems: list[str] = field(default_factory=list)
    device_problems: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        """True when the separation holds (device access is reported apart)."""
        return not self.problems


def probe(identity: ServerIdentity, *, key: Path | None, no_write: Sequence[Path],
          devices: Sequence[Path] = (), timeout_s: float = 20.0) -> Isolation:
    """Start a shell exactly as a server is started (:func:`enter`) and ask, as the server
    account: is the signing ``key`` readable, is this runner's ``/proc/<pid>`` visible, is any
    of ``no_write`` writable, can each of ``devices`` be opened for reading and writing.
    Raises IsolationError when the isolation cannot be entered at all (no privilege to switch
    the account or mount ``/proc``)."""
    args = [str(key) if key else "", str(os.getpid())]
    for p in no_write:
        args += ["--no-write", str(p)]
    for d in devices:
        args += ["--device", str(d)]
    try:
        res = subprocess.run(["/bin/sh", "-c", PROBE_SCRIPT, "sh", *args],
                             capture_output=True, text=True, timeout=timeout_s, cwd="/",
                             env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
                             preexec_fn=enter(identity, pdeathsig=False))
    except (OSError, subprocess.SubprocessError) as exc:
        raise IsolationError(
            f"cannot start a process as {identity.name!r} in a private mount namespace "
            f"({exc}); the runner needs root, or CAP_SETUID, CAP_SETGID, CAP_SYS_ADMIN and "
            "CAP_KILL (docs/security.md, 'The runner')") from None
    lines = res.stdout.splitlines()
    if "done" not in lines or f"uid {identity.uid}" not in lines:
        raise IsolationError(f"the isolation probe as {identity.name!r} did not complete (exit "
                           f"{res.returncode}): {(res.stderr or res.stdout).strip()[:300]}")
    out = Isolation(identity)
    for ln in lines:
        if ln.startswith("problem "):
            out.problems.append(ln.removeprefix("problem "))
        elif ln.startswith("device "):
            out.device_problems.append(ln.removeprefix("device ") + f" by {identity.name!r}")
    return out
