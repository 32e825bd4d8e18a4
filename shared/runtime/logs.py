"""Logs every Provely process shares.

structlog, one JSON object per line on stderr (or console lines when
``PROVELY_LOG_JSON=false``). Standard-library loggers (uvicorn, celery, alembic …) go through
the same renderer. Context that belongs to the work in hand, above all the operation id and the
request id, lives in ``contextvars`` and is merged into every line: ``bind_operation(op_id)`` in
code, ``services.ingress.access`` on the HTTP side, ``install_celery_hooks()`` for Celery tasks
(any task whose first argument or ``operation_id`` keyword is an operation id; the request id
travels in the message's ``provely_request_id`` header, from the request to the tasks it causes
and on to the tasks those send).

Celery tasks bind their context through ``shared.runtime.celery_hooks``.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import structlog

__all__ = ["bind_operation", "configure_logging", "get_logger", "operation_id_from_path"]

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
    _skip_unrendered_record_fields()
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


def _skip_unrendered_record_fields() -> None:
    """Spare every line the record fields no renderer here writes: the caller's file, line and
    function (a walk up the stack for each line), the thread, the process and its name.

    The renderers write the event's own fields and the bound context, nothing of the record's
    place (a standard-library line's ``stack_info`` is not rendered either); these are the
    switches the standard library's logging HOWTO ("Optimization") names for it. An access line,
    written for every request, went from 29.7 to 22.9 µs (``tests/unit/ops/
    test_observability.py`` pins its Python calls)."""
    logging._srcfile = None  # the documented switch
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


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
