"""Logs and metrics every Provely process shares.

Logs: structlog, one JSON object per line on stderr (or console lines when
``PROVELY_LOG_JSON=false``). Standard-library loggers (uvicorn, celery, alembic …) go through
the same renderer. Context that belongs to the work in hand, above all the operation id and the
request id, lives in ``contextvars`` and is merged into every line: ``bind_operation(op_id)`` in
code, ``services.ingress.access`` on the HTTP side, ``install_celery_hooks()`` for Celery tasks
(any task whose first argument or ``operation_id`` keyword is an operation id; the request id
travels in the message's ``provely_request_id`` header, from the request to the tasks it causes
and on to the tasks those send).

Metrics: Prometheus objects defined once here, on the default registry, so every service
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

import logging
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import structlog
from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from shared.core.types import OperationState, Verdict

__all__ = [
    "EVENTS_DEDUPLICATED",
    "EVENTS_RECEIVED",
    "EVENTS_REFUSED",
    "LABEL_VALUES",
    "OBSERVATION_LATENCY",
    "OPERATION_TRANSITIONS",
    "QUEUE_LAG",
    "REFUSAL_REASONS",
    "REQUEST_ID_HEADER",
    "TASKS",
    "VERDICTS",
    "OperationsByStateCollector",
    "bind_operation",
    "configure_logging",
    "get_logger",
    "install_celery_hooks",
    "mark_process_dead",
    "metrics_registry",
    "observe_queue_lag",
    "operation_id_from_path",
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
        "unstorable",
    }
)
"""Every ``reason`` of ``provely_events_refused_total`` (a test keeps it in step with the
reasons the intake, the signature schemes and the event parser give)."""

_STATES = frozenset(state.value for state in OperationState)
_VERDICTS = frozenset(verdict.value for verdict in Verdict)

LABEL_VALUES: dict[str, dict[str, frozenset[str] | None]] = {
    "provely_events_received_total": {"provider": None},
    "provely_events_deduplicated_total": {"provider": None},
    "provely_events_refused_total": {"provider": None, "reason": REFUSAL_REASONS},
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


# --------------------------------------------------------------------------------------------
# Logging
# --------------------------------------------------------------------------------------------

_SHARED_PROCESSORS: list[Any] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
]


def configure_logging(*, level: str = "INFO", json: bool = True, stream: Any = None) -> None:
    """Route structlog and the standard library through one renderer on ``stream`` (stderr)."""
    renderer: Any = (
        structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    )
    formatter = structlog.stdlib.ProcessorFormatter(
        # A standard-library line's ``extra={...}`` become fields (``operation_id`` above all).
        foreign_pre_chain=[*_SHARED_PROCESSORS, structlog.stdlib.ExtraAdder()],
        processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta,
            structlog.processors.format_exc_info,
            renderer,
        ],
    )
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(formatter)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "celery", "kombu"):
        named = logging.getLogger(name)
        named.handlers.clear()
        named.propagate = True
    # billiard (Celery's pool) logs to "multiprocessing", which does not propagate: give it the
    # same handler, or its lines reach stderr as plain text through logging's last resort.
    pool = logging.getLogger("multiprocessing")
    pool.handlers.clear()
    pool.addHandler(handler)
    pool.setLevel(logging.WARNING)  # its info lines are each pool process's start
    # Warnings (a library's deprecation, Celery's "running as root") become log lines too.
    logging.captureWarnings(True)
    structlog.configure(
        processors=[
            # A line under the level costs nothing more than this check (an access line per
            # request under PROVELY_LOG_LEVEL=WARNING, say).
            structlog.stdlib.filter_by_level,
            *_SHARED_PROCESSORS,
            structlog.stdlib.ProcessorFormatter.wrap_for_formatter,
        ],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def get_logger(name: str | None = None) -> Any:
    """A structlog logger; every line carries the bound context (operation id …)."""
    return structlog.get_logger(name)


@contextmanager
def bind_operation(operation_id: str | None, **extra: Any) -> Iterator[None]:
    """Bind ``operation_id`` (and any extra keys) to every log line inside the block."""
    values = {k: v for k, v in {"operation_id": operation_id, **extra}.items() if v is not None}
    with structlog.contextvars.bound_contextvars(**values):
        yield


def operation_id_from_path(path: str) -> str | None:
    """The operation id of an API path (``/v1/operations/op_…``), or None."""
    parts = path.strip("/").split("/")
    if len(parts) >= 3 and parts[0] == "v1" and parts[1] == "operations":
        candidate = parts[2]
        if candidate.startswith("op_"):
            return candidate
    return None


# --------------------------------------------------------------------------------------------
# Celery: operation id in the logs, queue lag, task outcomes
# --------------------------------------------------------------------------------------------

_CELERY_HOOKS_INSTALLED = False
_SENT_AT_HEADER = "provely_sent_at"
REQUEST_ID_HEADER = "provely_request_id"
"""The Celery message header that carries the request id of the HTTP request (``X-Request-Id``)
that caused the task, directly or through the tasks in between."""


def _task_operation_id(args: Any, kwargs: Any) -> str | None:
    if isinstance(kwargs, dict):
        value = kwargs.get("operation_id")
        if isinstance(value, str):
            return value
    if isinstance(args, list | tuple) and args and isinstance(args[0], str):
        first: str = args[0]
        if first.startswith("op_"):
            return first
    return None


def _parse_time(value: Any) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        return datetime.fromtimestamp(float(value), UTC)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


def install_celery_hooks() -> None:
    """Connect Celery signals once per process (publisher and worker sides).

    - publishing: stamps the send time on each message (for the lag of tasks without an ETA) and
      the request id of the work in hand (an HTTP request, or the task that sends this one);
    - before a task: binds the operation id and the request id to the logs and records the
      queue lag;
    - after a task: unbinds and counts the outcome.
    """
    global _CELERY_HOOKS_INSTALLED
    if _CELERY_HOOKS_INSTALLED:
        return
    from celery import signals

    def before_publish(headers: dict[str, Any] | None = None, **_: Any) -> None:
        if headers is not None:
            headers.setdefault(_SENT_AT_HEADER, time.time())
            request_id = structlog.contextvars.get_contextvars().get("request_id")
            if isinstance(request_id, str):
                headers.setdefault(REQUEST_ID_HEADER, request_id)

    def prerun(task: Any = None, args: Any = None, kwargs: Any = None, **_: Any) -> None:
        structlog.contextvars.clear_contextvars()
        operation_id = _task_operation_id(args, kwargs)
        bind: dict[str, Any] = {"task": getattr(task, "name", None)}
        if operation_id:
            bind["operation_id"] = operation_id
        structlog.contextvars.bind_contextvars(**bind)
        request = getattr(task, "request", None)
        if request is None:
            return
        request_id = request.get(REQUEST_ID_HEADER)
        if isinstance(request_id, str):
            structlog.contextvars.bind_contextvars(request_id=request_id)
        due = _parse_time(getattr(request, "eta", None))
        if due is None:
            due = _parse_time(request.get(_SENT_AT_HEADER))
        delivery = getattr(request, "delivery_info", None) or {}
        queue = delivery.get("routing_key") or delivery.get("queue") or "unknown"
        observe_queue_lag(str(queue), due, datetime.now(UTC))

    def postrun(task: Any = None, state: Any = None, **_: Any) -> None:
        TASKS.labels(task=getattr(task, "name", "unknown"), outcome=str(state or "unknown")).inc()
        structlog.contextvars.clear_contextvars()

    signals.before_task_publish.connect(before_publish, weak=False)
    signals.task_prerun.connect(prerun, weak=False)
    signals.task_postrun.connect(postrun, weak=False)
    _CELERY_HOOKS_INSTALLED = True
