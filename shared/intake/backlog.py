"""The correlation backlog: stored events that no correlator has matched yet wait as rows of
``event_backlog``; :func:`correlate_backlog` claims the oldest (``FOR UPDATE SKIP LOCKED`` on
PostgreSQL) and correlates them set-based (``shared.intake.batch.correlate_stored``), which
deletes their rows. What the ``provely.correlate`` task and the sweeper run
(``shared.intake.correlator``).

The caller owns the transaction; nothing here commits.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from shared.db.models import Event, EventBacklog, EventKey
from shared.db.sql import driver_cursor, keyed_lookups, one_of
from shared.intake.batch import correlate_stored
from shared.intake.correlate import lock_correlation
from shared.intake.parse import ParsedEvent
from shared.intake.results import Delivery, IntakeResult

__all__ = ["correlate_backlog"]


_PG_CLAIM = """
    WITH claimed AS (
        SELECT event_pk FROM event_backlog {where}
        ORDER BY event_pk LIMIT %(limit)s FOR UPDATE SKIP LOCKED
    )
    SELECT e.id, e.workspace_id, e.provider, e.event_id, e.type, e.provider_timestamp,
           e.api_version, e.object_id, e.idempotency_key, e.received_at, k.names, k.vals
    FROM claimed
    JOIN events e ON e.id = claimed.event_pk
    LEFT JOIN LATERAL (
        SELECT array_agg(name) AS names, array_agg(value) AS vals
        FROM event_keys WHERE event_keys.event_pk = e.id
    ) k ON TRUE
    ORDER BY e.id
    """
"""The backlog's oldest events no other correlator holds, locked, with what correlation reads of
them and their keys: one round trip, plain tuples. Neither the body (a JSON document to decode)
nor the raw bytes are read."""
_PG_CLAIM_ALL = _PG_CLAIM.format(where="")
_PG_CLAIM_BEFORE = _PG_CLAIM.format(where="WHERE received_at < %(before)s")

_Claimed = tuple[
    int, str, str, str, str, datetime, str | None, str | None, str | None, datetime,
    dict[str, str],
]  # fmt: skip


def _claim_pg(session: Session, limit: int, received_before: datetime | None) -> list[_Claimed]:
    params: dict[str, Any] = {"limit": limit, "before": received_before}
    statement = _PG_CLAIM_ALL if received_before is None else _PG_CLAIM_BEFORE
    with driver_cursor(session) as cursor:
        rows = cursor.execute(statement, params).fetchall()
    return [
        (
            int(pk),
            ws,
            prov,
            eid,
            typ,
            ts.astimezone(UTC),
            api,
            obj,
            idem,
            received.astimezone(UTC),
            dict(zip(names, vals, strict=True)) if names else {},
        )
        for pk, ws, prov, eid, typ, ts, api, obj, idem, received, names, vals in rows
    ]


def _claim(session: Session, limit: int, received_before: datetime | None) -> list[_Claimed]:
    """:func:`_claim_pg` through the ORM's tables, for the other databases (SQLite serialises
    writers: the claimed rows are this transaction's until it ends)."""
    db = session.connection()  # plain rows (no ORM loading)
    claim = select(EventBacklog.event_pk)
    if received_before is not None:
        claim = claim.where(EventBacklog.received_at < received_before)
    claimed = [int(pk) for pk in db.scalars(claim.order_by(EventBacklog.event_pk).limit(limit))]
    if not claimed:
        return []
    keys: dict[int, dict[str, str]] = {}
    for pk, name, value in db.execute(
        select(EventKey.event_pk, EventKey.name, EventKey.value).where(
            one_of(session, EventKey.event_pk, claimed)
        )
    ).all():
        keys.setdefault(int(pk), {})[name] = value
    query = select(
        Event.id,
        Event.workspace_id,
        Event.provider,
        Event.event_id,
        Event.type,
        Event.provider_timestamp,
        Event.api_version,
        Event.object_id,
        Event.idempotency_key,
        Event.received_at,
    ).where(one_of(session, Event.id, claimed))
    return [(*row, keys.get(row.id, {})) for row in db.execute(query.order_by(Event.id)).all()]


def correlate_backlog(
    session: Session,
    *,
    now: datetime,
    limit: int = 256,
    received_before: datetime | None = None,
) -> list[IntakeResult]:
    """Claim up to ``limit`` stored events that no correlator has matched yet (oldest first;
    only those received before ``received_before`` when given) and :func:`correlate_stored`
    them. The events wait as rows of the backlog table (``event_backlog``), which the
    correlation deletes. On PostgreSQL those rows are claimed with ``FOR UPDATE SKIP LOCKED``,
    so correlators running at once never take the same event; the event rows are neither locked
    nor written, so a transaction that links a claimed event from the operation's side never
    waits for the claim (it holds the workspace's correlation lock the claimer is about to wait
    for). The caller commits, then dispatches the wakes.
    """
    keyed_lookups(session)  # plans that hold without statistics (``shared.db.sql``)
    if session.get_bind().dialect.name == "postgresql":
        rows = _claim_pg(session, limit, received_before)
    else:
        rows = _claim(session, limit, received_before)
    if not rows:
        return []
    # No action report of these workspaces is between its key scan and its commit from here on
    # (and the statements below see the reports that committed while this waited). What was
    # read above cannot change: an event and its keys are written once, by one statement.
    lock_correlation(session, {row[1] for row in rows}, shared=False)
    pending = [
        (
            Delivery(
                ws,
                prov,
                ParsedEvent(
                    event_id=eid,
                    type=typ,
                    provider_timestamp=ts,
                    body={},  # not read by correlation (see above)
                    api_version=api,
                    object_id=obj,
                    idempotency_key=idem,
                    keys=keys,
                ),
                b"",
                received,
            ),
            IntakeResult(event_pk=pk, duplicate=False),
        )
        for pk, ws, prov, eid, typ, ts, api, obj, idem, received, keys in rows
    ]
    correlate_stored(session, pending, now=now)
    return [r for _, r in pending]
