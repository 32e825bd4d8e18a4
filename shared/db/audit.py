"""The audit trail: every state change as a ``transitions`` row, hash-chained per workspace.

Row ``n`` of a workspace carries ``prev_hash`` = the hash of row ``n-1`` (64 zeros for the
first) and ``hash`` = sha256(prev_hash + canonical JSON of the row's fields). Editing, deleting
or reordering any row breaks the chain from that row on; :func:`verify_chain` names the first
broken row.

The workspace row holds the chain's head (``chain_seq``, ``chain_hash``, ``chain_prev_hash``).
:func:`append_transition` only queues a row in the session; the rows are written when the
transaction commits, last in it, each by one statement that moves the head forward and inserts
the row. Moving the head locks the workspace row (the lock an UPDATE takes, FOR NO KEY UPDATE:
it blocks other appenders of the workspace, not inserts of rows that reference it) until the
commit, so a workspace's appenders take turns and ``(workspace_id, seq)`` stays gapless and
unique.

On PostgreSQL the new hash is computed by the server from the head it has just locked, and the
appends and the COMMIT go to the server in one pipeline (:func:`commit`): the lock is held for the
server's own work only, never across a round trip to a busy worker process. SQLite serialises
writers anyway (``BEGIN IMMEDIATE``); there the hash is computed here.

A PostgreSQL write that nothing later in the transaction reads can ride in that pipeline too,
before the appends (:func:`write_with_commit`): one round trip less for the transaction.

Savepoints (the sweeper decides each operation of a batch in one): a savepoint rolled back takes
back what was queued in it, and only that; a released one leaves its queue to the transaction's
commit, in order.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, bindparam, event, insert, select, update
from sqlalchemy.exc import DBAPIError, StatementError
from sqlalchemy.orm import Session

from shared.core.contract import canonical_json
from shared.db.models import GENESIS_HASH, Transition, Workspace

__all__ = [
    "GENESIS_HASH",
    "HASHED_FIELDS",
    "BrokenLink",
    "append_transition",
    "commit",
    "hashed_around_seq",
    "transition_hash",
    "verify_chain",
    "write_with_commit",
]

_VERIFY_BATCH = 1000
_PENDING = "provely_chain_pending"
_WITH_COMMIT = "provely_writes_with_commit"
_MARKS = "provely_savepoint_marks"


def _timestamp(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


HASHED_FIELDS = (
    "workspace_id",
    "seq",
    "operation_id",
    "from_state",
    "to_state",
    "verdict",
    "reason",
    "cause",
    "details",
    "created_at",
)
"""The columns of a transition its hash covers (besides ``prev_hash``)."""


def _hashed_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    hashed = {name: fields[name] for name in HASHED_FIELDS}
    hashed["created_at"] = _timestamp(hashed["created_at"])
    return hashed


def transition_hash(prev_hash: str, fields: Mapping[str, Any]) -> str:
    """sha256 hex of ``prev_hash`` followed by the canonical JSON of the row's
    :data:`HASHED_FIELDS` (``created_at`` an aware datetime, hashed as microsecond UTC)."""
    hashed = canonical_json(_hashed_fields(fields))
    return hashlib.sha256(prev_hash.encode("ascii") + hashed).hexdigest()


def hashed_around_seq(fields: Mapping[str, Any]) -> tuple[bytes, bytes]:
    """The canonical JSON of a row's hashed ``fields`` (see :func:`transition_hash`; ``seq``
    not needed), as the bytes before and after the decimal digits of its ``seq``.

    ``prev_hash + before + str(seq) + after`` is what :func:`transition_hash` hashes: the row's
    position is left for whoever holds the chain's lock to fill in. Keys are sorted, so the
    object is the fields before ``"seq"``, then ``seq``, then the fields after it.
    """
    hashed = _hashed_fields({**fields, "seq": 0})
    before = canonical_json({k: v for k, v in hashed.items() if k < "seq"})
    after = canonical_json({k: v for k, v in hashed.items() if k > "seq"})
    return before[:-1] + b',"seq":', b"," + after[1:]


def _row_hash(row: Transition) -> str:
    return transition_hash(row.prev_hash, {name: getattr(row, name) for name in HASHED_FIELDS})


@dataclass(frozen=True, slots=True)
class _Pending:
    """A transition queued in a session, written when the session commits."""

    workspace_id: str
    operation_id: str
    from_state: str | None
    to_state: str
    verdict: str | None
    reason: str | None
    cause: str
    details: dict[str, Any] | None
    created_at: datetime

    def fields(self) -> dict[str, Any]:
        return {
            "workspace_id": self.workspace_id,
            "operation_id": self.operation_id,
            "from_state": self.from_state,
            "to_state": self.to_state,
            "verdict": self.verdict,
            "reason": self.reason,
            "cause": self.cause,
            "details": self.details,
            "created_at": self.created_at,
        }


def append_transition(
    session: Session,
    *,
    workspace_id: str,
    operation_id: str,
    from_state: str | None,
    to_state: str,
    verdict: str | None,
    reason: str | None,
    cause: str,
    now: datetime,
    details: dict[str, Any] | None = None,
) -> None:
    """Append one transition to the workspace's chain when the caller's transaction commits.

    The row takes its place in the chain (``seq``, ``prev_hash``, ``hash``) at the commit, after
    every other statement of the transaction; a rolled-back transaction appends nothing. Rows
    queued in one transaction are appended in the order they were queued.
    """
    session.connection()  # the queue belongs to a transaction: begin one if none is open
    session.info.setdefault(_PENDING, []).append(
        _Pending(
            workspace_id=workspace_id,
            operation_id=operation_id,
            from_state=from_state,
            to_state=to_state,
            verdict=verdict,
            reason=reason,
            cause=cause,
            details=details,
            # Store what is hashed: microsecond UTC, the precision both backends keep.
            created_at=now.astimezone(UTC),
        )
    )


def write_with_commit(session: Session, statement: str, params: Mapping[str, Any]) -> None:
    """PostgreSQL: send the driver ``statement`` (psycopg placeholders) with ``params`` when the
    caller's transaction commits, in the pipeline of its appends and its COMMIT, before them.

    For a write nothing later in the transaction reads: it is sent after every other statement
    of the transaction. Its error fails the commit, and nothing of the transaction is kept,
    as when it failed on its own; a rolled-back transaction sends nothing."""
    connection = session.connection()  # the queue belongs to a transaction, as the appends'
    if connection.dialect.name != "postgresql":
        raise ValueError("write_with_commit is for PostgreSQL's pipeline")
    session.info.setdefault(_WITH_COMMIT, []).append((statement, params))


def commit(session: Session) -> None:
    """Commit ``session``'s transaction, its queued transitions appended last.

    On PostgreSQL the appends and the COMMIT are sent in one pipeline: the workspace's chain is
    locked by the first append and released by the COMMIT with no round trip in between.
    """
    _append_queued(session, with_commit=True)
    session.commit()  # on PostgreSQL after the pipeline: nothing left to send


@event.listens_for(Session, "before_commit")
def _append_before_commit(session: Session) -> None:
    """A commit not made through :func:`commit` still appends what its transaction queued.

    A savepoint's release (which SQLAlchemy announces as a commit too) appends nothing: what it
    queued waits, in order, for the transaction's own commit, so that the chain's lock is taken
    there only, and an enclosing savepoint rolled back later still takes it back."""
    nested = session.get_nested_transaction()
    marks = session.info.get(_MARKS)
    if nested is not None:
        if marks:
            marks.pop(nested, None)
        return
    if marks:
        marks.clear()
    _append_queued(session, with_commit=False)


def _append_queued(session: Session, *, with_commit: bool) -> None:
    pending: list[_Pending] = session.info.pop(_PENDING, None) or []
    writes: list[tuple[str, Mapping[str, Any]]] = session.info.pop(_WITH_COMMIT, None) or []
    if not pending and not writes:
        return
    session.flush()  # every other change of the transaction goes first
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        _append_pg(connection, pending, writes=writes, with_commit=with_commit)
    else:
        _append_here(connection, pending)


@event.listens_for(Session, "after_transaction_create")
def _mark_savepoint(session: Session, transaction: Any) -> None:
    """Remember how much was queued when a savepoint began: its rollback drops what it queued
    since, and only that (a released savepoint's queue waits for the transaction's commit)."""
    if transaction.nested:
        marks = session.info.setdefault(_MARKS, {})
        marks[transaction] = (
            len(session.info.get(_PENDING) or ()),
            len(session.info.get(_WITH_COMMIT) or ()),
        )


@event.listens_for(Session, "after_soft_rollback")
def _forget_after_rollback(session: Session, previous_transaction: Any) -> None:
    if not session.in_transaction():  # the whole transaction
        session.info.pop(_PENDING, None)
        session.info.pop(_WITH_COMMIT, None)
        session.info.pop(_MARKS, None)
        return
    marks = session.info.get(_MARKS)
    mark = marks.pop(previous_transaction, None) if marks else None
    if mark is not None:  # a savepoint: what was queued after it began goes with it
        for key, kept in zip((_PENDING, _WITH_COMMIT), mark, strict=True):
            queued = session.info.get(key)
            if queued:
                del queued[kept:]


# One statement per append: the UPDATE locks the workspace row (waiting for an appender ahead,
# then reading the head it committed), computes the next hash from it, and returns the new head
# (chain_prev_hash is the old chain_hash: every SET expression reads the row before the UPDATE).
# An unknown workspace leaves `head` empty and the LEFT JOIN gives seq NULL: the INSERT fails.
_APPEND_PG = """
WITH head AS (
    UPDATE workspaces SET
        chain_seq = chain_seq + 1,
        chain_prev_hash = chain_hash,
        chain_hash = encode(sha256(
            convert_to(chain_hash, 'UTF8') || %(before_seq)s::bytea
            || convert_to((chain_seq + 1)::text, 'UTF8') || %(after_seq)s::bytea
        ), 'hex')
    WHERE id = %(workspace_id)s
    RETURNING chain_seq, chain_prev_hash, chain_hash
)
INSERT INTO transitions (
    workspace_id, seq, operation_id, from_state, to_state, verdict, reason, cause, details,
    created_at, prev_hash, hash
)
SELECT
    %(workspace_id)s, head.chain_seq, %(operation_id)s, %(from_state)s, %(to_state)s,
    %(verdict)s, %(reason)s, %(cause)s, %(details)s, %(created_at)s,
    head.chain_prev_hash, head.chain_hash
