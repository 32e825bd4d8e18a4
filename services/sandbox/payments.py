"""Customers, PaymentIntents and captures: the objects a payment flow creates before a refund.

Each function takes the :class:`~services.sandbox.model.Sandbox` it changes and the decoded
request parameters, validates them as Stripe does (:mod:`services.sandbox.params`) and emits
the events Stripe sends (``customer.created``, ``payment_intent.succeeded``,
``charge.captured``, …). Plain data, no I/O.

A PaymentIntent confirmed with a card succeeds at once (``capture_method=automatic``) or waits
for its capture (``manual``: ``requires_capture`` with an uncaptured charge). Confirming needs a
payment method; any ``pm_…`` id is accepted (``pm_card_visa`` as in Stripe's test mode).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from services.sandbox import params as rules
from services.sandbox.errors import StripeError
from services.sandbox.forms import FormError, as_list
from services.sandbox.objects import new_id

if TYPE_CHECKING:
    from services.sandbox.events import RequestContext
    from services.sandbox.model import Sandbox

__all__ = [
    "cancel_payment_intent",
    "capture_charge",
    "capture_payment_intent",
    "confirm_payment_intent",
    "create_customer",
    "create_payment_intent",
    "delete_customer",
    "update_customer",
]


def _boolean(params: dict[str, Any], name: str, default: bool) -> bool:
    raw = params.get(name)
    if raw is None or raw == "":
        return default
    if raw not in ("true", "false"):
        raise StripeError(400, f"Invalid boolean: {name}.", param=name)
    return bool(raw == "true")


def _known_customer(sandbox: Sandbox, params: dict[str, Any]) -> str | None:
    customer = rules.string(params, "customer")
    if customer is not None and customer not in sandbox.customers:
        raise rules.missing("customer", customer, "customer")
    return customer


# ------------------------------------------------------------------------------- customers
_CUSTOMER_FIELDS = ("email", "name", "description", "phone")


def create_customer(
    sandbox: Sandbox, params: dict[str, Any], ctx: RequestContext
) -> dict[str, Any]:
    rules.check_known(params, {*_CUSTOMER_FIELDS, "metadata"})
    customer: dict[str, Any] = {
        "id": new_id("cus_", 14),
        "object": "customer",
        "created": sandbox.clock.stamp(),
        "livemode": False,
        "metadata": rules.metadata(params.get("metadata")),
        **{name: rules.string(params, name) for name in _CUSTOMER_FIELDS},
        "_seq": sandbox._next_seq(),
    }
    sandbox.customers[customer["id"]] = customer
    sandbox.emit("customer.created", customer, ctx)
    return customer


def update_customer(
    sandbox: Sandbox, ident: str, params: dict[str, Any], ctx: RequestContext
) -> dict[str, Any]:
    rules.check_known(params, {*_CUSTOMER_FIELDS, "metadata"})
    customer = sandbox.get(sandbox.customers, "customer", ident)
    before = {k: customer.get(k) for k in (*_CUSTOMER_FIELDS, "metadata")}
    for name in _CUSTOMER_FIELDS:
        if name in params:
            customer[name] = rules.string(params, name)
    if "metadata" in params:
        customer["metadata"] = rules.metadata(params["metadata"], customer["metadata"])
    changed = {k: v for k, v in before.items() if customer.get(k) != v}
    if changed:
        sandbox.emit("customer.updated", customer, ctx, previous=changed)
    return customer


def delete_customer(sandbox: Sandbox, ident: str, ctx: RequestContext) -> dict[str, Any]:
    customer = sandbox.get(sandbox.customers, "customer", ident)
    del sandbox.customers[ident]
    sandbox.emit("customer.deleted", customer, ctx)
    return {"id": ident, "object": "customer", "deleted": True}


# ------------------------------------------------------------------------- payment intents
def create_payment_intent(
    sandbox: Sandbox, params: dict[str, Any], ctx: RequestContext
) -> dict[str, Any]:
    rules.check_known(
        params,
        {
            "amount",
            "currency",
            "customer",
            "description",
            "metadata",
            "confirm",
            "payment_method",
            "payment_method_types",
            "capture_method",
            "automatic_payment_methods",
            "receipt_email",
            "return_url",
        },
    )
    amount = rules.positive_int(params, "amount", required=True)
    currency = rules.currency(params, required=True)
    capture_method = rules.string(params, "capture_method") or "automatic"
    if capture_method not in ("automatic", "automatic_async", "manual"):
        raise StripeError(
            400,
            "Invalid capture_method: must be one of automatic, automatic_async, manual.",
            code="parameter_invalid_string",
            param="capture_method",
        )
    try:
        types = as_list(params.get("payment_method_types", ""), param="payment_method_types")
    except FormError as exc:
        raise StripeError(400, str(exc), param="payment_method_types") from exc
    payment_method = rules.string(params, "payment_method")
    intent_id = new_id("pi_")
    intent: dict[str, Any] = {
        "id": intent_id,
        "object": "payment_intent",
        "amount": amount,
        "amount_capturable": 0,
        "amount_received": 0,
        "capture_method": capture_method,
        "client_secret": f"{intent_id}_secret_{new_id('', 24)}",
        "created": sandbox.clock.stamp(),
        "currency": currency,
        "customer": _known_customer(sandbox, params),
        "description": rules.string(params, "description"),
        "latest_charge": None,
        "livemode": False,
        "metadata": rules.metadata(params.get("metadata")),
        "payment_method": payment_method,
        "payment_method_types": types or ["card"],
        "receipt_email": rules.string(params, "receipt_email"),
        "status": "requires_confirmation" if payment_method else "requires_payment_method",
        "_seq": sandbox._next_seq(),
    }
    sandbox.payment_intents[intent_id] = intent
    sandbox.emit("payment_intent.created", intent, ctx)
    if _boolean(params, "confirm", False):
        confirm_payment_intent(sandbox, intent_id, {}, ctx)
    return intent


def confirm_payment_intent(
    sandbox: Sandbox, ident: str, params: dict[str, Any], ctx: RequestContext
) -> dict[str, Any]:
    rules.check_known(params, {"payment_method", "return_url", "receipt_email"})
    intent = sandbox.get(sandbox.payment_intents, "payment_intent", ident)
    if intent["status"] not in ("requires_payment_method", "requires_confirmation"):
        raise StripeError(
            400,
            f"This PaymentIntent's status is {intent['status']}; it cannot be confirmed.",
            code="payment_intent_unexpected_state",
        )
    if params.get("payment_method"):
        intent["payment_method"] = rules.string(params, "payment_method")
    if not intent.get("payment_method"):
        raise StripeError(
            400,
            "You cannot confirm this PaymentIntent because it's missing a payment method. "
            "Pass payment_method (for example pm_card_visa).",
            code="payment_intent_unexpected_state",
            param="payment_method",
        )
    manual = intent["capture_method"] == "manual"
    charge = sandbox._new_charge(
        amount=intent["amount"],
        currency=intent["currency"],
        customer=intent["customer"],
        description=intent.get("description"),
        metadata=dict(intent["metadata"]),
        payment_intent=intent["id"],
        captured=not manual,
    )
    charge["payment_method"] = intent["payment_method"]
    intent["latest_charge"] = charge["id"]
    sandbox.emit("charge.succeeded", charge, ctx)
    if manual:
        intent.update({"status": "requires_capture", "amount_capturable": intent["amount"]})
        sandbox.emit("payment_intent.amount_capturable_updated", intent, ctx)
    else:
        intent.update({"status": "succeeded", "amount_received": intent["amount"]})
        sandbox.emit("payment_intent.succeeded", intent, ctx)
    return intent


def _capture_amount(params: dict[str, Any], name: str, available: int) -> int:
    amount = rules.positive_int(params, name, required=False)
    if amount is None:
        return available
    if amount > available:
        raise StripeError(
            400,
            f"The amount to capture ({amount}) is greater than the amount that can be "
            f"captured ({available}).",
            code="amount_too_large",
            param=name,
        )
    return amount


def capture_charge(
    sandbox: Sandbox, ident: str, params: dict[str, Any], ctx: RequestContext
) -> dict[str, Any]:
    """``POST /v1/charges/{id}/capture``: an uncaptured charge is captured (all or part)."""
    rules.check_known(params, {"amount", "receipt_email", "statement_descriptor"})
    charge = sandbox.get(sandbox.charges, "charge", ident)
    if charge["captured"]:
        raise StripeError(
            400,
            f"Charge {ident} has already been captured.",
            code="charge_already_captured",
        )
    amount = _capture_amount(params, "amount", charge["amount"])
    charge.update(
        {"captured": True, "amount_captured": amount, "balance_transaction": new_id("txn_")}
    )
    sandbox.emit("charge.captured", charge, ctx, previous={"captured": False})
    intent = sandbox.payment_intents.get(charge.get("payment_intent") or "")
    if intent is not None and intent["status"] == "requires_capture":
        intent.update({"status": "succeeded", "amount_received": amount, "amount_capturable": 0})
        sandbox.emit("payment_intent.succeeded", intent, ctx)
    return charge


def capture_payment_intent(
    sandbox: Sandbox, ident: str, params: dict[str, Any], ctx: RequestContext
) -> dict[str, Any]:
    rules.check_known(params, {"amount_to_capture"})
    intent = sandbox.get(sandbox.payment_intents, "payment_intent", ident)
    if intent["status"] != "requires_capture":
        raise StripeError(
            400,
            f"This PaymentIntent could not be captured because it has a status of "
            f"{intent['status']}. Only a PaymentIntent with status requires_capture can be.",
            code="payment_intent_unexpected_state",
        )
    amount = _capture_amount(params, "amount_to_capture", intent["amount_capturable"])
    capture_charge(sandbox, intent["latest_charge"], {"amount": str(amount)}, ctx)
    return intent


def cancel_payment_intent(
    sandbox: Sandbox, ident: str, params: dict[str, Any], ctx: RequestContext
) -> dict[str, Any]:
    rules.check_known(params, {"cancellation_reason"})
    intent = sandbox.get(sandbox.payment_intents, "payment_intent", ident)
    if intent["status"] in ("succeeded", "canceled"):
        raise StripeError(
            400,
            f"You cannot cancel this PaymentIntent because it has a status of {intent['status']}.",
            code="payment_intent_unexpected_state",
        )
    intent.update(
        {
            "status": "canceled",
            "canceled_at": sandbox.clock.stamp(),
            "cancellation_reason": rules.string(params, "cancellation_reason"),
            "amount_capturable": 0,
        }
    )
    sandbox.emit("payment_intent.canceled", intent, ctx)
    return intent
