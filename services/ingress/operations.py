"""``/v1/operations``: create operations, report actions, read verdicts, verify, review."""

from __future__ import annotations

import base64
import binascii
import json
from datetime import datetime
from typing import Annotated, cast

from fastapi import APIRouter, Header, Path, Query, Request, Response
from sqlalchemy import and_, or_, select
from sqlalchemy.orm import Session, defer
from sqlalchemy.orm.attributes import set_committed_value

from services.ingress.actions import Scheduled, record_action, request_verification
from services.ingress.bodies import StorableJsonRoute
from services.ingress.creation import (
    check_field_sizes,
    check_operation_input,
    create_operation,
    prepare_operation,
)
from services.ingress.deps import AdminCaller, Caller, app_engine, app_settings, now, transaction
from services.ingress.lookup import load_operation
from services.ingress.problems import ApiError, FieldProblem, error_responses
from services.ingress.review import record_review
from services.ingress.schemas import (
    ActionReportIn,
    CreateOperationIn,
    OperationList,
    OperationListItem,
    OperationOut,
    ReviewIn,
    Timeline,
)
from services.ingress.views import operation_view, timeline_view
from shared.core.types import OperationState
from shared.db.models import Operation
from shared.lifecycle import messages

__all__ = ["router"]

router = APIRouter(prefix="/v1/operations", tags=["operations"], route_class=StorableJsonRoute)

OperationId = Annotated[str, Path(max_length=64, description="The operation id (op_…).")]


def _dispatch(operation_id: str, scheduled: Scheduled) -> None:
    """Send the observe message after commit; the stored schedule is the record."""
    if scheduled.fence is None:
        return
    messages.observe(operation_id, scheduled.fence, countdown_s=scheduled.countdown_s)


@router.post(
    "",
    status_code=201,
    response_model=OperationOut,
    responses={
        200: {"model": OperationOut, "description": "Replayed: same Idempotency-Key and body."},
        **error_responses(400, 401, 409, 413, 422),
    },
    summary="Create an operation bound to a contract",
    operation_id="create_operation",
    description=(
        "Create one attempt at one effect, bound to a contract version. Use the returned id as "
        "the provider's idempotency key, perform the action, then report it. An `Idempotency-Key` "
        "header replays the same operation (200) for the same body and refuses another body "
        "(409)."
    ),
)
def create(
    request: Request,
    response: Response,
    body: CreateOperationIn,
    who: Caller,
    idempotency_key: Annotated[
        str | None,
        Header(
            alias="Idempotency-Key",
            min_length=1,
            max_length=255,
            pattern=r"^[!-~]+$",
            description="Visible ASCII; the same key with the same body replays the operation.",
        ),
    ] = None,
) -> OperationOut:
    settings = app_settings(request)
    engine = app_engine(request)
    check_field_sizes(body, settings)
    with transaction(engine) as session:
        prepared = prepare_operation(
            session, workspace_id=who.workspace_id, body=body, idempotency_key=idempotency_key
        )
        replayed = operation_view(session, prepared) if isinstance(prepared, Operation) else None
    if replayed is not None:
        response.status_code = 200
        response.headers["Location"] = f"/v1/operations/{replayed.id}"
        return replayed
    assert not isinstance(prepared, Operation)
    check_operation_input(prepared, body)  # no transaction is held while patterns match
    with transaction(engine) as session:
        created = create_operation(
            session,
            workspace_id=who.workspace_id,
            body=body,
            resolved=prepared,
            idempotency_key=idempotency_key,
            settings=settings,
            now=now(),
        )
        view = operation_view(session, created.operation)
    response.status_code = 201 if created.new else 200
    response.headers["Location"] = f"/v1/operations/{view.id}"
    return view


@router.post(
    "/{operation_id}/action",
    response_model=OperationOut,
    responses=error_responses(400, 401, 404, 409, 413, 422),
    summary="Report the action: started, its result, or its error",
    operation_id="report_action",
    description=(
        "Report what happened to the action: `started` before the call, then `result` with the "
        "provider's response body or `error` with what the agent saw. The action response (E1) "
        "never verifies on its own: observation starts and the verdict follows from the evidence."
    ),
)
def report_action(
    request: Request, operation_id: OperationId, body: ActionReportIn, who: Caller
) -> OperationOut:
    settings = app_settings(request)
    with transaction(app_engine(request)) as session:
        op = load_operation(session, who.workspace_id, operation_id, for_update=True)
        scheduled = record_action(session, op, body, settings=settings, now=now())
        view = operation_view(session, op)
    _dispatch(op.id, scheduled)
    return view


