"""Evidence locks: a decision and the intake of an event it could read never interleave.

A final decision reduces its webhook channels over the events stored when it decides, and a
verdict must stay true of the evidence that was there when it was given. On PostgreSQL, under
READ COMMITTED, an event committed after the decision's event query but before its commit
would be acknowledged to the provider (200) and still missed by a verdict that becomes visible
afterwards. These transaction-level advisory locks close that gap, keyed by what events are
found by — a key value an event carries (``event_keys.value``) in one workspace and provider:

- the intake takes each of its events' keys **shared** in the statement (or transaction) that
  stores them: storing events never waits for other stored events;
- a decision takes the key values its webhook channels look events up by **exclusively**,
  before it reads them, and holds them until it commits.

So an event either committed before the decision read (the decision counts it) or commits after
the decision did (the watch of a VERIFIED operation sees it: ``shared.lifecycle.watch``). Both
sides take their locks in ascending order of lock id, so they cannot deadlock. SQLite needs none of
this: every write transaction there begins ``IMMEDIATE`` and holds the database until it ends.

The lock id is the first 8 bytes of sha256 over (workspace, provider, value), as a signed 64-bit
integer; two values that share an id only make one side wait for the other. A stored batch holds
one lock per distinct key value of its events (at most a few per event, 64 events a batch) and a
decision one per value its channels look up: far below the server's lock table
(``max_locks_per_transaction`` times the connections).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from sqlalchemy import bindparam, text
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.orm import Session
from sqlalchemy.types import BigInteger

__all__ = ["PG_SHARED_LOCKS", "evidence_lock_ids", "lock_evidence"]


def _lock_id(workspace_id: str, provider: str, value: str) -> int:
    digest = hashlib.sha256(f"{workspace_id}\x00{provider}\x00{value}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def evidence_lock_ids(keys: Iterable[tuple[str, str, str]]) -> list[int]:
    """The lock ids of ``(workspace, provider, value)`` keys: distinct, ascending."""
    return sorted({_lock_id(ws, provider, value) for ws, provider, value in keys})


PG_SHARED_LOCKS = (
    "SELECT count(pg_advisory_xact_lock_shared(l)) FROM unnest(CAST(%(locks)s AS BIGINT[])) AS l"
)
"""Driver-level SQL: the intake's shared locks on the (ascending) ids in ``locks``."""

_EXCLUSIVE = text(
    "SELECT count(pg_advisory_xact_lock(l)) FROM unnest(CAST(:locks AS BIGINT[])) AS l"
).bindparams(bindparam("locks", type_=ARRAY(BigInteger())))


def lock_evidence(
    session: Session, workspace_id: str, keys: Iterable[tuple[str, str]]
) -> list[int]:
    """Take the decision's exclusive locks on ``(provider, value)`` keys of one workspace, held
    until the transaction ends (PostgreSQL; nothing on SQLite). Returns the lock ids."""
    if session.get_bind().dialect.name != "postgresql":
        return []
    ids = evidence_lock_ids((workspace_id, provider, value) for provider, value in keys)
    if ids:
        session.execute(_EXCLUSIVE, {"locks": ids})
    return ids
