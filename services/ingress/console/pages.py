"""The console's pages: the operations list, one operation, the live states, the review queue.

Each page reads through what the API reads (``listing.summary_page``: the rows of
``listing.list_page`` as the columns the table shows; ``views.operation_view`` and
``timeline_view``, ``shared.lifecycle.review``), always for the session's workspace: another
workspace's operation id is the same 404 page as an id that does not exist.
"""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime
from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from sqlalchemy.orm import Session

from services.ingress.api.listing import OperationFilters, operation_states, summary_page
from services.ingress.api.lookup import load_operation
from services.ingress.api.views import operation_view, timeline_view
from services.ingress.console.auth import csrf_ok, signed_in
from services.ingress.console.render import html, secured
from services.ingress.console.render import json as json_response
from services.ingress.deps import app_engine, app_settings, now, transaction
from services.ingress.problems import ApiError
from shared.core.types import OperationState, Verdict
from shared.db.console_sessions import SignedIn
from shared.db.models import Receipt
from shared.lifecycle.receipts import receipt_document_for
from shared.lifecycle.review import (
    REVIEWABLE_STATES,
    ReviewRefused,
    receipt_history,
    record_review,
    review_queue,
)

__all__ = ["router", "verify_link"]

router = APIRouter(prefix="/console", include_in_schema=False)

PAGE_SIZE = 50
LIVE_IDS_MAX = 200
STATES = [state.value for state in OperationState]
VERDICTS = [verdict.value for verdict in Verdict]
REVIEW_VERDICTS = [v for v in VERDICTS if v != Verdict.PENDING.value]
OperationId = Annotated[str, Path(max_length=64)]
Text = Annotated[str, Query(max_length=200)]


def verify_link(row: Receipt) -> str:
    """The browser check of a receipt: ``/verify/receipt`` with the signed document in the
    fragment (base64url of its JSON, unpadded); a fragment never reaches a server."""
    document = json.dumps(receipt_document_for(row), separators=(",", ":"), sort_keys=True)
    encoded = base64.urlsafe_b64encode(document.encode()).decode().rstrip("=")
    return f"/verify/receipt#receipt={encoded}"


def _when(value: str, name: str) -> datetime | None:
    """A time from a filter form (``2026-12-02T17:30``, UTC) or None when empty."""
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"{name} is not a time (YYYY-MM-DDTHH:MM, UTC)") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _filters(**given: str) -> OperationFilters:
    """The list's filters from the query; ``ValueError`` names a value that is not one."""
    if given["state"] and given["state"] not in STATES:
        raise ValueError(f"state {given['state']!r} is not a state")
    if given["verdict"] and given["verdict"] not in VERDICTS:
        raise ValueError(f"verdict {given['verdict']!r} is not a verdict")
    return OperationFilters(
        state=given["state"] or None,
        verdict=given["verdict"] or None,
        reason=given["reason"] or None,
        contract=given["contract"] or None,
        since=_when(given["since"], "since"),
        until=_when(given["until"], "until"),
        needs_person=given["needs_person"] == "1",
    )


@router.get("/operations")
def operations_page(
    request: Request,
    state: Text = "",
    verdict: Text = "",
    reason: Text = "",
    contract: Text = "",
    since: Text = "",
    until: Text = "",
    needs_person: Text = "",
    cursor: Annotated[str, Query(max_length=500)] = "",
) -> Response:
    who = signed_in(request)
    given = {
        "state": state,
        "verdict": verdict,
        "reason": reason,
        "contract": contract,
        "since": since,
        "until": until,
        "needs_person": needs_person,
    }
    context: dict[str, Any] = {"who": who, "given": given, "states": STATES, "verdicts": VERDICTS}
    try:
        filters = _filters(**given)
        with transaction(app_engine(request)) as session:
            page = summary_page(
                session,
                workspace_id=who.workspace_id,
                filters=filters,
                limit=PAGE_SIZE,
                cursor=cursor or None,
            )
    except (ValueError, ApiError) as exc:
        detail = exc.detail if isinstance(exc, ApiError) else str(exc)
        return html("operations.html", status_code=422, error=detail, page=None, **context)
    next_query = {k: v for k, v in given.items() if v}
    if page.next_cursor:
        next_query["cursor"] = page.next_cursor
    return html(
        "operations.html",
        page=page,
        next_query=next_query if page.next_cursor else None,
        error="",
        **context,
    )


