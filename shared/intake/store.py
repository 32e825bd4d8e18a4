"""Storing events once: each verified event is inserted with ``INSERT … ON CONFLICT DO NOTHING``
on (workspace, provider, event id); a repeat only bumps ``events.duplicates``. The keys the
event carries go to ``event_keys`` (indexed by name and value), and a new event takes its place
in the correlation backlog (``event_backlog``), not yet correlated.

:func:`store_event` stores one (one round trip on PostgreSQL); :func:`store_many` stores the
deliveries that arrived together in one statement (:func:`store_many_async`: the same on the
webhook intake's psycopg asyncio connections). Nothing here links or wakes: that is the
correlators' (``shared.intake.batch``, ``shared.intake.backlog``). :func:`event_record` is the
core's view of a stored event.

Events whose api version is not one of the contract's are stored and linked like any other; the
core's reduction (``shared.core.events.reduce_events``) sets them aside using
``events.api_version``, which :func:`event_record` hands over.

The caller owns the transaction; nothing here commits.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, insert, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from shared.core.types import EventRecord
from shared.db.models import Event, EventBacklog, EventKey
from shared.evidence.locks import PG_SHARED_LOCKS, evidence_lock_ids
from shared.intake.parse import ParsedEvent
from shared.intake.results import Delivery, IntakeResult

__all__ = ["event_record", "store_event", "store_many", "store_many_async"]


def dialect_insert(session: Session, table: Any) -> Any:
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        return postgresql.insert(table)
    if dialect == "sqlite":
        return sqlite.insert(table)
    raise RuntimeError(f"unsupported database dialect {dialect}")


_PG_STORE = text(
    """
    WITH inserted AS (
        INSERT INTO events (workspace_id, provider, event_id, type, provider_timestamp,
                            api_version, object_id, idempotency_key, body, raw, digest,
                            duplicates, received_at, escaped)
        VALUES (:workspace_id, :provider, :event_id, :type, :provider_timestamp,
                :api_version, :object_id, :idempotency_key, CAST(:body AS JSON), :raw, :digest,
                0, :received_at, CAST(:escaped AS JSON))
        ON CONFLICT (workspace_id, provider, event_id) DO NOTHING
        RETURNING id
    ), keyed AS (
        INSERT INTO event_keys (event_pk, workspace_id, provider, name, value)
        SELECT inserted.id, :workspace_id, :provider, k.name, k.value
        FROM inserted, unnest(CAST(:names AS TEXT[]), CAST(:values AS TEXT[])) AS k(name, value)
    ), queued AS (
        INSERT INTO event_backlog (event_pk, received_at)
        SELECT inserted.id, :received_at FROM inserted
    )
    SELECT id FROM inserted
    """
)


def store_event(
    session: Session,
    *,
    workspace_id: str,
    provider: str,
    event: ParsedEvent,
    raw: bytes,
    now: datetime,
) -> int | None:
    """Insert the event once, not yet correlated; return its row id, or None when it was
    already stored.

    A repeat writes nothing but ``duplicates = duplicates + 1`` on the stored row.
    """
    stmt = (
        dialect_insert(session, Event)
        .values(
            workspace_id=workspace_id,
            provider=provider,
            event_id=event.event_id,
            type=event.type,
            provider_timestamp=event.provider_timestamp,
            api_version=event.api_version,
            object_id=event.object_id,
            idempotency_key=event.idempotency_key,
            body=event.body,
            raw=raw,
            digest=hashlib.sha256(raw).hexdigest(),
            duplicates=0,
            received_at=now,
            escaped=list(event.escaped) or None,
        )
        .on_conflict_do_nothing(index_elements=["workspace_id", "provider", "event_id"])
        .returning(Event.id)
    )
    keys = sorted(event.keys.items())
    if keys and session.get_bind().dialect.name == "postgresql":
        # The shared evidence locks of its keys, held until the caller commits.
        locks = evidence_lock_ids((workspace_id, provider, value) for _, value in keys)
        session.connection().exec_driver_sql(PG_SHARED_LOCKS, {"locks": locks})
        # One round trip: the event, and its keys only when the event row is new.
        found = session.execute(
            _PG_STORE,
            {
                "workspace_id": workspace_id,
                "provider": provider,
                "event_id": event.event_id,
                "type": event.type,
                "provider_timestamp": event.provider_timestamp,
                "api_version": event.api_version,
                "object_id": event.object_id,
                "idempotency_key": event.idempotency_key,
                "body": json.dumps(event.body, separators=(",", ":")),
                "raw": raw,
                "digest": hashlib.sha256(raw).hexdigest(),
                "received_at": now,
                "escaped": _escaped_text(event),
                "names": [name for name, _ in keys],
                "values": [value for _, value in keys],
            },
        ).scalar_one_or_none()
        event_pk = None if found is None else int(found)
    else:
        event_pk = session.execute(stmt).scalar_one_or_none()
        if event_pk is not None:
            session.execute(insert(EventBacklog).values(event_pk=event_pk, received_at=now))
        if event_pk is not None and keys:
            session.execute(
                insert(EventKey),
                [
                    {
                        "event_pk": event_pk,
                        "workspace_id": workspace_id,
                        "provider": provider,
                        "name": name,
                        "value": value,
                    }
                    for name, value in keys
                ],
            )
    if event_pk is None:
        session.execute(
            update(Event)
            .where(
                Event.workspace_id == workspace_id,
                Event.provider == provider,
                Event.event_id == event.event_id,
            )
            .values(duplicates=Event.duplicates + 1)
            .execution_options(synchronize_session=False)
        )
        return None
    return int(event_pk)


_PG_STORE_MANY = """
    WITH locked AS (
        SELECT count(pg_advisory_xact_lock_shared(l)) AS n
        FROM unnest(CAST(%(locks)b AS BIGINT[])) AS l
    ), batch AS (
        SELECT t.* FROM locked, unnest(
            CAST(%(ws)b AS TEXT[]), CAST(%(prov)b AS TEXT[]), CAST(%(eid)b AS TEXT[]),
            CAST(%(typ)b AS TEXT[]), CAST(%(ts)b AS TIMESTAMPTZ[]), CAST(%(api)b AS TEXT[]),
            CAST(%(obj)b AS TEXT[]), CAST(%(idem)b AS TEXT[]), CAST(%(body)b AS TEXT[]),
            CAST(%(raw)b AS BYTEA[]), CAST(%(digest)b AS TEXT[]),
            CAST(%(recv)b AS TIMESTAMPTZ[]), CAST(%(n)b AS INT[]), CAST(%(esc)b AS TEXT[])
        ) AS t(ws, prov, eid, typ, ts, api, obj, idem, body, raw, digest, recv, n, esc)
    ), inserted AS (
        INSERT INTO events (workspace_id, provider, event_id, type, provider_timestamp,
                            api_version, object_id, idempotency_key, body, raw, digest,
                            duplicates, received_at, escaped)
        SELECT ws, prov, eid, typ, ts, api, obj, idem, CAST(body AS JSON), raw, digest, n - 1,
               recv, CAST(esc AS JSON)
        FROM batch
        ORDER BY ws, prov, eid
        ON CONFLICT (workspace_id, provider, event_id) DO NOTHING
        RETURNING id, workspace_id, provider, event_id, received_at
    ), queued AS (
        INSERT INTO event_backlog (event_pk, received_at)
        SELECT id, received_at FROM inserted
    ), keyed AS (
        INSERT INTO event_keys (event_pk, workspace_id, provider, name, value)
        SELECT i.id, i.workspace_id, i.provider, k.name, k.value
        FROM inserted i
        JOIN unnest(CAST(%(k_ws)b AS TEXT[]), CAST(%(k_prov)b AS TEXT[]),
                    CAST(%(k_eid)b AS TEXT[]), CAST(%(k_name)b AS TEXT[]),
                    CAST(%(k_value)b AS TEXT[]))
             AS k(ws, prov, eid, name, value)
          ON k.ws = i.workspace_id AND k.prov = i.provider AND k.eid = i.event_id
    )
    SELECT id, workspace_id, provider, event_id FROM inserted
    """
"""One statement (one round trip, atomic even in autocommit): the batch's new events, their
keys and their places in the correlation backlog, under the shared evidence locks of their keys
(``shared.evidence.locks``: taken before any row is written, held until the statement commits).
Driver-level SQL with binary parameters
(``%(name)b``): psycopg sends the arrays as they are, where the text format would escape every
body and raw byte string. A new event starts with the repeats of its key in the batch as its
counter. Its keys are written only with an event row that is new, one per name (they are a
mapping): no conflict to check there. Nothing in it joins the events table: the plan psycopg
prepares after a few batches is kept while the table grows, and the conflict check goes through
the unique index whatever the statistics say."""
_PG_DUPLICATE = """
    UPDATE events SET duplicates = duplicates + %(n)s
    WHERE workspace_id = %(ws)s AND provider = %(prov)s AND event_id = %(eid)s
    """
"""A repeat's counter: one row by its unique key, sent for each repeat of a batch at once
(``executemany`` pipelines them). The row was committed before (or by a concurrent transaction
the insert waited for), so this statement's snapshot sees it."""


