"""Process-wide counters for ``GET /metrics`` (Prometheus text exposition format 0.0.4).

One object, :data:`metrics`, shared by the webhook endpoint, the worker and the GitHub adapter
(``bot.github``), which calls :meth:`Metrics.github_call` once per HTTP request it makes to
GitHub.  Counters are per process and start at zero (Prometheus handles resets); the queue
depth is read from the database at scrape time, so it survives restarts.

Thread-safe: the endpoint runs on the server's event loop, the worker on its own thread.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Iterable, Mapping

PREFIX = "campaign_bot"


class Metrics:
    """Counters and gauges of one bot process.

    Attributes (all read through :meth:`snapshot` or :meth:`render`):

    * ``received`` – new deliveries stored (by event name);
    * ``duplicates`` – deliveries acknowledged but not stored again (same ``X-GitHub-Delivery``);
    * ``rejected`` – requests refused, by reason (``signature``, ``too_large``, ``malformed``,
      ``bad_request``);
    * ``processed`` / ``failed`` – deliveries the worker finished (``failed`` counts final
      failures after the last attempt) and ``handler_failures`` – failed handler runs;
    * ``github_calls`` – HTTP requests made to GitHub (by method), ``github_rate_limit_remaining``
      – the last ``X-RateLimit-Remaining`` GitHub returned (None until the first call).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.received: Counter[str] = Counter()
        self.duplicates = 0
        self.rejected: Counter[str] = Counter()
        self.processed = 0
        self.failed = 0
        self.handler_failures = 0
        self.retries_scheduled = 0
        self.github_calls: Counter[str] = Counter()
        self.github_rate_limit_remaining: int | None = None

    # -- called by the endpoint and the worker ---------------------------------------------
    def inc_received(self, event: str) -> None:
        """One new delivery of ``event`` stored."""
        with self._lock:
            self.received[event] += 1

    def inc_duplicate(self) -> None:
        """One delivery acknowledged as a duplicate (not stored, not processed)."""
        with self._lock:
            self.duplicates += 1

    def inc_rejected(self, reason: str) -> None:
        """One request refused for ``reason`` (signature, too_large, malformed, bad_request)."""
        with self._lock:
            self.rejected[reason] += 1

    def inc_processed(
        self, *, failed: bool, handler_failures: int = 0, retry: bool = False
    ) -> None:
        """One delivery attempt finished: done, scheduled for retry, or failed for good."""
        with self._lock:
            self.handler_failures += handler_failures
            if retry:
                self.retries_scheduled += 1
            elif failed:
                self.failed += 1
            else:
                self.processed += 1

    # -- called by the GitHub adapter (bot.github) -------------------------------------------
    def github_call(self, method: str, rate_limit_remaining: int | None = None) -> None:
        """Count one HTTP request to GitHub (``method`` e.g. ``GET``) and remember the
        ``X-RateLimit-Remaining`` header of its response, when it had one."""
        with self._lock:
            self.github_calls[method.upper()] += 1
            if rate_limit_remaining is not None:
                self.github_rate_limit_remaining = int(rate_limit_remaining)

    def reset(self) -> None:
        """Zero everything (tests)."""
        self.__init__()  # type: ignore[misc]

    def snapshot(self) -> dict[str, object]:
        """A plain-dict copy of every counter."""
        with self._lock:
            return {
                "received": dict(self.received),
                "duplicates": self.duplicates,
                "rejected": dict(self.rejected),
                "processed": self.processed,
                "failed": self.failed,
                "handler_failures": self.handler_failures,
                "retries_scheduled": self.retries_scheduled,
                "github_calls": dict(self.github_calls),
                "github_rate_limit_remaining": self.github_rate_limit_remaining,
            }

    def render(self, queue: Mapping[str, int], others: Iterable[Mapping[str, object]] = ()
               ) -> str:
        """Prometheus text format; ``queue`` maps delivery status to row count (from the DB);
        ``others`` are snapshots of other processes (the worker process) added in."""
        s = merge_snapshots([self.snapshot(), *others])
        out: list[str] = []

        def metric(name: str, kind: str, help_: str, samples: list[tuple[str, float]]) -> None:
            full = f"{PREFIX}_{name}"
            out.append(f"# HELP {full} {help_}")
            out.append(f"# TYPE {full} {kind}")
            for labels, value in samples:
                v = "NaN" if isinstance(value, float) and math.isnan(value) else f"{value:g}"
                out.append(f"{full}{labels} {v}")

        def labelled(label: str, d: Mapping[str, int]) -> list[tuple[str, float]]:
            return [(f'{{{label}="{_esc(k)}"}}', float(v)) for k, v in sorted(d.items())]

        received = s["received"]
        assert isinstance(received, dict)
        metric("deliveries_received_total", "counter",
               "New webhook deliveries verified and stored.",
               [("", float(sum(received.values())))])
        metric("deliveries_received_by_event_total", "counter",
               "New webhook deliveries stored, by X-GitHub-Event.", labelled("event", received))
        metric("deliveries_duplicate_total", "counter",
               "Deliveries acknowledged as already seen (same X-GitHub-Delivery).",
               [("", float(s["duplicates"]))])  # type: ignore[arg-type]
        metric("deliveries_rejected_total", "counter", "Requests refused, by reason.",
               labelled("reason", s["rejected"]))  # type: ignore[arg-type]
        metric("deliveries_processed_total", "counter",
               "Deliveries whose handlers all finished.", [("", float(s["processed"]))])  # type: ignore[arg-type]
        metric("deliveries_failed_total", "counter",
               "Deliveries that failed their last attempt.", [("", float(s["failed"]))])  # type: ignore[arg-type]
        metric("handler_failures_total", "counter", "Handler runs that raised.",
               [("", float(s["handler_failures"]))])  # type: ignore[arg-type]
        metric("queue_depth", "gauge", "Stored deliveries not yet done or failed, by status.",
               [(f'{{status="{k}"}}', float(queue.get(k, 0))) for k in ("queued", "processing")])
        metric("github_api_calls_total", "counter", "HTTP requests made to GitHub, by method.",
               labelled("method", s["github_calls"]))  # type: ignore[arg-type]
        rl = s["github_rate_limit_remaining"]
        metric("github_rate_limit_remaining", "gauge",
               "Last X-RateLimit-Remaining from GitHub (NaN before the first call).",
               [("", float("nan") if rl is None else float(rl))])  # type: ignore[arg-type]
        return "\n".join(out) + "\n"


def merge_snapshots(snaps: Iterable[Mapping[str, object]]) -> dict[str, object]:
    """Sum counters of several :meth:`Metrics.snapshot` dicts; the rate-limit gauge is the
    last one that is known."""
    out: dict[str, object] = {}
    for snap in snaps:
        for k, v in snap.items():
            if k == "github_rate_limit_remaining":
                if v is not None:
                    out[k] = v
                else:
                    out.setdefault(k, None)
            elif isinstance(v, dict):
                d = out.setdefault(k, {})
                assert isinstance(d, dict)
                for kk, vv in v.items():
                    d[kk] = d.get(kk, 0) + vv
            elif isinstance(v, int):
                out[k] = int(out.get(k, 0)) + v  # type: ignore[call-overload]
    return out


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


metrics = Metrics()
"""The process-wide instance."""
