"""Refunds and their lifecycle: creation against a charge, the outcome that plans their next
statuses, settlement on the sandbox clock, and the charge's refunded amount that follows."""

from __future__ import annotations

from typing import Any

from services.sandbox import params as rules
from services.sandbox.errors import StripeError
from services.sandbox.events import AUTOMATIC, RequestContext
from services.sandbox.lag import ReadLag
from services.sandbox.objects import new_id
from services.sandbox.settings import OUTCOMES

__all__ = ["REFUND_STATUSES", "UNKNOWN_STATUS", "Refunds"]

#: The status a refund takes under the ``unknown_status`` outcome: not one Stripe documents.
UNKNOWN_STATUS = "processing_unknown"
REFUND_STATUSES = ("pending", "requires_action", "succeeded", "failed", "canceled", UNKNOWN_STATUS)
#: Refund statuses whose amount counts against the charge (money out or on its way out).
_COUNTING = frozenset({"pending", "requires_action", "succeeded", UNKNOWN_STATUS})
_REFUND_REASONS = frozenset({"duplicate", "fraudulent", "requested_by_customer"})
_FAILURE_REASON = "declined"


class Refunds(ReadLag):
    """Refunds (a part of :class:`services.sandbox.model.Sandbox`)."""

    def _refunded_amount(self, charge_id: str) -> int:
        return sum(
            r["amount"]
            for r in self.refunds.values()
            if r["charge"] == charge_id and r["status"] in _COUNTING
        )

    def _sync_charge(self, charge: dict[str, Any], ctx: RequestContext) -> None:
        """Recompute the charge's refunded amount; emit ``charge.refunded`` when it moved."""
        before = {"amount_refunded": charge["amount_refunded"], "refunded": charge["refunded"]}
        charge["amount_refunded"] = self._refunded_amount(charge["id"])
        charge["refunded"] = charge["amount_refunded"] >= charge.get(
            "amount_captured", charge["amount"]
        )
        if charge["amount_refunded"] != before["amount_refunded"]:
            changed = {k: v for k, v in before.items() if charge[k] != v}
            self.emit("charge.refunded", charge, ctx, previous=changed)

    def create_refund(self, params: dict[str, Any], ctx: RequestContext) -> dict[str, Any]:
        rules.check_known(params, {"charge", "amount", "reason", "metadata", "payment_intent"})
        if params.get("payment_intent"):
            raise StripeError(
                400,
                "This sandbox refunds charges: pass charge instead of payment_intent.",
                code="parameter_unknown",
                param="payment_intent",
            )
        charge_id = rules.string(params, "charge")
        if charge_id is None:
            raise StripeError(
                400,
                "One of the following params should be provided for this request: "
                "payment_intent or charge.",
                code="parameter_missing",
                param="charge",
            )
        charge = self.charges.get(charge_id)
        if charge is None:
            raise rules.missing("charge", charge_id, "charge")
        if not charge.get("captured", True):
            raise StripeError(
                400,
                f"Charge {charge_id} has not been captured; capture it before refunding it.",
                code="charge_not_captured",
                param="charge",
            )
        remaining = charge.get("amount_captured", charge["amount"]) - self._refunded_amount(
            charge_id
        )
        if remaining <= 0:
            raise StripeError(
                400,
                f"Charge {charge_id} has already been refunded.",
                code="charge_already_refunded",
                param="charge",
            )
        amount = rules.positive_int(params, "amount", required=False)
        if amount is None:
            amount = remaining
        if amount > remaining:
            raise StripeError(
                400,
                f"Refund amount ({amount}) is greater than the unrefunded amount on the "
                f"charge ({remaining}).",
                code="amount_too_large",
                param="amount",
            )
        reason = rules.string(params, "reason")
        if reason is not None and reason not in _REFUND_REASONS:
            raise StripeError(
                400,
                f"Invalid reason: must be one of {', '.join(sorted(_REFUND_REASONS))}.",
                code="parameter_invalid_string",
                param="reason",
            )
        metadata = rules.metadata(params.get("metadata"))
        outcome = metadata.get("sandbox_outcome", self.faults.default_outcome)
        if outcome not in OUTCOMES:
            raise StripeError(
                400,
                f"Unknown sandbox_outcome {outcome!r}; one of: {', '.join(OUTCOMES)}.",
                code="parameter_invalid_string",
                param="metadata[sandbox_outcome]",
            )
        refund: dict[str, Any] = {
            "id": new_id("re_"),
            "object": "refund",
            "amount": amount,
            "balance_transaction": new_id("txn_"),
            "charge": charge_id,
            "created": self.clock.stamp(),
            "currency": charge["currency"],
            "customer": charge["customer"],
            "destination_details": None,
            "failure_reason": None,
            "metadata": metadata,
            "next_action": None,
            "payment_intent": charge["payment_intent"],
            "reason": reason,
            "receipt_number": None,
            "source_transfer_reversal": None,
            "status": "pending",
            "transfer_reversal": None,
            "_seq": self._next_seq(),
            "_outcome": outcome,
        }
        self.refunds[refund["id"]] = refund
        self.remember_refund(refund)
        self._plan(refund, outcome)
        self.emit("refund.created", refund, ctx)
        self._sync_charge(charge, ctx)
        return refund

    def update_refund(
        self, ident: str, params: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        rules.check_known(params, {"metadata"})
        refund = self.get(self.refunds, "refund", ident)
        before = dict(refund["metadata"])
        refund["metadata"] = rules.metadata(params.get("metadata"), before)
        if refund["metadata"] != before:
            self.remember_refund(refund)
            self.emit("refund.updated", refund, ctx, previous={"metadata": before})
        return refund

    def cancel_refund(self, ident: str, ctx: RequestContext) -> dict[str, Any]:
        refund = self.get(self.refunds, "refund", ident)
        if refund["status"] != "requires_action":
            raise StripeError(
                400,
                f"Refund {ident} cannot be canceled: only a refund that requires action can be.",
                param="refund",
            )
        self.set_refund_status(refund, "canceled", ctx)
        return refund

    def _plan(self, refund: dict[str, Any], outcome: str) -> None:
        """Schedule the refund's next statuses for ``outcome`` from now."""
        self.transitions = [t for t in self.transitions if t["refund_id"] != refund["id"]]
        refund["_outcome"] = outcome
        settle = self.settings.settle_ms / 1000
        now = self.clock.sched()
        steps: list[tuple[float, str]] = {
            "succeeded": [(settle, "succeeded")],
            "failed": [(settle, "failed")],
            "canceled": [(settle, "canceled")],
            "requires_action": [(settle, "requires_action")],
            "stuck_pending": [],
            "succeeded_then_failed": [(settle, "succeeded"), (2 * settle, "failed")],
            "unknown_status": [(settle, UNKNOWN_STATUS)],
        }[outcome]
        for offset, status in steps:
            self.transitions.append(
                {
                    "refund_id": refund["id"],
                    "due_at": now + offset,
                    "status": status,
                    "seq": self._next_seq(),
                }
            )

    def set_refund_outcome(self, ident: str, outcome: str) -> dict[str, Any]:
        refund = self.get(self.refunds, "refund", ident)
        if outcome not in OUTCOMES:
            raise StripeError(400, f"Unknown outcome {outcome!r}; one of: {', '.join(OUTCOMES)}.")
        if refund["status"] != "pending":
            raise StripeError(
                400,
                f"Refund {ident} is {refund['status']}, not pending: set its status instead.",
            )
        self._plan(refund, outcome)
        return refund

    def set_refund_status(
        self, refund: dict[str, Any], status: str, ctx: RequestContext = AUTOMATIC
    ) -> None:
        """Move a refund to ``status`` now, with the events Stripe sends for that change."""
        previous = refund["status"]
        if status == previous:
            return
        refund["status"] = status
        changed: dict[str, Any] = {"status": previous}
        if status == "failed":
            changed["failure_reason"] = refund["failure_reason"]
            refund["failure_reason"] = _FAILURE_REASON
        if status == "requires_action":
            changed["next_action"] = refund["next_action"]
            refund["next_action"] = {"type": "display_details", "display_details": None}
        elif refund["next_action"] is not None:
            changed["next_action"] = refund["next_action"]
            refund["next_action"] = None
        self.remember_refund(refund)
        self.emit("refund.updated", refund, ctx, previous=changed)
        if status == "failed":
            self.emit("refund.failed", refund, ctx, previous=changed)
        charge = self.charges.get(refund["charge"])
        if charge is not None:
            self._sync_charge(charge, ctx)

    def force_refund_status(self, ident: str, status: str) -> dict[str, Any]:
        refund = self.get(self.refunds, "refund", ident)
        if status not in REFUND_STATUSES:
            raise StripeError(
                400, f"Unknown refund status {status!r}; one of: {', '.join(REFUND_STATUSES)}."
            )
        self.transitions = [t for t in self.transitions if t["refund_id"] != ident]
        self.set_refund_status(refund, status)
        return refund

    def settle_due(self) -> int:
        """Apply every scheduled refund transition that is due; returns how many."""
        now = self.clock.sched()
        due = sorted(
            (t for t in self.transitions if t["due_at"] <= now),
            key=lambda t: (t["due_at"], t["seq"]),
        )
        if not due:
            return 0
        self.transitions = [t for t in self.transitions if t["due_at"] > now]
        for step in due:
            refund = self.refunds.get(step["refund_id"])
            if refund is not None:
                self.set_refund_status(refund, step["status"])
        return len(due)
