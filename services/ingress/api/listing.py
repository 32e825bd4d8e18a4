"""One page of a workspace's operations, newest first, with a keyset cursor.

``GET /v1/operations`` and the console's operations list read through :func:`list_page`, so a
filter means the same thing in both. The cursor is the last row's ``(created_at, id)``: a page
is one range scan of ``ix_operations_ws_created`` however deep it is, and rows created while
someone pages never shift the pages after it.

"Needs a person" is what the review queue holds: HUMAN_REVIEW, CONTRADICTED and EXPIRED
operations nobody has reviewed yet.

:func:`summary_page` is the same page (same filters, order and cursor) read as the few columns
a table of operations shows, for the console: no ORM objects, no resource models, one
statement, so its cost stays that of the range scan (``bench/console.py``).
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar, cast

from sqlalchemy import Row, Select, and_, or_, select
from sqlalchemy.orm import Session, defer
from sqlalchemy.orm.attributes import set_committed_value

from services.ingress.api.schemas import OperationList, OperationListItem
from services.ingress.api.views import operation_view
from services.ingress.problems import ApiError, FieldProblem
from shared.db.models import Operation, Receipt
from shared.lifecycle.review import REVIEWABLE_STATES

__all__ = [
    "SUMMARY_COLUMNS",
    "OperationFilters",
    "SummaryPage",
    "decode_cursor",
    "encode_cursor",
    "list_page",
    "operation_states",
    "page_query",
    "summary_page",
    "summary_query",
]

_Query = TypeVar("_Query", bound=Select[Any])


@dataclass(frozen=True, slots=True)
class OperationFilters:
    state: str | None = None
    verdict: str | None = None
    reason: str | None = None
    contract: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    needs_person: bool = False


@dataclass(frozen=True, slots=True)
class SummaryPage:
    """One page of :func:`summary_page`: rows of ``SUMMARY_COLUMNS`` and the next cursor."""

    rows: list[Row[Any]]
    next_cursor: str | None


def _cursor(created_at: datetime, op_id: str) -> str:
    raw = json.dumps([created_at.isoformat(), op_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def encode_cursor(op: Operation) -> str:
    return _cursor(op.created_at, op.id)


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names; 422 for one this API did not return."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created, op_id = json.loads(raw)
        when = datetime.fromisoformat(created)
        if when.tzinfo is None or not isinstance(op_id, str):
            raise ValueError
        return when, op_id
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ApiError(
            422,
            "invalid-request",
            "cursor is not one this API returned",
            errors=[FieldProblem(field="query.cursor", message="is not a valid cursor")],
        ) from None


def _filtered(query: _Query, filters: OperationFilters) -> _Query:
    if filters.state is not None:
        query = query.where(Operation.state == filters.state)
    if filters.verdict is not None:
        query = query.where(Operation.verdict == filters.verdict)
    if filters.reason is not None:
        query = query.where(Operation.reason == filters.reason)
    if filters.contract is not None:
        query = query.where(Operation.contract_id == filters.contract)
    if filters.since is not None:
        query = query.where(Operation.created_at >= filters.since)
    if filters.until is not None:
        query = query.where(Operation.created_at < filters.until)
    if filters.needs_person:
        query = query.where(Operation.state.in_(REVIEWABLE_STATES), Operation.review.is_(None))
    return query


def _load_facts(session: Session, page: list[Operation]) -> None:
    """Load ``input`` and ``action_result`` in one query for the operations of a page whose
    correlation is not recorded in their decision (their view derives it from those)."""
    wanted = [
        op.id
        for op in page
        if not (isinstance(op.decision, dict) and op.decision.get("correlation"))
    ]
    if not wanted:
        return
    found = {
        row.id: row
        for row in session.execute(
            select(Operation.id, Operation.input, Operation.action_result).where(
                Operation.id.in_(wanted)
            )
        )
    }
    for op in page:
        row = found.get(op.id)
        if row is not None:
            set_committed_value(op, "input", row.input)
            set_committed_value(op, "action_result", row.action_result)


def _with_current_receipt(session: Session, page: list[Operation]) -> set[str]:
    """The final operations of a page that have a current receipt, in one query."""
    final = [op.id for op in page if op.final]
    if not final:
        return set()
    return set(
        session.execute(
            select(Receipt.operation_id).where(
                Receipt.operation_id.in_(final), Receipt.current.is_(True)
            )
        ).scalars()
    )


def _paged(query: _Query, *, limit: int, cursor: str | None) -> _Query:
    """``query`` after ``cursor``, newest first, ``limit + 1`` rows (the extra one says
    another page exists)."""
    if cursor is not None:
        created, op_id = decode_cursor(cursor)
        query = query.where(
            or_(
                Operation.created_at < created,
                and_(Operation.created_at == created, Operation.id < op_id),
            )
        )
    return query.order_by(Operation.created_at.desc(), Operation.id.desc()).limit(limit + 1)


def page_query(
    *, workspace_id: str, filters: OperationFilters, limit: int, cursor: str | None = None
) -> Select[tuple[Operation]]:
    """The statement of one page: ``limit + 1`` rows (the extra one says another page exists)."""
    query = _filtered(
        select(Operation)
        .where(Operation.workspace_id == workspace_id)
        # List items never carry metadata; input and the action result are read only for
        # the operations whose view needs them (_load_facts): a page's memory does not grow
        # with what agents sent.
        .options(
            defer(Operation.metadata_), defer(Operation.input), defer(Operation.action_result)
        ),
        filters,
    )
    return _paged(query, limit=limit, cursor=cursor)


SUMMARY_COLUMNS = (
    Operation.id,
    Operation.contract_id,
    Operation.contract_version,
    Operation.state,
    Operation.verdict,
    Operation.reason,
    Operation.final,
    Operation.created_at,
    Operation.updated_at,
)


def summary_query(
    *, workspace_id: str, filters: OperationFilters, limit: int, cursor: str | None = None
) -> Select[Any]:
    """:func:`page_query`'s page as ``SUMMARY_COLUMNS`` only."""
    query = _filtered(
        select(*SUMMARY_COLUMNS).where(Operation.workspace_id == workspace_id), filters
    )
    return _paged(query, limit=limit, cursor=cursor)


