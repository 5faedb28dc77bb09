"""Digests (SHA-256, and the other BagIt algorithms) of many files at the machine's hashing
limit, in small, flat memory.

:class:`HashPool` keeps every core hashing until the last byte:

* one hashing thread per usable core (:func:`usable_cores`); ``hashlib`` (OpenSSL) releases
  the GIL while it digests a buffer longer than 2047 bytes (CPython's ``HASHLIB_GIL_MINSIZE``)
  and ``FileIO.readinto`` releases it during ``read(2)``, so the threads run on all cores
  at once, as far as one OpenSSL process per core would (``benchmarks/verify.py`` compares
  with two ``openssl dgst -sha256`` processes), though they hand the GIL to each other
  twice per read;
* or, for the files ``campaign-bot check`` finds listed in a bag's manifests before it has
  imported anything else (:mod:`evidence.launch`), one forked process per core with one
  reading thread each (:meth:`HashPool.hash_in_child`): no GIL to share with each other or
  with the main thread that imports and parses meanwhile;
* the largest waiting file is hashed first (a heap on size), also across batches submitted
  at different times, so the pool never ends on one big file with the other cores idle;
* files can be submitted while others hash: ``campaign-bot check`` submits the files the
  BagIt and SHA256SUMS manifests list as soon as those manifests are read, then parses and
  validates the JSON documents on the main thread while the pool hashes
  (:func:`evidence.manifest.verify_tree`);
* each thread owns one buffer (:func:`chunk_bytes`, 64 KiB), allocated once and refilled
  with ``readinto``: memory is ``threads x chunk`` whatever the file sizes (128 KiB on 2
  cores), never a whole file;
* a file is opened non-blocking and must be a regular file when opened (a FIFO swapped in
  after the tree walk is refused, never waited on), and read with
  ``POSIX_FADV_SEQUENTIAL`` read-ahead for cold caches.

* a file is read once for every algorithm its manifests need (a bag with ``manifest-md5.txt``
  and ``manifest-sha512.txt`` reads each payload file once and feeds both digests);
  MD5 and SHA-1 are created with ``usedforsecurity=False`` (they detect damage, not forgery,
  and FIPS-mode OpenSSL refuses them otherwise).

Unreadable files are results (the ``OSError``), not exceptions: one bad file never stops
the others.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import heapq
import io
import os
import pickle
import signal
import stat
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from types import TracebackType

ProgressFn = Callable[[int, int], None]
"""Progress callback ``(bytes_done, bytes_total)``, called from the hashing threads;
``bytes_total`` grows as files are submitted."""

CHUNK_BYTES = 64 << 10
"""Read size (64 KiB), chosen by measurement in a new process (the read-size sweep of
``benchmarks/verify.py``; machines and figures in docs/benchmarks.md).  On a 2-core AMD EPYC
virtual machine two threads reading 2 GiB from the page cache into 256 KiB to 4 MiB buffers
spent 1.3 to 1.5 s of system time and 1.5 s of wall, into 64 KiB buffers 0.27 s and 1.04 s,
less than two ``openssl dgst`` processes; on a 2-core Intel Xeon machine, hashing processes
of :meth:`HashPool.hash_in_child` spent the same CPU with 64 KiB to 1 MiB reads and the least
system time with 64 KiB (two threads of one process: 0.06 to 0.1 CPU s more with 64 KiB
than with 256 KiB).  16 KiB and 4 MiB cost more."""

MIN_CHUNK_BYTES = 16 << 10
"""Smallest read size (16 KiB), reached only on machines with more than 128 cores."""

BUFFER_BUDGET_BYTES = 8 << 20
"""Ceiling of all threads' buffers together (8 MiB): the chunk shrinks on many-core machines
(:func:`chunk_bytes`)."""

Result = tuple[str, int] | OSError
"""``(lowercase hex SHA-256, size in bytes)``, or the ``OSError`` that reading raised."""

DigestResult = tuple[dict[str, str], int] | OSError
"""``({algorithm: lowercase hex digest}, size in bytes)``, or the ``OSError`` that reading
raised."""

ALGORITHMS: dict[str, int] = {"md5": 32, "sha1": 40, "sha224": 56, "sha256": 64,
                              "sha384": 96, "sha512": 128}
"""Digest algorithms hashed here (the BagIt manifest algorithms, RFC 8493 2.4, as
``hashlib`` names them) and their hex digest lengths."""

WEAK_ALGORITHMS = frozenset({"md5", "sha1"})
"""Not collision-resistant: they detect damage, not forgery (RFC 8493 2.4 asks for SHA-512
or SHA-256); created with ``usedforsecurity=False``."""

SHA256 = ("sha256",)


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity, e.g. under ``taskset`` or a container
    cpuset), else ``os.cpu_count()``; at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def chunk_bytes(workers: int) -> int:
    """Read size for ``workers`` threads: :data:`CHUNK_BYTES`, shrunk so that all buffers fit
    :data:`BUFFER_BUDGET_BYTES`, never below :data:`MIN_CHUNK_BYTES`."""
    return max(MIN_CHUNK_BYTES, min(CHUNK_BYTES, BUFFER_BUDGET_BYTES // max(1, workers)))


def _as_path(p: str | os.PathLike[str]) -> Path:
    """``p`` as a :class:`~pathlib.Path`, itself when it is one (``Path(path)`` parses the
    path again: ``check`` passes each of its files several times)."""
    return p if isinstance(p, Path) else Path(p)


def inside(real: str, real_root: str) -> bool:
    """True when the resolved path ``real`` is ``real_root`` or lies below it (both
    absolute, symlinks resolved)."""
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def _opened_path(fd: int, path: str | os.PathLike[str]) -> str:
    """Where the open file ``fd`` really is: ``/proc/self/fd/FD`` on Linux (the file that was
    opened, whatever was renamed or swapped on the way), else the resolved ``path``."""
    try:
        return os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return os.path.realpath(path)


def _open_regular(path: str | os.PathLike[str], beneath: str | None = None) -> int:
    """Open ``path`` for reading without blocking on a FIFO; raise ``OSError`` (EINVAL,
    naming the path) unless it is a regular file once opened.

    ``beneath`` (a resolved directory): the file opened must lie inside it, or ``OSError``
    (EXDEV, "resolves outside the checked directory") is raised.  This is checked on the open
    file itself, so a directory swapped for a symlink after the tree was walked (a race
    against ``campaign-bot check``) cannot make it read a file outside the checked tree."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
        if beneath is not None and not inside(_opened_path(fd, path), beneath):
            raise OSError(errno.EXDEV, "resolves outside the checked directory", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_regular(path: str | os.PathLike[str], *, limit: int | None = None,
                 beneath: str | None = None) -> bytes:
    """The bytes of ``path``, opened as :func:`_open_regular` opens a file to hash (never
    blocking on a FIFO, a regular file only, inside ``beneath`` when given); at most
    ``limit`` bytes are read when given.  Raises ``OSError`` as :func:`_open_regular` does
    and for a failed read."""
    fd = _open_regular(path, beneath)
    with open(fd, "rb", closefd=True) as f:
        return f.read() if limit is None else f.read(limit)


def digest_file(path: str | os.PathLike[str], algorithms: Iterable[str] = SHA256, *,
                chunk: int = CHUNK_BYTES, on_bytes: Callable[[int], None] | None = None,
                buffer: bytearray | None = None,
                stop: threading.Event | None = None,
                beneath: str | None = None) -> tuple[dict[str, str], int]:
    """Stream ``path`` once through every digest of ``algorithms`` (names of
    :data:`ALGORITHMS`), in reads of ``chunk`` bytes into one buffer.

    Returns ``({algorithm: hex_digest}, size_in_bytes)``.  ``buffer`` (any length > 0) is
    reused instead of allocating one, so a caller hashing many files allocates once; memory
    is O(chunk) whatever the file size.  ``on_bytes(n)`` is called after each read.  Raises
    ``ValueError`` for an unknown algorithm, ``OSError`` (PermissionError,
    FileNotFoundError, EINVAL for a file that is not regular when opened; ECANCELED when
    ``stop`` is set while hashing; EXDEV when ``beneath``, a resolved directory, is given and
    the file opened lies outside it).
    """
    algs = tuple(dict.fromkeys(algorithms))
    for a in algs:
        if a not in ALGORITHMS:
            raise ValueError(f"unknown digest algorithm {a!r}")
    hs = [hashlib.new(a, usedforsecurity=a not in WEAK_ALGORITHMS) for a in algs]
    buf = buffer if buffer is not None else bytearray(chunk)
    view = memoryview(buf)
    size = 0
    with open(_open_regular(path, beneath), "rb", buffering=0, closefd=True) as f:
        if hasattr(os, "posix_fadvise"):  # cold cache: ask for aggressive read-ahead
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        read = f.readinto
        full = len(view)
        while n := read(view):
            part = view if n == full else view[:n]  # no new view for a full read
            for h in hs:
                h.update(part)
            size += n
            if on_bytes is not None:
                on_bytes(n)
            if stop is not None and stop.is_set():
                raise OSError(errno.ECANCELED, "hashing cancelled", str(path))
    return {a: h.hexdigest() for a, h in zip(algs, hs, strict=True)}, size


def sha256_file(path: str | os.PathLike[str], *, chunk: int = CHUNK_BYTES,
                on_bytes: Callable[[int], None] | None = None,
                buffer: bytearray | None = None,
                stop: threading.Event | None = None) -> tuple[str, int]:
    """:func:`digest_file` for SHA-256 alone: returns ``(hex_digest, size_in_bytes)``.
    Raises ``OSError`` as :func:`digest_file` does."""
    digests, size = digest_file(path, SHA256, chunk=chunk, on_bytes=on_bytes, buffer=buffer,
                                stop=stop)
    return digests["sha256"], size


class HashPool:
    """Hash files on ``workers`` threads (default :func:`usable_cores`), largest first.

    Use as a context manager (or call :meth:`close`).  :meth:`submit` queues a file with the
    algorithms it needs; a path submitted again is not read again for algorithms already
    asked for (new ones join a file still waiting; a file already read is read once more
    for the new ones only).  :meth:`digests` waits for files and returns
    ``{path: ({algorithm: hex}, size) | OSError}``; :meth:`results` is its SHA-256 form,
    ``{path: (hex, size) | OSError}``.  Threads start with the first submission, so a pool
    with nothing to hash costs nothing.  ``progress(done, total)`` sees the running byte
    counts (``total`` is the sum of the sizes submitted so far, or ``total_bytes`` when
    given).  ``beneath``: a directory every hashed file must really lie in (checked on the
    open file, :func:`_open_regular`); a file outside it is an ``OSError`` result (EXDEV).
    """

    def __init__(self, workers: int | None = None, *, progress: ProgressFn | None = None,
                 total_bytes: int | None = None, chunk: int | None = None,
                 beneath: str | os.PathLike[str] | None = None) -> None:
        self.workers = max(1, workers or usable_cores())
        self.beneath = os.path.realpath(beneath) if beneath is not None else None
        self.chunk = chunk or chunk_bytes(self.workers)
        self._progress = progress
        self._fixed_total = total_bytes
        self._cv = threading.Condition()
        self._heap: list[tuple[int, int, Path]] = []
        self._want: dict[Path, set[str]] = {}  # algorithms asked for, per path
        self._in_heap: dict[Path, int] = {}  # queue entries of a path not yet taken
        self._busy: dict[Path, set[str]] = {}  # algorithms being computed now
        self._done: dict[Path, DigestResult] = {}
        self._jobs = 0  # queue entries not yet finished
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._failed: BaseException | None = None  # a bug in a hashing thread, re-raised
        self._stop = threading.Event()
        self._seq = 0
        self._bytes_done = 0
        self._bytes_total = 0
        self._count_lock = threading.Lock()
        self._children: dict[int, int] = {}  # hashing processes (hash_in_child) still running
        self._child_done: dict[int, int] = {}  # bytes each has hashed, as it last reported
        self._adopters: list[threading.Thread] = []
        self._pending: set[Path] = set()  # files given to hashing processes, no result yet
        self._live = 0  # hashing processes not yet reaped

    # -- queueing
    def submit(self, path: Path, size: int | None = None,
               algorithms: Iterable[str] = SHA256) -> None:
        """Queue ``path`` for the digests of ``algorithms`` (default SHA-256; ``size`` in
        bytes orders the queue, default from ``stat``).  Raises ``ValueError`` for an
        algorithm not in :data:`ALGORITHMS`, RuntimeError after :meth:`close`."""
        path = _as_path(path)
        algs = set(algorithms)
        unknown = sorted(algs - ALGORITHMS.keys())
        if unknown:
            raise ValueError(f"unknown digest algorithm {unknown[0]!r}")
        with self._cv:
            if self._closed:
                raise RuntimeError("HashPool is closed")
            want = self._want.get(path)
            if want is not None and algs <= want:
                return
        if size is None:
            try:
                size = path.stat().st_size
            except OSError:
                size = 0  # the hashing thread reports the error
        with self._cv:
            if self._closed:
                raise RuntimeError("HashPool is closed")
            want = self._want.setdefault(path, set())
            if algs <= want:
                return
            want |= algs
            if self._in_heap.get(path, 0):
                return  # still waiting: the thread that takes it computes the new ones too
            self._in_heap[path] = 1
            self._jobs += 1
            self._seq += 1
            heapq.heappush(self._heap, (-size, self._seq, path))
            self._bytes_total += size
            self._start_thread()
            self._cv.notify()

    def _start_thread(self) -> None:
        """One more hashing thread, up to :attr:`workers` (the condition held)."""
        if len(self._threads) < self.workers:
            t = threading.Thread(target=self._work, name=f"hash-{len(self._threads)}",
                                 daemon=True)
            self._threads.append(t)
            t.start()

    def queued(self) -> frozenset[Path]:
        """Every path submitted so far (hashed, being hashed or waiting)."""
        with self._cv:
            return frozenset(self._want)

    def _stopped(self) -> bool:
        return self._closed or self._failed is not None

    def _ready(self, p: Path) -> bool:
        return self._complete(p) or self._stopped()

    def _complete(self, p: Path) -> bool:
        got = self._done.get(p)
        if got is None:
            return False
        return isinstance(got, OSError) or self._want.get(p, set()) <= got[0].keys()

    def digests(self, todo: Mapping[Path, Iterable[str]]) -> dict[Path, DigestResult]:
        """Wait for the files of ``todo`` (``{path: algorithms}``, queued now where not yet)
        and return ``{path: ({algorithm: hex}, size) | OSError}``; the mapping of a file
        holds at least the algorithms asked for.

        Raises RuntimeError when a hashing thread failed with anything but an ``OSError``
        (a bug, not a bad file), instead of waiting for ever; ``ValueError`` for an unknown
        algorithm.
        """
        plist = [_as_path(p) for p in todo]
        for p, algs in zip(plist, todo.values(), strict=True):
            self.submit(p, algorithms=algs)
        with self._cv:
            # One path at a time: a wake-up (one per file hashed) re-tests one path, not all;
            # again if another submission asked more of a file already waited for.
            while not self._stopped():
                for p in plist:
                    self._cv.wait_for(functools.partial(self._ready, p))
                if all(self._complete(p) for p in plist):
                    break
            if self._failed is not None:
                raise RuntimeError("a hashing thread failed") from self._failed
            return {p: self._done[p] if self._complete(p)
                    else OSError(errno.ECANCELED, "not hashed", str(p)) for p in plist}

    def results(self, paths: Iterable[Path]) -> dict[Path, Result]:
        """:meth:`digests` for SHA-256: ``{path: (hex, size) | OSError}``.  Raises as
        :meth:`digests` does."""
        got = self.digests({Path(p): SHA256 for p in paths})
        return {p: r if isinstance(r, OSError) else (r[0]["sha256"], r[1])
                for p, r in got.items()}

    # -- threads
    def _tick(self, n: int) -> None:
        if self._progress is None:
            return
        with self._count_lock:
            self._bytes_done += n
            done = self._bytes_done + sum(self._child_done.values())
        total = self._fixed_total if self._fixed_total is not None else self._bytes_total
        self._progress(done, max(total, done))

    def _work(self) -> None:
        buf = bytearray(self.chunk)  # this thread's one buffer, for every file it hashes
        tick = self._tick if self._progress is not None else None  # no call per read if None
        while True:
            with self._cv:
                while not self._heap and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                _, _, path = heapq.heappop(self._heap)
                self._in_heap[path] = 0
                prev = self._done.get(path)
                have = set() if prev is None or isinstance(prev, OSError) else set(prev[0])
                busy = self._busy.setdefault(path, set())
                algs = tuple(sorted(self._want[path] - have - busy))
                busy |= set(algs)
                if not algs or isinstance(prev, OSError):
                    self._jobs -= 1
                    self._cv.notify_all()
                    continue
            result: DigestResult
            try:
                result = digest_file(path, algs, on_bytes=tick, buffer=buf,
                                     stop=self._stop, beneath=self.beneath)
            except OSError as e:
                result = e
            except BaseException as e:  # a bug (or a progress callback's): wake the waiters
                with self._cv:
                    self._failed = e
                    self._cv.notify_all()
                return
            with self._cv:
                self._finish(path, algs, result)

    def _finish(self, path: Path, algs: Iterable[str], result: DigestResult) -> None:
        """Record ``result`` for the ``algs`` of ``path`` (the condition held)."""
        self._busy[path] -= set(algs)
        prev = self._done.get(path)
        if isinstance(result, OSError) or prev is None or isinstance(prev, OSError):
            self._done[path] = prev if isinstance(prev, OSError) else result
        else:  # more algorithms for a file read before: merge
            self._done[path] = ({**prev[0], **result[0]}, result[1])
        self._jobs -= 1
        self._cv.notify_all()

    # -- hashing processes
    def hash_in_child(self, todo: list[tuple[Path, int, tuple[str, ...]]]) -> bool:
        """Hash the files of ``todo`` (``(path, size in bytes, algorithms)``) in child
        processes (``os.fork``), one per worker, each taking the largest file left from a
        shared queue and reading it in turn, as if this pool's threads hashed them:
        :meth:`submit` and :meth:`digests` see them queued, each result arrives as soon as it
        is hashed, and the progress callback (if any) sees the processes' bytes.  Returns
        False, doing nothing, where a process cannot be forked safely (no ``os.fork``, a
        thread already running in this process), the pool is already hashing, or ``todo``
        holds more than :data:`MAX_FORKED_FILES` files.

        Why: threads hashing in one process wait for the interpreter lock twice per read,
        for each other and for a main thread that imports and parses; a process per core
        with one reading thread each hashes as two ``openssl dgst`` processes do
        (``benchmarks/verify.py``, docs/benchmarks.md); taking the largest file left, they
        end together.  A child only hashes (``beneath`` applies there too) and sends
        the results back through a pipe; a file whose result does not come back (the child
        died) is hashed here instead.
        """
        if (not hasattr(os, "fork") or threading.active_count() > 1 or self._threads
                or not todo or len(todo) > MAX_FORKED_FILES):
            return False
        with self._cv:
            if any(self._want.get(path) for path, _, _ in todo):
                return False
            forked: dict[Path, tuple[set[str], int]] = {}
            for path, size, algs in todo:
                self._want.setdefault(path, set()).update(algs)
                self._busy.setdefault(path, set()).update(algs)
                forked.setdefault(path, (set(), size))[0].update(algs)
            self._jobs += len(forked)
            self._bytes_total += sum(size for _, size in forked.values())
        order = sorted(forked, key=lambda path: -forked[path][1])  # largest first
        work_r, work_w = os.pipe()  # the queue: each process takes the next index from it
        try:
            os.write(work_w, b"".join(i.to_bytes(4, "little") for i in range(len(order))))
        finally:  # it all fits: MAX_FORKED_FILES indexes are far below a pipe's 64 KiB
            os.close(work_w)
        self._pending = set(order)
        started: list[tuple[int, int]] = []
        for _ in range(min(self.workers, len(order))):  # all forked before a thread starts
            read_fd, write_fd = os.pipe()
            pid = os.fork()
            if pid == 0:
                code = 1
                try:
                    for other, _ in started:
                        os.close(other)
                    os.close(read_fd)
                    self._hash_queue(order, forked, work_r, write_fd)
                    code = 0
                finally:
                    os._exit(code)  # nothing else of this process runs in the child
            os.close(write_fd)
            started.append((read_fd, pid))
        os.close(work_r)
        self._live = len(started)
        for index, (read_fd, pid) in enumerate(started):
            self._children[index] = pid
            self._child_done[index] = 0
            t = threading.Thread(target=self._adopt, args=(read_fd, pid, forked, index),
                                 name=f"hash-adopt-{index}", daemon=True)
            self._adopters.append(t)
            t.start()
        return True

    def _hash_queue(self, order: list[Path], forked: dict[Path, tuple[set[str], int]],
                    work_r: int, write_fd: int) -> None:
        """In a child process: hash the files whose indexes (in ``order``) it takes from the
        queue ``work_r`` until it is empty, in one buffer, and send each result and its
        progress (:class:`_Sender`) on ``write_fd``."""
        with open(write_fd, "wb", closefd=True) as out:
            send = _Sender(out)
            buf = bytearray(self.chunk)
            done = 0

            def tick(n: int) -> None:
                nonlocal done
                done += n
                send.progress(done, 0)

            while len(item := os.read(work_r, 4)) == 4:  # 4 bytes: one atomic pipe read
                path = order[int.from_bytes(item, "little")]
                result: DigestResult
                try:
                    result = digest_file(path, sorted(forked[path][0]), buffer=buf,
                                         beneath=self.beneath,
                                         on_bytes=tick if self._progress is not None else None)
                except OSError as e:
                    result = e
                send.message(("digest", (path, result)))

    def _adopt(self, read_fd: int, pid: int, forked: dict[Path, tuple[set[str], int]],
               index: int) -> None:
        """Read a hashing process's messages to the end and record each digest as it comes,
        then reap the process; once the last one has ended, a file without a result (a
        process died) is queued here (hashed by this pool's threads) unless the pool is
        closing."""
        done = 0
        with open(read_fd, "rb", closefd=True) as f:
            while True:
                try:
                    kind, value = pickle.load(f)  # our own child's messages (_Sender)
                except (pickle.UnpicklingError, EOFError, ValueError, TypeError):
                    break  # the end, or a child that died mid-message
                if kind == "progress":
                    with self._count_lock:
                        self._child_done[index] = value
                    self._tick(0)
                elif kind == "digest":
                    path, result = value
                    with self._cv:
                        if path in self._pending:
                            self._pending.discard(path)
                            self._finish(path, forked[path][0], result)
                            if not isinstance(result, OSError):
                                done += result[1]
        os.waitpid(pid, 0)
        with self._count_lock:  # every byte it hashed, whatever its last report said
            self._child_done[index] = done
        self._tick(0)
        with self._cv:
            self._children.pop(index, None)
            self._live -= 1
            if self._live:
                return
            for path in self._pending:  # no process hashed it: hash it here
                algs, size = forked[path]
                self._busy[path] -= algs
                if self._closed or self._stop.is_set():
                    self._jobs -= 1
                    continue
                self._in_heap[path] = 1
                self._seq += 1
                heapq.heappush(self._heap, (-size, self._seq, path))
                self._start_thread()
            self._pending = set()
            self._cv.notify_all()

    # -- lifetime
    def close(self, *, cancel: bool = False) -> None:
        """Stop the threads once the queue is empty (with ``cancel``: at once, abandoning
        queued files and the files being hashed) and wait for them."""
        with self._cv:
            if cancel:
                self._heap.clear()
                self._stop.set()
                for pid in self._children.values():
                    with contextlib.suppress(OSError):
                        os.kill(pid, signal.SIGKILL)
            else:
                self._cv.wait_for(lambda: self._jobs == 0 or self._failed is not None)
            self._closed = True
            self._cv.notify_all()
        for t in self._adopters:
            t.join()
        for t in self._threads:
            t.join()

    def __enter__(self) -> HashPool:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close(cancel=exc_type is not None)


def hash_files(paths: Iterable[Path], *, workers: int | None = None,
               progress: ProgressFn | None = None,
               total_bytes: int | None = None) -> dict[Path, Result]:
    """Hash many files on a :class:`HashPool` (default: one thread per usable core).

    Returns ``{path: (hex, size)}``, or the ``OSError`` raised for an unreadable file (the
    other files are still hashed).  ``progress(done, total)`` sees the running byte count;
    ``total_bytes`` (default: the sum of sizes from ``stat``) is its denominator.
    """
    plist = [Path(p) for p in paths]
    with HashPool(workers, progress=progress, total_bytes=total_bytes) as pool:
        return pool.results(plist)


def digest_files(todo: Mapping[Path, Iterable[str]], *, workers: int | None = None,
                 progress: ProgressFn | None = None,
                 total_bytes: int | None = None,
                 beneath: str | os.PathLike[str] | None = None) -> dict[Path, DigestResult]:
    """:func:`hash_files` for several algorithms: ``todo`` maps each path to the algorithms
    it needs (names of :data:`ALGORITHMS`; each file is read once).  Returns
    ``{path: ({algorithm: hex}, size)}`` or the ``OSError`` of an unreadable file; raises
    ``ValueError`` for an unknown algorithm.  ``beneath``: as for :class:`HashPool`."""
    with HashPool(workers, progress=progress, total_bytes=total_bytes,
                  beneath=beneath) as pool:
        return pool.digests({Path(p): tuple(a) for p, a in todo.items()})


BAG_MANIFEST_PREFIX = "manifest-"
"""BagIt payload manifests are ``manifest-<algorithm>.txt`` at the bag's root (RFC 8493 2.1.3)."""

PREFETCH_MANIFEST_BYTES = 64 << 20
"""Largest root manifest read by :func:`prefetch_bag` (64 MiB, the default
``--max-file-bytes`` of ``campaign-bot check``); a larger one is left to the verifier."""


class _Sender:
    """The messages of a hashing process to its parent (:meth:`HashPool.hash_in_child`):
    pickled ``(kind, value)`` pairs on one pipe, ``("progress", bytes hashed)`` at most every
    :data:`PROGRESS_EVERY_S` seconds and ``("digests", {path: result})`` at the end."""

    def __init__(self, out: io.BufferedWriter) -> None:
        self.out = out
        self.lock = threading.Lock()
        self.last = 0.0

    def message(self, value: tuple[str, object]) -> None:
        with self.lock:
            pickle.dump(value, self.out)
            self.out.flush()

    def progress(self, done: int, total: int) -> None:
        now = time.monotonic()
        if now - self.last >= PROGRESS_EVERY_S:
            self.last = now
            self.message(("progress", done))


MAX_FORKED_FILES = 8192
"""Most files :meth:`HashPool.hash_in_child` gives to hashing processes (their 4-byte indexes
fill at most 32 KiB of the queue pipe, written before the processes start); a larger set is
hashed by threads."""

PROGRESS_EVERY_S = 0.1
"""How often a hashing process reports its progress when there is a progress bar (seconds)."""


class FileList:
    """Stands in for a :class:`HashPool` in :func:`prefetch_bag`: records the files it would
    queue, in :attr:`todo` as ``(path, size in bytes, algorithms)``, for
    :meth:`HashPool.hash_in_child`."""

    def __init__(self) -> None:
        self.todo: list[tuple[Path, int, tuple[str, ...]]] = []

    def submit(self, path: Path, size: int | None = None,
               algorithms: Iterable[str] = SHA256) -> None:
        """Record ``path`` (``size`` from ``stat`` when None, 0 when it cannot be read)."""
        if size is None:
            try:
                size = os.stat(path).st_size
            except OSError:
                size = 0
        self.todo.append((_as_path(path), size, tuple(algorithms)))


def prefetch_bag(root: Path, pool: HashPool | FileList) -> int:
    """Queue on ``pool`` the payload files that the BagIt manifests at ``root`` list, before
    the verifier has read them, and return how many files were queued.

    ``campaign-bot check`` calls this before it imports the document models, so that the
    hashing threads use every core while the main thread imports and parses; the verifier
    (:func:`evidence.manifest.verify_tree`) later asks the same pool for the same paths
    (``root / relative path``) and finds them hashed or hashing.  It only warms that cache:
    it judges nothing, reports nothing, and a line it cannot read simply is not queued.

    Only a bag is prefetched (a regular ``bagit.txt`` at ``root``: elsewhere the verifier
    reads no root ``manifest-*.txt``, so a file listed there must not take hashing time).
    Queued are lines ``<hex digest> <path>`` (RFC 8493 2.1.3; a ``*`` binary marker and a
    ``./`` prefix are dropped, CR, LF and CRLF line ends all end a line) whose path is under
    ``data/`` (the payload, RFC 8493 2.1.2), has no ``%`` escape and no ``..`` component,
    names a regular file (``lstat``, not followed) and resolves inside ``root``; at most
    :data:`PREFETCH_MANIFEST_BYTES` of each manifest are read.  Never raises for a bad
    manifest or file (``OSError`` is swallowed: the verifier meets the same problem and
    reports it).
    """
    root = Path(root)
    try:
        if not stat.S_ISREG(os.lstat(root / "bagit.txt").st_mode):
            return 0  # not a bag: the verifier reads no root manifest-*.txt, so none is hashed
    except OSError:
        return 0
    try:
        names = sorted(e.name for e in os.scandir(root)
                       if e.name.startswith(BAG_MANIFEST_PREFIX) and e.name.endswith(".txt")
                       and e.is_file(follow_symlinks=False))
    except OSError:
        return 0
    real_root = os.path.realpath(root)
    parent_inside: dict[str, bool] = {}  # directory -> it resolves inside root (one realpath)
    queued = 0
    for name in names:
        alg = name[len(BAG_MANIFEST_PREFIX):-len(".txt")].lower()
        if alg not in ALGORITHMS:
            continue
        try:
            with open(root / name, "rb") as f:
                data = f.read(PREFETCH_MANIFEST_BYTES + 1)
        except OSError:
            continue
        if len(data) > PREFETCH_MANIFEST_BYTES:
            continue
        for raw in data.splitlines():
            parts = raw.split(None, 1)
            if len(parts) != 2 or len(parts[0]) != ALGORITHMS[alg]:
                continue
            rel = parts[1].strip(b" \t").removeprefix(b"*")
            try:
                text = rel.decode()
            except UnicodeDecodeError:
                continue
            while text.startswith("./"):
                text = text[2:]
            if not text.startswith("data/") or "%" in text or ".." in text.split("/"):
                continue  # a bag's payload is under data/ (RFC 8493 2.1.2); nothing else
            path = root / text
            try:
                st = os.lstat(path)
            except OSError:
                continue
            if not stat.S_ISREG(st.st_mode):
                continue
            parent = os.path.dirname(path)
            ok = parent_inside.get(parent)
            if ok is None:
                ok = parent_inside[parent] = inside(os.path.realpath(parent), real_root)
            if not ok:
                continue
            pool.submit(path, st.st_size, (alg,))
            queued += 1
    return queued


def git_blob_sha(data: bytes) -> str:
    """Git's object id of a blob holding ``data`` (SHA-1 of ``blob <size>\\0`` + data), as
    ``git hash-object`` prints it: how the bot pins the default branch's ``campaign.toml`` for
    a screen and how the runner checks the file it was given."""
    import hashlib

    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()
