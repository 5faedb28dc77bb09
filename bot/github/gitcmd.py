"""One git command, run so that nothing from a repository or the host's git settings acts:
its environment (:func:`git_env`, the settings of :data:`SAFE_CONFIG`, the token only in the
child's environment), its time limit with the whole process group killed past it
(:func:`run_git`, :func:`kill_group`), and its failure as one sentence without the token
(:func:`error_message`).  :mod:`bot.github.git` runs every command of the mirrors through
here; why each setting is there is in that module's docstring.
"""

from __future__ import annotations

import base64
import contextlib
import ipaddress
import os
import signal
import subprocess
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import urlsplit

from bot.github.port import GitRemote

SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", os.devnull),
    ("core.fsmonitor", "false"),
    ("credential.helper", ""),
    ("protocol.allow", "never"),
    ("protocol.https.allow", "always"),
    ("http.followRedirects", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("submodule.recurse", "false"),
    ("fetch.fsckObjects", "true"),
    ("fetch.writeCommitGraph", "false"),
    ("gc.auto", "0"),
    ("maintenance.auto", "false"),
    ("init.templateDir", ""),
)
"""Settings of every git command (why each: the docstring of :mod:`bot.github.git`)."""


class GitError(Exception):
    """A git step failed; ``str()`` is one sentence fit for a check run (no token in it)."""


class GitTimeout(GitError):
    """A git command ran past its time limit and was killed."""


def git_env(home: Path, remote: GitRemote | None, extra: dict[str, str] | None = None
            ) -> dict[str, str]:
    """The whole environment of one git command: nothing inherited but ``PATH``, ``HOME``
    set to ``home`` (made if missing), :data:`SAFE_CONFIG` as ``GIT_CONFIG_*`` variables and,
    with a ``remote``, its token as an ``http.<URL>.extraHeader`` for that URL alone (plain
    HTTP allowed only for a loopback address); ``extra`` added last."""
    home.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", os.defpath), "HOME": str(home), "LC_ALL": "C",
        "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_TERMINAL_PROMPT": "0", "GIT_LFS_SKIP_SMUDGE": "1",
        "GIT_PROTOCOL_FROM_USER": "0",
        "GIT_ALLOW_PROTOCOL": "https:http" if remote and _loopback(remote.url) else "https",
    }
    config = list(SAFE_CONFIG)
    if remote is not None:
        if remote.url.startswith("http://") and _loopback(remote.url):
            config.append(("protocol.http.allow", "always"))
        basic = base64.b64encode(f"x-access-token:{remote.token}".encode()).decode()
        config.append((f"http.{remote.url}.extraHeader", f"Authorization: Basic {basic}"))
    env["GIT_CONFIG_COUNT"] = str(len(config))
    for i, (k, v) in enumerate(config):
        env[f"GIT_CONFIG_KEY_{i}"] = k
        env[f"GIT_CONFIG_VALUE_{i}"] = v
    if extra:
        env.update(extra)
    return env


def run_git(git: str, args: Sequence[str], *, cwd: Path | None, env: dict[str, str],
            remote: GitRemote | None = None, stdin: bytes | None = None, check: bool = True,
            timeout: float) -> subprocess.CompletedProcess[bytes]:
    """Run ``GIT [-C cwd] ARGS`` with environment ``env`` and ``stdin`` (bytes, or nothing),
    in a session of its own; kill it and its helpers after ``timeout`` seconds and raise
    :class:`GitTimeout`; with ``check``, raise :class:`GitError` (the message scrubbed of
    ``remote``'s token) on a non-zero exit."""
    cmd = [git, *(["-C", str(cwd)] if cwd is not None else []), *args]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE if stdin is not None else
                            subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        raise GitTimeout(f"git {args[0]} took longer than {timeout:.0f} s and was stopped "
                         "(CAMPAIGN_BOT_GIT_TIMEOUT_S)") from None
    res = subprocess.CompletedProcess(cmd, proc.returncode, out, err)
    if check and res.returncode != 0:
        raise GitError(f"git {args[0]} failed: {error_message(err, remote)}")
    return res


def error_message(err: bytes, remote: GitRemote | None) -> str:
    """One sentence from git's standard error ``err`` for a check run: the last ``fatal:``/
    ``error:``/``remote:`` lines (at most 500 characters), the token of ``remote`` replaced by
    ``***``, and a refused token said in words."""
    text = _scrubbed(err.decode("utf-8", "replace").strip(), remote)
    if "could not read Username" in text or "Authentication failed" in text:
        # git asks for credentials after a 401 and is not allowed to prompt
        return ("the server refused the token (HTTP 401): the installation may not have "
                "access to this repository, or its token expired")
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    fatal = [x for x in lines if x.startswith(("fatal:", "error:", "remote:", " !"))]
    return "; ".join((fatal or lines)[-3:])[:500] or "no message"


def _scrubbed(text: str, remote: GitRemote | None) -> str:
    """``text`` with ``remote``'s token (if any) replaced by ``***``."""
    return text.replace(remote.token, "***") if remote is not None and remote.token else text


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill ``proc`` and its process group (git runs helpers: remote-https, index-pack)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