def store_many(db: Session | Connection, deliveries: Sequence[Delivery]) -> list[IntakeResult]:
    """Store the deliveries' events once each, with their keys, not yet correlated.

    ``db`` is a session or a connection (on PostgreSQL it may be in autocommit: the batch's new
    events are one statement, see ``_PG_STORE_MANY``). A repeat — of a stored event, or of an
    event earlier in the batch — only moves the stored row's duplicate counter and gets
    ``duplicate=True``. Nothing is linked or woken: :func:`correlate_stored` (inline) or
    :func:`correlate_backlog` (a worker, after commit) does that. :func:`store_many_async` is
    the same on a psycopg asyncio connection.
    """
    if not deliveries:
        return []
    if _dialect(db) != "postgresql":
        session = db if isinstance(db, Session) else Session(bind=db)
        results: list[IntakeResult] = []
        for d in deliveries:
            pk = store_event(
                session,
                workspace_id=d.workspace_id,
                provider=d.provider,
                event=d.event,
                raw=d.raw,
                now=d.now,
            )
            results.append(IntakeResult(event_pk=pk, duplicate=pk is None))
        return results
    plan = _StorePlan.of(deliveries)
    driver = _driver(db)
    rows = driver.exec_driver_sql(_PG_STORE_MANY, plan.params).all()
    stored = {(ws, prov, eid): int(pk) for pk, ws, prov, eid in rows}
    repeats = plan.repeats(stored)
    if repeats:
        driver.exec_driver_sql(_PG_DUPLICATE, repeats)
    return plan.results(stored)


