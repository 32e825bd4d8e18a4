"""``/v1/operations``: create operations, report actions, read verdicts, verify, review."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, BackgroundTasks, Header, Path, Query, Request, Response

from services.ingress.api.actions import Scheduled, record_action, request_verification
from services.ingress.api.answers import operation_answer
from services.ingress.api.bodies import StorableJsonRoute
from services.ingress.api.creation import (
    check_field_sizes,
    check_operation_input,
    create_operation,
    prepare_operation,
)
from services.ingress.api.listing import OperationFilters, list_page
from services.ingress.api.lookup import load_operation, load_operation_linked
from services.ingress.api.review import record_review
from services.ingress.api.schemas import (
    ActionReportIn,
    CreateOperationIn,
    OperationList,
    OperationOut,
    ReviewIn,
    Timeline,
)
from services.ingress.api.views import operation_view, timeline_view
from services.ingress.deps import (
    AdminCaller,
    BearerKey,
    Caller,
    app_engine,
    app_settings,
    authorized,
    now,
    transaction,
)
from services.ingress.problems import error_responses
from shared.core.types import OperationState
from shared.db.models import Operation
from shared.intake.ignored import count_ignored
from shared.lifecycle import messages

__all__ = ["router"]

router = APIRouter(prefix="/v1/operations", tags=["operations"], route_class=StorableJsonRoute)

OperationId = Annotated[str, Path(max_length=64, description="The operation id (op_…).")]


def _dispatch(operation_id: str, scheduled: Scheduled) -> None:
    """After commit: count the events linked that cannot count, send the observe message (the
    stored schedule is the record)."""
    if scheduled.ignored is not None:
        count_ignored([scheduled.ignored])
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
    body: CreateOperationIn,
    key: BearerKey,
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
) -> Response:
    settings = app_settings(request)
    with authorized(request, key) as (session, who):
        check_field_sizes(body, settings)
        prepared = prepare_operation(
            session, workspace_id=who.workspace_id, body=body, idempotency_key=idempotency_key
        )
        replayed = operation_view(session, prepared) if isinstance(prepared, Operation) else None
    if replayed is not None:
        return operation_answer(replayed, location=True)
    assert not isinstance(prepared, Operation)
    check_operation_input(prepared, body)  # no transaction is held while patterns match
    with transaction(app_engine(request)) as session:
        created = create_operation(
            session,
            workspace_id=who.workspace_id,
            action_window_seconds=who.action_window_seconds,
            body=body,
            resolved=prepared,
            idempotency_key=idempotency_key,
            settings=settings,
            now=now(),
        )
        view = operation_view(session, created.operation, inserted=created.new)
    return operation_answer(view, status_code=201 if created.new else 200, location=True)


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
    request: Request,
    operation_id: OperationId,
    body: ActionReportIn,
    key: BearerKey,
    after: BackgroundTasks,
) -> Response:
    settings = app_settings(request)
    with authorized(request, key) as (session, who):
        op, linked = load_operation_linked(session, who.workspace_id, operation_id, for_update=True)
        scheduled = record_action(session, op, body, settings=settings, now=now())
        # Nothing else links events to it meanwhile: the report holds the workspace's
        # correlation lock (shared) and the row's.
        view = operation_view(session, op, linked_events=linked or scheduled.linked)
    # After commit and after the answer: the stored schedule is the record (a message that is
    # never sent is sent again by the sweeper), so the agent does not wait for the broker.
    after.add_task(_dispatch, op.id, scheduled)
    return operation_answer(view)


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
def get_operation(request: Request, operation_id: OperationId, key: BearerKey) -> Response:
    with authorized(request, key) as (session, who):
        op, linked = load_operation_linked(session, who.workspace_id, operation_id)
        view = operation_view(session, op, linked_events=linked)
    return operation_answer(view)


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
    with transaction(app_engine(request)) as session:
        return list_page(
            session,
            workspace_id=who.workspace_id,
            filters=OperationFilters(
                state=None if state is None else state.value, contract=contract
            ),
            limit=limit,
            cursor=cursor,
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
    summary="Review an operation a person decides: a verdict and a note (admin scope)",
    operation_id="review_operation",
    description=(
        "A person's decision on an operation in HUMAN_REVIEW, CONTRADICTED or EXPIRED: a verdict "
        "and a note, recorded once in the audit chain and answered with a signed review receipt "
        "(`review.receipt_id`) that supersedes the receipt it follows and names it in "
        "`review.follows`. The runtime's verdict is never rewritten. Needs an admin key."
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
        record_review(
            session,
            op,
            body,
            reviewer_key_id=who.key_id,
            now=now(),
            settings=app_settings(request),
        )
        return operation_view(session, op)
