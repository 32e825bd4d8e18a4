"""The audit trail: every state change as a ``transitions`` row, hash-chained per workspace.

Row ``n`` of a workspace carries ``prev_hash`` = the hash of row ``n-1`` (64 zeros for the
first) and ``hash`` = sha256(prev_hash + canonical JSON of the row's fields). Editing, deleting
or reordering any row breaks the chain from that row on; :func:`verify_chain` names the first
broken row.

Appending is safe under concurrency: the workspace row is locked (``SELECT … FOR NO KEY
UPDATE`` on PostgreSQL; SQLite serialises writers with ``BEGIN IMMEDIATE``) before the last
``seq`` is read, and ``(workspace_id, seq)`` is unique.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import Connection, Table, insert, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, make_transient_to_detached

from shared.core.contract import canonical_json
from shared.db.models import Transition, Workspace

__all__ = [
    "GENESIS_HASH",
    "BrokenLink",
    "append_transition",
    "transition_hash",
    "verify_chain",
]

GENESIS_HASH = "0" * 64
_VERIFY_BATCH = 1000


def _timestamp(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="microseconds")


def transition_hash(
    *,
    prev_hash: str,
    workspace_id: str,
    seq: int,
    operation_id: str,
    from_state: str | None,
    to_state: str,
    verdict: str | None,
    reason: str | None,
    cause: str,
    details: dict[str, Any] | None,
    created_at: datetime,
) -> str:
    """sha256 hex of ``prev_hash`` followed by the canonical JSON of the row's fields."""
    fields = {
        "workspace_id": workspace_id,
        "seq": seq,
        "operation_id": operation_id,
        "from_state": from_state,
        "to_state": to_state,
        "verdict": verdict,
        "reason": reason,
        "cause": cause,
        "details": details,
        "created_at": _timestamp(created_at),
    }
    return hashlib.sha256(prev_hash.encode("ascii") + canonical_json(fields)).hexdigest()


def _row_hash(row: Transition) -> str:
    return transition_hash(
        prev_hash=row.prev_hash,
        workspace_id=row.workspace_id,
        seq=row.seq,
        operation_id=row.operation_id,
        from_state=row.from_state,
        to_state=row.to_state,
        verdict=row.verdict,
        reason=row.reason,
        cause=row.cause,
        details=row.details,
        created_at=row.created_at,
    )


_TRANSITIONS = cast(Table, Transition.__table__)
_INSERT = insert(_TRANSITIONS).returning(_TRANSITIONS.c.id)

_LOCK_SQL = "SELECT id FROM workspaces WHERE id = %s FOR NO KEY UPDATE"
_LAST_SQL = "SELECT seq, hash FROM transitions WHERE workspace_id = %s ORDER BY seq DESC LIMIT 1"


def _lock_chain(session: Session, workspace_id: str) -> tuple[bool, tuple[int, str] | None]:
    """Lock the workspace's chain; whether the workspace exists, and its last (seq, hash).

    Serialises appenders of this workspace. NO KEY UPDATE does not block inserts of rows that
    reference the workspace (they take KEY SHARE), only other appenders. The last row is read
    by a statement that starts once the lock is held, so it sees the previous holder's row.
    """
    connection = session.connection()
    if connection.dialect.name == "postgresql":
        # Both statements go in one pipeline: the server reads the last row as soon as it
        # grants the lock, without a round trip back to this (maybe busy) process in between.
        # Each statement still takes its own snapshot (READ COMMITTED), so the read is fresh.
        session.flush()  # what autoflush would have sent before the lock, sent first
        return _lock_chain_pipelined(connection, workspace_id)
    locked = session.execute(
        select(Workspace.id).where(Workspace.id == workspace_id).with_for_update(key_share=True)
    ).scalar_one_or_none()
    if locked is None:
        return False, None
    last = session.execute(
        select(Transition.seq, Transition.hash)
        .where(Transition.workspace_id == workspace_id)
        .order_by(Transition.seq.desc())
        .limit(1)
    ).first()
    return True, None if last is None else (int(last.seq), str(last.hash))


def _lock_chain_pipelined(
    connection: Connection, workspace_id: str
) -> tuple[bool, tuple[int, str] | None]:
    import psycopg

    raw: Any = connection.connection.driver_connection
    try:
        with raw.pipeline():
            locked = raw.execute(_LOCK_SQL, (workspace_id,))
            last = raw.execute(_LAST_SQL, (workspace_id,))
        found = locked.fetchone() is not None
        row = last.fetchone()
    except psycopg.Error as exc:  # the same exceptions as a statement sent through SQLAlchemy
        raise DBAPIError.instance(
            _LOCK_SQL, (workspace_id,), exc, psycopg.Error, dialect=connection.dialect
        ) from exc
    if not found:
        return False, None
    return True, None if row is None else (int(row[0]), str(row[1]))


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
) -> Transition:
    """Append one transition to the workspace's chain, in the caller's transaction."""
    found, last = _lock_chain(session, workspace_id)
    if not found:
        raise LookupError(f"workspace {workspace_id} does not exist")
    seq = 1 if last is None else last[0] + 1
    prev_hash = GENESIS_HASH if last is None else last[1]
    # Store what is hashed: microsecond UTC, the precision both backends keep.
    created_at = now.astimezone(UTC)
    values: dict[str, Any] = {
        "workspace_id": workspace_id,
        "seq": seq,
        "operation_id": operation_id,
        "from_state": from_state,
        "to_state": to_state,
        "verdict": verdict,
        "reason": reason,
        "cause": cause,
        "details": details,
        "created_at": created_at,
        "prev_hash": prev_hash,
    }
    values["hash"] = transition_hash(**values)  # the hashed fields are the stored ones
    values["id"] = session.execute(_INSERT, values).scalar_one()
    # The stored row, as the session would hold it after a flush (no second INSERT).
    row = Transition(**values)
    make_transient_to_detached(row)
    session.add(row)
    return row


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
