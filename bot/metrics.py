"""Counters and gauges for ``GET /metrics``, on prometheus-client (text exposition 0.0.4).

Why prometheus-client: it formats values exactly (a counter of 1,234,567 is written
``1.234567e+06``, every digit kept, where a hand-written ``{:g}`` gave ``1.23457e+06``),
escapes label values, and merges processes with its multiprocess mode.

One :class:`Metrics` object per application, shared by the webhook endpoint, the worker and
the GitHub adapter (:class:`bot.github.pygithub.PyGithubPort` calls :meth:`Metrics.github_call`
once per HTTP request to GitHub).  The queue depth is read from the database at scrape time
(:meth:`Metrics.exposition`), so it survives restarts.

Worker process: ``campaign-bot serve`` runs its worker as a child process.  It sets
``PROMETHEUS_MULTIPROC_DIR`` (a fresh directory) before prometheus-client is first imported,
so both processes keep their values in files there, and the parent's scrape merges them
(:class:`prometheus_client.multiprocess.MultiProcessCollector`): counters are summed, the
rate-limit gauge is the most recent value any process set.  Without that variable (the thread
worker, tests) values live in this process only.

Metric names (prefix ``campaign_bot_``): ``deliveries_received_total``,
``deliveries_received_by_event_total{event}``, ``deliveries_duplicate_total``,
``deliveries_rejected_total{reason}``, ``deliveries_processed_total``,
``deliveries_failed_total``, ``deliveries_retried_total``, ``handler_failures_total``,
``queue_depth{status}``, ``github_api_calls_total{method}``, ``github_rate_limit_remaining``.

Thread-safe: the endpoint runs on the server's event loop, the worker on its own thread.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

NAMESPACE = "campaign_bot"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
QUEUE_STATUSES = ("queued", "processing")


class Metrics:
    """Counters and gauges of one application.

    ``multiprocess_dir``: the directory of prometheus-client's multiprocess mode, whose files
    :meth:`exposition` merges (default: ``$PROMETHEUS_MULTIPROC_DIR`` when set, else this
    process only).  ``rate_limit_unknown``: start the rate-limit gauge at NaN; a worker
    process passes False, so that a restarted worker does not hide the last value another
    process saw.  The ``inc_*`` methods count; the properties read this process's values.
    """

    def __init__(self, multiprocess_dir: str | None = None, *,
                 rate_limit_unknown: bool = True) -> None:
        self.multiprocess_dir = multiprocess_dir or os.environ.get(MULTIPROC_ENV) or None
        self.registry = CollectorRegistry()
        r = self.registry
        self._received = Counter("deliveries_received", "New webhook deliveries verified and "
                                 "stored.", namespace=NAMESPACE, registry=r)
        self._received_by_event = Counter(
            "deliveries_received_by_event", "New webhook deliveries stored, by X-GitHub-Event.",
            ["event"], namespace=NAMESPACE, registry=r)
        self._duplicates = Counter(
            "deliveries_duplicate", "Deliveries acknowledged as already seen (same "
            "X-GitHub-Delivery).", namespace=NAMESPACE, registry=r)
        self._rejected = Counter("deliveries_rejected", "Requests refused, by reason.",
                                 ["reason"], namespace=NAMESPACE, registry=r)
        self._processed = Counter("deliveries_processed", "Deliveries whose handlers all "
                                  "finished.", namespace=NAMESPACE, registry=r)
        self._failed = Counter("deliveries_failed", "Deliveries that failed their last "
                               "attempt.", namespace=NAMESPACE, registry=r)
        self._retried = Counter("deliveries_retried", "Delivery attempts that failed and were "
                                "scheduled again.", namespace=NAMESPACE, registry=r)
        self._handler_failures = Counter("handler_failures", "Handler runs that raised.",
                                         namespace=NAMESPACE, registry=r)
        self._github_calls = Counter("github_api_calls", "HTTP requests made to GitHub, by "
                                     "method.", ["method"], namespace=NAMESPACE, registry=r)
        self._rate_limit = Gauge(
            "github_rate_limit_remaining", "Last X-RateLimit-Remaining from GitHub (NaN before "
            "the first call).", namespace=NAMESPACE, registry=r,
            multiprocess_mode="mostrecent")
        if rate_limit_unknown or not self.multiprocess_dir:
            self._rate_limit.set(math.nan)

    # -- called by the endpoint and the worker ---------------------------------------------
    def inc_received(self, event: str) -> None:
        """One new delivery of ``event`` stored."""
        self._received.inc()
        self._received_by_event.labels(event).inc()

    def inc_duplicate(self) -> None:
        """One delivery acknowledged as a duplicate (not stored, not processed)."""
        self._duplicates.inc()

    def inc_rejected(self, reason: str) -> None:
        """One request refused for ``reason`` (signature, too_large, malformed, bad_request;
        body_timeout and busy from :class:`bot.inbox.limits.BodyLimits`)."""
        self._rejected.labels(reason).inc()

    def inc_processed(
        self, *, failed: bool, handler_failures: int = 0, retry: bool = False, count: int = 1
    ) -> None:
        """``count`` delivery attempts finished: done, scheduled for retry, or failed for
        good; ``handler_failures`` handler runs raised in them."""
        if handler_failures:
            self._handler_failures.inc(handler_failures)
        if retry:
            self._retried.inc(count)
        elif failed:
            self._failed.inc(count)
        else:
            self._processed.inc(count)

    # -- called by the GitHub adapter ------------------------------------------------------
    def github_call(self, method: str, rate_limit_remaining: int | None = None) -> None:
        """Count one HTTP request to GitHub (``method`` e.g. ``GET``) and remember the
        ``X-RateLimit-Remaining`` header of its response, when it had one."""
        self._github_calls.labels(method.upper()).inc()
        if rate_limit_remaining is not None:
            self._rate_limit.set(int(rate_limit_remaining))

    # -- reading (this process) ------------------------------------------------------------
    def _value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        v = self.registry.get_sample_value(f"{NAMESPACE}_{name}", dict(labels or {}))
        return 0.0 if v is None else v

    def _by(self, name: str, label: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for family in self.registry.collect():
            for s in family.samples:
                if s.name == f"{NAMESPACE}_{name}" and label in s.labels:
                    out[s.labels[label]] = int(s.value)
        return out

    @property
    def processed(self) -> int:
        """Deliveries done."""
        return int(self._value("deliveries_processed_total"))

    @property
    def failed(self) -> int:
        """Deliveries failed for good."""
        return int(self._value("deliveries_failed_total"))

    @property
    def retries_scheduled(self) -> int:
        """Failed attempts scheduled again."""
        return int(self._value("deliveries_retried_total"))

    @property
    def handler_failures(self) -> int:
        """Handler runs that raised."""
        return int(self._value("handler_failures_total"))

    @property
    def duplicates(self) -> int:
        """Deliveries acknowledged as duplicates."""
        return int(self._value("deliveries_duplicate_total"))

    @property
    def received(self) -> dict[str, int]:
        """New deliveries stored, by event."""
        return self._by("deliveries_received_by_event_total", "event")

    @property
    def rejected(self) -> dict[str, int]:
        """Requests refused, by reason."""
        return self._by("deliveries_rejected_total", "reason")

    @property
    def github_calls(self) -> dict[str, int]:
        """Requests to GitHub, by method."""
        return self._by("github_api_calls_total", "method")

    @property
    def github_rate_limit_remaining(self) -> int | None:
        """The last ``X-RateLimit-Remaining`` seen (None before the first call)."""
        v = self._value("github_rate_limit_remaining")
        return None if math.isnan(v) else int(v)

    def snapshot(self) -> dict[str, Any]:
        """Every value of this process as a plain dict (logs, tests)."""
        return {
            "received": self.received, "duplicates": self.duplicates,
            "rejected": self.rejected, "processed": self.processed, "failed": self.failed,
            "handler_failures": self.handler_failures,
            "retries_scheduled": self.retries_scheduled, "github_calls": self.github_calls,
            "github_rate_limit_remaining": self.github_rate_limit_remaining,
        }

    # -- exposition ------------------------------------------------------------------------
    def exposition(self, queue: Mapping[str, int],
                   redeliveries: Mapping[str, int] | None = None) -> bytes:
        """The text of ``GET /metrics``: every process's values (multiprocess mode) or this
        one's, ``queue_depth`` from ``queue`` (delivery status -> row count) and, when given,
        ``redeliveries`` / ``redeliveries_arrived`` from ``redeliveries`` (outcome -> row
        count of :func:`bot.inbox.recovery.redelivery_counts`)."""
        scrape = CollectorRegistry()
        if self.multiprocess_dir:
            MultiProcessCollector(scrape, path=self.multiprocess_dir)
        else:
            scrape.register(self.registry)  # type: ignore[arg-type]
        scrape.register(_QueueDepth(queue))
        if redeliveries is not None:
            scrape.register(_Redeliveries(redeliveries))
        return generate_latest(scrape)

    def process_gone(self, pid: int) -> None:
        """Forget a dead process's live gauges (multiprocess mode; its counters stay)."""
        if self.multiprocess_dir:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, self.multiprocess_dir)


class _QueueDepth:
    """``queue_depth{status}`` from row counts read at scrape time."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(f"{NAMESPACE}_queue_depth", "Stored deliveries not yet done or "
                              "failed, by status.", labels=["status"])
        for status in QUEUE_STATUSES:
            g.add_metric([status], float(self.counts.get(status, 0)))
        yield g


class _Redeliveries:
    """``redeliveries{outcome}`` and ``redeliveries_arrived`` read at scrape time."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(f"{NAMESPACE}_redeliveries", "Missed webhook deliveries the bot "
                              "asked GitHub to redeliver, by outcome (requested, refused, "
                              "error).", labels=["outcome"])
        for outcome in ("requested", "refused", "error"):
            g.add_metric([outcome], float(self.counts.get(outcome, 0)))
        yield g
        yield GaugeMetricFamily(f"{NAMESPACE}_redeliveries_arrived", "Asked-for redeliveries "
                                "whose GUID the inbox now holds.",
                                value=float(self.counts.get("arrived", 0)))