def summary_page(
    session: Session,
    *,
    workspace_id: str,
    filters: OperationFilters,
    limit: int,
    cursor: str | None = None,
) -> SummaryPage:
    """The rows :func:`list_page` would list, as ``SUMMARY_COLUMNS`` (what a table of
    operations shows: id, contract and version, state, verdict, reason, final, times)."""
    query = summary_query(workspace_id=workspace_id, filters=filters, limit=limit, cursor=cursor)
    rows = list(session.execute(query).all())
    page = rows[:limit]
    more = len(rows) > limit
    return SummaryPage(
        rows=page, next_cursor=_cursor(page[-1].created_at, page[-1].id) if more else None
    )


def list_page(
    session: Session,
    *,
    workspace_id: str,
    filters: OperationFilters,
    limit: int,
    cursor: str | None = None,
) -> OperationList:
    """The page of ``workspace_id``'s operations after ``cursor`` that ``filters`` keep."""
    query = page_query(workspace_id=workspace_id, filters=filters, limit=limit, cursor=cursor)
    rows = list(session.execute(query).scalars())
    page = rows[:limit]
    _load_facts(session, page)
    receipts = _with_current_receipt(session, page)
    return OperationList(
        data=[
            cast(
                OperationListItem,
                operation_view(session, op, listed=True, current_receipts=receipts),
            )
            for op in page
        ],
        next_cursor=encode_cursor(page[-1]) if len(rows) > limit else None,
    )


def operation_states(
    session: Session, *, workspace_id: str, ids: list[str]
) -> list[dict[str, object]]:
    """State, verdict, reason, ``final`` and version of the given operations of
    ``workspace_id`` (what a page polls to show verdicts as they change); ids of another
    workspace are left out, as unknown ones are."""
    if not ids:
        return []
    rows = session.execute(
        select(
            Operation.id,
            Operation.state,
            Operation.verdict,
            Operation.reason,
            Operation.final,
            Operation.version,
        ).where(Operation.workspace_id == workspace_id, Operation.id.in_(ids))
    )
    return [
        {
            "id": row.id,
            "state": row.state,
            "verdict": row.verdict,
            "reason": row.reason,
            "final": row.final,
            "version": row.version,
        }
        for row in rows
    ]
