"""The durable observation schedule: fences, ``next_observation_at`` and wake-ups.

Every scheduled observation gets a new **fence** number (``operations.fence``) and a due time
(``operations.next_observation_at``), written in the caller's transaction. The ``observe``
message sent after commit carries the fence; a message whose fence is no longer the operation's
is stale and dropped, and the observation of a fence is stored once (unique operation, fence,
channel), so a message delivered twice, a wake and a sweeper re-send never make two readings of
one fence.

``enqueued_at`` is when a message for the current fence was last sent. A due time further away
than the broker may safely hold a countdown (``MAX_COUNTDOWN_S``) is left to the sweeper: no
message now, ``enqueued_at`` empty, and the sweeper sends it as it comes due.

Errors: :class:`ScheduleConflict` when the operation's fence moved under the caller (another
writer scheduled first); the caller re-reads and decides again.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from sqlalchemy import select, text, tuple_, update
from sqlalchemy.orm.attributes import set_committed_value

from shared.core.types import OperationState
from shared.db.models import Observation, Operation
from shared.db.sql import one_of

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

__all__ = [
    "OBSERVABLE_STATES",
    "OBSERVE_LEAD_S",
    "WAKE_CLOCK_MARGIN",
    "ScheduleConflict",
    "dispatch_observe",
    "message_reads_after",
    "schedule_observation",
    "wake",
    "wake_for_events",
]

log = logging.getLogger(__name__)

OBSERVABLE_STATES = (
    OperationState.ACTION_ACCEPTED.value,
    OperationState.OBSERVING.value,
    OperationState.PENDING.value,
)
"""States in which an operation is observed (its action was reported, no final verdict)."""


OBSERVE_LEAD_S = 0.2
"""How early an ``observe`` message is delivered before its due time; the task prepares, then
waits until ``next_observation_at`` before it reads (never longer than this lead)."""


WAKE_CLOCK_MARGIN = timedelta(seconds=1)
"""How much later than an event's arrival a pending ``observe`` message must have been sent for
a wake to keep it (see :func:`message_reads_after`): the two times come from the clocks of
different processes (the intake stamps ``received_at``, the sender ``enqueued_at``)."""


class ScheduleConflict(RuntimeError):
    """The operation's fence changed since it was read; nothing was scheduled."""


def _max_countdown_s() -> float:
    from shared.celery_app import MAX_COUNTDOWN_S

    return MAX_COUNTDOWN_S


