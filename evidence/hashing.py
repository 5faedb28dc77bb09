"""SHA-256 of many files at the machine's hashing limit, in small, flat memory.

:class:`HashPool` keeps every core hashing until the last byte:

* one hashing thread per usable core (:func:`usable_cores`); ``hashlib`` (OpenSSL) releases
  the GIL while it digests a buffer longer than 2047 bytes (CPython's ``HASHLIB_GIL_MINSIZE``)
  and ``FileIO.readinto`` releases it during ``read(2)``, so the threads run on all cores
  at once, as far as one OpenSSL process per core would (``benchmarks/verify.py`` compares
  with two ``openssl dgst -sha256`` processes);
* the largest waiting file is hashed first (a heap on size), also across batches submitted
  at different times, so the pool never ends on one big file with the other cores idle;
* files can be submitted while others hash: ``campaign-bot check`` submits each manifest's
  entries as soon as that manifest is read, then parses and validates the JSON documents
  on the main thread while the pool hashes (:func:`evidence.manifest.verify_tree`);
* each thread owns one buffer (:func:`chunk_bytes`, at most 4 MiB), allocated once and
  refilled with ``readinto``: memory is ``threads x chunk`` whatever the file sizes (8 MiB
  on 2 cores), never a whole file;
* a file is opened non-blocking and must be a regular file when opened (a FIFO swapped in
  after the tree walk is refused, never waited on), and read with
  ``POSIX_FADV_SEQUENTIAL`` read-ahead for cold caches.

Unreadable files are results (the ``OSError``), not exceptions: one bad file never stops
the others.
"""

from __future__ import annotations

import errno
import hashlib
import heapq
import os
import stat
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType

ProgressFn = Callable[[int, int], None]
"""Progress callback ``(bytes_done, bytes_total)``, called from the hashing threads;
``bytes_total`` grows as files are submitted."""

CHUNK_BYTES = 4 << 20
"""Largest read size (4 MiB): a thread holds the GIL only between chunks, so a chunk that
takes milliseconds to digest keeps hashing at full speed while the main thread parses
documents; small enough that ``threads x chunk`` stays a few MiB."""

MIN_CHUNK_BYTES = 256 << 10
"""Smallest read size (256 KiB), reached only on machines with more than 128 cores."""

BUFFER_BUDGET_BYTES = 32 << 20
"""Ceiling of all threads' buffers together (32 MiB): the chunk shrinks on many-core machines
(:func:`chunk_bytes`)."""

Result = tuple[str, int] | OSError
"""``(lowercase hex digest, size in bytes)``, or the ``OSError`` that reading raised."""


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


