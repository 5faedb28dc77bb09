"""Git for the GitHub double: every repository the double holds is also a real bare git
repository, served over git's smart HTTP protocol by ``git http-backend`` (real git, run as
a CGI program per request), so ``git fetch`` and ``git push`` work against the double the way
they work against ``https://github.com/OWNER/NAME.git``.

One state, two views.  The REST side keeps ``RepoState.trees`` (commit SHA -> ``{path:
bytes}``) and ``RepoState.refs`` (branch -> commit SHA); every commit the double makes
(:meth:`GitHubDouble.set_branch`, ``add_repo``, ``add_pull``, ``push``) is a real git commit
object computed here (:meth:`GitHTTP.commit`), so REST SHAs *are* git SHAs.  Objects are kept
in memory and written to the bare repository, with the refs, right before a git request is
served (:meth:`GitHTTP.sync_to_disk`).  After a push (``git-receive-pack``) the new commits are
read back with ``git rev-list``, ``ls-tree`` and ``cat-file --batch`` into ``trees``, branches
move in ``refs``, same-repository pull requests whose head branch moved get the new head SHA
and a recomputed diff, and every callable in ``GitHubDouble.push_hooks`` is run on a new
thread with ``(double, full_name, updates, pusher)`` -- ``updates`` a list of ``(ref, before,
after)`` with ``"0" * 40`` for a created or deleted ref -- so a test can send the ``push`` and
``pull_request`` ``synchronize`` deliveries GitHub would send.

Refs served: ``refs/heads/BRANCH`` for every branch (except the head branch of a fork PR,
which lives in the fork on GitHub) and ``refs/pull/N/head`` for every pull request; ``HEAD``
points at the default branch.

Authentication is GitHub's for HTTPS git: HTTP Basic with the token as password (user name
``x-access-token`` or anything else); every token the REST side accepts is accepted, and an
unauthenticated or unknown token gets 401 with ``WWW-Authenticate: Basic`` (the double treats
every repository as private).  Pushes are attributed to the token's login
(``GitHubDouble.app_login`` for installation tokens); a token of an App registered through the
double's manifest flow may push only when the App was granted Contents write (else 403, as
GitHub answers).

``GitHubDouble.inject`` works on git paths too (``double.inject("GET", "/o/r.git/*", 500)``):
the request is answered with the status before git runs.

Every git request is logged in ``GitHubDouble.calls`` with the operation ``git-info-refs``,
``git-upload-pack`` or ``git-receive-pack`` (only a successful receive-pack counts as a write).
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import re
import shutil
import subprocess
import tempfile
import threading
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any
from urllib.parse import parse_qs, unquote, urlsplit

if TYPE_CHECKING:
    from http.server import BaseHTTPRequestHandler

    from .server import GitHubDouble, RepoState

ZERO = "0" * 40
GIT_PATH = re.compile(
    r"^/(?P<owner>[A-Za-z0-9_.-]+)/(?P<name>[A-Za-z0-9_.-]+?)(?:\.git)?/"
    r"(?P<rest>info/refs|git-upload-pack|git-receive-pack)$")
EPOCH = 1_700_000_000
"""Commit times of the double's own commits: this epoch plus one second per commit, so SHAs
are reproducible within a test and two commits never share one."""
IDENT = "GitHub double <double@example.invalid>"
CHUNK = 1 << 20
REPACK_BYTES = 16 << 20
"""New loose content (bytes) above which the double packs a repository after writing it."""


def blob_header(kind: str, size: int) -> bytes:
    """The git object header ``"KIND SIZE\\0"``."""
    return f"{kind} {size}\0".encode()


def object_sha(kind: str, data: bytes) -> str:
    """The git (SHA-1) object name of ``data`` as a ``kind`` object."""
    h = hashlib.sha1(blob_header(kind, len(data)))
    h.update(data)
    return h.hexdigest()


def _git(path: Path, *args: str, stdin: bytes | None = None, timeout: float = 120) -> bytes:
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
           "HOME": str(path), "LC_ALL": "C"}
    res = subprocess.run(["git", "-C", str(path), *args], input=stdin, capture_output=True,
                         env=env, timeout=timeout, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)}: {res.stderr.decode(errors='replace')}")
    return res.stdout


@dataclass
class RepoGit:
    """The git side of one repository: objects made here (``objects``: SHA -> (kind,
    content)), commit parents, which objects and refs are on disk."""

    path: Path
    objects: dict[str, tuple[str, bytes]] = field(default_factory=dict)
    parents: dict[str, list[str]] = field(default_factory=dict)
    blob_ids: dict[int, tuple[bytes, str]] = field(default_factory=dict)
    written: set[str] = field(default_factory=set)
    disk_refs: dict[str, str] = field(default_factory=dict)
    created: bool = False


class GitHTTP:
    """The double's git side (see the module docstring); one per :class:`GitHubDouble`,
    made again by its ``reset()``."""

    def __init__(self, double: GitHubDouble) -> None:
        self.double = double
        self.root = Path(tempfile.mkdtemp(prefix="github-double-git-"))
        self.repos: dict[str, RepoGit] = {}
        self._times = itertools.count(1)

    def close(self) -> None:
        """Remove the bare repositories."""
        shutil.rmtree(self.root, ignore_errors=True)

    def state(self, full_name: str) -> RepoGit:
        """The git state of ``full_name`` (made on first use)."""
        st = self.repos.get(full_name)
        if st is None:
            st = RepoGit(self.root / f"{full_name}.git")
            self.repos[full_name] = st
        return st

    # ------------------------------------------------------------------------ objects

    def _put(self, st: RepoGit, kind: str, data: bytes) -> str:
        sha = object_sha(kind, data)
        st.objects.setdefault(sha, (kind, data))
        return sha

    def _blob(self, st: RepoGit, data: bytes) -> str:
        hit = st.blob_ids.get(id(data))
        if hit is not None and hit[0] is data:
            return hit[1]
        sha = self._put(st, "blob", data)
        st.blob_ids[id(data)] = (data, sha)  # holds ``data``: its id cannot be reused
        return sha

    def _tree(self, st: RepoGit, files: dict[str, bytes]) -> str:
        root: dict[str, Any] = {}
        for path, data in files.items():
            node = root
            parts = path.split("/")
            for p in parts[:-1]:
                node = node.setdefault(p, {})
            node[parts[-1]] = data

        def write(node: dict[str, Any]) -> str:
            entries = []
            for name, v in node.items():
                if isinstance(v, dict):
                    entries.append((name + "/", b"40000 " + name.encode() + b"\0"
                                    + bytes.fromhex(write(v))))
                else:
                    entries.append((name, b"100644 " + name.encode() + b"\0"
                                    + bytes.fromhex(self._blob(st, v))))
            # git orders entries by name, a tree's name compared as if it ended in "/"
            entries.sort(key=lambda e: e[0].encode())
            return self._put(st, "tree", b"".join(e[1] for e in entries))

        return write(root)

    def tree_sha(self, full_name: str, files: dict[str, bytes]) -> str:
        """The git tree SHA of ``files`` (path -> bytes, relative to the tree)."""
        return self._tree(self.state(full_name), files)

    def commit(self, full_name: str, files: dict[str, bytes], parent: str | None,
               message: str) -> str:
        """Make the commit of ``files`` (path -> bytes) over ``parent``; returns its SHA."""
        st = self.state(full_name)
        tree = self._tree(st, files)
        when = EPOCH + next(self._times)
        lines = [f"tree {tree}"]
        if parent:
            lines.append(f"parent {parent}")
        lines += [f"author {IDENT} {when} +0000", f"committer {IDENT} {when} +0000", "",
                  message]
        sha = self._put(st, "commit", ("\n".join(lines) + "\n").encode())
        st.parents[sha] = [parent] if parent else []
        return sha

    # ------------------------------------------------------------------- disk sync

    def _wanted_refs(self, repo: RepoState) -> dict[str, str]:
        fork_heads = {p.head_ref for p in repo.pulls.values()
                      if p.head_repo not in (None, repo.full_name)}
        refs = {f"refs/heads/{b}": sha for b, sha in repo.refs.items() if b not in fork_heads}
        refs.update({f"refs/pull/{n}/head": p.head_sha for n, p in repo.pulls.items()})
        return refs

    def sync_to_disk(self, repo: RepoState) -> Path:
        """Write the objects and refs of ``repo`` the bare repository lacks; returns its
        path.  Call with the double's lock held."""
        st = self.state(repo.full_name)
        if not st.created:
            st.path.parent.mkdir(parents=True, exist_ok=True)
            subprocess.run(["git", "init", "--bare", "-q", str(st.path)], check=True,
                           capture_output=True, env={**os.environ, "GIT_CONFIG_NOSYSTEM": "1"})
            _git(st.path, "config", "http.receivepack", "true")
            _git(st.path, "config", "uploadpack.allowAnySHA1InWant", "true")
            # partial fetches (--filter=blob:none), as github.com serves them
            _git(st.path, "config", "uploadpack.allowFilter", "true")
            _git(st.path, "config", "receive.denyNonFastForwards", "false")
            st.created = True
        fresh = 0
        for sha, (kind, data) in st.objects.items():
            if sha in st.written:
                continue
            d = st.path / "objects" / sha[:2]
            d.mkdir(exist_ok=True)
            tmp = d / f".tmp-{sha[2:]}"
            tmp.write_bytes(zlib.compress(blob_header(kind, len(data)) + data, 1))
            tmp.replace(d / sha[2:])
            st.written.add(sha)
            fresh += len(data)
        if fresh > REPACK_BYTES:
            # like GitHub's servers, keep large content packed: every fetch then reuses the
            # compressed objects instead of deflating them again
            _git(st.path, "repack", "-a", "-d", "-q", timeout=1800)
        want = self._wanted_refs(repo)
        lines = [f"update {r} {sha}" for r, sha in want.items() if st.disk_refs.get(r) != sha]
        lines += [f"delete {r}" for r in st.disk_refs if r not in want]
        if lines:
            _git(st.path, "update-ref", "--stdin", stdin=("\n".join(lines) + "\n").encode())
            st.disk_refs = dict(want)
        _git(st.path, "symbolic-ref", "HEAD", f"refs/heads/{repo.default_branch}")
        return st.path

    def import_push(self, repo: RepoState) -> list[tuple[str, str, str]]:
        """Read what a push changed on disk into the REST state (see the module docstring);
        returns ``(ref, before, after)`` per moved branch.  Call with the lock held."""
        st = self.state(repo.full_name)
        out = _git(st.path, "for-each-ref", "--format=%(refname) %(objectname)", "refs/heads")
        now = dict(line.split(" ", 1) for line in out.decode().splitlines() if line)
        before = {r: s for r, s in st.disk_refs.items() if r.startswith("refs/heads/")}
        updates = []
        for ref in sorted(set(now) | set(before)):
            old, new = before.get(ref, ZERO), now.get(ref, ZERO)
            if old == new:
                continue
            branch = ref[len("refs/heads/"):]
            if new == ZERO:
                repo.refs.pop(branch, None)
            else:
                self._import_commits(repo, st, new)
                repo.refs[branch] = new
                for p in repo.pulls.values():
                    if p.head_repo == repo.full_name and p.head_ref == branch and \
                            p.state == "open":
                        p.head_sha = new
                        self.double._diff(repo, p)
            updates.append((ref, old, new))
        if updates:
            # what is on disk now: the pushed heads, the rest as written before
            st.disk_refs = {r: s for r, s in st.disk_refs.items()
                            if not r.startswith("refs/heads/")} | now
            self.sync_to_disk(repo)  # refs/pull/N/head follow their PRs
        return updates

    def _import_commits(self, repo: RepoState, st: RepoGit, tip: str) -> None:
        listing = _git(st.path, "rev-list", "--parents", tip).decode().split("\n")
        for line in listing:
            if not line:
                continue
            sha, *parents = line.split()
            if sha in repo.trees:
                continue
            st.parents[sha] = parents
            entries = _git(st.path, "ls-tree", "-r", "-z", "--full-tree", sha).split(b"\0")
            files: dict[str, str] = {}
            for e in entries:
                if not e:
                    continue
                meta, path = e.split(b"\t", 1)
                mode, kind, oid = meta.decode().split()
                if kind == "blob":
                    files[path.decode("utf-8", "surrogateescape")] = oid
            need = sorted({o for o in files.values() if o not in st.objects})
            blobs = _cat_batch(st.path, need)
            for oid, data in blobs.items():
                st.objects[oid] = ("blob", data)
                st.written.add(oid)
            repo.trees[sha] = {p: st.objects[o][1] for p, o in files.items()}
            st.written.add(sha)

    # ----------------------------------------------------------------------- serving

    @staticmethod
    def matches(raw_path: str) -> bool:
        """True for a git smart-HTTP path (``/OWNER/NAME.git/info/refs`` and friends)."""
        return GIT_PATH.match(urlsplit(raw_path).path) is not None

    def _login(self, headers: dict[str, str]) -> str | None:
        scheme, _, value = headers.get("authorization", "").partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            _user, _, token = base64.b64decode(value).decode().partition(":")
        except (ValueError, UnicodeDecodeError):
            return None
        if token not in self.double.tokens:
            return None
        req_headers = {"authorization": f"token {token}"}
        from .server import Request

        return self.double._author(Request("POST", "", {}, req_headers, b""))[0]

    def _may_push(self, headers: dict[str, str]) -> bool:
        """False for a token minted for an App registered here (manifest flow) whose
        permissions lack Contents write; other tokens may push."""
        try:
            token = base64.b64decode(headers.get("authorization", "").partition(" ")[2]
                                     ).decode().partition(":")[2]
        except (ValueError, UnicodeDecodeError):
            return False
        app_id = self.double.token_apps.get(token)
        if app_id is None:
            return True
        return self.double.apps[app_id]["permissions"].get("contents") == "write"

    def serve(self, h: BaseHTTPRequestHandler) -> None:
        """Answer one git smart-HTTP request on handler ``h`` (runs ``git http-backend``)."""
        split = urlsplit(h.path)
        m = GIT_PATH.match(split.path)
        assert m is not None
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        headers = {k.lower(): v for k, v in h.headers.items()}
        full = f"{m.group('owner')}/{m.group('name')}"
        rest = m.group("rest")
        service = query.get("service", "") if rest == "info/refs" else rest
        op = "git-info-refs" if rest == "info/refs" else rest
        body = _read_body(h)
        try:
            login = self._login(headers)
            if login is None:
                self._log(h.command, split.path, query, op, 401)
                return _answer(h, 401, {"WWW-Authenticate": 'Basic realm="GitHub"',
                                        "Content-Type": "text/plain"},
                               b"Invalid username or token.\n")
            if "git-receive-pack" in (service, rest) and not self._may_push(headers):
                # GitHub: a push needs Contents write; an App registered here has what its
                # manifest asked for
                self._log(h.command, split.path, query, op, 403)
                return _answer(h, 403, {"Content-Type": "text/plain"},
                               f"Permission to {full}.git denied to {login}.\n".encode())
            with self.double._lock:
                fault = self.double._fault_for(h.command, split.path)
                if fault is not None:  # GitHubDouble.inject("POST", "/o/r.git/*", 500)
                    self._log(h.command, split.path, query, op, fault.status)
                    return _answer(h, fault.status, {"Content-Type": "text/plain"},
                                   (fault.message or "injected failure").encode() + b"\n")
                repo = self.double.repos.get(full)
                if repo is None:
                    self._log(h.command, split.path, query, op, 404)
                    return _answer(h, 404, {"Content-Type": "text/plain"},
                                   b"Repository not found.\n")
                path = self.sync_to_disk(repo)
            status = self._backend(h, path.relative_to(self.root).as_posix(), rest, split.query,
                                   headers, body, login)
        finally:
            body.close()
        updates: list[tuple[str, str, str]] = []
        if service == "git-receive-pack" and rest != "info/refs" and status == 200:
            with self.double._lock:
                updates = self.import_push(self.double.repos[full])
        self._log(h.command, split.path, query, op, status,
                  write=bool(updates))
        for hook in list(self.double.push_hooks) if updates else []:
            threading.Thread(target=hook, args=(self.double, full, updates, login),
                             daemon=True).start()

    def _backend(self, h: BaseHTTPRequestHandler, repo_path: str, rest: str, query: str,
                 headers: dict[str, str], body: IO[bytes], login: str) -> int:
        size = body.seek(0, os.SEEK_END)
        body.seek(0)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
            "HOME": str(self.root), "GIT_PROJECT_ROOT": str(self.root),
            "GIT_HTTP_EXPORT_ALL": "1", "PATH_INFO": f"/{repo_path}/{rest}",
            "REQUEST_METHOD": h.command, "QUERY_STRING": query, "REMOTE_USER": login,
            "REMOTE_ADDR": "127.0.0.1", "CONTENT_TYPE": headers.get("content-type", ""),
            "CONTENT_LENGTH": str(size), "GIT_PROTOCOL": headers.get("git-protocol", ""),
        }
        if headers.get("content-encoding"):
            env["HTTP_CONTENT_ENCODING"] = headers["content-encoding"]
        proc = subprocess.Popen(["git", "http-backend"], stdin=body, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)
        assert proc.stdout is not None
        try:
            status, out_headers, first = _cgi_headers(proc.stdout)
            h.send_response(status)
            for k, v in out_headers:
                h.send_header(k, v)
            h.send_header("Connection", "close")
            h.end_headers()
            h.close_connection = True
            if first:
                h.wfile.write(first)
            while chunk := proc.stdout.read(CHUNK):
                h.wfile.write(chunk)
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            proc.kill()
            status = 499
        finally:
            proc.stdout.close()
            err = proc.stderr.read() if proc.stderr else b""
            if proc.stderr:
                proc.stderr.close()
            rc = proc.wait()
        if rc != 0 and status == 200:
            status = 500
            self.double.git_errors.append(err.decode(errors="replace"))
        return status

    def _log(self, method: str, path: str, query: dict[str, str], op: str, status: int,
             write: bool = False) -> None:
        from .server import Call

        with self.double._lock:
            self.double.calls.append(Call(method, unquote(path), query, op, status, None, None,
                                          None, git_write=write))