async def store_many_async(conn: Any, deliveries: Sequence[Delivery]) -> list[IntakeResult]:
    """:func:`store_many` on PostgreSQL through a psycopg ``AsyncConnection`` in autocommit
    (the webhook intake's own connections): the same statements, no ORM in between."""
    if not deliveries:
        return []
    plan = _StorePlan.of(deliveries)
    async with conn.cursor() as cursor:
        await cursor.execute(_PG_STORE_MANY, plan.params)
        rows = await cursor.fetchall()
        stored = {(ws, prov, eid): int(pk) for pk, ws, prov, eid in rows}
        repeats = plan.repeats(stored)
        if repeats:
            await cursor.executemany(_PG_DUPLICATE, repeats)
    return plan.results(stored)


_Key = tuple[str, str, str]


def _escaped_text(event: ParsedEvent) -> str | None:
    """``events.escaped`` as JSON text (NULL when nothing was escaped)."""
    return json.dumps(list(event.escaped)) if event.escaped else None


def _json_text(d: Delivery) -> str:
    """The event's JSON text for the ``body`` column: the raw body itself when it is UTF-8
    without a byte order mark (it is the document the event was parsed from, and PostgreSQL's
    JSON parser refuses a mark) and nothing in it was escaped, else the (escaped) document
    written out again."""
    if d.event.escaped:
        return json.dumps(d.event.body, separators=(",", ":"))
    try:
        text = d.raw.decode("utf-8")
    except UnicodeDecodeError:
        text = "\ufeff"
    if text.startswith("\ufeff"):
        return json.dumps(d.event.body, separators=(",", ":"))
    return text


