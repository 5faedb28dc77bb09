"""Durations as people read them: the unit adapts to the size (``s``, ``ms``, ``us``, ``ns``),
the way Nsight Systems and the torch.profiler tables print them, so a 4 us kernel does not
read ``0.000`` in a table of seconds.  Standard library only (command plug-ins import it).

Documents keep integer nanoseconds (trace summaries) or float milliseconds (probes); only the
text changes unit.
"""

from __future__ import annotations

import math


def duration_text(ns: float | None, digits: int = 3) -> str:
    """``ns`` nanoseconds as text with an adaptive unit: ``1.234 s``, ``12.35 ms``,
    ``4.216 us``, ``812 ns``; ``—`` for None or a non-finite value.  ``digits``: significant
    digits kept (at least 3), integers of nanoseconds are printed whole."""
    if ns is None or not math.isfinite(ns):
        return "—"
    a = abs(ns)
    if a < 999.5:
        return f"{round(ns):d} ns"
    for scale, unit in ((1e9, "s"), (1e6, "ms"), (1e3, "us")):
        if a >= scale * 0.9995:  # 999.6 ns reads 1.00 us, not 1000 ns
            v = ns / scale
            whole = len(str(int(round(abs(v), 6))))
            return f"{v:.{max(0, max(digits, 3) - whole)}f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def ms_text(ms: float | None, digits: int = 3) -> str:
    """Milliseconds as :func:`duration_text` prints them (``0.0123`` ms -> ``12.30 us``)."""
    return duration_text(None if ms is None else ms * 1e6, digits)
