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

Metric names (prefix ``campaign_bot_``; docs/deploy.md, "Metrics and alerts", says what each
is for and deploy/prometheus/ holds the alert rules built on them):

* webhook deliveries: ``deliveries_received_by_event_total{event}``,
  ``deliveries_duplicate_total``, ``deliveries_rejected_total{reason}``,
  ``deliveries_processed_total``, ``deliveries_failed_total``, ``deliveries_retried_total``,
  ``handler_failures_total``, ``delivery_lag_seconds`` (histogram: from receipt to the first
  attempt's start), ``inbox_depth{status}`` (stored deliveries queued or processing, read
  from the database at scrape time);
* screens: ``screen_queue_depth{pool}`` and ``screen_queue_oldest_wait_seconds{pool}`` (read
  from the database at scrape time), ``workflow_dispatches_total{outcome}``;
* GitHub: ``github_api_calls_total{method}``, ``github_responses_total{route,status}``
  (``status`` the class of GitHub's answer: ``2xx``, ``3xx``, ``4xx``, ``5xx``, or ``none``
  when no answer came), ``github_rate_limit_remaining{installation}``;
* ``build_info{version,python}`` (always 1).

Every labelled counter whose label values are known in advance has all its series from the
start, at 0 (Prometheus' ``rate()`` and ``increase()`` need a first sample before the first
event: "Instrumentation", Prometheus docs, "Avoid missing metrics"); the series of a pool or
an installation appear with its first screen or GitHub answer.  The unlabelled
``deliveries_received_total`` of earlier versions is gone: it was the sum of
``deliveries_received_by_event_total`` (``sum(campaign_bot_deliveries_received_by_event_total)``).

Thread-safe: the endpoint runs on the server's event loop, the worker on its own thread.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

NAMESPACE = "campaign_bot"
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
QUEUE_STATUSES = ("queued", "processing")
REJECT_REASONS = ("signature", "too_large", "malformed", "bad_request", "body_timeout", "busy")
"""Why ``/webhook`` refuses a request (:meth:`Metrics.inc_rejected`)."""
ROUTE_CLASSES = ("repos", "contents", "pulls", "issues", "collaborators", "checks", "actions",
                 "other")
"""Families of GitHub REST routes the bot calls (the path after ``/repos/OWNER/REPO/``:
``pulls/...`` is ``pulls``), the ``route`` label of ``github_responses_total``."""
STATUS_CLASSES = ("2xx", "3xx", "4xx", "5xx", "none")
HTTP_METHODS = ("GET", "POST", "PATCH", "PUT", "DELETE")
"""The methods of GitHub's REST API (``github_api_calls_total{method}``)."""
DISPATCH_OUTCOMES = ("dispatched", "forbidden", "not_found", "unprocessable", "rate_limited",
                     "server_error", "no_answer", "other")
"""``workflow_dispatches_total{outcome}``: dispatched, or why GitHub refused (by its status:
403, 404, 422, 429 or a 403 rate limit, 5xx) or gave no answer."""
LAG_BUCKETS_S = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0,
                 3600.0, math.inf)
"""``delivery_lag_seconds`` buckets: GitHub waits 10 s for the answer, not for processing;
an operator cares from seconds (interactive commands) to an hour (a stuck worker)."""


def status_class(status: int | None) -> str:
    """``2xx`` ... ``5xx`` for an HTTP status, ``none`` for no answer (None or not 1xx-5xx)."""
    if status is None or not 100 <= status <= 599:
        return "none"
    return f"{status // 100}xx"


def dispatch_outcome(status: int | None, *, rate_limited: bool = False) -> str:
    """The ``outcome`` label of a refused or unanswered workflow dispatch (GitHub's status, or
    None when no answer came); see :data:`DISPATCH_OUTCOMES`."""
    if rate_limited or status == 429:
        return "rate_limited"
    if status is None:
        return "no_answer"
    return {403: "forbidden", 404: "not_found", 422: "unprocessable"}.get(
        status, "server_error" if status >= 500 else "other")


