"""Celery signal hooks: the operation id and request id in a task's logs, queue lag, outcomes.

:func:`install_celery_hooks` connects them once per process, on the publishing side (the send
time and the request id of the work in hand go in each message's headers) and on the worker
side (the task's context is bound to its log lines, its lag is observed, its outcome counted).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import structlog

from shared.runtime.metrics import TASKS, observe_queue_lag

__all__ = ["REQUEST_ID_HEADER", "install_celery_hooks"]

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
