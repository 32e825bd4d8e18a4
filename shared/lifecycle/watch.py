"""The watch after VERIFIED: late evidence always reaches a verified operation.

A FAILED verdict whose retry guidance allows the action again (``allowed_as_new_operation``)
is watched the same way (:func:`watched_after`): it advises a new side effect, so evidence that
the effect happened after all must reach it as surely as a contradiction reaches a VERIFIED one
(``shared.lifecycle.late_evidence``). :data:`WATCHED_STATES` are the states a watch can hold.

A VERIFIED operation stays watched for the longest worst-case latency of its event channels
(``worst_case_ms``, from the contract; the contract's timeout when no channel states one),
counted from the verdict: ``operations.watch_until``. Its webhook channels' key values and
event types are written to ``watch_keys`` in the transaction that writes the verdict
(:func:`start_watch`). Every event a correlator takes from the backlog is looked up there by
the key values it carries, one index probe per key (:func:`rechecks_for_events`): each watched
operation it names gets a recheck (a new fence due now, the same marker an observation uses,
written by ``shared.lifecycle.scheduling.request_rechecks``),
whatever the event's correlation links are — a second refund's ``refund.created`` names the
charge, not the operation.

The decision's evidence locks (``shared.evidence.locks``) make this complete: an event the
decision did not count committed after the verdict did, so the correlator's look-up, which runs
after the event committed, sees the watch. When the watch ends the verdict is settled: the
sweeper deletes the expired rows (:func:`end_expired_watches`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Table, bindparam, delete, insert, select, tuple_
from sqlalchemy.orm import Session

from shared.core.contract import Contract
from shared.core.retry import retry_guidance
from shared.core.types import Decision, OperationState, Verdict
from shared.core.verifiers import verifier_of
from shared.db.audit import write_with_commit
from shared.db.models import Operation, WatchKey
from shared.db.sql import driver_cursor

__all__ = [
    "WATCHED_STATES",
    "end_expired_watches",
    "rechecks_for_events",
    "start_watch",
    "watch_until",
    "watched_after",
]

WATCHED_STATES = (OperationState.VERIFIED.value, OperationState.FAILED.value)
"""The final states a watch holds: VERIFIED, and FAILED advising a new operation."""


def watched_after(decision: Decision, state: OperationState) -> bool:
    """Whether the final ``decision`` (written with ``state``) is watched: VERIFIED, or a verdict
    whose retry guidance allows the action as a new operation."""
    if not decision.final:
        return False
    if decision.verdict is Verdict.VERIFIED and state is OperationState.VERIFIED:
        return True
    advice = retry_guidance(decision.verdict, decision.reason, state)
    return state.value in WATCHED_STATES and advice.action == "allowed_as_new_operation"


def watch_until(contract: Contract, verified_at: datetime) -> datetime:
    """When the watch of an operation verified at ``verified_at`` ends."""
    worst = [
        c.worst_case_ms
        for c in contract.channels
        if verifier_of(c).reduces_events and c.worst_case_ms is not None
    ]
    span = max(worst) if worst else contract.timing.timeout_ms
    return verified_at + timedelta(milliseconds=span)


_WATCH_KEYS: Table = WatchKey.__table__  # type: ignore[assignment]
# Built once, and Core rather than ORM statements: building a statement and its cache key, and
# the ORM's bulk insert path, cost more than running them (a cProfile of evaluate).
_END_WATCH = delete(_WATCH_KEYS).where(_WATCH_KEYS.c.operation_id == bindparam("operation_id"))
_ADD_KEYS = insert(_WATCH_KEYS)

_PG_ADD_KEYS = """
    INSERT INTO watch_keys (operation_id, provider, value, workspace_id, event_types, until)
    SELECT %(operation_id)s, k.provider, k.value, %(workspace_id)s, k.event_types, %(until)s
    FROM unnest(CAST(%(prov)s AS TEXT[]), CAST(%(val)s AS TEXT[]), CAST(%(types)s AS TEXT[]))
         AS k(provider, value, event_types)
    ON CONFLICT (operation_id, provider, value)
    DO UPDATE SET event_types = EXCLUDED.event_types, until = EXCLUDED.until
    """
"""PostgreSQL: every key of a watch in one statement on the driver, whatever their number (the
arrays are one parameter each; psycopg prepares it), where an executemany sends one per key."""


def start_watch(
    session: Session,
    op: Operation,
    keys: Mapping[str, tuple[set[str], set[str]]],
    *,
    until: datetime,
) -> None:
    """Write the watch keys of ``op`` (``keys``: provider → (values, event types)).

    A watch starts with the final verdict of an open operation, and no final state leaves for an
    open one (``shared.core.state_machine``): the operation was never watched, so there is no
    earlier watch to delete. Were a key there all the same, it is written again with this watch's
    event types and end; a watch only ever gains keys, so no event it names is missed.

    On PostgreSQL the keys are written when the transaction commits, in the pipeline of its
    COMMIT (``shared.db.audit.write_with_commit``): still in the verdict's transaction."""
    rows = [
        {
            "operation_id": op.id,
            "provider": provider,
            "value": value,
            "workspace_id": op.workspace_id,
            "event_types": " ".join(sorted(types)),
            "until": until,
        }
        for provider, (values, types) in sorted(keys.items())
        for value in sorted(values)
    ]
    if not rows:
        return
    if session.get_bind().dialect.name == "postgresql":
        params = {
            "operation_id": op.id,
            "workspace_id": op.workspace_id,
            "until": until,
            "prov": [row["provider"] for row in rows],
            "val": [row["value"] for row in rows],
            "types": [row["event_types"] for row in rows],
        }
        # Nothing in the transaction reads the watch: it rides in the commit's pipeline.
        write_with_commit(session, _PG_ADD_KEYS, params)
        return
    session.execute(_END_WATCH, {"operation_id": op.id})
    session.execute(_ADD_KEYS, rows if len(rows) > 1 else rows[0])