@router.get("/live")
def live_states(
    request: Request, ids: Annotated[str, Query(max_length=LIVE_IDS_MAX * 66)] = ""
) -> Response:
    """The state, verdict and version of the listed operations of the session's workspace."""
    who = signed_in(request)
    wanted = [item for item in ids.split(",") if item][:LIVE_IDS_MAX]
    with transaction(app_engine(request)) as session:
        found = operation_states(session, workspace_id=who.workspace_id, ids=wanted)
    return json_response({"operations": found})


def _not_found(who: SignedIn, operation_id: str) -> Response:
    return html(
        "message.html",
        status_code=404,
        who=who,
        title="Not found",
        message=f"No operation {operation_id} in this workspace.",
    )


def _detail(session: Session, who: SignedIn, operation_id: str) -> dict[str, Any]:
    op = load_operation(session, who.workspace_id, operation_id)
    receipts = receipt_history(session, workspace_id=who.workspace_id, operation_id=op.id)
    return {
        "op": operation_view(session, op),
        "timeline": timeline_view(session, op),
        "receipts": [{"row": row, "link": verify_link(row)} for row in reversed(receipts)],
        "reviewable": op.state in REVIEWABLE_STATES and op.review is None and bool(receipts),
    }


@router.get("/operations/{operation_id}")
def operation_page(request: Request, operation_id: OperationId) -> Response:
    who = signed_in(request)
    try:
        with transaction(app_engine(request)) as session:
            context = _detail(session, who, operation_id)
    except ApiError as exc:
        if exc.status != 404:
            raise
        return _not_found(who, operation_id)
    return html(
        "operation.html",
        who=who,
        review_verdicts=REVIEW_VERDICTS,
        error="",
        **context,
    )


def _review(request: Request, operation_id: str, form: dict[str, Any]) -> Response:
    who = signed_in(request)
    if not csrf_ok(who.csrf, form.get("csrf")):
        return html(
            "message.html",
            status_code=403,
            who=who,
            title="Refused",
            message="The form did not carry this session's token; reload the page.",
        )
    verdict, note = form.get("verdict"), str(form.get("note") or "").strip()
    try:
        with transaction(app_engine(request)) as session:
            op = load_operation(session, who.workspace_id, operation_id, for_update=True)
            if verdict not in REVIEW_VERDICTS or not note or len(note) > 4000:
                raise ReviewRefused("a review needs a verdict and a note (up to 4,000 characters)")
            record_review(
                session,
                op,
                verdict=str(verdict),
                note=note,
                reviewer=who.reviewer,
                now=now(),
                settings=app_settings(request),
            )
    except ApiError as exc:
        if exc.status != 404:
            raise
        return _not_found(who, operation_id)
    except ReviewRefused as exc:
        with transaction(app_engine(request)) as session:
            context = _detail(session, who, operation_id)
        return html(
            "operation.html",
            status_code=409,
            who=who,
            review_verdicts=REVIEW_VERDICTS,
            error=str(exc),
            **context,
        )
    return secured(RedirectResponse(f"/console/operations/{operation_id}", status_code=303))


@router.post("/operations/{operation_id}/review")
async def review(request: Request, operation_id: OperationId) -> Response:
    form = dict((await request.form()).items())
    return await run_in_threadpool(_review, request, operation_id, form)


@router.get("/review")
def review_page(request: Request) -> Response:
    who = signed_in(request)
    with transaction(app_engine(request)) as session:
        queue = [
            operation_view(session, op, listed=True)
            for op in review_queue(session, workspace_id=who.workspace_id)
        ]
    return html("review.html", who=who, queue=queue)
