"""Celery task ``provely.evaluate`` (queue ``verdict``): a thin adapter over :mod:`.evaluate`.

Its parameter is the field of ``shared.lifecycle.messages.Evaluate``, sent as a keyword; a
message queued by the previous release as ``[operation_id]`` still runs."""

from __future__ import annotations

from celery.signals import worker_process_init

from services.verdict.evaluate import evaluate_operation
from shared.db.session import dispose_engines, get_engine
from shared.lifecycle.warmup import preload, warm_up
from shared.runtime.celery_app import EVALUATE_TASK, app
from shared.runtime.settings import get_settings

__all__ = ["evaluate"]


@app.task(name=EVALUATE_TASK, ignore_result=True)
def evaluate(operation_id: str) -> str | None:
    """Decide ``operation_id`` and schedule its next observation; returns the verdict."""
    decision = evaluate_operation(get_engine(), str(operation_id), settings=get_settings())
    return decision.verdict.value if decision is not None else None


@worker_process_init.connect
def _fresh_connections_after_fork(**_: object) -> None:
    dispose_engines()
    warm_up()


preload()