_PG_WATCHED = """
    SELECT w.operation_id, w.workspace_id, w.provider, w.value, w.event_types
    FROM unnest(CAST(%(ws)b AS TEXT[]), CAST(%(prov)b AS TEXT[]), CAST(%(val)b AS TEXT[]))
         AS k(ws, prov, val)
    JOIN watch_keys w ON w.workspace_id = k.ws AND w.provider = k.prov AND w.value = k.val
    WHERE w.until > %(now)s
    """
"""PostgreSQL: the live watch keys of a list of (workspace, provider, value), as three array
parameters on the driver (binary: no element is searched for what to quote): one statement text
whatever the list's length (psycopg prepares it), where a tuple ``IN`` list is a statement of
its own per length, compiled by SQLAlchemy with a parameter per value and parsed and planned
again by the server each time."""
_PG_CHUNK = 4096
"""Keys per statement on PostgreSQL (the arrays are one parameter each)."""


def rechecks_for_events(
    session: Session,
    events: Iterable[tuple[str, str, str, Iterable[str]]],
    *,
    now: datetime,
) -> dict[str, set[str]]:
    """The watched operations that events name: ``events`` are (workspace, provider, type,
    key values); returns operation id → the types of the events that named it."""
    wanted: dict[tuple[str, str, str], set[str]] = {}
    for workspace_id, provider, event_type, values in events:
        for value in values:
            if value:
                wanted.setdefault((workspace_id, provider, value), set()).add(event_type)
    if not wanted:
        return {}
    found: dict[str, set[str]] = {}
    keys = sorted(wanted)
    if session.get_bind().dialect.name == "postgresql":
        watched: list[Any] = []
        with driver_cursor(session) as cursor:
            for start in range(0, len(keys), _PG_CHUNK):
                chunk = keys[start : start + _PG_CHUNK]
                params = {
                    "ws": [k[0] for k in chunk],
                    "prov": [k[1] for k in chunk],
                    "val": [k[2] for k in chunk],
                    "now": now,
                }
                watched.extend(cursor.execute(_PG_WATCHED, params).fetchall())
        for operation_id, ws, provider, value, event_types in watched:
            named = wanted[(ws, provider, value)] & set(event_types.split())
            if named:
                found.setdefault(operation_id, set()).update(named)
        return found
    for start in range(0, len(keys), 500):
        chunk = keys[start : start + 500]
        rows = session.execute(
            select(
                WatchKey.operation_id,
                WatchKey.workspace_id,
                WatchKey.provider,
                WatchKey.value,
                WatchKey.event_types,
            ).where(
                tuple_(WatchKey.workspace_id, WatchKey.provider, WatchKey.value).in_(chunk),
                WatchKey.until > now,
            )
        ).all()
        for row in rows:
            types = set(row.event_types.split())
            named = wanted[(row.workspace_id, row.provider, row.value)] & types
            if named:
                found.setdefault(row.operation_id, set()).update(named)
    return found


def end_expired_watches(session: Session, *, now: datetime, limit: int = 1000) -> int:
    """Delete up to ``limit`` watch keys whose watch has ended; how many were deleted."""
    expired = [
        (row.operation_id, row.provider, row.value)
        for row in session.execute(
            select(WatchKey.operation_id, WatchKey.provider, WatchKey.value)
            .where(WatchKey.until <= now)
            .limit(limit)
        ).all()
    ]
    if not expired:
        return 0
    session.execute(
        delete(WatchKey)
        .where(tuple_(WatchKey.operation_id, WatchKey.provider, WatchKey.value).in_(expired))
        .execution_options(synchronize_session=False)
    )
    return len(expired)