def build_version() -> str:
    """The installed campaign-bot's version (``unknown`` when run from an uninstalled tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("campaign-bot")
    except PackageNotFoundError:
        return "unknown"


class Metrics:
    """Counters and gauges of one application.

    ``multiprocess_dir``: the directory of prometheus-client's multiprocess mode, whose files
    :meth:`exposition` merges (default: ``$PROMETHEUS_MULTIPROC_DIR`` when set, else this
    process only).  The ``inc_*`` methods count; the properties read this process's values.
    """

    def __init__(self, multiprocess_dir: str | None = None) -> None:
        self.multiprocess_dir = multiprocess_dir or os.environ.get(MULTIPROC_ENV) or None
        self.registry = CollectorRegistry()
        r = self.registry
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
            "github_rate_limit_remaining", "Last X-RateLimit-Remaining GitHub sent, by App "
            "installation id (token: a personal token).", ["installation"],
            namespace=NAMESPACE, registry=r, multiprocess_mode="mostrecent")
        self._responses = Counter(
            "github_responses", "GitHub's answers to the bot's requests, by route family and "
            "status class (none: no answer).", ["route", "status"], namespace=NAMESPACE,
            registry=r)
        self._dispatches = Counter(
            "workflow_dispatches", "Screen workflow dispatches: dispatched, or why GitHub "
            "refused or did not answer.", ["outcome"], namespace=NAMESPACE, registry=r)
        self._lag = Histogram(
            "delivery_lag", "Seconds from a webhook delivery's receipt to the start of its "
            "first attempt.", unit="seconds", buckets=LAG_BUCKETS_S, namespace=NAMESPACE,
            registry=r)
        self._build = Gauge("build_info", "The running campaign-bot: version and Python.",
                            ["version", "python"], namespace=NAMESPACE, registry=r,
                            multiprocess_mode="max")
        self._build.labels(build_version(), platform.python_version()).set(1)
        self._last_remaining: int | None = None
        self.init_series()

    def init_series(self, events: Iterable[str] = ()) -> None:
        """Create every series whose labels are known, at 0: the refusal reasons, the route
        families and status classes, the dispatch outcomes, and ``events`` (the webhook
        events the handlers subscribe to; the composition root passes them)."""
        for reason in REJECT_REASONS:
            self._rejected.labels(reason)
        for route in ROUTE_CLASSES:
            for status in STATUS_CLASSES:
                self._responses.labels(route, status)
        for outcome in DISPATCH_OUTCOMES:
            self._dispatches.labels(outcome)
        for method in HTTP_METHODS:
            self._github_calls.labels(method)
        for event in events:
            self._received_by_event.labels(event)

    # -- called by the endpoint and the worker ---------------------------------------------
    def inc_received(self, event: str) -> None:
        """One new delivery of ``event`` stored."""
        self._received_by_event.labels(event).inc()

    def delivery_started(self, received_at: dt.datetime, attempt: int) -> None:
        """A delivery received at ``received_at`` (timezone-aware) starts attempt ``attempt``
        (1 = first): observe its lag (first attempts only: a retry waits on purpose)."""
        if attempt == 1:
            lag = (dt.datetime.now(dt.UTC) - received_at).total_seconds()
            self._lag.observe(max(lag, 0.0))

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
    def github_call(self, method: str, rate_limit_remaining: int | None = None, *,
                    route: str = "other", status: int | None = 200,
                    installation: str = "token") -> None:
        """Count one request to GitHub (``method`` e.g. ``GET``; ``route`` one of
        :data:`ROUTE_CLASSES`; ``status`` GitHub's answer, None when none came) and remember
        the ``X-RateLimit-Remaining`` header of its response for ``installation`` (the App
        installation id, or ``token``), when it had one."""
        self._github_calls.labels(method.upper()).inc()
        self._responses.labels(route if route in ROUTE_CLASSES else "other",
                               status_class(status)).inc()
        if rate_limit_remaining is not None:
            self._rate_limit.labels(installation).set(int(rate_limit_remaining))
            self._last_remaining = int(rate_limit_remaining)

    def workflow_dispatch(self, outcome: str) -> None:
        """One screen workflow dispatch ended with ``outcome`` (:data:`DISPATCH_OUTCOMES`)."""
        self._dispatches.labels(outcome if outcome in DISPATCH_OUTCOMES else "other").inc()

    # -- reading (this process) ------------------------------------------------------------
    def _value(self, name: str, labels: Mapping[str, str] | None = None) -> float:
        v = self.registry.get_sample_value(f"{NAMESPACE}_{name}", dict(labels or {}))
        return 0.0 if v is None else v

    def _by(self, name: str, label: str) -> dict[str, int]:
        out: dict[str, int] = {}
        for family in self.registry.collect():
            for s in family.samples:
                if s.name == f"{NAMESPACE}_{name}" and label in s.labels and s.value:
                    out[s.labels[label]] = int(s.value)  # the series at 0 left out
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
        """The last ``X-RateLimit-Remaining`` this process saw, of any installation (None
        before the first call)."""
        return self._last_remaining

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
                   redeliveries: Mapping[str, int] | None = None,
                   pools: Mapping[str, tuple[int, float]] | None = None) -> bytes:
        """The text of ``GET /metrics``: every process's values (multiprocess mode) or this
        one's, ``inbox_depth`` from ``queue`` (delivery status -> row count), when given
        ``redeliveries`` / ``redeliveries_arrived`` from ``redeliveries`` (outcome -> row
        count of :func:`bot.inbox.recovery.redelivery_counts`) and ``screen_queue_depth`` /
        ``screen_queue_oldest_wait_seconds`` from ``pools`` (pool -> (queued screens, seconds
        the oldest has waited))."""
        scrape = CollectorRegistry()
        if self.multiprocess_dir:
            MultiProcessCollector(scrape, path=self.multiprocess_dir)
        else:
            scrape.register(self.registry)  # type: ignore[arg-type]
        scrape.register(_QueueDepth(queue))
        if redeliveries is not None:
            scrape.register(_Redeliveries(redeliveries))
        if pools is not None:
            scrape.register(_PoolQueues(pools))
        return generate_latest(scrape)

    def process_gone(self, pid: int) -> None:
        """Forget a dead process's live gauges (multiprocess mode; its counters stay)."""
        if self.multiprocess_dir:
            from prometheus_client import multiprocess

            multiprocess.mark_process_dead(pid, self.multiprocess_dir)


class _QueueDepth:
    """``inbox_depth{status}`` from row counts read at scrape time."""

    def __init__(self, counts: Mapping[str, int]) -> None:
        self.counts = counts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        g = GaugeMetricFamily(f"{NAMESPACE}_inbox_depth", "Stored webhook deliveries not yet "
                              "done or failed, by status.", labels=["status"])
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


class _PoolQueues:
    """``screen_queue_depth{pool}`` and ``screen_queue_oldest_wait_seconds{pool}`` read at
    scrape time."""

    def __init__(self, pools: Mapping[str, tuple[int, float]]) -> None:
        self.pools = pools

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily(f"{NAMESPACE}_screen_queue_depth", "Screens queued for a "
                                  "pool, not yet dispatched.", labels=["pool"])
        wait = GaugeMetricFamily(f"{NAMESPACE}_screen_queue_oldest_wait_seconds", "Seconds "
                                 "the pool's oldest queued screen has waited (0: none queued).",
                                 labels=["pool"])
        for pool, (n, oldest_s) in sorted(self.pools.items()):
            depth.add_metric([pool], float(n))
            wait.add_metric([pool], float(oldest_s))
        yield depth
        yield wait
