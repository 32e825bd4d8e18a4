"""Charges: created directly or by a payment, updated, and what a refund is made against."""

from __future__ import annotations

from typing import Any

from services.sandbox import params as rules
from services.sandbox.errors import StripeError
from services.sandbox.events import Events, RequestContext
from services.sandbox.objects import new_id

__all__ = ["Charges"]


class Charges(Events):
    """Charges (a part of :class:`services.sandbox.model.Sandbox`)."""

    def create_charge(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        rules.check_known(
            params,
            {
                "amount",
                "currency",
                "customer",
                "metadata",
                "source",
                "description",
                "receipt_email",
                "capture",
                "statement_descriptor",
            },
        )
        capture = params.get("capture", "true")
        if capture not in ("true", "false"):
            raise StripeError(400, "Invalid boolean: capture.", param="capture")
        amount = rules.positive_int(params, "amount", required=True)
        currency = rules.currency(params, required=True)
        assert amount is not None
        assert currency is not None
        charge = self._new_charge(
            amount=amount,
            currency=currency,
            customer=rules.string(params, "customer"),
            description=rules.string(params, "description"),
            metadata=rules.metadata(params.get("metadata")),
            payment_intent=None,
            captured=capture == "true",
        )
        for name in ("receipt_email", "statement_descriptor"):
            if name in params:
                charge[name] = rules.string(params, name)
        self.emit("charge.succeeded", charge, ctx)
        return charge

    def _new_charge(
        self,
        *,
        amount: int,
        currency: str,
        customer: str | None,
        description: str | None,
        metadata: dict[str, str],
        payment_intent: str | None,
        captured: bool = True,
    ) -> dict[str, Any]:
        charge: dict[str, Any] = {
            "id": new_id("ch_"),
            "object": "charge",
            "amount": amount,
            "amount_captured": amount if captured else 0,
            "amount_refunded": 0,
            "balance_transaction": new_id("txn_") if captured else None,
            "captured": captured,
            "created": self.clock.stamp(),
            "currency": currency,
            "customer": customer,
            "description": description,
            "disputed": False,
            "failure_code": None,
            "failure_message": None,
            "livemode": False,
            "metadata": metadata,
            "outcome": {"network_status": "approved_by_network", "type": "authorized"},
            "paid": True,
            "payment_intent": payment_intent,
            "refunded": False,
            "status": "succeeded",
            "_seq": self._next_seq(),
        }
        self.charges[charge["id"]] = charge
        return charge

    def update_charge(self, ident: str, params: dict[str, Any]) -> dict[str, Any]:
        rules.check_known(params, {"metadata", "description"})
        charge = self.get(self.charges, "charge", ident)
        if "metadata" in params:
            charge["metadata"] = rules.metadata(params["metadata"], charge["metadata"])
        if "description" in params:
            charge["description"] = rules.string(params, "description")
        return charge
