"""``GET /v1/deliveries``: what the workspace's webhook endpoints received, newest first —
each delivery stored (with its event, whether an earlier delivery of it was repeated, the places
escaped to store it, and why no registered contract can count it, when none can) and each one
refused (the reason, the answer, the size; never the body). Read per connection with
``provider``; paged by cursor like the operations."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import Field
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session

from services.ingress.deps import Caller, app_engine, transaction
from services.ingress.models import ResponseModel as _Out
from services.ingress.problems import ApiError, FieldProblem, error_responses
from shared.db.models import Event, RefusedDelivery
from shared.intake.contracts import uncounted_by_contracts
from shared.trust.registry import RegistryError

__all__ = ["DeliveryList", "DeliveryOut", "decode_cursor", "delivery_page", "router"]

router = APIRouter(prefix="/v1/deliveries", tags=["deliveries"])

_STORED, _REFUSED = 1, 0
"""Ranks in the order of a page (newest first; at the same time, stored before refused)."""


class DeliveryOut(_Out):
    outcome: Literal["stored", "refused"]
    received_at: datetime
    provider: str
    event_id: str | None = Field(default=None, description="Stored: the provider's event id.")
    type: str | None = None
    api_version: str | None = None
    repeats: int | None = Field(
        default=None, description="Stored: later deliveries of the same event (not stored again)."
    )
    escaped: list[str] | None = Field(
        default=None, description="Stored: places of the stored copy escaped to be storable."
    )
    ignored: str | None = Field(
        default=None,
        description="Stored, but no registered contract can count it: why "
        "(`api_version 2025-03-31.basil is not among 2026-08-26`).",
    )
    ignored_reason: str | None = Field(default=None, description="`api_version` or `type_unread`.")
    reason: str | None = Field(
        default=None,
        description="Refused: why (`no_matching_signature`, `malformed_json`, …; the reasons of "
        "`provely_events_refused_total`).",
    )
    http_status: int | None = Field(default=None, description="Refused: the answer given.")
    size: int | None = Field(default=None, description="Refused: the body's size in bytes.")


class DeliveryList(_Out):
    data: list[DeliveryOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page.")


Cursor = tuple[datetime, int, int]


def _encode(item: Cursor) -> str:
    raw = json.dumps([item[0].isoformat(), item[1], item[2]]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> Cursor:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        when_text, rank, pk = json.loads(raw)
        when = datetime.fromisoformat(when_text)
        if when.tzinfo is None or rank not in (_STORED, _REFUSED) or type(pk) is not int:
            raise ValueError
        return when, rank, pk
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ApiError(
            422,
            "invalid-request",
            "cursor is not one this API returned",
            errors=[FieldProblem(field="query.cursor", message="is not a valid cursor")],
        ) from None


def _ignored(provider: str, event: Any) -> tuple[str, str] | None:
    try:
        return uncounted_by_contracts(provider, event.type, event.api_version)
    except RegistryError:
        return None


def _stored(event: Any) -> DeliveryOut:
    found = _ignored(event.provider, event)
    return DeliveryOut(
        outcome="stored",
        received_at=event.received_at,
        provider=event.provider,
        event_id=event.event_id,
        type=event.type,
        api_version=event.api_version,
        repeats=event.duplicates,
        escaped=list(event.escaped) if event.escaped else None,
        ignored=None if found is None else found[1],
        ignored_reason=None if found is None else found[0],
    )


def _refused(row: Any) -> DeliveryOut:
    return DeliveryOut(
        outcome="refused",
        received_at=row.received_at,
        provider=row.provider,
        reason=row.reason,
        http_status=row.http_status,
        size=row.size,
    )


@router.get(
    "",
    response_model=DeliveryList,
    responses=error_responses(401, 422),
    summary="List webhook deliveries received, stored and refused, newest first",
    operation_id="list_deliveries",
    description=(
        "What the workspace's webhook endpoints received: each delivery stored (its event, and "
        "`ignored` when no registered contract can count it, e.g. an endpoint on another API "
        "version) and each one refused (`reason`, never the body). Filter by `provider` (one "
        "connection) and `outcome`; pass `next_cursor` back as `cursor` for the next page."
    ),
)
def list_deliveries(
    request: Request,
    who: Caller,
    provider: Annotated[str | None, Query(max_length=64)] = None,
    outcome: Annotated[Literal["stored", "refused"] | None, Query()] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> DeliveryList:
    after = decode_cursor(cursor) if cursor is not None else None
    with transaction(app_engine(request)) as session:
        return delivery_page(
            session,
            workspace_id=who.workspace_id,
            provider=provider,
            outcome=outcome,
            limit=limit,
            after=after,
        )


def _stored_rows(
    session: Session, workspace_id: str, provider: str | None, limit: int, after: Cursor | None
) -> list[tuple[Cursor, DeliveryOut]]:
    query = select(Event).where(Event.workspace_id == workspace_id)
    if provider is not None:
        query = query.where(Event.provider == provider)
    if after is not None:
        when, rank, pk = after
        older = Event.received_at < when
        # At the cursor's time, stored deliveries come before refused ones.
        query = query.where(
            older
            if rank == _REFUSED
            else or_(older, and_(Event.received_at == when, Event.id < pk))
        )
    query = query.order_by(Event.received_at.desc(), Event.id.desc()).limit(limit + 1)
    return [
        ((event.received_at, _STORED, event.id), _stored(event))
        for event in session.execute(query).scalars()
    ]


def _refused_rows(
    session: Session, workspace_id: str, provider: str | None, limit: int, after: Cursor | None
) -> list[tuple[Cursor, DeliveryOut]]:
    query = select(RefusedDelivery).where(RefusedDelivery.workspace_id == workspace_id)
    if provider is not None:
        query = query.where(RefusedDelivery.provider == provider)
    if after is not None:
        when, rank, pk = after
        same = RefusedDelivery.received_at == when
        query = query.where(
            or_(
                RefusedDelivery.received_at < when,
                and_(same, RefusedDelivery.id < pk) if rank == _REFUSED else same,
            )
        )
    query = query.order_by(RefusedDelivery.received_at.desc(), RefusedDelivery.id.desc())
    return [
        ((row.received_at, _REFUSED, row.id), _refused(row))
        for row in session.execute(query.limit(limit + 1)).scalars()
    ]


def delivery_page(
    session: Session,
    *,
    workspace_id: str,
    provider: str | None,
    outcome: str | None,
    limit: int,
    after: Cursor | None,
) -> DeliveryList:
    """One page of the workspace's deliveries, newest first (``after``: the cursor's place)."""
    rows: list[tuple[Cursor, DeliveryOut]] = []
    if outcome in (None, "stored"):
        rows += _stored_rows(session, workspace_id, provider, limit, after)
    if outcome in (None, "refused"):
        rows += _refused_rows(session, workspace_id, provider, limit, after)
    rows.sort(key=lambda r: r[0], reverse=True)
    page = rows[:limit]
    return DeliveryList(
        data=[item for _, item in page],
        next_cursor=_encode(page[-1][0]) if len(rows) > limit else None,
    )
