"""Every message Provely sends to its queues, and the one function that sends each.

A message is a frozen dataclass whose fields are its task's keyword arguments; it travels as
those keywords (``kwargs`` of the Celery message), never as a positional list:

- :class:`Observe` → ``provely.observe`` (queue ``observe``), sent by :func:`observe`;
- :class:`ObserveMany` → ``provely.observe_many`` (queue ``observe``), by :func:`observe_many`;
- :class:`Evaluate` → ``provely.evaluate`` (queue ``verdict``), by :func:`evaluate`;
- :class:`Correlate` → ``provely.correlate`` (queue ``correlate``), by :func:`correlate`.

Messages only wake workers: the record is the database (``shared.lifecycle.scheduling`` writes
the fence and due time of every observation in the caller's transaction), so every send happens
after that transaction commits — directly after ``session_scope`` returns, or through
:func:`after_commit` when the caller is inside a transaction it does not own. :func:`observe`
alone applies the scheduler's lead time (``OBSERVE_LEAD_S``: delivered a little early, the task
waits for the due time) and the broker's countdown bound (``MAX_COUNTDOWN_S``: a later
observation is left to the sweeper).

The tasks (``services.observer.tasks``, ``services.verdict.tasks``) take the same parameters by
name, so a message queued by an older release in the positional form (``[operation_id, fence]``,
``[pairs]``, ``[operation_id]``) still runs after an upgrade; that form is accepted for one
release.

To add a message: a frozen dataclass here with its task name, a sending function beside the
others, its task name in ``shared.runtime.queues`` and its route in ``shared.runtime.celery_app``,
and a task whose
parameters are the dataclass's fields.

Errors: :func:`observe` and :func:`observe_many` never raise for a broker failure (they return
False; the sweeper re-sends what is overdue). :func:`evaluate` and :func:`correlate` raise the
broker's error to their caller, which decides whether to log it or fail its task.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from sqlalchemy import event as orm_event

from shared.lifecycle.scheduling import OBSERVE_LEAD_S
from shared.runtime import queues

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = [
    "Correlate",
    "Evaluate",
    "Message",
    "Observe",
    "ObserveMany",
    "after_commit",
    "correlate",
    "evaluate",
    "observe",
    "observe_many",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Observe:
    """Read every channel of ``operation_id`` for ``fence`` (stale when the fence moved on)."""

    TASK: ClassVar[str] = queues.OBSERVE_TASK
    operation_id: str
    fence: int

    def kwargs(self) -> dict[str, Any]:
        return {"operation_id": self.operation_id, "fence": self.fence}


@dataclass(frozen=True, slots=True)
class ObserveMany:
    """:class:`Observe` for each ``(operation_id, fence)`` of ``pairs``, read side by side."""

    TASK: ClassVar[str] = queues.OBSERVE_MANY_TASK
    pairs: tuple[tuple[str, int], ...]

    def kwargs(self) -> dict[str, Any]:
        return {"pairs": [[operation_id, fence] for operation_id, fence in self.pairs]}


@dataclass(frozen=True, slots=True)
class Evaluate:
    """Decide ``operation_id`` over its readings and schedule what comes next."""

    TASK: ClassVar[str] = queues.EVALUATE_TASK
    operation_id: str

    def kwargs(self) -> dict[str, Any]:
        return {"operation_id": self.operation_id}


@dataclass(frozen=True, slots=True)
class Correlate:
    """Link every stored webhook event that waits with the operations it names."""

    TASK: ClassVar[str] = queues.CORRELATE_TASK

    def kwargs(self) -> dict[str, Any]:
        return {}


Message = Observe | ObserveMany | Evaluate | Correlate
"""Any message of this module."""


def _send(message: Message, *, countdown_s: float = 0.0) -> None:
    # Imported on first send: building the Celery app is left to the processes that send.
    from shared.runtime.celery_app import send

    send(message.TASK, message.kwargs(), countdown_s=countdown_s)


def observe(operation_id: str, fence: int, *, countdown_s: float) -> bool:
    """Send :class:`Observe` for a fence the caller's committed transaction scheduled, due in
    ``countdown_s``; delivered ``OBSERVE_LEAD_S`` early (the task waits for the due time).

    Returns False when nothing was sent: the countdown is longer than the broker may hold (the
    sweeper sends it when due) or the broker is unreachable (the sweeper re-sends it once it is
    overdue). Never raises for a broker failure: the schedule in the database is the record.
    """
    if countdown_s > queues.MAX_COUNTDOWN_S:
        return False
    try:
        _send(Observe(operation_id, fence), countdown_s=countdown_s - OBSERVE_LEAD_S)
    except Exception:  # the broker is down: the sweeper recovers from next_observation_at
        log.warning(
            "observe message for %s fence %s not sent",
            operation_id,
            fence,
            exc_info=True,
            extra={"operation_id": operation_id, "fence": fence},
        )
        return False
    return True


def observe_many(wakes: Sequence[tuple[str, int]]) -> bool:
    """Observe each of ``wakes`` (``(operation_id, fence)``) at once: :class:`ObserveMany`
    messages of at most ``WAKES_PER_MESSAGE`` pairs each, in order, all through one producer
    (pipelined on Redis); call only after the transaction that moved the fences commits.

    Returns False when the broker could not take them (some may have gone): the sweeper
    re-sends what is overdue (one :class:`Observe` per operation). Never raises for a broker
    failure, as :func:`observe`.
    """
    if not wakes:
        return True
    pairs = tuple((operation_id, fence) for operation_id, fence in wakes)
    step = queues.WAKES_PER_MESSAGE
    messages = [ObserveMany(pairs[start : start + step]) for start in range(0, len(pairs), step)]
    from shared.runtime.celery_app import send_many

    try:
        send_many(ObserveMany.TASK, [message.kwargs() for message in messages])
    except Exception:  # the broker is down: the sweeper recovers from next_observation_at
        log.warning("%d observe messages not sent", len(wakes), exc_info=True)
        return False
    return True


def evaluate(operation_id: str, *, countdown_s: float = 0.0) -> None:
    """Send :class:`Evaluate` (after a reading was stored, or for a deadline ``countdown_s``
    away); raises the broker's error."""
    _send(Evaluate(operation_id), countdown_s=countdown_s)


def correlate() -> None:
    """Send :class:`Correlate` (after a batch of webhook events was stored); raises the broker's
    error."""
    _send(Correlate())


def after_commit(session: Session, send: Callable[[], object]) -> None:
    """Run ``send`` once the transaction of ``session`` commits (never when it rolls back):
    for a sender inside a transaction it does not own."""

    def run(_session: Session) -> None:
        send()

    orm_event.listen(session, "after_commit", run, once=True)