def _open_regular(path: str | os.PathLike[str]) -> int:
    """Open ``path`` for reading without blocking on a FIFO; raise ``OSError`` (EINVAL,
    naming the path) unless it is a regular file once opened."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", str(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def sha256_file(path: str | os.PathLike[str], *, chunk: int = CHUNK_BYTES,
                on_bytes: Callable[[int], None] | None = None,
                buffer: bytearray | None = None,
                stop: threading.Event | None = None) -> tuple[str, int]:
    """Stream ``path`` through SHA-256 in reads of ``chunk`` bytes into one buffer.

    Returns ``(hex_digest, size_in_bytes)``.  ``buffer`` (any length > 0) is reused instead
    of allocating one, so a caller hashing many files allocates once; memory is O(chunk)
    whatever the file size.  ``on_bytes(n)`` is called after each read.  Raises ``OSError``
    (PermissionError, FileNotFoundError, EINVAL for a file that is not regular when opened;
    ECANCELED when ``stop`` is set while hashing).
    """
    buf = buffer if buffer is not None else bytearray(chunk)
    view = memoryview(buf)
    h = hashlib.sha256()
    size = 0
    with open(_open_regular(path), "rb", buffering=0, closefd=True) as f:
        if hasattr(os, "posix_fadvise"):  # cold cache: ask for aggressive read-ahead
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
        while True:
            n = f.readinto(view)
            if not n:
                break
            h.update(view[:n])
            size += n
            if on_bytes is not None:
                on_bytes(n)
            if stop is not None and stop.is_set():
                raise OSError(errno.ECANCELED, "hashing cancelled", str(path))
    return h.hexdigest(), size


class HashPool:
    """Hash files on ``workers`` threads (default :func:`usable_cores`), largest first.

    Use as a context manager (or call :meth:`close`).  :meth:`submit` queues a file (once:
    a path submitted again is not hashed again); :meth:`results` waits for the given files,
    submitting any not yet queued, and returns ``{path: (hex, size) | OSError}``.  Threads
    start with the first submission, so a pool with nothing to hash costs nothing.
    ``progress(done, total)`` sees the running byte counts (``total`` is the sum of the
    sizes submitted so far, or ``total_bytes`` when given).
    """

    def __init__(self, workers: int | None = None, *, progress: ProgressFn | None = None,
                 total_bytes: int | None = None, chunk: int | None = None) -> None:
        self.workers = max(1, workers or usable_cores())
        self.chunk = chunk or chunk_bytes(self.workers)
        self._progress = progress
        self._fixed_total = total_bytes
        self._cv = threading.Condition()
        self._heap: list[tuple[int, int, Path]] = []
        self._queued: set[Path] = set()
        self._done: dict[Path, Result] = {}
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._failed: BaseException | None = None  # a bug in a hashing thread, re-raised
        self._stop = threading.Event()
        self._seq = 0
        self._bytes_done = 0
        self._bytes_total = 0
        self._count_lock = threading.Lock()

    # -- queueing
    def submit(self, path: Path, size: int | None = None) -> None:
        """Queue ``path`` for hashing (``size`` in bytes orders the queue; default: from
        ``stat``).  Raises RuntimeError after :meth:`close`."""
        path = Path(path)
        if size is None:
            try:
                size = path.stat().st_size
            except OSError:
                size = 0  # the hashing thread reports the error
        with self._cv:
            if self._closed:
                raise RuntimeError("HashPool is closed")
            if path in self._queued:
                return
            self._queued.add(path)
            self._seq += 1
            heapq.heappush(self._heap, (-size, self._seq, path))
            self._bytes_total += size
            if len(self._threads) < self.workers:
                t = threading.Thread(target=self._work, name=f"sha256-{len(self._threads)}",
                                     daemon=True)
                self._threads.append(t)
                t.start()
            self._cv.notify()

    def queued(self) -> frozenset[Path]:
        """Every path submitted so far (hashed, being hashed or waiting)."""
        with self._cv:
            return frozenset(self._queued)

    def results(self, paths: Iterable[Path]) -> dict[Path, Result]:
        """Wait for ``paths`` (queued now where not yet) and return their results.

        Raises RuntimeError when a hashing thread failed with anything but an ``OSError``
        (a bug, not a bad file), instead of waiting for ever.
        """
        plist = [Path(p) for p in paths]
        for p in plist:
            self.submit(p)
        with self._cv:
            self._cv.wait_for(lambda: all(p in self._done for p in plist) or self._closed
                              or self._failed is not None)
            if self._failed is not None:
                raise RuntimeError("a hashing thread failed") from self._failed
            return {p: self._done.get(p, OSError(errno.ECANCELED, "not hashed", str(p)))
                    for p in plist}

    # -- threads
    def _tick(self, n: int) -> None:
        if self._progress is None:
            return
        with self._count_lock:
            self._bytes_done += n
            done = self._bytes_done
        total = self._fixed_total if self._fixed_total is not None else self._bytes_total
        self._progress(done, max(total, done))

    def _work(self) -> None:
        buf = bytearray(self.chunk)  # this thread's one buffer, for every file it hashes
        while True:
            with self._cv:
                while not self._heap and not self._closed:
                    self._cv.wait()
                if self._closed:
                    return
                _, _, path = heapq.heappop(self._heap)
            result: Result
            try:
                result = sha256_file(path, on_bytes=self._tick, buffer=buf, stop=self._stop)
            except OSError as e:
                result = e
            except BaseException as e:  # a bug (or a progress callback's): wake the waiters
                with self._cv:
                    self._failed = e
                    self._cv.notify_all()
                return
            with self._cv:
                self._done[path] = result
                self._cv.notify_all()

    # -- lifetime
    def close(self, *, cancel: bool = False) -> None:
        """Stop the threads once the queue is empty (with ``cancel``: at once, abandoning
        queued files and the files being hashed) and wait for them."""
        with self._cv:
            if cancel:
                self._heap.clear()
                self._stop.set()
            else:
                self._cv.wait_for(lambda: len(self._done) >= len(self._queued)
                                  or self._failed is not None)
            self._closed = True
            self._cv.notify_all()
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
