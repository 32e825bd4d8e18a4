"""Logs carry the operation id; metrics are exposed under their documented names."""

from __future__ import annotations

import io
import json
import logging

import structlog
from prometheus_client import generate_latest

from shared.runtime import celery_hooks, logs, metrics


def _lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines() if line.strip()]


def test_json_logs_carry_the_bound_operation_id() -> None:
    stream = io.StringIO()
    logs.configure_logging(level="INFO", json=True, stream=stream)
    try:
        with logs.bind_operation("op_123", fence=2):
            logs.get_logger("test").info("observation.done", channel="refund_readback")
            logging.getLogger("plain.stdlib").warning("from the standard library")
        logs.get_logger("test").info("outside")
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    first, second, third = _lines(stream)
    assert first["event"] == "observation.done"
    assert first["operation_id"] == "op_123"
    assert first["fence"] == 2
    assert first["level"] == "info"
    assert "timestamp" in first
    assert second["operation_id"] == "op_123"
    assert second["event"] == "from the standard library"
    assert "operation_id" not in third


def test_a_line_costs_no_walk_up_the_stack_and_keeps_its_fields() -> None:
    """Every request writes an access line: the record fields no renderer writes (the caller's
    place, found by walking the stack; the thread and the process) are not gathered for it.
    The line holds the same fields; writing it took 71 Python calls before, 65 now."""
    import sys

    stream = io.StringIO()
    logs.configure_logging(level="INFO", json=True, stream=stream)
    log = logs.get_logger("provely.access")
    calls = 0

    def count(frame: object, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    try:
        log.info("http.request", status=200)  # the logger is cached on its first use
        with structlog.contextvars.bound_contextvars(request_id="r1"):
            sys.setprofile(count)
            try:
                log.info("http.request", status=200)
            finally:
                sys.setprofile(None)
            logging.getLogger("plain.stdlib").warning("from %s", "the standard library")
    finally:
        structlog.contextvars.clear_contextvars()
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    _, line, plain = _lines(stream)
    assert set(line) == {"event", "status", "request_id", "level", "logger", "timestamp"}
    assert set(plain) == {"event", "request_id", "level", "logger", "timestamp"}
    assert plain["event"] == "from the standard library"
    assert calls <= 65, calls


def test_operation_id_is_read_from_api_paths() -> None:
    assert logs.operation_id_from_path("/v1/operations/op_abc/action") == "op_abc"
    assert logs.operation_id_from_path("/v1/operations/op_abc") == "op_abc"
    assert logs.operation_id_from_path("/v1/operations") is None
    assert logs.operation_id_from_path("/v1/events/stripe/ws_1") is None


def test_registry_exposes_every_documented_metric() -> None:
    metrics.EVENTS_RECEIVED.labels(provider="stripe").inc()
    metrics.EVENTS_DEDUPLICATED.labels(provider="stripe").inc()
    metrics.EVENTS_REFUSED.labels(provider="stripe", reason="no_matching_signature").inc()
    metrics.OPERATION_TRANSITIONS.labels(state="VERIFIED").inc()
    metrics.OBSERVATION_LATENCY.labels(channel="c", verifier="http", status="ok").observe(0.02)
    metrics.record_verdict("VERIFIED", "all_conditions_hold")
    metrics.TASKS.labels(task="provely.observe", outcome="SUCCESS").inc()
    from datetime import UTC, datetime, timedelta

    now = datetime.now(UTC)
    metrics.observe_queue_lag("observe", now - timedelta(seconds=2), now)
    metrics.observe_queue_lag("observe", None, now)  # nothing due: nothing recorded
    registry = metrics.metrics_registry(
        [metrics.OperationsByStateCollector(lambda: {"PENDING": 3, "VERIFIED": 7})]
    )
    text = generate_latest(registry).decode()
    for name in (
        "provely_events_received_total",
        "provely_events_deduplicated_total",
        "provely_events_refused_total",
        "provely_operation_transitions_total",
        "provely_observation_latency_seconds_bucket",
        "provely_queue_lag_seconds_bucket",
        "provely_verdicts_total",
        "provely_tasks_total",
    ):
        assert name in text, name
    assert 'provely_operations{state="PENDING"} 3.0' in text
    assert 'provely_operations{state="VERIFIED"} 7.0' in text
    assert 'provely_verdicts_total{reason="all_conditions_hold",verdict="VERIFIED"}' in text


def test_a_failing_database_count_does_not_break_the_scrape() -> None:
    def broken() -> dict[str, int]:
        raise RuntimeError("database away")

    registry = metrics.metrics_registry([metrics.OperationsByStateCollector(broken)])
    text = generate_latest(registry).decode()
    assert "provely_operations" in text
    assert "provely_operations{state=" not in text


def test_task_operation_id_from_args_or_kwargs() -> None:
    assert celery_hooks._task_operation_id(["op_1", 3], {}) == "op_1"
    assert celery_hooks._task_operation_id([], {"operation_id": "op_2"}) == "op_2"
    assert celery_hooks._task_operation_id(["x"], {}) is None


def test_observe_many_names_each_operation_on_its_thread_and_keeps_the_task_context() -> None:
    import httpx

    from services.observer.observe import ObserveOutcome, Observer
    from shared.runtime.ratelimit import LocalTokenBucket
    from shared.runtime.settings import Settings

    class Logging(Observer):
        def observe(self, operation_id: str, fence: int) -> ObserveOutcome:
            logs.get_logger("test").info("reading", fence=fence)
            return ObserveOutcome.OBSERVED

    stream = io.StringIO()
    logs.configure_logging(level="INFO", json=True, stream=stream)
    observer = Logging(
        settings=Settings(),
        engine=None,  # type: ignore[arg-type]
        http=httpx.Client(),
        limiter=LocalTokenBucket(),
    )
    try:
        with structlog.contextvars.bound_contextvars(task="provely.observe_many", request_id="r1"):
            observer.observe_many([("op_a", 1), ("op_b", 2), ("op_c", 3)])
            observer.observe_many([("op_d", 4)])
    finally:
        observer.close()
        structlog.contextvars.clear_contextvars()
        structlog.reset_defaults()
        logging.getLogger().handlers.clear()
    lines = sorted(_lines(stream), key=lambda r: str(r["operation_id"]))
    assert [(r["operation_id"], r["fence"]) for r in lines] == [
        ("op_a", 1),
        ("op_b", 2),
        ("op_c", 3),
        ("op_d", 4),
    ]
    assert all(r["request_id"] == "r1" and r["task"] == "provely.observe_many" for r in lines)


def test_the_request_id_is_stamped_on_messages_and_bound_in_the_tasks_they_start() -> None:
    """Celery's own signals, as a publish and a worker fire them: the publishing side stamps
    the bound request id on the message's headers; a task started with such headers binds it
    (and its operation id) to its log lines, and a message it sends carries it on."""
    from celery import Celery, signals

    celery_app = Celery("test", set_as_current=False)

    @celery_app.task(name="test.observe")
    def observe(operation_id: str, fence: int) -> None:
        """A task like provely.observe (its first argument is the operation id)."""

    celery_hooks.install_celery_hooks()
    headers: dict[str, object] = {}
    with structlog.contextvars.bound_contextvars(request_id="req-9"):
        signals.before_task_publish.send(sender="test.observe", headers=headers, body=None)
    assert headers[celery_hooks.REQUEST_ID_HEADER] == "req-9"

    task = celery_app.tasks["test.observe"]
    task.push_request(
        id="t1", args=["op_9", 1], kwargs={}, **{celery_hooks.REQUEST_ID_HEADER: "req-9"}
    )
    try:
        signals.task_prerun.send(sender=task, task_id="t1", task=task, args=["op_9", 1], kwargs={})
        bound = structlog.contextvars.get_contextvars()
        assert bound["request_id"] == "req-9"
        assert bound["operation_id"] == "op_9"
        onward: dict[str, object] = {}
        signals.before_task_publish.send(sender="provely.evaluate", headers=onward, body=None)
        assert onward[celery_hooks.REQUEST_ID_HEADER] == "req-9"
        signals.task_postrun.send(
            sender=task, task_id="t1", task=task, args=["op_9", 1], kwargs={}, state="SUCCESS"
        )
        assert "request_id" not in structlog.contextvars.get_contextvars()
    finally:
        task.pop_request()
        structlog.contextvars.clear_contextvars()
