"""Measuring child processes for the benchmark scripts: peak RSS and CPU seconds.

Peak RSS is a process's ``VmHWM`` (the high-water mark of its own resident set) polled from
``/proc/PID/status``; ``ru_maxrss`` is not used because Linux carries the forking parent's
peak into it across ``exec``.  CPU seconds are user + system from ``wait4``'s resource usage of
the child alone.  Linux only (``/proc``).
"""

from __future__ import annotations

import os
import time
from typing import NamedTuple

POLL_S = 0.002
"""Polling period of :func:`wait_polling` (seconds): a peak held for less may be missed."""


def descendants(pid: int) -> list[int]:
    """The processes below ``pid`` (its children, theirs, ...), from ``/proc``; [] when it
    has gone."""
    found: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    kids = [int(k) for k in f.read().split()]
                found += kids
                todo += kids
        except (OSError, ValueError):
            continue
    return found


def tree_peak_rss_mib(pid: int) -> float:
    """``VmHWM`` of ``pid`` plus that of every process below it, MiB (an upper bound of the
    tree's peak: the peaks need not coincide), e.g. ``check`` and its hashing process."""
    return peak_rss_mib(pid) + sum(peak_rss_mib(k) for k in descendants(pid))


def peak_rss_mib(pid: int) -> float:
    """``VmHWM`` of process ``pid`` in MiB; 0.0 when it has gone or ``/proc`` is unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


class Usage(NamedTuple):
    """What :func:`wait_usage` measured of one or more children."""

    peak_mib: float
    """``VmHWM`` of the largest child together with the processes it started, MiB
    (:func:`tree_peak_rss_mib`)."""
    code: int
    """Exit status of the first child that failed, else 0 (``os.waitstatus_to_exitcode``'s:
    negative when killed by that signal)."""
    user_s: float
    """User CPU seconds of all the children."""
    sys_s: float
    """System CPU seconds of all the children."""


def wait_usage(pids: list[int]) -> Usage:
    """Reap every child in ``pids``, polling its ``VmHWM`` every :data:`POLL_S` seconds, and
    return their :class:`Usage`.  The caller must not reap the children itself
    (``Popen.wait``/``poll``)."""
    peak = {p: 0.0 for p in pids}
    code = 0
    user = system = 0.0
    live = set(pids)
    while live:
        for p in list(live):
            peak[p] = max(peak[p], tree_peak_rss_mib(p))
            done, status, usage = os.wait4(p, os.WNOHANG)
            if done:
                live.discard(p)
                code = code or os.waitstatus_to_exitcode(status)
                user += usage.ru_utime
                system += usage.ru_stime
        time.sleep(POLL_S)
    return Usage(max(peak.values(), default=0.0), code, user, system)


def wait_polling(pids: list[int]) -> tuple[float, int, float]:
    """:func:`wait_usage` as ``(peak MiB of the largest, exit status of the first that failed
    or 0, CPU seconds user + system of all of them)``."""
    u = wait_usage(pids)
    return u.peak_mib, u.code, u.user_s + u.sys_s
