"""A Stripe refund made the safe way: :func:`refund_with_proof` (and its async twin).

1. Create the operation (idempotent: the same ``idempotency_key`` gives back the same one; an
   operation whose action was already reported is answered as it stands, and Stripe is not
   called again).
2. Report ``started``, then call Stripe with the operation id as ``Idempotency-Key``.
3. Report what happened: the refund body (success), Stripe's error with its HTTP status (a
   refusal), or a timeout/connection error as a timeout — never as a failure: the refund may
   have gone through, and Provely finds it by the idempotency key.
4. Answer the operation. Read it, or ``wait()`` on it, for the verdict.

Needs the ``stripe`` extra (Stripe's official library); the rest of the SDK does not.
"""

from __future__ import annotations

import json
from typing import Any

import stripe

from provely_sdk._async_client import AsyncProvely
from provely_sdk._client import Provely
from provely_sdk._models import OperationOut

__all__ = ["refund_with_proof", "refund_with_proof_async"]

CONTRACT = "stripe.refund.succeeded"


def _params(charge: str, amount: int, reason: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {"charge": charge, "amount": amount}
    if reason is not None:
        params["reason"] = reason
    return params


def _response_body(refund: Any) -> tuple[dict[str, Any], int]:
    """The refund as Stripe sent it (raw body and status), else the library's dict of it."""
    last = getattr(refund, "last_response", None)
    if last is not None and isinstance(getattr(last, "body", None), str):
        body = json.loads(last.body)
        if isinstance(body, dict):
            return body, int(last.code)
    return dict(refund.to_dict()), 200


def _error_body(exc: stripe.StripeError) -> dict[str, Any]:
    body = exc.json_body
    if isinstance(body, dict):
        return body
    return {"error": {"type": type(exc).__name__, "message": str(exc)}}


def _refunds(stripe_client: stripe.StripeClient) -> Any:
    """``client.v1.refunds`` (stripe >= 12), else the older ``client.refunds``."""
    return getattr(stripe_client, "v1", stripe_client).refunds


def _already_acted(op: OperationOut) -> bool:
    return op.action.phase is not None


def refund_with_proof(
    provely: Provely,
    stripe_client: stripe.StripeClient,
    *,
    charge: str,
    amount: int,
    currency: str,
    reason: str | None = None,
    contract: str = CONTRACT,
    idempotency_key: str | None = None,
) -> OperationOut:
    """Refund ``amount`` of ``charge`` under an operation of ``contract``; answer the
    operation after the report. Never calls Stripe twice for one operation."""
    op = provely.create_operation(
        contract=contract,
        input={"charge": charge, "amount": amount, "currency": currency},
        idempotency_key=idempotency_key,
    )
    if _already_acted(op):
        return op
    provely.report_started(op.id)
    try:
        refund = _refunds(stripe_client).create(
            params=_params(charge, amount, reason),
            options={"idempotency_key": op.id},
        )
    except stripe.APIConnectionError as exc:
        return provely.report_timeout(op.id, message=f"no answer from Stripe: {exc}")
    except stripe.StripeError as exc:
        return provely.report_error(op.id, error=_error_body(exc), http_status=exc.http_status)
    body, status = _response_body(refund)
    return provely.report_result(op.id, result=body, http_status=status)


async def refund_with_proof_async(
    provely: AsyncProvely,
    stripe_client: stripe.StripeClient,
    *,
    charge: str,
    amount: int,
    currency: str,
    reason: str | None = None,
    contract: str = CONTRACT,
    idempotency_key: str | None = None,
) -> OperationOut:
    """:func:`refund_with_proof` with the async clients (``refunds.create_async``)."""
    op = await provely.create_operation(
        contract=contract,
        input={"charge": charge, "amount": amount, "currency": currency},
        idempotency_key=idempotency_key,
    )
    if _already_acted(op):
        return op
    await provely.report_started(op.id)
    try:
        refund = await _refunds(stripe_client).create_async(
            params=_params(charge, amount, reason),
            options={"idempotency_key": op.id},
        )
    except stripe.APIConnectionError as exc:
        return await provely.report_timeout(op.id, message=f"no answer from Stripe: {exc}")
    except stripe.StripeError as exc:
        return await provely.report_error(
            op.id, error=_error_body(exc), http_status=exc.http_status
        )
    body, status = _response_body(refund)
    return await provely.report_result(op.id, result=body, http_status=status)
