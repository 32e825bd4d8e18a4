"""Receipts over HTTP: an operation's current receipt, any receipt by id, and the public keys
that verify them.

- ``GET /v1/operations/{id}/receipt`` — the current receipt document of a final verdict; 404
  while the operation is open (and for another workspace's operation, which looks like none).
- ``GET /v1/receipts/{receipt_id}`` — one receipt document of the caller's workspace, current
  or superseded (a superseding receipt names the one it replaces; this is where to fetch it).
- ``GET /v1/receipts/keys`` — public, no API key: the active key and every retired one, in the
  format ``provely receipts verify --keys`` reads.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Request, Response
from sqlalchemy import select

from services.ingress.api.lookup import load_operation
from services.ingress.api.operations import OperationId
from services.ingress.deps import Caller, app_engine, app_settings, now, transaction
from services.ingress.problems import ApiError, error_responses
from shared.db.models import Receipt
from shared.lifecycle.receipt_keyring import ReceiptKeyError, keys_document
from shared.lifecycle.receipt_keys import ensure_active_key, list_receipt_keys
from shared.lifecycle.receipts import current_receipt, receipt_document_for

__all__ = ["router"]

router = APIRouter(tags=["receipts"])

ReceiptId = Annotated[str, Path(max_length=64, description="The receipt id (rcpt_…).")]
KEYS_MAX_AGE_S = 300


@router.get(
    "/v1/operations/{operation_id}/receipt",
    response_model=dict[str, Any],
    responses=error_responses(401, 404),
    summary="The signed receipt of a final verdict (404 while the operation is open)",
    operation_id="get_operation_receipt",
    description=(
        "The current signed receipt of the operation's final verdict (RFC 8785 canonical body, "
        "Ed25519 signature; see docs/receipts.md). 404 while the operation is open."
    ),
)
def get_receipt(request: Request, operation_id: OperationId, who: Caller) -> dict[str, Any]:
    with transaction(app_engine(request)) as session:
        op = load_operation(session, who.workspace_id, operation_id)
        row = current_receipt(session, op.id)
        if row is None:
            raise ApiError(
                404,
                "not-found",
                f"operation {op.id} has no receipt"
                + ("" if op.final else f" yet: it is open ({op.state})"),
            )
        return receipt_document_for(row)


@router.get(
    "/v1/receipts/keys",
    response_model=dict[str, Any],
    responses=error_responses(503),
    summary="Public keys that verify receipts: the active one and every retired one",
    operation_id="list_receipt_keys",
    description=(
        "The public keys that verify receipts, active first; a retired key keeps verifying the "
        "receipts it signed. No API key needed."
    ),
)
def receipt_keys(request: Request, response: Response) -> dict[str, Any]:
    with transaction(app_engine(request)) as session:
        try:
            # Publish the active key before the first receipt is signed with it.
            ensure_active_key(session, now=now(), settings=app_settings(request))
        except ReceiptKeyError as exc:
            raise ApiError(503, "unavailable", f"receipt keys unavailable: {exc}") from exc
        document = keys_document(list_receipt_keys(session))
    response.headers["Cache-Control"] = f"public, max-age={KEYS_MAX_AGE_S}"
    return document


@router.get(
    "/v1/receipts/{receipt_id}",
    response_model=dict[str, Any],
    responses=error_responses(401, 404),
    summary="One receipt of the workspace by id, current or superseded",
    operation_id="get_receipt",
    description=(
        "One receipt of the workspace by its id, including receipts superseded by later evidence "
        "(they still verify and name nothing as their successor; the newer one names them)."
    ),
)
def get_receipt_by_id(request: Request, receipt_id: ReceiptId, who: Caller) -> dict[str, Any]:
    with transaction(app_engine(request)) as session:
        row = session.execute(
            select(Receipt).where(
                Receipt.id == receipt_id, Receipt.workspace_id == who.workspace_id
            )
        ).scalar_one_or_none()
        if row is None:
            raise ApiError(404, "not-found", f"no receipt {receipt_id}")
        return receipt_document_for(row)