FROM (VALUES (1)) AS one LEFT JOIN head ON true
"""


def _append_pg(
    connection: Connection,
    pending: list[_Pending],
    *,
    writes: list[tuple[str, Mapping[str, Any]]],
    with_commit: bool,
) -> None:
    import psycopg
    from psycopg.types.json import Json

    raw: Any = connection.connection.driver_connection
    params = []
    for row in pending:
        values = row.fields()
        before, after = hashed_around_seq(values)
        values.update(before_seq=before, after_seq=after, details=Json(row.details))
        params.append(values)
    try:
        with raw.pipeline():
            for statement, write in writes:
                raw.execute(statement, write)
            for values in params:
                raw.execute(_APPEND_PG, values)
            if with_commit:
                raw.commit()
    except psycopg.errors.NotNullViolation as exc:
        if exc.diag.column_name == "seq":
            names = sorted({row.workspace_id for row in pending})
            raise LookupError(f"workspace {', '.join(names)} does not exist") from exc
        raise _sqlalchemy_error(connection, exc) from exc
    except psycopg.Error as exc:  # the same exceptions as a statement sent through SQLAlchemy
        raise _sqlalchemy_error(connection, exc) from exc


def _sqlalchemy_error(connection: Connection, exc: Exception) -> StatementError:
    import psycopg

    return DBAPIError.instance(_APPEND_PG, None, exc, psycopg.Error, dialect=connection.dialect)


_TRANSITIONS = cast(Table, Transition.__table__)
_INSERT_ROW = insert(_TRANSITIONS)
_WORKSPACES = cast(Table, Workspace.__table__)
_HEAD = select(_WORKSPACES.c.chain_seq, _WORKSPACES.c.chain_hash).where(
    _WORKSPACES.c.id == bindparam("workspace_id")
)
_MOVE_HEAD = (
    update(_WORKSPACES)
    .where(_WORKSPACES.c.id == bindparam("workspace_id"))
    .values(
        chain_seq=bindparam("seq"),
        chain_prev_hash=bindparam("prev_hash"),
        chain_hash=bindparam("hash"),
    )
)


def _append_here(connection: Connection, pending: list[_Pending]) -> None:
    """The same appends with the hash computed in this process (the writer holds the lock)."""
    for row in pending:
        head = connection.execute(_HEAD, {"workspace_id": row.workspace_id}).first()
        if head is None:
            raise LookupError(f"workspace {row.workspace_id} does not exist")
        prev_hash = str(head.chain_hash)
        values = {**row.fields(), "seq": int(head.chain_seq) + 1, "prev_hash": prev_hash}
        values["hash"] = transition_hash(prev_hash, values)
        connection.execute(
            _MOVE_HEAD,
            {
                "workspace_id": row.workspace_id,
                "seq": values["seq"],
                "prev_hash": prev_hash,
                "hash": values["hash"],
            },
        )
        connection.execute(_INSERT_ROW, values)


@dataclass(frozen=True, slots=True)
class BrokenLink:
    """The first row where a workspace's chain does not hold, and why."""

    id: int
    seq: int
    operation_id: str
    problem: str  # "hash_mismatch" | "prev_hash_mismatch" | "seq_gap"


def verify_chain(session: Session, workspace_id: str) -> BrokenLink | None:
    """Walk the workspace's chain in ``seq`` order; the first broken row, or None when intact."""
    prev_hash = GENESIS_HASH
    expected_seq = 1
    last_seq = 0
    while True:
        batch = (
            session.execute(
                select(Transition)
                .where(Transition.workspace_id == workspace_id, Transition.seq > last_seq)
                .order_by(Transition.seq)
                .limit(_VERIFY_BATCH)
            )
            .scalars()
            .all()
        )
        for row in batch:
            if row.seq != expected_seq:
                return BrokenLink(row.id, row.seq, row.operation_id, "seq_gap")
            if row.prev_hash != prev_hash:
                return BrokenLink(row.id, row.seq, row.operation_id, "prev_hash_mismatch")
            if _row_hash(row) != row.hash:
                return BrokenLink(row.id, row.seq, row.operation_id, "hash_mismatch")
            prev_hash = row.hash
            expected_seq += 1
            last_seq = row.seq
        if len(batch) < _VERIFY_BATCH:
            break
    return None