@dataclass(frozen=True, slots=True)
class _StorePlan:
    """A batch ready for ``_PG_STORE_MANY``: each event key once (its first delivery is the one
    stored), how often the batch has it, and the statement's array parameters."""

    deliveries: Sequence[Delivery]
    first: dict[_Key, int]
    times: dict[_Key, int]
    params: dict[str, list[Any]]

    @classmethod
    def of(cls, deliveries: Sequence[Delivery]) -> _StorePlan:
        first: dict[_Key, int] = {}
        times: dict[_Key, int] = {}
        for index, d in enumerate(deliveries):
            key = (d.workspace_id, d.provider, d.event.event_id)
            first.setdefault(key, index)
            times[key] = times.get(key, 0) + 1
        new = [deliveries[i] for i in sorted(first.values())]
        key_rows = [
            (d.workspace_id, d.provider, d.event.event_id, name, value)
            for d in new
            for name, value in sorted(d.event.keys.items())
        ]
        params: dict[str, list[Any]] = {
            "ws": [d.workspace_id for d in new],
            "prov": [d.provider for d in new],
            "eid": [d.event.event_id for d in new],
            "typ": [d.event.type for d in new],
            "ts": [d.event.provider_timestamp for d in new],
            "api": [d.event.api_version for d in new],
            "obj": [d.event.object_id for d in new],
            "idem": [d.event.idempotency_key for d in new],
            "body": [_json_text(d) for d in new],
            "raw": [d.raw for d in new],
            "digest": [hashlib.sha256(d.raw).hexdigest() for d in new],
            "recv": [d.now for d in new],
            "n": [times[(d.workspace_id, d.provider, d.event.event_id)] for d in new],
            "esc": [_escaped_text(d.event) for d in new],
            "k_ws": [k[0] for k in key_rows],
            "k_prov": [k[1] for k in key_rows],
            "k_eid": [k[2] for k in key_rows],
            "k_name": [k[3] for k in key_rows],
            "k_value": [k[4] for k in key_rows],
            "locks": evidence_lock_ids((k[0], k[1], k[4]) for k in key_rows),
        }
        return cls(deliveries, first, times, params)

    def repeats(self, stored: Mapping[_Key, int]) -> list[dict[str, Any]]:
        """``_PG_DUPLICATE``'s parameters for the keys the statement did not store (stored
        before, or by a concurrent transaction that committed meanwhile), in key order."""
        return [
            {"ws": k[0], "prov": k[1], "eid": k[2], "n": self.times[k]}
            for k in sorted(set(self.first) - set(stored))
        ]

    def results(self, stored: Mapping[_Key, int]) -> list[IntakeResult]:
        results = []
        for index, d in enumerate(self.deliveries):
            key = (d.workspace_id, d.provider, d.event.event_id)
            if self.first[key] == index and key in stored:
                results.append(IntakeResult(event_pk=stored[key], duplicate=False))
            else:
                results.append(IntakeResult(event_pk=None, duplicate=True))
        return results


def _driver(db: Session | Connection) -> Connection:
    return db if isinstance(db, Connection) else db.connection()


def _dialect(db: Session | Connection) -> str:
    return db.dialect.name if isinstance(db, Connection) else db.get_bind().dialect.name


def event_record(row: Event) -> EventRecord:
    """The core's view of a stored event (what ``reduce_events`` takes)."""
    return EventRecord(
        event_id=row.event_id,
        type=row.type,
        provider_timestamp=row.provider_timestamp,
        body=row.body,
        api_version=row.api_version,
        received_at=row.received_at,
        duplicates=row.duplicates,
    )
