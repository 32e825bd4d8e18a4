"""Metrics every Provely process shares: Prometheus objects defined once, and where they are served.

Metric objects live here, on the default registry, so every service
increments the same names. Processes that fork (uvicorn ``--workers``, Celery prefork) set
``PROMETHEUS_MULTIPROC_DIR`` before this module is imported (``provely serve`` does it) and
``metrics_registry()`` then aggregates the per-process files. ``start_metrics_server(port)``
serves a process's metrics on a port of their own (``PROVELY_METRICS_PORT``, on
``PROVELY_METRICS_HOST``, loopback unless configured), never on the API's port. The
database-wide gauges (``provely_operations``) are not per process: only ``provely serve
metrics`` exports them (:class:`OperationsByStateCollector`), so adding up every target never
counts an operation twice.

Metric names (:data:`LABEL_VALUES` lists the values a label takes where they are a closed set):

- ``provely_events_received_total{provider}``: signed deliveries accepted (new or repeated).
- ``provely_events_deduplicated_total{provider}``: deliveries of an event already stored.
- ``provely_events_refused_total{provider,reason}``: deliveries refused and stored nowhere,
  every kind (:data:`REFUSAL_REASONS`).
- ``provely_events_ignored_total{provider,reason}``: new events stored that no registered
  contract can count (:data:`IGNORE_REASONS`: ``api_version``, ``type_unread``, counted by the
  intake), and events linked to an operation they are older than (``before_operation``, counted
  by the process that correlates, once per event and operation); the operation resource names
  those linked to it (``blocked_by``).
- ``provely_operations{state}``: operations by state, counted in the database at scrape time.
- ``provely_operation_transitions_total{state}``: state changes written, by the new state.
- ``provely_observation_latency_seconds{channel,verifier,status}``: one channel reading.
- ``provely_queue_lag_seconds{queue}``: how late a task started after it was due.
- ``provely_verdicts_total{verdict,reason}``: verdicts decided by the engine (final or not).
- ``provely_tasks_total{task,outcome}``: Celery tasks run, by outcome.
- ``provely_http_requests_total{handler,method,status}`` and
  ``provely_http_request_duration_seconds{handler,method,status}``: the ingress's requests, by
  route template (``prometheus-fastapi-instrumentator``; ``services.ingress.access``).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shared.core.types import OperationState, Verdict
from shared.runtime.logs import get_logger

__all__ = [
    "EVENTS_DEDUPLICATED",
    "EVENTS_IGNORED",
    "EVENTS_RECEIVED",
    "EVENTS_REFUSED",
    "IGNORE_REASONS",
    "LABEL_VALUES",
    "OBSERVATION_LATENCY",
    "OPERATION_TRANSITIONS",
    "QUEUE_LAG",
    "REFUSAL_REASONS",
    "TASKS",
    "VERDICTS",
    "OperationsByStateCollector",
    "mark_process_dead",
    "metrics_registry",
    "observe_queue_lag",
    "record_verdict",
    "start_metrics_server",
]

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

# --------------------------------------------------------------------------------------------
# Metric objects (import these; never define a second metric of the same name elsewhere)
# --------------------------------------------------------------------------------------------

EVENTS_RECEIVED = Counter(
    "provely_events_received_total",
    "Provider deliveries whose signature verified (new or repeated).",
    ["provider"],
)
EVENTS_DEDUPLICATED = Counter(
    "provely_events_deduplicated_total",
    "Deliveries of an event already stored (answered 200, nothing written).",
    ["provider"],
)
EVENTS_REFUSED = Counter(
    "provely_events_refused_total",
    "Deliveries refused and stored nowhere (bad signature, too large, malformed …).",
    ["provider", "reason"],
)
EVENTS_IGNORED = Counter(
    "provely_events_ignored_total",
    "Events that cannot count: for no registered contract (its API version, its type), or for "
    "an operation it is older than.",
    ["provider", "reason"],
)
OPERATION_TRANSITIONS = Counter(
    "provely_operation_transitions_total",
    "Operation state changes written, by the state entered.",
    ["state"],
)
OBSERVATION_LATENCY = Histogram(
    "provely_observation_latency_seconds",
    "Time one channel reading took (readback request or event query).",
    ["channel", "verifier", "status"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0),
)
QUEUE_LAG = Histogram(
    "provely_queue_lag_seconds",
    "How late a task started after it was due (ETA or publish time).",
    ["queue"],
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0),
)
VERDICTS = Counter(
    "provely_verdicts_total",
    "Verdicts decided by the engine, by verdict and reason.",
    ["verdict", "reason"],
)
TASKS = Counter(
    "provely_tasks_total",
    "Celery tasks run by this process, by task name and outcome.",
    ["task", "outcome"],
)


REFUSAL_REASONS: frozenset[str] = frozenset(
    {
        # the request: no such endpoint, wrong method, too large, or not storable now
        "unknown_endpoint",
        "method_not_allowed",
        "body_too_large",
        "client_disconnected",
        "unavailable",
        "internal_error",
        # the signature (``shared.trust.signatures.SignatureError.reason``)
        "missing_header",
        "malformed_header",
        "no_v1_signature",
        "no_matching_signature",
        "timestamp_out_of_tolerance",
        "no_secret",
        # the verified body (``shared.intake.parse.MalformedEvent.reason``)
        "malformed_json",
        "malformed_event",
        "missing_event_id",
        "missing_event_type",
        "missing_event_time",
    }
)
"""Every ``reason`` of ``provely_events_refused_total`` (a test keeps it in step with the
reasons the intake, the signature schemes and the event parser give)."""

IGNORE_REASONS: frozenset[str] = frozenset({"api_version", "before_operation", "type_unread"})
"""Every ``reason`` of ``provely_events_ignored_total``
(``shared.intake.contracts.uncounted_by_contracts`` at intake, ``shared.intake.ignored`` at
correlation)."""

_STATES = frozenset(state.value for state in OperationState)
_VERDICTS = frozenset(verdict.value for verdict in Verdict)

LABEL_VALUES: dict[str, dict[str, frozenset[str] | None]] = {
    "provely_events_received_total": {"provider": None},
    "provely_events_deduplicated_total": {"provider": None},
    "provely_events_refused_total": {"provider": None, "reason": REFUSAL_REASONS},
    "provely_events_ignored_total": {"provider": None, "reason": IGNORE_REASONS},
    "provely_operations": {"state": _STATES},
    "provely_operation_transitions_total": {"state": _STATES},
    "provely_observation_latency_seconds": {
        "channel": None,
        "verifier": None,
        "status": None,
    },
    "provely_queue_lag_seconds": {
        "queue": frozenset({"observe", "correlate", "verdict", "unknown"})
    },
    "provely_verdicts_total": {"verdict": _VERDICTS, "reason": None},
    "provely_tasks_total": {"task": None, "outcome": None},
    "provely_http_requests_total": {"handler": None, "method": None, "status": None},
    "provely_http_request_duration_seconds": {"handler": None, "method": None, "status": None},
}
"""Every metric Provely exports, its labels and, where they are a closed set, their values (None:
open, such as a provider or a route template). Documentation (alerts, dashboards) may only name
what is here; a test checks docs/operations.md against it."""


def record_verdict(verdict: str, reason: str | None) -> None:
    """Count one decided verdict (call once per evaluation that wrote a decision)."""
    VERDICTS.labels(verdict=verdict, reason=reason or "").inc()


def observe_queue_lag(queue: str, due_at: datetime | None, now: datetime) -> None:
    """Record how late work due at ``due_at`` started at ``now`` (negative lags count as 0)."""
    if due_at is None:
        return
    if due_at.tzinfo is None:
        due_at = due_at.replace(tzinfo=UTC)
    QUEUE_LAG.labels(queue=queue).observe(max(0.0, (now - due_at).total_seconds()))


class OperationsByStateCollector(Collector):
    """``provely_operations{state}``: counted in the database each time it is scraped.

    A gauge kept by increments would drift across processes and restarts; the table is the
    record, so the scrape asks it. ``count_by_state`` returns ``{state: count}``.
    """

    def __init__(self, count_by_state: Callable[[], dict[str, int]]) -> None:
        self._count_by_state = count_by_state

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "provely_operations", "Operations by state (from the database).", labels=["state"]
        )
        try:
            counts = self._count_by_state()
        except Exception:  # a scrape must not fail because the database is briefly away
            get_logger(__name__).warning("metrics.operations_by_state_failed", exc_info=True)
            counts = {}
        for state, count in sorted(counts.items()):
            family.add_metric([state], float(count))
        yield family


class _DefaultRegistry(Collector):
    """Everything on this process's default registry (single-process mode)."""

    def collect(self) -> Iterable[Any]:
        yield from REGISTRY.collect()


def metrics_registry(extra: Iterable[Collector] = ()) -> CollectorRegistry:
    """A registry to expose: this process's metrics (or, when running multi-process, every
    process's files aggregated) plus ``extra`` collectors such as the operations by state."""
    registry = CollectorRegistry()
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    else:
        registry.register(_DefaultRegistry())
    for collector in extra:
        registry.register(collector)
    return registry


def start_metrics_server(
    port: int, *, addr: str = "127.0.0.1", extra: Iterable[Collector] = ()
) -> None:
    """Serve this process's metrics (aggregated in multi-process mode) on ``addr:port``, in a
    thread (loopback unless told otherwise: the figures are the operator's, not the public's);
    ``extra`` collectors are added (the database-wide gauges of ``provely serve metrics``)."""
    from prometheus_client import start_http_server

    start_http_server(port, addr=addr, registry=metrics_registry(extra))


def mark_process_dead(pid: int) -> None:
    """Drop a finished child process's live gauges (multi-process mode only)."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid)  # type: ignore[no-untyped-call]
