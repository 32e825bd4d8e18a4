"""The durable observation schedule: fences, ``next_observation_at`` and wake-ups.

Every scheduled observation gets a new **fence** number (``operations.fence``) and a due time
(``operations.next_observation_at``), written in the caller's transaction. The ``observe``
message sent after commit carries the fence; a message whose fence is no longer the operation's
is stale and dropped, and the observation of a fence is stored once (unique operation, fence,
channel), so a message delivered twice, a wake and a sweeper re-send never make two readings of
one fence. Every fence is written here: the schedule (:func:`schedule_observation`), a wake
(:func:`wake`, :func:`wake_for_events`) and the rechecks of a watched operation
(:func:`request_rechecks`, :func:`schedule_recheck`); the messages are sent by
``shared.lifecycle.messages``.

``slot_at`` is the due time of the schedule's slot: :func:`schedule_observation` writes it with
``next_observation_at``, a wake leaves it, so a woken reading is an extra one and the schedule's
next slot stays (:func:`counts_as_slot`; ``services.verdict.evaluate`` schedules it again).

``enqueued_at`` is when a message for the current fence was last sent; ``reading_fence`` the
last fence an observer claimed before reading it (:func:`claim_reading`). A due time further away
than the broker may safely hold a countdown (``MAX_COUNTDOWN_S``) is left to the sweeper: no
message now, ``enqueued_at`` empty, and the sweeper sends it as it comes due.

Errors: :class:`ScheduleConflict` when the operation's fence moved under the caller (another
writer scheduled first); the caller re-reads and decides again.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from psycopg.rows import namedtuple_row
from sqlalchemy import (
    BindParameter,
    ColumnElement,
    any_,
    bindparam,
    case,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql.psycopg import dialect as psycopg_dialect
from sqlalchemy.orm.attributes import set_committed_value

from shared.core.types import OperationState
from shared.db.models import Operation
from shared.db.sql import driver_cursor, one_of
from shared.lifecycle.watch import WATCHED_STATES
from shared.runtime.queues import MAX_COUNTDOWN_S

if TYPE_CHECKING:
    from sqlalchemy import Connection
    from sqlalchemy.orm import Session

__all__ = [
    "OBSERVABLE_STATES",
    "OBSERVE_LEAD_S",
    "SLOT_TOLERANCE",
    "ScheduleConflict",
    "claim_reading",
    "counts_as_slot",
    "message_pending",
    "observation_schedule",
    "request_rechecks",
    "schedule_observation",
    "schedule_recheck",
    "wake",
    "wake_for_events",
]

OBSERVABLE_STATES = (
    OperationState.ACTION_ACCEPTED.value,
    OperationState.OBSERVING.value,
    OperationState.PENDING.value,
)
"""States in which an operation is observed (its action was reported, no final verdict)."""


OBSERVE_LEAD_S = 0.2
"""How early an ``observe`` message is delivered before its due time; the task prepares, then
waits until ``next_observation_at`` before it reads (never longer than this lead)."""


SLOT_TOLERANCE = timedelta(seconds=1)
"""A reading this close before its slot is the slot's reading (clocks of two processes)."""


def counts_as_slot(slot_at: datetime | None, read_at: datetime) -> bool:
    """Whether a reading made at ``read_at`` is the schedule's observation (it counts in
    ``attempts``): it is not before the slot (within :data:`SLOT_TOLERANCE`); a reading a wake
    brought forward is an extra one. Without a slot every reading counts."""
    return slot_at is None or slot_at <= read_at + SLOT_TOLERANCE


class ScheduleConflict(RuntimeError):
    """The operation's fence changed since it was read; nothing was scheduled."""


