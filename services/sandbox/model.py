"""The sandbox's provider model: charges, refunds and their lifecycle, events, deliveries.

Everything here is plain data (JSON-able dicts) mutated by :class:`Sandbox` methods. Nothing here
does network I/O: the HTTP layer (:mod:`services.sandbox.stripe`) parses requests and calls these
methods, the dispatcher (:mod:`services.sandbox.delivery`) sends what :meth:`Sandbox.due_deliveries`
returns and reports back with :meth:`Sandbox.record_attempt`.

Time comes from :class:`Clock`: a *scheduling* clock (wall time plus the seconds added by
"advance") drives settlement, delivery delays and retries; the *provider* clock (scheduling
clock plus the clock-offset fault) stamps ``created`` fields; signatures carry wall time plus
the offset (advancing is a way to skip waiting, the offset is the skew fault).

Keys of stored objects that start with ``_`` are internal and never rendered.
"""

from __future__ import annotations

import json
import random
import secrets
import string
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from services.sandbox import params as rules
from services.sandbox.errors import StateFileError, StripeError
from services.sandbox.forms import FormError, as_list
from services.sandbox.shapes import complete

__all__ = [
    "OUTCOMES",
    "UNKNOWN_STATUS",
    "Clock",
    "Faults",
    "RequestContext",
    "Sandbox",
    "SandboxSettings",
    "public",
]

Outcome = Literal[
    "succeeded",
    "failed",
    "canceled",
    "requires_action",
    "stuck_pending",
    "succeeded_then_failed",
    "unknown_status",
]
OUTCOMES: tuple[str, ...] = (
    "succeeded",
    "failed",
    "canceled",
    "requires_action",
    "stuck_pending",
    "succeeded_then_failed",
    "unknown_status",
)
#: The status a refund takes under the ``unknown_status`` outcome: not one Stripe documents.
UNKNOWN_STATUS = "processing_unknown"
REFUND_STATUSES = ("pending", "requires_action", "succeeded", "failed", "canceled", UNKNOWN_STATUS)
#: Refund statuses whose amount counts against the charge (money out or on its way out).
_COUNTING = frozenset({"pending", "requires_action", "succeeded", UNKNOWN_STATUS})
_REFUND_REASONS = frozenset({"duplicate", "fraudulent", "requested_by_customer"})
_FAILURE_REASON = "declined"
STATE_FORMAT = 1


