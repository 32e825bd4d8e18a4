"""The record of refused deliveries: a delivery to a connection that was refused because its
signature failed or its body is not a JSON event leaves one ``refused_deliveries`` row — the
connection, the reason, the answer, the body's size and the time — and never its body (safety
rule 9: a delivery whose signature fails is stored nowhere). Deliveries to an address with no
connection are not recorded (anyone may send them; the metrics count them).

:func:`record_refusals` writes them in the transaction of the batch they arrived with
(:func:`record_refusals_async` on the intake's psycopg asyncio connections). The caller owns
the transaction.

Anyone who knows a workspace's address can make refused deliveries, so the record is bounded:
:func:`prune_refusals` (run by the sweeper on every pass) keeps each workspace's newest
``keep`` rows and deletes the rest. Between two passes a flood adds at most what arrives in one
sweeper interval; the metrics still count every refusal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Connection, and_, delete, func, insert, or_, select
from sqlalchemy.orm import Session

from shared.db.models import RefusedDelivery

__all__ = ["Refusal", "prune_refusals", "record_refusals", "record_refusals_async"]


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refused delivery to a connection, without its body."""

    workspace_id: str
    provider: str
    connection_id: str
    reason: str
    http_status: int
    size: int
    received_at: datetime

    def row(self) -> dict[str, Any]:
        return {
            "workspace_id": self.workspace_id,
            "provider": self.provider,
            "connection_id": self.connection_id,
            "reason": self.reason,
            "http_status": self.http_status,
            "size": self.size,
            "received_at": self.received_at,
        }


def record_refusals(db: Session | Connection, refusals: Sequence[Refusal]) -> None:
    """Write the refusals (nothing when there are none)."""
    if refusals:
        db.execute(insert(RefusedDelivery), [r.row() for r in refusals])


_PG_INSERT = """
    INSERT INTO refused_deliveries (workspace_id, provider, connection_id, reason,
                                    http_status, size, received_at)
    VALUES (%(workspace_id)s, %(provider)s, %(connection_id)s, %(reason)s,
            %(http_status)s, %(size)s, %(received_at)s)
    """


async def record_refusals_async(conn: Any, refusals: Sequence[Refusal]) -> None:
    """:func:`record_refusals` on a psycopg ``AsyncConnection`` (the webhook intake's own)."""
    if refusals:
        async with conn.cursor() as cursor:
            await cursor.executemany(_PG_INSERT, [r.row() for r in refusals])


def prune_refusals(db: Session | Connection, *, keep: int) -> int:
    """Keep each workspace's newest ``keep`` refused deliveries; return how many were deleted."""
    crowded = db.execute(
        select(RefusedDelivery.workspace_id)
        .group_by(RefusedDelivery.workspace_id)
        .having(func.count() > keep)
    ).scalars()
    deleted = 0
    for workspace_id in list(crowded):
        # The newest row past the ones kept; it and every older row go.
        first_dropped = db.execute(
            select(RefusedDelivery.received_at, RefusedDelivery.id)
            .where(RefusedDelivery.workspace_id == workspace_id)
            .order_by(RefusedDelivery.received_at.desc(), RefusedDelivery.id.desc())
            .offset(keep)
            .limit(1)
        ).first()
        if first_dropped is None:
            continue
        at, pk = first_dropped
        result = db.execute(
            delete(RefusedDelivery).where(
                RefusedDelivery.workspace_id == workspace_id,
                or_(
                    RefusedDelivery.received_at < at,
                    and_(RefusedDelivery.received_at == at, RefusedDelivery.id <= pk),
                ),
            )
        )
        deleted += int(getattr(result, "rowcount", 0) or 0)
    return deleted