def observation_schedule(operation: Operation, *, delay_ms: int, now: datetime) -> dict[str, Any]:
    """The columns that schedule the next observation ``delay_ms`` after ``now`` (``fence``:
    the new fence), for a caller that holds the operation's row locked (``FOR UPDATE``) and
    writes them in its own UPDATE: no other writer can move the fence before its commit (the
    action report's → OBSERVING writes them with the state). Send the message after commit as
    for :func:`schedule_observation`."""
    if delay_ms < 0:
        raise ValueError("delay_ms cannot be negative")
    due = now + timedelta(milliseconds=delay_ms)
    return {
        "fence": operation.fence + 1,
        "next_observation_at": due,
        "enqueued_at": now if delay_ms / 1000.0 <= MAX_COUNTDOWN_S else None,
        "slot_at": due,
    }


def schedule_observation(
    session: Session, operation: Operation, *, delay_ms: int, now: datetime
) -> int:
    """Schedule the next observation ``delay_ms`` after ``now``; return its new fence.

    Written with ``UPDATE … WHERE fence = :current`` in the caller's transaction; raises
    :class:`ScheduleConflict` when another writer moved the fence first. After commit, send
    the message with ``shared.lifecycle.messages.observe`` (countdown: the due time minus the
    clock).
    """
    current = operation.fence
    values = observation_schedule(operation, delay_ms=delay_ms, now=now)
    result = session.execute(
        update(Operation)
        .where(Operation.id == operation.id, Operation.fence == current)
        .values(**values)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise ScheduleConflict(f"operation {operation.id} fence moved from {current}")
    for key, value in values.items():
        set_committed_value(operation, key, value)
    fence: int = values["fence"]
    return fence


def schedule_recheck(
    session: Session, operation: Operation, *, due: datetime, rechecks: int, now: datetime
) -> int | None:
    """Schedule the next try of a watched operation's recheck at ``due`` (``rechecks`` tries so
    far, this one included); return its new fence, or None when another recheck moved the fence
    on meanwhile (that one owns the schedule) or the operation is no longer watched.

    Written in the caller's transaction with ``UPDATE … WHERE fence = :current``; after commit,
    send ``messages.observe(operation.id, fence, countdown_s=due - now)``.
    """
    fence = session.execute(
        update(Operation)
        .where(
            Operation.id == operation.id,
            Operation.fence == operation.fence,
            Operation.state.in_(WATCHED_STATES),
        )
        .values(
            fence=Operation.fence + 1, next_observation_at=due, enqueued_at=now, rechecks=rechecks
        )
        .returning(Operation.fence)
        .execution_options(synchronize_session=False)
    ).scalar_one_or_none()
    return None if fence is None else int(fence)


def request_rechecks(
    session: Session, operation_ids: Iterable[str], *, now: datetime
) -> list[tuple[str, int]]:
    """Schedule a recheck of each watched (VERIFIED or FAILED) operation now (a new fence);
    returns the ``(operation id, fence)`` pairs to dispatch after commit. The rechecks'
    backoff starts again (``operations.rechecks``)."""
    ids = sorted(set(operation_ids))
    if not ids:
        return []
    moved = session.execute(
        update(Operation)
        .where(
            one_of(session, Operation.id, ids),
            Operation.state.in_(WATCHED_STATES),
            Operation.watch_until > now,
        )
        .values(fence=Operation.fence + 1, next_observation_at=now, enqueued_at=now, rechecks=0)
        .returning(Operation.id, Operation.fence)
        .execution_options(synchronize_session=False)
    ).all()
    return sorted((str(op_id), int(fence)) for op_id, fence in moved)


def _due_by(now: datetime | BindParameter[datetime]) -> ColumnElement[datetime]:
    """A woken operation's due time: ``now``, or the earlier time it was already due at.

    An operation that is due already keeps its due time, so the wake leaves the indexed
    ``next_observation_at`` as it is: on PostgreSQL the new row version is then a heap-only
    update (no entry in any of the table's indexes), which is what most wakes of a burst are
    (the events that arrive while an observer reads). What makes the wake is the fence and
    the message; the due time orders the sweeper's work, and if the wake's message is lost the
    sweeper's backoff counts from that earlier due time (``services.verdict.sweeper``)."""
    return case((Operation.next_observation_at <= now, Operation.next_observation_at), else_=now)


def wake(session: Session, operation_id: str, *, now: datetime) -> int | None:
    """Move the next observation of an open operation to now (:func:`_due_by`: an operation
    already due stays due since then); return the fence to dispatch.

    The fence moves on (atomically, ``fence = fence + 1``), so whatever message was pending for
    the previous fence becomes stale: a wake never makes two readings of one fence. Returns
    None when the operation is unknown, final or not observed yet (action not reported).
    After commit, send ``messages.observe(operation_id, fence, countdown_s=0)``.
    """
    row = session.execute(
        update(Operation)
        .where(
            Operation.id == operation_id,
            Operation.final.is_(False),
            Operation.state.in_(OBSERVABLE_STATES),
        )
        .values(fence=Operation.fence + 1, next_observation_at=_due_by(now), enqueued_at=now)
        .returning(Operation.fence, Operation.next_observation_at)
        .execution_options(synchronize_session=False)
    ).first()
    if row is None:
        return None
    _woken_in_session(session, operation_id, int(row.fence), row.next_observation_at, now)
    return int(row.fence)


def _woken_in_session(
    session: Session, operation_id: str, fence: int, due: datetime, now: datetime
) -> None:
    """A woken operation that the session holds loaded gets the values the wake wrote."""
    loaded = session.identity_map.get(session.identity_key(Operation, operation_id))
    if isinstance(loaded, Operation):
        set_committed_value(loaded, "fence", fence)
        set_committed_value(loaded, "next_observation_at", due)
        set_committed_value(loaded, "enqueued_at", now)


def message_pending(
    *,
    due: datetime | None,
    enqueued_at: datetime | None,
    fence: int,
    reading_fence: int | None,
    now: datetime,
) -> bool:
    """Whether an operation's next observation is already now: it is due (``due <= now``), the
    ``observe`` message of its current ``fence`` was sent (``enqueued_at``) and no observer has
    begun to read that fence (``reading_fence``, claimed before the readbacks). Whatever
    happened before this is seen by that reading, so a wake may keep the message instead of
    sending another. Read with the operation's row locked (:func:`wake_for_events`)."""
    return (
        due is not None
        and due <= now
        and enqueued_at is not None
        and (reading_fence is None or reading_fence < fence)
    )


def wake_for_events(
    session: Session, operation_ids: Iterable[str], *, now: datetime
) -> list[tuple[str, int]]:
    """Wake each open operation of ``operation_ids`` — or leave it as it is when its next
    observation is already now (:func:`message_pending`): its ``observe`` message is due and no
    observer has begun to read it, so that reading starts after these events were linked, and
    the webhook channels it reduces include them. Under a burst of events this spares a fence,
    a row version and a message per event; each reading an observer begins lets the next event
    wake the operation again.

    The others are woken as :func:`wake` does (due from now, or from the earlier time they
    were due at already), in one statement. Returns the ``(operation id, fence)`` pairs to
    dispatch after commit (``messages.observe_many``), in id order.

    The operations' rows are locked first (``FOR NO KEY UPDATE``, id order) and the claim is
    read after that: an observer's claim (an update of the row) either committed before (the
    operation is woken) or waits for this transaction, and reads after it.
    """
    ids = sorted(set(operation_ids))
    if not ids:
        return []
    if session.get_bind().dialect.name == "postgresql":
        return _wake_for_events_pg(session, ids, now)
    # By primary key alone (a filter on the state or the final flag lets the planner prefer
    # their indexes and test every open operation against the list); the rest is read here.
    locked = (
        session.connection()
        .execute(
            _WAKE_LOCK.where(one_of(session, Operation.id, ids))
            .order_by(Operation.id)
            .with_for_update(key_share=True)
        )
        .all()
    )
    woken = [str(row.id) for row in locked if _wakes(row, now)]
    if not woken:
        return []
    moved = session.execute(  # rows locked above: still open and observable
        update(Operation)
        .where(one_of(session, Operation.id, woken))
        .values(fence=Operation.fence + 1, next_observation_at=_due_by(now), enqueued_at=now)
        .returning(Operation.id, Operation.fence, Operation.next_observation_at)
        .execution_options(synchronize_session=False)
    ).all()
    for op_id, fence, due in moved:
        _woken_in_session(session, str(op_id), int(fence), due, now)
    return sorted((str(op_id), int(fence)) for op_id, fence, _ in moved)


_WAKE_LOCK = select(
    Operation.id,
    Operation.fence,
    Operation.next_observation_at,
    Operation.enqueued_at,
    Operation.reading_fence,
    Operation.final,
    Operation.state,
)
"""What a wake reads of the operations, with their rows locked."""


def _wakes(row: Any, now: datetime) -> bool:
    """Whether a locked row of ``_WAKE_LOCK`` is woken (open, observable, no message pending)."""
    return (
        not row.final
        and row.state in OBSERVABLE_STATES
        and not message_pending(
            due=row.next_observation_at,
            enqueued_at=row.enqueued_at,
            fence=int(row.fence),
            reading_fence=row.reading_fence,
            now=now,
        )
    )


_IDS = bindparam("ids", type_=postgresql.ARRAY(Operation.id.type))
_NOW = bindparam("now", type_=Operation.enqueued_at.type)
_PG_WAKE_LOCK = str(
    _WAKE_LOCK.where(Operation.id == any_(_IDS))
    .order_by(Operation.id)
    .with_for_update(key_share=True)
    .compile(dialect=psycopg_dialect())  # type: ignore[no-untyped-call]
)
_PG_WAKE = str(
    update(Operation)
    .where(Operation.id == any_(_IDS))
    .values(
        fence=Operation.fence + literal_column("1"),  # no parameter for the constant
        next_observation_at=_due_by(_NOW),
        enqueued_at=_NOW,
    )
    .returning(Operation.id, Operation.fence, Operation.next_observation_at)
    .compile(dialect=psycopg_dialect())  # type: ignore[no-untyped-call]
)
"""The two statements of a wake, compiled once for the driver: the same statements as the
other databases', without compiling or processing rows per batch (a correlator's batch wakes
hundreds of operations)."""


def _wake_for_events_pg(session: Session, ids: list[str], now: datetime) -> list[tuple[str, int]]:
    with driver_cursor(session, namedtuple_row) as cursor:
        locked = cursor.execute(_PG_WAKE_LOCK, {"ids": ids}).fetchall()
        woken = [row.id for row in locked if _wakes(row, now)]
        if not woken:
            return []
        moved = cursor.execute(_PG_WAKE, {"ids": woken, "now": now}).fetchall()
    for op_id, fence, due in moved:
        _woken_in_session(session, op_id, fence, due.astimezone(UTC), now)
    return sorted((op_id, fence) for op_id, fence, _ in moved)


_CLAIM = (
    update(Operation)
    .where(Operation.id == bindparam("operation_id"), Operation.fence == bindparam("claimed_fence"))
    .values(reading_fence=Operation.fence)
)
"""Built once (building a statement and its cache key costs more than running it)."""


def claim_reading(connection: Connection, operation_id: str, fence: int) -> bool:
    """Record that an observer begins to read ``fence`` (before its readbacks); False when the
    fence is no longer the operation's (a wake or a schedule moved it: the message is stale).

    An update of the operation's row: it waits for a correlation that holds the row
    (:func:`wake_for_events`) and re-reads the fence after it, so a kept message is read after
    the events that kept it. The caller commits before it reads. On PostgreSQL the observer
    makes the same claim in the statement that loads the operation
    (``services.observer.statements.PREPARE_AND_CLAIM``)."""
    result = connection.execute(_CLAIM, {"operation_id": operation_id, "claimed_fence": fence})
    return bool(result.rowcount == 1)
