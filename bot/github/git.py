"""Evidence through git: one bare mirror per repository in a cache folder, fetched over HTTPS
with the installation token, read from git objects without a checkout; and commits of
verified screen bundles, pushed back without force.

Why the git command line (real git) rather than a Python implementation such as dulwich: the
work here is pack transfer and object access on repositories of hundreds of megabytes.  git
resolves deltas and indexes packs in C on several threads (``index-pack``), speaks protocol
v2 with ref-prefix filtering (a fetch of one branch never lists every ref), checks what it
receives (``fetch.fsckObjects``), and is what GitHub's own servers are tested against; dulwich
does pack indexing and delta resolution largely in Python and would make the bot the slow
part of a review.  git is already a requirement of the runner and of ``campaign-bot check
--base`` (FROZEN_RECEIPT_CHANGED reads git objects the same way).

Nothing from the repository is executed and nothing is checked out:

* every command runs with a fresh environment (``GIT_CONFIG_NOSYSTEM=1``,
  ``GIT_CONFIG_GLOBAL=/dev/null``, no ``GIT_TRACE*``, no terminal prompt) and the settings of
  :data:`bot.github.gitcmd.SAFE_CONFIG` passed as ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/
  ``GIT_CONFIG_VALUE_n`` environment variables: ``core.hooksPath=/dev/null`` (no hook runs, not even
  ``reference-transaction``), ``protocol.allow=never`` with HTTPS alone allowed (plain HTTP only
  for a loopback address: the test suite's GitHub double), no credential helper, no redirects
  (``http.followRedirects=false``: the token is never sent to another host), no submodule
  recursion, no automatic gc, and ``fetch.fsckObjects`` (a tree with ``..`` or ``.git`` names is
  refused at fetch);
* the token travels only in ``http.<URL>.extraHeader`` (``Authorization: Basic
  base64(x-access-token:TOKEN)``, GitHub's form for installation tokens: GitHub Docs,
  "Authenticating as a GitHub App installation"), scoped to the one remote URL, in the child's
  environment: never on a command line (which ``ps`` shows to every user), never in a file,
  never in a log (error messages are scrubbed of it);
* files are read with ``git ls-tree -r -l -z`` and ``git cat-file --batch`` and written into a
  temporary directory by this module: no checkout, so no smudge or clean filter (Git LFS
  included), no ``.gitattributes`` and no symbolic link is ever acted on.  Symbolic links and
  submodules are listed as not verified; names with ``..``, ``.git`` or an absolute path are
  refused; Git LFS pointer files are recognised and reported as external (their SHA-256 and
  size recorded, the content not verifiable here);
* commits are built with plumbing (``hash-object --no-filters``, a throw-away index,
  ``write-tree``, ``commit-tree``) and pushed with ``git push`` of one ref, never forced: a
  branch that moved meanwhile rejects the push and the caller rebuilds on the new tip.

Limits: every git command is killed (with its children) after ``timeout_s``; a campaign
directory whose files add up to more than ``max_campaign_bytes`` is refused before anything is
written.  Both end in a :class:`GitError` whose message is one sentence for a check run.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import subprocess
import tempfile
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from bot.github.gitcmd import GitError, GitTimeout, error_message, git_env, kill_group, run_git
from bot.github.port import FileChange, GitRemote
from bot.github.tree import (
    LFS_POINTER_MAX_BYTES,
    LfsPointer,
    TreeEntry,
    human_size,
    left_on_server,
    parse_lfs_pointer,
    split_patches,
    twin_paths,
    unsafe_path,
)

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT_S = 600.0
"""Seconds one git command may run (a first fetch of a large campaign repository)."""
DEFAULT_MAX_CAMPAIGN_BYTES = 2 * 1024**3
"""Largest campaign directory read (bytes, committed files only): 2 GiB, the size of the
largest screen bundle the bot unpacks from an artifact."""
LOCAL_PREFIX = "refs/campaign-bot/"
"""Where fetched refs are kept in a mirror: ``refs/heads/main`` -> ``refs/campaign-bot/heads/
main``, ``refs/pull/7/head`` -> ``refs/campaign-bot/pull/7/head``."""
REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
CHUNK = 1 << 20
MAX_PACKS = 50
"""Packs a mirror may hold before they are merged into one."""


# ------------------------------------------------------------------------------ errors
# (GitError and GitTimeout, of every git command, are bot.github.gitcmd's)


class CampaignTooLarge(GitError):
    """A campaign directory is over the per-campaign limit; nothing was written."""


class PushRejected(GitError):
    """The remote refused the push because the branch moved (not a fast-forward)."""


class FrozenPathConflict(GitError):
    """A path the bot would commit already exists with other content (frozen evidence is
    never rewritten)."""


# ------------------------------------------------------------------------ value types


@dataclass
class Materialised:
    """What :meth:`GitMirrors.materialise` wrote: ``files`` and ``bytes`` written, ``lfs``
    pointers (not written: external), and ``skipped`` ``(path, why)`` (not written)."""

    files: int = 0
    bytes: int = 0
    lfs: list[LfsPointer] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)


@dataclass(frozen=True)
class PushOutcome:
    """A push that landed: ``sha`` is the branch tip now; ``created`` when the branch is new;
    ``confirmed`` when the push itself reported an error but a lookup found the branch at
    ``sha`` (the write happened)."""

    sha: str
    created: bool = False
    confirmed: bool = False


# ---------------------------------------------------------------------------- helpers


def git_base_url(api_url: str) -> str:
    """The web (and git) base URL for a REST base URL: ``https://api.github.com`` ->
    ``https://github.com``; ``https://HOST/api/v3`` (GitHub Enterprise Server) ->
    ``https://HOST``; anything else (a local double) unchanged."""
    u = api_url.rstrip("/")
    if u == "https://api.github.com":
        return "https://github.com"
    if u.endswith("/api/v3"):
        return u[: -len("/api/v3")]
    return u