def _read_body(h: BaseHTTPRequestHandler) -> IO[bytes]:
    """The request body (``Content-Length`` or chunked) spooled to a temporary file."""
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=8 << 20)  # noqa: SIM115
    if h.headers.get("Transfer-Encoding", "").lower() == "chunked":
        while True:
            line = h.rfile.readline(1024)
            n = int(line.split(b";")[0].strip() or b"0", 16)
            if n == 0:
                while h.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass
                break
            left = n
            while left:
                chunk = h.rfile.read(min(left, CHUNK))
                if not chunk:
                    raise ConnectionError("request body ended early")
                spool.write(chunk)
                left -= len(chunk)
            h.rfile.readline(8)
    else:
        left = int(h.headers.get("Content-Length") or 0)
        while left:
            chunk = h.rfile.read(min(left, CHUNK))
            if not chunk:
                raise ConnectionError("request body ended early")
            spool.write(chunk)
            left -= len(chunk)
    spool.seek(0)
    return spool


def _cgi_headers(out: IO[bytes]) -> tuple[int, list[tuple[str, str]], bytes]:
    """Status, headers and the first body bytes of a CGI response."""
    buf = b""
    while b"\r\n\r\n" not in buf and b"\n\n" not in buf:
        chunk = out.read1(65536) if hasattr(out, "read1") else out.read(65536)
        if not chunk:
            break
        buf += chunk
    sep = b"\r\n\r\n" if b"\r\n\r\n" in buf else b"\n\n"
    head, _, rest = buf.partition(sep)
    status = 200
    headers = []
    for line in head.decode("latin-1").splitlines():
        k, _, v = line.partition(":")
        if k.lower() == "status":
            status = int(v.strip().split()[0])
        elif k:
            headers.append((k.strip(), v.strip()))
    return status, headers, rest


def _answer(h: BaseHTTPRequestHandler, status: int, headers: dict[str, str],
            data: bytes) -> None:
    h.send_response(status)
    for k, v in headers.items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(data)))
    h.end_headers()
    h.wfile.write(data)


def _cat_batch(path: Path, oids: list[str]) -> dict[str, bytes]:
    """Contents of blobs ``oids`` (``git cat-file --batch``)."""
    if not oids:
        return {}
    raw = _git(path, "cat-file", "--batch", stdin=("\n".join(oids) + "\n").encode(),
               timeout=600)
    out: dict[str, bytes] = {}
    pos = 0
    for oid in oids:
        nl = raw.index(b"\n", pos)
        head = raw[pos:nl].decode().split()
        size = int(head[2])
        out[oid] = raw[nl + 1: nl + 1 + size]
        pos = nl + 1 + size + 1
    return out
