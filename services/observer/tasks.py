"""Celery tasks of the observer (queue ``observe``), thin adapters: ``provely.observe`` and
``provely.observe_many`` over :mod:`.observe`, ``provely.correlate`` over
:mod:`shared.intake.correlator` (which the sweeper runs too).

Their parameters are the fields of the messages of ``shared.lifecycle.messages``, which sends
them as keywords; a message queued by the previous release in the positional form
(``[operation_id, fence]``, ``[pairs]``, ``[]``) binds to the same parameters and still runs."""

from __future__ import annotations

from typing import Any

from celery.signals import worker_process_init

from services.observer.observe import default_observer, reset_default_observer
from shared.db.session import dispose_engines, get_engine
from shared.intake.correlator import correlate_pending
from shared.lifecycle.warmup import preload, warm_up
from shared.runtime.celery_app import CORRELATE_TASK, OBSERVE_MANY_TASK, OBSERVE_TASK, app

__all__ = ["correlate", "observe", "observe_many"]


@app.task(name=OBSERVE_TASK, ignore_result=True)
def observe(operation_id: str, fence: int) -> str:
    """Read every channel of ``operation_id`` for ``fence`` (see ``services.observer.observe``)."""
    return default_observer().observe(str(operation_id), int(fence)).value


@app.task(name=OBSERVE_MANY_TASK, ignore_result=True)
def observe_many(pairs: list[list[Any]]) -> list[str]:
    """``observe`` for each ``[operation_id, fence]`` of ``pairs`` (the wakes of a correlation),
    each on a thread of its own (``Observer.observe_many``)."""
    outcomes = default_observer().observe_many([(str(op), int(fence)) for op, fence in pairs])
    return [outcome.value for outcome in outcomes]


@app.task(name=CORRELATE_TASK, ignore_result=True)
def correlate() -> int:
    """Correlate the stored webhook events that wait (``shared.intake.correlator``)."""
    return correlate_pending(get_engine())


@worker_process_init.connect
def _fresh_connections_after_fork(**_: object) -> None:
    # A forked pool process must not share the parent's sockets (database, HTTP).
    dispose_engines()
    reset_default_observer()
    warm_up()


preload()