def remote_url(api_url: str, repo: str) -> str:
    """The HTTPS clone URL of ``repo`` (``owner/name``) for a REST base URL."""
    return f"{git_base_url(api_url)}/{repo}.git"


def _stdin_paths(files: Sequence[Path]) -> bytes:
    """``files`` one per line for ``git hash-object --stdin-paths``; ValueError for a name
    holding CR or LF (git would read it as another path, or two)."""
    names = [os.fsencode(f) for f in files]
    bad = next((f for f, n in zip(files, names, strict=True) if b"\n" in n or b"\r" in n),
               None)
    if bad is not None:
        raise ValueError(f"{str(bad)!r}: a line break in a file name; not hashed")
    return b"".join(n + b"\n" for n in names)


def _local(ref: str) -> str:
    if not ref.startswith("refs/"):
        raise ValueError(f"not a full ref name: {ref!r}")
    return LOCAL_PREFIX + ref[len("refs/"):]


# ----------------------------------------------------------------------------- mirrors


class GitMirrors:
    """Bare mirrors of repositories under ``cache_dir`` (one ``OWNER/NAME.git`` each).

    ``timeout_s``: seconds one git command may run; ``max_campaign_bytes``: largest campaign
    directory :meth:`materialise` writes; ``git``: the git executable; ``identity``: ``(name,
    email)`` of the commits this bot makes.  Methods are blocking (run them in a thread from an
    event loop); one repository's mirror is used by one caller at a time (a thread lock and an
    ``flock`` on the mirror, so a second process sharing the cache waits too).
    """

    def __init__(self, cache_dir: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S,
                 max_campaign_bytes: int = DEFAULT_MAX_CAMPAIGN_BYTES, git: str = "git",
                 identity: tuple[str, str] = ("campaign-bot[bot]",
                                              "campaign-bot[bot]@users.noreply.github.com"),
                 ) -> None:
        self.cache_dir = Path(cache_dir)
        self.timeout_s = timeout_s
        self.max_campaign_bytes = max_campaign_bytes
        self.git = git
        self.identity = identity
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.commands = 0
        """git commands run (for benchmarks)."""

    # ------------------------------------------------------------------ plumbing

    def path(self, repo: str) -> Path:
        """The bare mirror of ``repo`` (``owner/name``).  Raises ValueError for a name that
        is not a GitHub repository name."""
        if not REPO_NAME.fullmatch(repo) or any(p in (".", "..") for p in repo.split("/")):
            raise ValueError(f"not a repository name: {repo!r}")
        return self.cache_dir / "repos" / f"{repo}.git"

    @contextlib.contextmanager
    def locked(self, repo: str) -> Iterator[Path]:
        """Hold ``repo``'s mirror (made on first use) for one caller; yields its path."""
        path = self.path(repo)
        with self._guard:
            lock = self._locks.setdefault(repo, threading.Lock())
        with lock:
            if not (path / "HEAD").exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                self._run(["init", "--bare", "--quiet", str(path)], cwd=None)
            with open(path / "campaign-bot.lock", "a+b") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)
                try:
                    yield path
                finally:
                    fcntl.flock(fh, fcntl.LOCK_UN)

    def _run(self, args: Sequence[str], *, cwd: Path | None, remote: GitRemote | None = None,
             stdin: bytes | None = None, extra_env: dict[str, str] | None = None,
             check: bool = True, timeout: float | None = None) -> subprocess.CompletedProcess[
                 bytes]:
        """Run ``git [-C cwd] ARGS`` (:func:`bot.github.gitcmd.run_git`, counted); raises
        :class:`GitTimeout` or, with ``check``, :class:`GitError` on a non-zero exit."""
        self.commands += 1
        return run_git(self.git, args, cwd=cwd, env=self._env(remote, extra_env),
                       remote=remote, stdin=stdin, check=check,
                       timeout=self.timeout_s if timeout is None else timeout)

    def _env(self, remote: GitRemote | None, extra: dict[str, str] | None = None
             ) -> dict[str, str]:
        return git_env(self.cache_dir / "home", remote, extra)

    # ------------------------------------------------------------------- fetching

    def fetch(self, remote: GitRemote, repo: str, refs: Sequence[str],
              shas: Sequence[str] = (), *, blobs: bool = True, backfill: bool = True
              ) -> dict[str, str]:
        """Fetch remote ``refs`` (full names: ``refs/heads/main``, ``refs/pull/7/head``) and
        commits ``shas`` into ``repo``'s mirror in one ``git fetch``; returns ``ref -> commit
        SHA`` as fetched.  With ``blobs=False`` only commits and trees come (a partial fetch,
        ``--filter=blob:none``): a pull request's files stay on the server until
        :meth:`fetch_blobs` asks for those of its campaign folders, so a huge file beside them
        costs no transfer (a server without filter support sends everything, as git does).
        ``backfill``: a full fetch also brings the files of a fetched commit first fetched
        partially (:meth:`_backfill`); off where only trees are read (committing evidence).
        Raises :class:`GitError` naming what failed (a ref that does not exist,
        authentication, the network) or :class:`GitTimeout`."""
        specs = [f"+{r}:{_local(r)}" for r in refs] + list(shas)
        with self.locked(repo) as path:
            if specs:
                self._run(["fetch", "--quiet", "--no-tags", "--no-recurse-submodules",
                           "--no-write-fetch-head", "--no-auto-gc",
                           *([] if blobs else ["--filter=blob:none"]), remote.url, *specs],
                          cwd=path, remote=remote)
                if blobs and backfill and any((path / "objects" / "pack").glob("*.promisor")):
                    self._backfill(path, remote, [_local(r) for r in refs] + list(shas))
                self._maybe_repack(path)
            return self._local_refs(path, refs)

    def _backfill(self, path: Path, remote: GitRemote, tips: Sequence[str]) -> None:
        """Fetch the file contents of ``tips``' trees that a full fetch did not send: the
        server leaves out every object reachable from a commit the mirror already has, and a
        commit first fetched partially (a pull request's head, later merged by fast-forward
        or pushed as a branch) has its files on the server only."""
        have = self._run(["for-each-ref", "--format=%(objectname)", *tips], cwd=path).stdout
        commits = [t for t in tips if "/" not in t] + have.decode().split()
        listing = self._run(["rev-list", "--objects", "--no-walk", "--missing=print",
                             *commits], cwd=path).stdout.decode() if commits else ""
        self._fetch_oids(path, remote, sorted({ln[1:].split()[0] for ln in listing.split("\n")
                                               if ln.startswith("?")}))

    def _fetch_oids(self, path: Path, remote: GitRemote, oids: Sequence[str]) -> None:
        """Fetch objects ``oids`` by id in one ``git fetch --stdin`` (what git's own
        partial-clone backfill asks; GitHub serves it)."""
        if oids:
            self._run(["fetch", "--quiet", "--no-tags", "--no-recurse-submodules",
                       "--no-write-fetch-head", "--no-auto-gc", "--filter=blob:none",
                       "--stdin", remote.url], cwd=path, remote=remote,
                      stdin=("\n".join(oids) + "\n").encode())

    def fetch_blobs(self, remote: GitRemote, repo: str, commit: str,
                    directories: Sequence[str]) -> int:
        """Fetch the file contents under ``directories`` at ``commit`` that a partial
        :meth:`fetch` (``blobs=False``) left on the server, by object id in one ``git fetch
        --stdin`` (what git's own partial-clone backfill asks; GitHub serves it); returns the
        number of blobs named.  Nothing else of the commit is fetched.  Raises
        :class:`GitError` or :class:`GitTimeout`."""
        if not directories:
            return 0
        with self.locked(repo) as path:
            listing = self._run(["ls-tree", "-r", "-z", commit, "--", *directories],
                                cwd=path).stdout
            oids = sorted({meta.split()[2].decode() for rec in listing.split(b"\0") if rec
                           for meta in [rec.partition(b"\t")[0]]
                           if meta.split()[1:2] == [b"blob"]})
            self._fetch_oids(path, remote, oids)
        return len(oids)

    def forget_pull(self, repo: str, number: int) -> bool:
        """Drop closed PR ``number``'s head from ``repo``'s mirror: its ref
        (``refs/pull/N/head``) is deleted, then ``git repack -a -d`` rewrites the packs
        without the objects no kept ref reaches and ``git prune --expire=now`` removes such
        loose objects (a fork's push stays on disk otherwise: nothing else prunes).  Returns
        False when the mirror does not exist or held no such ref.  Raises :class:`GitError`."""
        path = self.path(repo)
        if not path.is_dir():
            return False
        ref = _local(f"refs/pull/{int(number)}/head")
        with self.locked(repo) as path:
            if self._run(["for-each-ref", "--format=%(refname)", ref],
                         cwd=path).stdout.strip() == b"":
                return False
            self._run(["update-ref", "-d", ref], cwd=path)
            if any((path / "objects" / "pack").glob("*.promisor")):
                self._repack_reachable(path)
            else:
                self._run(["repack", "-a", "-d", "-q", "--no-write-bitmap-index"], cwd=path)
            self._run(["prune", "--expire=now"], cwd=path)
        return True

    def _repack_reachable(self, path: Path) -> None:
        """One pack of exactly the objects the mirror's refs reach, replacing every pack: what
        ``repack -a -d`` does, for a mirror holding partial fetches (``git repack`` keeps
        every object of a promisor pack, reachable or not, so a closed PR's head would stay).
        The new pack is marked a promisor pack: objects in it may name file contents that
        were left on the server."""
        pack_dir = path / "objects" / "pack"
        old = [p for p in pack_dir.iterdir() if p.name.startswith("pack-")]
        listing = self._run(["rev-list", "--objects", "--all", "--missing=allow-promisor"],
                            cwd=path).stdout
        oids = b"".join(line.split(b" ", 1)[0] + b"\n" for line in listing.splitlines()
                        if line)
        name = self._run(["pack-objects", "-q", "--missing=allow-promisor",
                          str(pack_dir / "pack")], cwd=path, stdin=oids).stdout.decode().strip()
        (pack_dir / f"pack-{name}.promisor").write_bytes(b"")
        for p in old:
            if not p.name.startswith(f"pack-{name}."):
                p.unlink(missing_ok=True)

    def _maybe_repack(self, path: Path) -> None:
        """Every fetch leaves a pack; past :data:`MAX_PACKS` they are merged into one
        (``git repack -a -d``; automatic gc is off, so this is the mirror's only upkeep)."""
        packs = list((path / "objects" / "pack").glob("*.pack"))
        if len(packs) > MAX_PACKS:
            self._run(["repack", "-a", "-d", "-q", "--no-write-bitmap-index"], cwd=path)

    def _local_refs(self, path: Path, refs: Sequence[str]) -> dict[str, str]:
        out = self._run(["for-each-ref", "--format=%(refname) %(objectname)", LOCAL_PREFIX],
                        cwd=path).stdout.decode()
        have = dict(line.split(" ", 1) for line in out.splitlines() if line)
        return {r: have[_local(r)] for r in refs if _local(r) in have}

    def remote_ref(self, remote: GitRemote, repo: str, ref: str) -> str | None:
        """The commit ``ref`` points at on the remote now (``git ls-remote``), None when
        absent."""
        with self.locked(repo) as path:
            out = self._run(["ls-remote", remote.url, ref], cwd=path,
                            remote=remote).stdout.decode()
        for line in out.splitlines():
            sha, _, name = line.partition("\t")
            if name == ref:
                return sha
        return None

    def rev_list(self, repo: str, good: str, bad: str) -> list[str]:
        """Descendants of ``good`` on ``bad``'s first-parent line up to ``bad``, oldest first
        (empty when ``good`` is no ancestor of ``bad``).  Raises :class:`GitError`."""
        with self.locked(repo) as path:
            return self._run(["rev-list", "--reverse", "--first-parent", "--ancestry-path",
                              f"{good}..{bad}"], cwd=path).stdout.decode().split()

    def has_commit(self, repo: str, sha: str) -> bool:
        """True when the mirror holds commit ``sha``."""
        with self.locked(repo) as path:
            res = self._run(["cat-file", "-e", f"{sha}^{{commit}}"], cwd=path, check=False)
        return res.returncode == 0

    # -------------------------------------------------------------------- reading

    def tree_sha(self, repo: str, commit: str, directory: str) -> str | None:
        """The git tree SHA of ``directory`` at ``commit`` (it changes whenever anything
        below it changes), None when absent or not a directory."""
        spec = f"{commit}^{{tree}}" if directory in ("", ".") else f"{commit}:{directory}"
        with self.locked(repo) as path:
            res = self._run(["rev-parse", "--verify", "--quiet", spec], cwd=path, check=False)
            if res.returncode != 0:
                return None
            sha = res.stdout.decode().strip()
            kind = self._run(["cat-file", "-t", sha], cwd=path).stdout.decode().strip()
        return sha if kind == "tree" else None

    def ls_tree(self, repo: str, commit: str, directory: str) -> list[TreeEntry]:
        """Every file, link and submodule below ``directory`` at ``commit`` (recursive),
        paths relative to ``directory``; [] when absent."""
        with self.locked(repo) as path:
            return self._ls_tree(path, commit, directory)

    def _ls_tree(self, path: Path, commit: str, directory: str) -> list[TreeEntry]:
        d = directory.strip("/")
        d = "" if d == "." else d
        args = ["ls-tree", "-r", "-l", "-z", "--full-tree", commit]
        if d:
            args += ["--", f"{d}/"]
        res = self._run(args, cwd=path, check=False)
        if res.returncode != 0:
            raise GitError(f"cannot list {d or 'the repository'} at {commit[:12]}: "
                           f"{error_message(res.stderr, None)}")
        out = []
        for rec in res.stdout.split(b"\0"):
            if not rec:
                continue
            meta, _, raw = rec.partition(b"\t")
            mode, _kind, sha, size = meta.decode().split()
            name = os.fsdecode(raw)
            rel = name[len(d) + 1:] if d else name
            out.append(TreeEntry(rel, mode, sha, int(size) if size != "-" else 0))
        return out

    def materialise(self, repo: str, commit: str, directory: str, dest: Path, *,
                    max_bytes: int | None = None, suffixes: tuple[str, ...] | None = None,
                    ) -> Materialised:
        """Write the files below ``directory`` at ``commit`` into ``dest`` from git objects
        (see the module docstring); ``suffixes`` limits it to names ending so.  Raises
        :class:`CampaignTooLarge` (nothing written) when the files add up to more than
        ``max_bytes`` (default ``max_campaign_bytes``), :class:`GitError`/:class:`GitTimeout`
        when git fails."""
        limit = self.max_campaign_bytes if max_bytes is None else max_bytes
        out = Materialised()
        with self.locked(repo) as path:
            entries = self._ls_tree(path, commit, directory)
            todo: list[TreeEntry] = []
            room = 4096 - len(os.fsencode(str(dest.absolute()))) - 1  # PATH_MAX under dest
            for e in entries:
                why = unsafe_path(e.path, max_path_bytes=room)
                if why is not None:
                    out.skipped.append((e.path, f"not written: {why}"))
                elif e.mode == "120000":
                    out.skipped.append((e.path, "symbolic link: not followed, not verified"))
                elif e.mode == "160000":
                    out.skipped.append((e.path, "submodule: not fetched, not verified"))
                elif not e.is_file:
                    out.skipped.append((e.path, f"git mode {e.mode}: not verified"))
                elif suffixes is None or e.path.endswith(suffixes):
                    todo.append(e)
            total = sum(e.size for e in todo)
            if total > limit:
                raise CampaignTooLarge(
                    f"{directory or 'the repository'} at {commit[:12]} holds {len(todo)} files "
                    f"of {human_size(total)}, over the per-campaign limit of {human_size(limit)} "
                    "(CAMPAIGN_BOT_GIT_MAX_CAMPAIGN_BYTES); nothing was checked")
            dest.mkdir(parents=True, exist_ok=True)
            for e, kind, data in self._cat(path, [x.sha for x in todo], todo, dest):
                if kind == "lfs":
                    ptr = parse_lfs_pointer(data)
                    assert ptr is not None
                    out.lfs.append(LfsPointer(e.path, ptr[0], ptr[1]))
                else:
                    out.files += 1
                    out.bytes += e.size
        return out

    def _cat(self, path: Path, shas: list[str], entries: list[TreeEntry], dest: Path
             ) -> Iterator[tuple[TreeEntry, str, bytes]]:
        """Stream blobs through one ``git cat-file --batch``: each small blob is checked for
        an LFS pointer (yielded as ``lfs`` with its bytes, not written); every other blob is
        written to ``dest / entry.path`` (yielded as ``file``)."""
        if not shas:
            return
        proc = subprocess.Popen([self.git, "-C", str(path), "cat-file", "--batch"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=self._env(None),
                                start_new_session=True)
        self.commands += 1
        assert proc.stdin is not None and proc.stdout is not None
        stdin = proc.stdin

        def feed() -> None:
            try:
                for sha in shas:
                    stdin.write(f"{sha}\n".encode())
                stdin.close()
            except (BrokenPipeError, OSError):
                pass

        writer = threading.Thread(target=feed, daemon=True)
        writer.start()
        fired = threading.Event()

        def stop() -> None:
            fired.set()
            kill_group(proc)

        timer = threading.Timer(self.timeout_s, stop)
        timer.start()
        try:
            for e in entries:
                head = proc.stdout.readline().decode().split()
                if fired.is_set():
                    break
                if len(head) != 3 or head[1] != "blob":
                    raise GitError(f"git cat-file: object {e.sha[:12]} ({e.path}) is not a "
                                   f"readable blob: {' '.join(head) or 'no answer'}")
                size = int(head[2])
                target = dest / e.path
                if size < LFS_POINTER_MAX_BYTES:
                    data = _read_exact(proc.stdout, size)
                    proc.stdout.read(1)
                    if parse_lfs_pointer(data) is not None:
                        yield e, "lfs", data
                        continue
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(data)
                else:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with open(target, "wb") as fh:
                        left = size
                        while left:
                            chunk = proc.stdout.read(min(left, CHUNK))
                            if not chunk:
                                break
                            fh.write(chunk)
                            left -= len(chunk)
                    if left:
                        raise GitError(f"git cat-file ended early in {e.path}")
                    proc.stdout.read(1)
                yield e, "file", b""
        except GitError:
            if fired.is_set():
                raise GitTimeout(f"git cat-file took longer than {self.timeout_s:.0f} s and "
                                 "was stopped (CAMPAIGN_BOT_GIT_TIMEOUT_S)") from None
            raise
        finally:
            timer.cancel()
            if proc.poll() is None:
                kill_group(proc)  # all read (or given up): nothing of it is needed any more
            proc.stdout.close()
            if proc.stderr:
                proc.stderr.close()
        if fired.is_set():
            raise GitTimeout(f"git cat-file took longer than {self.timeout_s:.0f} s and was "
                             "stopped (CAMPAIGN_BOT_GIT_TIMEOUT_S)")

    def read_file(self, repo: str, commit: str, path: str, *, max_bytes: int = 16 << 20
                  ) -> bytes | None:
        """The bytes of file ``path`` at ``commit``, None when absent or not a file.  Raises
        :class:`GitError` when over ``max_bytes`` or :func:`left_on_server` (not absent)."""
        with self.locked(repo) as mirror:
            res = self._run(["cat-file", "-s", f"{commit}:{path}"], cwd=mirror, check=False)
            if res.returncode != 0:  # absent, unless the tree names it: left on the server
                left_on_server(self._run(["ls-tree", commit, "--", path], cwd=mirror,
                                         check=False).stdout, f"{path} at {commit[:12]}")
                return None
            size = int(res.stdout.decode().strip() or 0)
            if size > max_bytes:
                raise GitError(f"{path} at {commit[:12]} is {human_size(size)}, over "
                               f"{human_size(max_bytes)}")
            res = self._run(["cat-file", "blob", f"{commit}:{path}"], cwd=mirror, check=False)
        return res.stdout if res.returncode == 0 else None

    def changed_files(self, repo: str, base: str, head: str,
                      patch_dirs: Sequence[str] | None = None) -> list[FileChange]:
        """The files a pull request changes, as GitHub shows them: the diff from the merge
        base of ``base`` and ``head`` to ``head`` (``git diff --no-renames``, 3 lines of
        context, no external diff or textconv driver), with each file's hunks as ``patch``
        (None for a binary file).  With ``patch_dirs`` only files under those folders get a
        patch (the list of names reads trees only, so a file whose content a partial fetch
        left on the server is listed, never fetched)."""
        with self.locked(repo) as path:
            mb = self._run(["merge-base", base, head], cwd=path, check=False)
            start = mb.stdout.decode().strip() if mb.returncode == 0 else base
            common = ["diff", "--no-renames", "--no-ext-diff", "--no-textconv", "--no-color",
                      start, head]
            names = self._run([*common[:1], "--name-status", "-z", *common[1:]],
                              cwd=path).stdout.split(b"\0")
            statuses: list[tuple[str, str]] = []
            for i in range(0, len(names) - 1, 2):
                code, name = names[i].decode(), os.fsdecode(names[i + 1])
                statuses.append((name, {"A": "added", "D": "removed"}.get(code[:1],
                                                                          "modified")))
            only = [] if patch_dirs is None else ["--", *patch_dirs]
            diff = "" if patch_dirs is not None and not patch_dirs else self._run(
                [*common, "--unified=3", *only], cwd=path).stdout.decode("utf-8", "replace")
        patches = split_patches(diff)
        return [FileChange(name, status, patches.get(name) if status != "removed" else None)
                for name, status in statuses]

    # ------------------------------------------------------------------ committing

    def blob_shas(self, repo: str, files: Sequence[Path]) -> list[str]:
        """The git blob SHAs ``files`` would have (nothing written).  Raises ValueError for
        a file name holding CR or LF."""
        if not files:
            return []
        with self.locked(repo) as path:
            out = self._run(["hash-object", "--no-filters", "--stdin-paths"], cwd=path,
                            stdin=_stdin_paths(files)).stdout
        return out.decode().split()

    def commit_files(self, repo: str, parent: str | None, files: dict[str, Path],
                     message: str) -> str:
        """A new commit over ``parent`` (None: a root commit) that adds ``files`` (repository
        path -> local file; existing paths are replaced); returns its SHA.  Nothing is pushed.
        Raises ValueError for an unsafe repository path."""
        for rel in files:
            why = unsafe_path(rel)
            if why is not None:
                raise ValueError(f"{rel}: {why}")
        twins = twin_paths(files)
        if twins is not None:
            raise ValueError(twins)
        name, email = self.identity
        who = {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email,
               "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}
        order = sorted(files)
        with self.locked(repo) as path, tempfile.TemporaryDirectory(
                prefix="campaign-bot-index-") as tmp:
            index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            shas = self._run(["hash-object", "-w", "--no-filters", "--stdin-paths"], cwd=path,
                             stdin=_stdin_paths([files[r] for r in order])
                             ).stdout.decode().split()
            if parent:
                self._run(["read-tree", parent], cwd=path, extra_env=index)
            info = b"".join(b"100644 " + s.encode() + b"\t" + os.fsencode(r) + b"\0"
                            for r, s in zip(order, shas, strict=True))
            self._run(["update-index", "-z", "--index-info"], cwd=path, stdin=info,
                      extra_env=index)
            # --missing-ok: the parent's tree may name file contents a partial fetch left on
            # the server (a pull request's file outside the campaigns); they are kept as they
            # are, never fetched (the objects written here are checked by hash-object -w)
            tree = self._run(["write-tree", "--missing-ok"], cwd=path,
                             extra_env=index).stdout.decode().strip()
            args = ["commit-tree", tree, *(["-p", parent] if parent else []), "-F", "-"]
            return self._run(args, cwd=path, stdin=message.encode(),
                             extra_env=who).stdout.decode().strip()

    def push(self, remote: GitRemote, repo: str, sha: str, branch: str,
             *, expect: str | None) -> PushOutcome:
        """Push commit ``sha`` to ``refs/heads/BRANCH`` without force (``expect``: the tip the
        commit was built on, None for a new branch).  Before concluding that a failed push did
        not land, the branch is looked up (``git ls-remote``): found at ``sha``, the push
        counts.  Raises :class:`PushRejected` when the branch moved (rebuild on the new tip),
        :class:`GitError`/:class:`GitTimeout` otherwise."""
        ref = f"refs/heads/{branch}"
        try:
            with self.locked(repo) as path:
                res = self._run(["push", "--porcelain", "--no-verify",
                                 "--no-recurse-submodules", remote.url, f"{sha}:{ref}"],
                                cwd=path, remote=remote, check=False)
        except GitTimeout:
            res = None
        if res is not None and res.returncode == 0:
            return PushOutcome(sha, created=expect is None)
        # look it up before concluding: the push may have landed with its answer lost
        try:
            now = self.remote_ref(remote, repo, ref)
        except GitError:
            now = None
        if now == sha:
            return PushOutcome(sha, created=expect is None, confirmed=True)
        text = error_message(res.stderr + res.stdout, remote) if res is not None else \
            "timed out"
        if now != expect or "non-fast-forward" in text or "fetch first" in text:
            raise PushRejected(f"branch {branch} moved (now {str(now)[:12]}, built on "
                               f"{str(expect)[:12]}): {text}")
        raise GitError(f"git push to {branch} failed: {text}")


def _read_exact(fh: IO[bytes], n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = fh.read(n - len(buf))
        if not chunk:
            raise GitError("git cat-file ended early")
        buf += chunk
    return bytes(buf)


def sha256_file(path: Path) -> str:
    """SHA-256 hex of the file at ``path`` (read in 1 MiB chunks)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


__all__ = [
    "CampaignTooLarge", "FrozenPathConflict", "GitError", "GitMirrors", "GitRemote",
    "GitTimeout", "LfsPointer", "Materialised", "PushOutcome", "PushRejected", "TreeEntry",
    "git_base_url", "remote_url", "sha256_file",
]
