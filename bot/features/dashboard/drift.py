"""Change points in a control's drift: where the level of a series of control session
medians (one pool, one track, time order) shifts.

Why ``ruptures`` (Truong, Oudre and Vayatis, "Selective review of offline change point
detection methods", Signal Processing 167, 2020): a maintained, BSD-licensed library of
offline change point detection whose PELT search (Killick, Fearnhead and Eckley, JASA 2012)
finds the exact optimal segmentation for a penalised cost in linear expected time; it needs
only numpy and scipy, which the bot already has.  It is imported when a chart needs it.

The rule: a least-squares (``l2``) cost on the medians, each segment at least
:data:`MIN_SEGMENT` sessions long, penalty ``BIC_FACTOR x sigma^2 x ln(n)`` with ``sigma``
estimated robustly from successive differences (MAD / 0.6745 / sqrt(2)), the BIC-style
penalty of the ruptures documentation's examples: a shift must explain more variance than
the session-to-session noise of the series to count.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

MIN_SEGMENT = 3
"""Fewest sessions on each side of a change point (a single odd session is noise)."""
BIC_FACTOR = 2.0
"""Penalty per change point, in units of ``sigma^2 x ln(n)``."""


def change_points(values: Sequence[float]) -> list[int]:
    """Indices into ``values`` (control session medians in seconds, time order) where a new
    level starts; empty when the series is too short (fewer than ``2 x MIN_SEGMENT``) or
    flat.  Deterministic (PELT is exact, no random start)."""
    n = len(values)
    if n < 2 * MIN_SEGMENT:
        return []
    diffs = [b - a for a, b in zip(values, values[1:], strict=False)]
    mad = statistics.median(abs(d - statistics.median(diffs)) for d in diffs)
    sigma = mad / 0.6745 / math.sqrt(2)
    if sigma <= 0:
        sigma = statistics.pstdev(values) / 10
    if sigma <= 0:
        return []
    import numpy as np
    import ruptures

    algo = ruptures.Pelt(model="l2", min_size=MIN_SEGMENT, jump=1).fit(
        np.asarray(values, dtype=float))
    ends = algo.predict(pen=BIC_FACTOR * sigma * sigma * math.log(n))
    return [k for k in ends if 0 < k < n]