def public(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API shows it (internal ``_`` keys removed)."""
    return {k: v for k, v in obj.items() if not k.startswith("_")}


def _new_id(prefix: str, length: int = 24) -> str:
    alphabet = string.ascii_letters + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))


class Faults(BaseModel):
    """Faults on demand; every field has a harmless default. Changed with ``/_sandbox/faults``."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    duplicate: int = Field(1, ge=1, le=20, description="copies of each delivery")
    order: Literal["in_order", "reversed", "shuffled"] = Field(
        "in_order", description="reversed/shuffled buffer deliveries until /_sandbox/release"
    )
    shuffle_seed: int | None = None
    delay_ms: int = Field(0, ge=0, description="added before each new delivery")
    drop_types: list[str] = Field(default_factory=list, description="event types never delivered")
    api_version: str | None = Field(None, description="api_version stamped on new events")
    clock_offset_s: float = Field(0.0, description="skew of the provider clock")
    outage_until: float | None = Field(None, description="scheduling-clock time the outage ends")
    default_outcome: Outcome = "succeeded"


@dataclass(frozen=True)
class SandboxSettings:
    """Fixed at start: settlement delay, API version, webhook retry policy."""

    settle_ms: int = 1000
    api_version: str = "2026-08-26"
    retry_base_ms: int = 1000
    retry_max_attempts: int = 6
    retry_max_ms: int = 3_600_000


@dataclass(frozen=True)
class RequestContext:
    """The API request that causes a change (``None`` ids for the provider's own progress)."""

    request_id: str | None = None
    idempotency_key: str | None = None

    def as_event_request(self) -> dict[str, Any]:
        return {"id": self.request_id, "idempotency_key": self.idempotency_key}


AUTOMATIC = RequestContext()


class Clock:
    """Scheduling clock = wall + advanced seconds; provider clock = scheduling + offset."""

    def __init__(self, sandbox: Sandbox, wall: Callable[[], float] = time.time) -> None:
        self._sandbox = sandbox
        self._wall = wall

    def sched(self) -> float:
        return self._wall() + self._sandbox.advanced_s

    def stamp(self) -> int:
        return int(self.sched() + self._sandbox.faults.clock_offset_s)

    def signing_stamp(self) -> int:
        """``t=`` of a signature: wall time plus the offset fault, never the advanced seconds,
        so that skipping ahead in a test does not make receivers refuse deliveries."""
        return int(self._wall() + self._sandbox.faults.clock_offset_s)


class Sandbox:
    """All provider state and every operation on it. Not thread-safe: one event loop owns it."""

    def __init__(
        self, settings: SandboxSettings | None = None, *, wall: Callable[[], float] = time.time
    ) -> None:
        self.settings = settings or SandboxSettings()
        self.clock = Clock(self, wall)
        self.faults = Faults()
        self.advanced_s = 0.0
        self._listeners: list[Callable[[], None]] = []
        self.reset()

    # ----------------------------------------------------------------- state
    def reset(self, *, keep_faults: bool = False) -> None:
        self.charges: dict[str, dict[str, Any]] = {}
        self.refunds: dict[str, dict[str, Any]] = {}
        self.payment_intents: dict[str, dict[str, Any]] = {}
        self.checkout_sessions: dict[str, dict[str, Any]] = {}
        self.customers: dict[str, dict[str, Any]] = {}
        self.webhook_endpoints: dict[str, dict[str, Any]] = {}
        self.events: dict[str, dict[str, Any]] = {}
        self.deliveries: dict[str, dict[str, Any]] = {}
        self.transitions: list[dict[str, Any]] = []
        self.idempotency: dict[str, dict[str, Any]] = {}
        self.seq = 0
        self.advanced_s = 0.0
        if not keep_faults:
            self.faults = Faults()

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def dump(self) -> dict[str, Any]:
        """Everything, JSON-able (the ``--state`` file format)."""
        return {
            "format": STATE_FORMAT,
            "seq": self.seq,
            "advanced_s": self.advanced_s,
            "faults": self.faults.model_dump(),
            "charges": self.charges,
            "refunds": self.refunds,
            "payment_intents": self.payment_intents,
            "checkout_sessions": self.checkout_sessions,
            "customers": self.customers,
            "webhook_endpoints": self.webhook_endpoints,
            "events": self.events,
            "deliveries": self.deliveries,
            "transitions": self.transitions,
            "idempotency": self.idempotency,
        }

    def load(self, data: Any) -> None:
        if not isinstance(data, dict) or data.get("format") != STATE_FORMAT:
            raise StateFileError(f"not a sandbox state file of format {STATE_FORMAT}")
        try:
            self.faults = Faults.model_validate(data["faults"])
            self.seq = int(data["seq"])
            self.advanced_s = float(data["advanced_s"])
            for name in (
                "charges",
                "refunds",
                "payment_intents",
                "checkout_sessions",
                "webhook_endpoints",
                "events",
                "deliveries",
                "idempotency",
            ):
                value = data[name]
                if not isinstance(value, dict):
                    raise StateFileError(f"{name} is not an object")
                setattr(self, name, value)
            # Added later: a state file written before customers existed has none.
            customers = data.get("customers", {})
            if not isinstance(customers, dict):
                raise StateFileError("customers is not an object")
            self.customers = customers
            transitions = data["transitions"]
            if not isinstance(transitions, list):
                raise StateFileError("transitions is not a list")
            self.transitions = transitions
        except (KeyError, TypeError, ValueError) as exc:
            raise StateFileError(f"incomplete sandbox state: {exc}") from exc
        # A delivery that was on the wire when the process stopped is sent again.
        for delivery in self.deliveries.values():
            if delivery["status"] == "sending":
                delivery["status"] = "scheduled"

    # ------------------------------------------------------------- listings
    def list_objects(
        self,
        items: Iterable[dict[str, Any]],
        *,
        url: str,
        params: dict[str, Any],
        filters: dict[str, Callable[[dict[str, Any], Any], bool]],
    ) -> dict[str, Any]:
        rules.check_known(params, {"limit", "starting_after", "ending_before", "created", *filters})
        rows = sorted(items, key=lambda o: o["_seq"], reverse=True)
        for name, predicate in filters.items():
            if name in params and params[name] != "":
                rows = [o for o in rows if predicate(o, params[name])]
        if "created" in params:
            rows = [o for o in rows if rules.created_matches(o["created"], params["created"])]
        limit = 10
        if "limit" in params:
            raw = params["limit"]
            if not isinstance(raw, str) or not raw.isdigit() or not 1 <= int(raw) <= 100:
                raise StripeError(
                    400,
                    "Invalid limit: must be an integer between 1 and 100.",
                    code="parameter_invalid_integer",
                    param="limit",
                )
            limit = int(raw)
        ids = [o["id"] for o in rows]
        after, before = params.get("starting_after"), params.get("ending_before")
        if after and before:
            raise StripeError(
                400,
                "You may only specify one of these parameters: ending_before, starting_after.",
                param="starting_after",
            )
        if after:
            if after not in ids:
                raise rules.missing("object", str(after), "starting_after")
            rows = rows[ids.index(after) + 1 :]
            page, has_more = rows[:limit], len(rows) > limit
        elif before:
            if before not in ids:
                raise rules.missing("object", str(before), "ending_before")
            rows = rows[: ids.index(before)]
            page, has_more = rows[-limit:], len(rows) > limit
        else:
            page, has_more = rows[:limit], len(rows) > limit
        return {
            "object": "list",
            "data": [self.render(o) for o in page],
            "has_more": has_more,
            "url": url,
        }

    def render(self, obj: dict[str, Any]) -> dict[str, Any]:
        out = complete(public(obj))
        if obj.get("object") == "event":
            out["pending_webhooks"] = self._pending_webhooks(obj["id"])
        if obj.get("object") == "webhook_endpoint":
            out.pop("secret", None)
        return out

    # -------------------------------------------------------------- charges
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
            "id": _new_id("ch_"),
            "object": "charge",
            "amount": amount,
            "amount_captured": amount if captured else 0,
            "amount_refunded": 0,
            "balance_transaction": _new_id("txn_") if captured else None,
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

    def get(self, table: dict[str, dict[str, Any]], kind: str, ident: str) -> dict[str, Any]:
        obj = table.get(ident)
        if obj is None:
            raise rules.missing(kind, ident)
        return obj

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

    # -------------------------------------------------------------- refunds
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
            "id": _new_id("re_"),
            "object": "refund",
            "amount": amount,
            "balance_transaction": _new_id("txn_"),
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

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise StripeError(400, "seconds must not be negative.")
        self.advanced_s += seconds

    # ------------------------------------------------------ payment intents, checkout
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
            "id": _new_id("cs_test_", 58),
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
        intent_id = _new_id("pi_")
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

    # ------------------------------------------------------- webhook endpoints
    def create_webhook_endpoint(
        self, params: dict[str, Any], ctx: RequestContext
    ) -> dict[str, Any]:
        rules.check_known(
            params, {"url", "enabled_events", "description", "metadata", "api_version"}
        )
        endpoint: dict[str, Any] = {
            "id": _new_id("we_"),
            "object": "webhook_endpoint",
            "api_version": rules.string(params, "api_version"),
            "application": None,
            "created": self.clock.stamp(),
            "description": rules.string(params, "description"),
            "enabled_events": rules.event_types(params.get("enabled_events")),
            "livemode": False,
            "metadata": rules.metadata(params.get("metadata")),
            "secret": "whsec_" + secrets.token_urlsafe(32).replace("-", "a").replace("_", "b"),
            "status": "enabled",
            "url": rules.url(params.get("url")),
            "_seq": self._next_seq(),
        }
        self.webhook_endpoints[endpoint["id"]] = endpoint
        return endpoint

    def update_webhook_endpoint(self, ident: str, params: dict[str, Any]) -> dict[str, Any]:
        rules.check_known(params, {"url", "enabled_events", "description", "metadata", "disabled"})
        endpoint = self.get(self.webhook_endpoints, "webhook endpoint", ident)
        if "url" in params:
            endpoint["url"] = rules.url(params["url"])
        if "enabled_events" in params:
            endpoint["enabled_events"] = rules.event_types(params["enabled_events"])
        if "description" in params:
            endpoint["description"] = rules.string(params, "description")
        if "metadata" in params:
            endpoint["metadata"] = rules.metadata(params["metadata"], endpoint["metadata"])
        if "disabled" in params:
            if params["disabled"] not in ("true", "false"):
                raise StripeError(400, "Invalid boolean: disabled.", param="disabled")
            endpoint["status"] = "disabled" if params["disabled"] == "true" else "enabled"
        return endpoint

    def delete_webhook_endpoint(self, ident: str) -> dict[str, Any]:
        self.get(self.webhook_endpoints, "webhook endpoint", ident)
        del self.webhook_endpoints[ident]
        for delivery in self.deliveries.values():
            if delivery["endpoint_id"] == ident and delivery["status"] in ("scheduled", "buffered"):
                delivery["status"] = "canceled"
        return {"id": ident, "object": "webhook_endpoint", "deleted": True}

    # ------------------------------------------------------------------ events
    def emit(
        self,
        type_: str,
        obj: dict[str, Any],
        ctx: RequestContext,
        *,
        previous: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Record an event with a snapshot of ``obj`` and queue its deliveries."""
        data: dict[str, Any] = {"object": json.loads(json.dumps(self.render(obj)))}
        if previous:
            data["previous_attributes"] = json.loads(json.dumps(previous))
        event: dict[str, Any] = {
            "id": _new_id("evt_"),
            "object": "event",
            "api_version": self.faults.api_version or self.settings.api_version,
            "created": self.clock.stamp(),
            "data": data,
            "livemode": False,
            "pending_webhooks": 0,
            "request": ctx.as_event_request(),
            "type": type_,
            "_seq": self._next_seq(),
        }
        self.events[event["id"]] = event
        endpoints = [
            e
            for e in self.webhook_endpoints.values()
            if e["status"] == "enabled"
            and ("*" in e["enabled_events"] or type_ in e["enabled_events"])
        ]
        event["pending_webhooks"] = len(endpoints)
        for endpoint in endpoints:
            self._queue(event, endpoint, copies=self.faults.duplicate)
        return event

    def _pending_webhooks(self, event_id: str) -> int:
        return len(
            {
                d["endpoint_id"]
                for d in self.deliveries.values()
                if d["event_id"] == event_id and d["status"] in ("scheduled", "buffered", "sending")
            }
        )

    def _queue(
        self, event: dict[str, Any], endpoint: dict[str, Any], *, copies: int, reason: str = "event"
    ) -> list[dict[str, Any]]:
        body = public(event)
        if endpoint["api_version"]:
            body["api_version"] = endpoint["api_version"]
        payload = json.dumps(body, indent=2)
        dropped = event["type"] in self.faults.drop_types
        buffered = self.faults.order != "in_order"
        queued = []
        for copy in range(copies):
            delivery: dict[str, Any] = {
                "id": _new_id("dlv_"),
                "event_id": event["id"],
                "event_type": event["type"],
                "endpoint_id": endpoint["id"],
                "url": endpoint["url"],
                "copy": copy + 1,
                "reason": reason,
                "status": "dropped" if dropped else ("buffered" if buffered else "scheduled"),
                "next_attempt_at": None
                if dropped or buffered
                else self.clock.sched() + self.faults.delay_ms / 1000,
                "attempts": [],
                "payload": payload,
                "seq": self._next_seq(),
            }
            self.deliveries[delivery["id"]] = delivery
            queued.append(delivery)
        return queued

    def resend_event(self, event_id: str, endpoint_id: str | None) -> list[dict[str, Any]]:
        """Deliver an existing event again (same id and payload), as Stripe's resend does."""
        event = self.get(self.events, "event", event_id)
        if endpoint_id is not None:
            targets = [self.get(self.webhook_endpoints, "webhook endpoint", endpoint_id)]
        else:
            targets = [
                e
                for e in self.webhook_endpoints.values()
                if "*" in e["enabled_events"] or event["type"] in e["enabled_events"]
            ]
        queued: list[dict[str, Any]] = []
        for endpoint in targets:
            queued.extend(self._queue(event, endpoint, copies=1, reason="resend"))
        return queued

    def release(self) -> list[str]:
        """Schedule buffered deliveries now, in the order the ``order`` fault names."""
        buffered = sorted(
            (d for d in self.deliveries.values() if d["status"] == "buffered"),
            key=lambda d: d["seq"],
        )
        if self.faults.order == "reversed":
            buffered.reverse()
        elif self.faults.order == "shuffled":
            random.Random(self.faults.shuffle_seed).shuffle(buffered)
        now = self.clock.sched() + self.faults.delay_ms / 1000
        for delivery in buffered:
            delivery["status"] = "scheduled"
            delivery["next_attempt_at"] = now
            delivery["seq"] = self._next_seq()
        return [d["id"] for d in buffered]

    def due_deliveries(self) -> list[dict[str, Any]]:
        """Scheduled deliveries whose time has come, oldest first; marked ``sending``."""
        now = self.clock.sched()
        due = sorted(
            (
                d
                for d in self.deliveries.values()
                if d["status"] == "scheduled" and d["next_attempt_at"] <= now
            ),
            key=lambda d: (d["next_attempt_at"], d["seq"]),
        )
        for delivery in due:
            delivery["status"] = "sending"
        return due

    def signing_secret(self, delivery: dict[str, Any]) -> str | None:
        endpoint = self.webhook_endpoints.get(delivery["endpoint_id"])
        if endpoint is None or endpoint["status"] != "enabled":
            return None
        secret: str = endpoint["secret"]
        return secret

    def record_attempt(
        self,
        delivery: dict[str, Any],
        *,
        status_code: int | None,
        error: str | None,
        duration_ms: int,
    ) -> None:
        """Note one attempt; a non-2xx answer is retried with backoff until the attempts run out."""
        if delivery["id"] not in self.deliveries:  # the sandbox was reset meanwhile
            return
        now = self.clock.sched()
        delivery["attempts"].append(
            {
                "at": self.clock.stamp(),
                "status_code": status_code,
                "error": error,
                "duration_ms": duration_ms,
            }
        )
        if status_code is not None and 200 <= status_code < 300:
            delivery["status"], delivery["next_attempt_at"] = "delivered", None
            return
        tried = len(delivery["attempts"])
        if tried >= self.settings.retry_max_attempts:
            delivery["status"], delivery["next_attempt_at"] = "failed", None
            return
        wait_ms = min(self.settings.retry_max_ms, self.settings.retry_base_ms * 2 ** (tried - 1))
        delivery["status"], delivery["next_attempt_at"] = "scheduled", now + wait_ms / 1000

    def cancel_delivery(self, delivery: dict[str, Any]) -> None:
        delivery["status"], delivery["next_attempt_at"] = "canceled", None

    # ------------------------------------------------------------------ outage
    def in_outage(self) -> bool:
        until = self.faults.outage_until
        return until is not None and self.clock.sched() < until