@router.get(
    "/{operation_id}",
    response_model=OperationOut,
    responses=error_responses(401, 404),
    summary="Read an operation: state, verdict, retry guidance, evidence",
    operation_id="get_operation",
    description=(
        "The operation as it stands: lifecycle state, current verdict and reason, `final`, "
        "`safe_to_claim_complete`, retry guidance (`retry.action`, `retry.verification`), the "
        "conditions as evaluated and the evidence behind them. PENDING is a normal answer: ask "
        "again later."
    ),
)
def get_operation(request: Request, operation_id: OperationId, who: Caller) -> OperationOut:
    with transaction(app_engine(request)) as session:
        op = load_operation(session, who.workspace_id, operation_id)
        return operation_view(session, op)


def _encode_cursor(op: Operation) -> str:
    raw = json.dumps([op.created_at.isoformat(), op.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
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


@router.get(
    "",
    response_model=OperationList,
    responses=error_responses(401, 422),
    summary="List operations, newest first (cursor pagination)",
    operation_id="list_operations",
    description=(
        "The workspace's operations, newest first, optionally filtered by `state` or `contract`. "
        "Pass `next_cursor` back as `cursor` for the next page."
    ),
)
def list_operations(
    request: Request,
    who: Caller,
    state: Annotated[OperationState | None, Query()] = None,
    contract: Annotated[str | None, Query(max_length=200)] = None,
    limit: Annotated[int, Query(ge=1, le=200)] = 50,
    cursor: Annotated[str | None, Query(max_length=500)] = None,
) -> OperationList:
    query = (
        select(Operation)
        .where(Operation.workspace_id == who.workspace_id)
        # List items never carry metadata; input and the action result are read only for
        # the operations whose view needs them (_load_facts): a page's memory does not grow
        # with what agents sent.
        .options(defer(Operation.metadata_), defer(Operation.input), defer(Operation.action_result))
    )
    if state is not None:
        query = query.where(Operation.state == state.value)
    if contract is not None:
        query = query.where(Operation.contract_id == contract)
    if cursor is not None:
        created, op_id = _decode_cursor(cursor)
        query = query.where(
            or_(
                Operation.created_at < created,
                and_(Operation.created_at == created, Operation.id < op_id),
            )
        )
    query = query.order_by(Operation.created_at.desc(), Operation.id.desc()).limit(limit + 1)
    with transaction(app_engine(request)) as session:
        rows = list(session.execute(query).scalars())
        page = rows[:limit]
        _load_facts(session, page)
        return OperationList(
            data=[cast(OperationListItem, operation_view(session, op, listed=True)) for op in page],
            next_cursor=_encode_cursor(page[-1]) if len(rows) > limit else None,
        )


@router.get(
    "/{operation_id}/timeline",
    response_model=Timeline,
    response_model_exclude_none=True,
    responses=error_responses(401, 404),
    summary="Transitions, observations and correlated events, in order",
    operation_id="get_operation_timeline",
    description=(
        "Everything that happened to the operation in time order: state transitions (with their "
        "audit chain position), readbacks and the provider events correlated with it."
    ),
)
def get_timeline(request: Request, operation_id: OperationId, who: Caller) -> Timeline:
    with transaction(app_engine(request)) as session:
        op = load_operation(session, who.workspace_id, operation_id)
        return timeline_view(session, op)


@router.post(
    "/{operation_id}/verify",
    status_code=202,
    response_model=OperationOut,
    responses=error_responses(401, 404, 409),
    summary="Retry the verification now (only where the retry table allows it)",
    operation_id="verify_operation",
    description=(
        "Ask for a new observation now. Allowed only where the retry table allows retrying the "
        "verification (UNVERIFIABLE with `evidence_unavailable`); otherwise 409."
    ),
)
def verify(request: Request, operation_id: OperationId, who: Caller) -> OperationOut:
    with transaction(app_engine(request)) as session:
        op = load_operation(session, who.workspace_id, operation_id, for_update=True)
        scheduled = request_verification(session, op, now=now())
        view = operation_view(session, op)
    _dispatch(op.id, scheduled)
    return view


@router.post(
    "/{operation_id}/review",
    response_model=OperationOut,
    responses=error_responses(400, 401, 403, 404, 409, 413, 422),
    summary="Resolve HUMAN_REVIEW with a verdict and a note (admin scope)",
    operation_id="review_operation",
    description=(
        "A person's decision on an operation in HUMAN_REVIEW: a final verdict and a note, "
        "recorded in the audit chain and answered with a signed receipt. Needs an admin key."
    ),
)
def review(
    request: Request,
    operation_id: OperationId,
    body: ReviewIn,
    who: AdminCaller,
) -> OperationOut:
    with transaction(app_engine(request)) as session:
        op = load_operation(session, who.workspace_id, operation_id, for_update=True)
        record_review(session, op, body, reviewer_key_id=who.key_id, now=now())
        return operation_view(session, op)
