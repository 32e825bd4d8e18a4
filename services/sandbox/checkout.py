"""Checkout sessions (``mode=payment``): line items, and the payment that completes them."""

from __future__ import annotations

from typing import Any

from services.sandbox import params as rules
from services.sandbox.charges import Charges
from services.sandbox.errors import StripeError
from services.sandbox.events import AUTOMATIC, RequestContext
from services.sandbox.forms import FormError, as_list
from services.sandbox.objects import new_id

__all__ = ["CheckoutSessions"]


class CheckoutSessions(Charges):
    """Checkout sessions (a part of :class:`services.sandbox.model.Sandbox`)."""

    def create_checkout_session(
        self, params: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        rules.check_known(
            params,
            {
                "mode",
                "line_items",
                "metadata",
                "customer",
                "client_reference_id",
                "success_url",
                "cancel_url",
                "currency",
                "customer_email",
            },
        )
        if params.get("mode") != "payment":
            raise StripeError(
                400,
                "This sandbox supports checkout sessions with mode=payment.",
                code="parameter_invalid_string" if params.get("mode") else "parameter_missing",
                param="mode",
            )
        try:
            raw_items = as_list(params.get("line_items", {}), param="line_items")
        except FormError as exc:
            raise StripeError(400, str(exc), param="line_items") from exc
        if not raw_items:
            raise StripeError(
                400,
                "Missing required param: line_items.",
                code="parameter_missing",
                param="line_items",
            )
        total, currency, items = 0, rules.currency(params, required=False), []
        for index, item in enumerate(raw_items):
            where = f"line_items[{index}]"
            if not isinstance(item, dict) or not isinstance(item.get("price_data"), dict):
                raise StripeError(
                    400,
                    f"{where} needs price_data[currency] and price_data[unit_amount].",
                    code="parameter_missing",
                    param=f"{where}[price_data]",
                )
            price = item["price_data"]
            unit = rules.positive_int(price, "unit_amount", required=True)
            item_currency = rules.currency(price, required=True)
            quantity = rules.positive_int(item, "quantity", required=False) or 1
            assert unit is not None
            assert item_currency is not None
            if currency is not None and item_currency != currency:
                raise StripeError(
                    400,
                    "All line items must share one currency.",
                    code="parameter_invalid_string",
                    param=f"{where}[price_data][currency]",
                )
            currency = item_currency
            total += unit * quantity
            name = (
                price.get("product_data", {}).get("name")
                if isinstance(price.get("product_data"), dict)
                else None
            )
            items.append({"unit_amount": unit, "quantity": quantity, "description": name})
        session: dict[str, Any] = {
            "id": new_id("cs_test_", 58),
            "object": "checkout.session",
            "amount_subtotal": total,
            "amount_total": total,
            "client_reference_id": rules.string(params, "client_reference_id"),
            "created": self.clock.stamp(),
            "currency": currency,
            "customer": rules.string(params, "customer"),
            "customer_email": rules.string(params, "customer_email"),
            "livemode": False,
            "metadata": rules.metadata(params.get("metadata")),
            "mode": "payment",
            "payment_intent": None,
            "payment_status": "unpaid",
            "status": "open",
            "success_url": rules.string(params, "success_url"),
            "cancel_url": rules.string(params, "cancel_url"),
            "url": None,
            "_items": items,
            "_seq": self._next_seq(),
        }
        session["url"] = f"https://checkout.stripe.com/c/pay/{session['id']}"
        self.checkout_sessions[session["id"]] = session
        return session

    def complete_checkout_session(
        self, ident: str, ctx: RequestContext = AUTOMATIC
    ) -> dict[str, Any]:
        """The customer pays: a charge (and its PaymentIntent) exists, the session completes."""
        session = self.get(self.checkout_sessions, "checkout session", ident)
        if session["status"] != "open":
            raise StripeError(400, f"Checkout session {ident} is {session['status']}, not open.")
        intent_id = new_id("pi_")
        charge = self._new_charge(
            amount=session["amount_total"],
            currency=session["currency"],
            customer=session["customer"],
            description=None,
            metadata=dict(session["metadata"]),
            payment_intent=intent_id,
        )
        self.payment_intents[intent_id] = {
            "id": intent_id,
            "object": "payment_intent",
            "amount": charge["amount"],
            "amount_received": charge["amount"],
            "created": charge["created"],
            "currency": charge["currency"],
            "customer": charge["customer"],
            "latest_charge": charge["id"],
            "livemode": False,
            "metadata": dict(session["metadata"]),
            "status": "succeeded",
            "_seq": self._next_seq(),
        }
        self.emit("charge.succeeded", charge, ctx)
        session.update(
            {
                "payment_intent": intent_id,
                "payment_status": "paid",
                "status": "complete",
                "url": None,
            }
        )
        self.emit("checkout.session.completed", session, ctx)
        return session