def schedule_observation(
    session: Session, operation: Operation, *, delay_ms: int, now: datetime
) -> int:
    """Schedule the next observation ``delay_ms`` after ``now``; return its new fence.

    Written with ``UPDATE … WHERE fence = :current`` in the caller's transaction; raises
    :class:`ScheduleConflict` when another writer moved the fence first. After commit, send
    the message with :func:`dispatch_observe` (countdown: the due time minus the clock).
    """
    if delay_ms < 0:
        raise ValueError("delay_ms cannot be negative")
    current = operation.fence
    fence = current + 1
    due = now + timedelta(milliseconds=delay_ms)
    enqueued_at = now if delay_ms / 1000.0 <= _max_countdown_s() else None
    result = session.execute(
        update(Operation)
        .where(Operation.id == operation.id, Operation.fence == current)
        .values(fence=fence, next_observation_at=due, enqueued_at=enqueued_at)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise ScheduleConflict(f"operation {operation.id} fence moved from {current}")
    set_committed_value(operation, "fence", fence)
    set_committed_value(operation, "next_observation_at", due)
    set_committed_value(operation, "enqueued_at", enqueued_at)
    return fence


def dispatch_observe(operation_id: str, fence: int, *, countdown_s: float) -> bool:
    """Send ``observe(operation_id, fence)``; call only after the scheduling transaction commits.

    Returns False when nothing was sent: the countdown is longer than the broker may hold (the
    sweeper sends it when due) or the broker is unreachable (the sweeper re-sends it once it is
    overdue). Never raises for a broker failure: the schedule in the database is the record.
    """
    from shared.celery_app import MAX_COUNTDOWN_S, OBSERVE_TASK, send

    if countdown_s > MAX_COUNTDOWN_S:
        return False
    try:
        # Delivered a little early: the task loads what it needs, then waits for the due time,
        # so the reading itself happens on time.
        send(OBSERVE_TASK, [operation_id, fence], countdown_s=countdown_s - OBSERVE_LEAD_S)
    except Exception:  # the broker is down: the sweeper recovers from next_observation_at
        log.warning("observe message for %s fence %s not sent", operation_id, fence, exc_info=True)
        return False
    return True


def dispatch_observe_now(wakes: Sequence[tuple[str, int]]) -> bool:
    """``observe(operation_id, fence)`` at once for each of ``wakes``, all through one producer
    (pipelined on Redis); call only after the transaction that moved the fences commits.

    Returns False when the broker could not take them (some may have gone): the sweeper
    re-sends what is overdue. Never raises for a broker failure, as :func:`dispatch_observe`.
    """
    from shared.celery_app import OBSERVE_TASK, send_many

    if not wakes:
        return True
    try:
        send_many(OBSERVE_TASK, [[operation_id, fence] for operation_id, fence in wakes])
    except Exception:  # the broker is down: the sweeper recovers from next_observation_at
        log.warning("%d observe messages not sent", len(wakes), exc_info=True)
        return False
    return True


def wake(session: Session, operation_id: str, *, now: datetime) -> int | None:
    """Move the next observation of an open operation to now; return the fence to dispatch.

    The fence moves on (atomically, ``fence = fence + 1``), so whatever message was pending for
    the previous fence becomes stale: a wake never makes two readings of one fence. Returns
    None when the operation is unknown, final or not observed yet (action not reported).
    After commit, call ``dispatch_observe(operation_id, fence, countdown_s=0)``.
    """
    result = session.execute(
        update(Operation)
        .where(
            Operation.id == operation_id,
            Operation.final.is_(False),
            Operation.state.in_(OBSERVABLE_STATES),
        )
        .values(fence=Operation.fence + 1, next_observation_at=now, enqueued_at=now)
        .returning(Operation.fence)
        .execution_options(synchronize_session=False)
    )
    fence = result.scalar_one_or_none()
    if fence is None:
        return None
    _woken_in_session(session, operation_id, int(fence), now)
    return int(fence)


def _woken_in_session(session: Session, operation_id: str, fence: int, now: datetime) -> None:
    """A woken operation that the session holds loaded gets the values the wake wrote."""
    loaded = session.identity_map.get(session.identity_key(Operation, operation_id))
    if isinstance(loaded, Operation):
        set_committed_value(loaded, "fence", fence)
        set_committed_value(loaded, "next_observation_at", now)
        set_committed_value(loaded, "enqueued_at", now)


def message_reads_after(
    *, due: datetime | None, enqueued_at: datetime | None, received_at: datetime, now: datetime
) -> bool:
    """Whether the ``observe`` message already sent for an operation's current fence is bound to
    read after an event that arrived at ``received_at``, so that a wake for the event may keep
    it instead of sending another: the observation is due (``due <= now``) and the message was
    sent at least :data:`WAKE_CLOCK_MARGIN` after the event arrived (a message is read after it
    is sent). Whether the fence was read already is asked of the database
    (:func:`wake_for_events`)."""
    return (
        due is not None
        and due <= now
        and enqueued_at is not None
        and received_at + WAKE_CLOCK_MARGIN <= enqueued_at
    )


def wake_for_events(
    session: Session, received: Mapping[str, datetime], *, now: datetime
) -> list[tuple[str, int]]:
    """Wake each open operation of ``received`` (operation id → arrival of the latest event
    that correlated with it) — or leave it as it is when its next observation is already now.

    An operation whose observation is due and whose ``observe`` message for the current fence
    was sent after the events arrived (:func:`message_reads_after`) and has not been read yet
    keeps that message: its reading comes after the events, and the webhook channels it reduces
    include them. Under a burst of events this spares a fence, a row version and a message per
    event; an operation that reads faster than its events arrive is woken by each of them.

    The others are woken as :func:`wake` does, in one statement. Returns the ``(operation id,
    fence)`` pairs to dispatch after commit (``dispatch_observe_now``), in id order.

    The operations' rows are locked first (``FOR NO KEY UPDATE``, id order), and whether the
    pending fence was read is asked after that: an observer storing the reading of that fence
    either committed before (its reading is seen, the operation is woken) or waits for this
    transaction, then reduces the webhook channels with these events linked.
    """
    ids = sorted(received)
    if not ids:
        return []
    # By primary key alone (a filter on the state or the final flag lets the planner prefer
    # their indexes and test every open operation against the list); the rest is read here.
    locked = (
        session.connection()
        .execute(
            select(
                Operation.id,
                Operation.fence,
                Operation.next_observation_at,
                Operation.enqueued_at,
                Operation.final,
                Operation.state,
            )
            .where(one_of(session, Operation.id, ids))
            .order_by(Operation.id)
            .with_for_update(key_share=True)
        )
        .all()
    )
    rows = [row for row in locked if not row.final and row.state in OBSERVABLE_STATES]
    pending = [
        (str(row.id), int(row.fence))
        for row in rows
        if message_reads_after(
            due=row.next_observation_at,
            enqueued_at=row.enqueued_at,
            received_at=received[row.id],
            now=now,
        )
    ]
    kept: set[str] = set()
    if pending:
        kept = {op_id for op_id, _ in pending} - _read_fences(session, pending)
    woken = [str(row.id) for row in rows if row.id not in kept]
    if not woken:
        return []
    moved = session.execute(  # rows locked above: still open and observable
        update(Operation)
        .where(one_of(session, Operation.id, woken))
        .values(fence=Operation.fence + 1, next_observation_at=now, enqueued_at=now)
        .returning(Operation.id, Operation.fence)
        .execution_options(synchronize_session=False)
    ).all()
    for op_id, fence in moved:
        _woken_in_session(session, str(op_id), int(fence), now)
    return sorted((str(op_id), int(fence)) for op_id, fence in moved)


_PG_READ_FENCES = text(
    """
    SELECT DISTINCT o.operation_id
    FROM unnest(CAST(:ops AS TEXT[]), CAST(:fences AS INT[])) AS p(op, fence)
    JOIN observations o ON o.operation_id = p.op AND o.fence = p.fence
    """
)


def _read_fences(session: Session, pairs: Sequence[tuple[str, int]]) -> set[str]:
    """The operations of ``(operation id, fence)`` pairs whose fence has an observation."""
    if session.get_bind().dialect.name == "postgresql":
        rows = session.execute(
            _PG_READ_FENCES, {"ops": [op for op, _ in pairs], "fences": [f for _, f in pairs]}
        ).scalars()
    else:
        rows = session.execute(
            select(Observation.operation_id)
            .where(tuple_(Observation.operation_id, Observation.fence).in_(pairs))
            .distinct()
        ).scalars()
    return {str(op_id) for op_id in rows}
