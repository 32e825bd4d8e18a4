"""The entitlement example: seats granted on ``checkout.session.completed``, cut on refunds.

- Deliveries are verified with ``stripe.Webhook.construct_event`` and the endpoint's secret
  (400 on a bad signature, nothing recorded).
- ``checkout.session.completed`` grants ``metadata.seats`` seats, keyed on the charge id that
  paid for the session (read from the session's PaymentIntent, ``latest_charge``).
- ``charge.refunded`` sets the seats to what the unrefunded amount pays for:
  ``floor((amount - amount_refunded) * seats_bought / amount)`` — 0 after a full refund.
  The total is read back from Stripe (``GET /v1/charges/{id}``) when the event comes, not taken
  from the event: deliveries come in any order and Stripe stamps whole seconds, so two refunds
  made back to back send two ``charge.refunded`` of one second and neither arrival nor
  ``created`` says which is newer; a refund that fails later lowers the total again. Of two
  readbacks, the one begun last wins.
- Each event id is applied once: a replayed delivery answers 200 and changes nothing.
- ``IGNORE_REFUNDS=1`` (or ``ignore_refunds=True``) makes the app ignore refunds: the bug of
  seed 003, kept on purpose so a verifier can catch it.
- ``GET /entitlements/{charge_id}`` answers ``{"charge": ..., "seats": N}``.

Configuration (arguments win over the environment): ``STRIPE_WEBHOOK_SECRET``,
``STRIPE_API_KEY``, ``STRIPE_API_BASE`` (the sandbox URL), ``IGNORE_REFUNDS``. The secret can be
set after start through ``app.state.config.webhook_secret`` (the endpoint is often created after
the app's URL is known).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field
from typing import Any

import stripe
from fastapi import FastAPI, HTTPException, Request
from starlette.concurrency import run_in_threadpool

__all__ = ["AppConfig", "create_app"]


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


@dataclass
class AppConfig:
    webhook_secret: str | None = None
    api_key: str | None = None
    api_base: str | None = None
    ignore_refunds: bool = False


@dataclass
class Grant:
    seats_bought: int
    amount: int
    seats: int


@dataclass
class Ledger:
    """Grants by charge id, the refunded total of the newest readback per charge (with the
    number of that readback), applied event ids."""

    grants: dict[str, Grant] = field(default_factory=dict)
    refunded: dict[str, tuple[int, int]] = field(default_factory=dict)  # charge -> (read, amt)
    reads: int = 0  # readbacks begun
    applied: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def recompute(self, charge_id: str) -> None:
        grant = self.grants.get(charge_id)
        if grant is None:
            return
        refunded = self.refunded.get(charge_id, (0, 0))[1]
        remaining = max(0, grant.amount - refunded)
        grant.seats = remaining * grant.seats_bought // grant.amount if grant.amount else 0


def create_app(  # noqa: C901  # pay down: every route a closure; module-level routes
    *,
    webhook_secret: str | None = None,
    api_key: str | None = None,
    api_base: str | None = None,
    ignore_refunds: bool | None = None,
) -> FastAPI:
    config = AppConfig(
        webhook_secret=webhook_secret or os.environ.get("STRIPE_WEBHOOK_SECRET"),
        api_key=api_key or os.environ.get("STRIPE_API_KEY"),
        api_base=api_base or os.environ.get("STRIPE_API_BASE"),
        ignore_refunds=_env_flag("IGNORE_REFUNDS") if ignore_refunds is None else ignore_refunds,
    )
    ledger = Ledger()
    app = FastAPI(title="entitlement example")
    app.state.config = config
    app.state.ledger = ledger

    clients: dict[tuple[str, str | None], stripe.StripeClient] = {}

    def client() -> stripe.StripeClient:
        if not config.api_key:
            raise HTTPException(503, "STRIPE_API_KEY is not configured")
        key = (config.api_key, config.api_base)
        if key not in clients:
            clients[key] = stripe.StripeClient(
                config.api_key,
                base_addresses={"api": config.api_base} if config.api_base else None,
                max_network_retries=2,
            )
        return clients[key]

    def charge_of_session(session: Any) -> str:
        intent_id = session["payment_intent"]
        if not intent_id:
            raise HTTPException(422, "the checkout session has no payment")
        intent = client().v1.payment_intents.retrieve(intent_id)
        return str(intent.latest_charge)

    def refunded_total(charge_id: str) -> int:
        return int(client().v1.charges.retrieve(charge_id).amount_refunded)

    @app.post("/webhooks/stripe")
    async def stripe_webhook(request: Request) -> Any:
        payload = await request.body()
        signature = request.headers.get("stripe-signature")
        if not config.webhook_secret:
            raise HTTPException(503, "STRIPE_WEBHOOK_SECRET is not configured")
        try:
            event = stripe.Webhook.construct_event(payload, signature, config.webhook_secret)
        except (ValueError, stripe.SignatureVerificationError) as exc:
            raise HTTPException(400, f"rejected delivery: {exc}") from None
        with ledger.lock:
            if event.id in ledger.applied:
                return {"status": "already applied", "event": event.id}
        obj = event.data.object
        if event.type == "checkout.session.completed":
            try:
                seats = int(obj["metadata"].to_dict().get("seats", "0"))
            except ValueError:
                raise HTTPException(422, "metadata.seats is not an integer") from None
            charge_id = await run_in_threadpool(charge_of_session, obj)
            with ledger.lock:
                if event.id in ledger.applied:
                    return {"status": "already applied", "event": event.id}
                if charge_id not in ledger.grants:
                    ledger.grants[charge_id] = Grant(
                        seats_bought=seats, amount=int(obj["amount_total"]), seats=seats
                    )
                    ledger.recompute(charge_id)
                ledger.applied.add(event.id)
        elif event.type == "charge.refunded" and not config.ignore_refunds:
            charge_id = str(obj["id"])
            with ledger.lock:
                ledger.reads += 1
                read = ledger.reads
            total = await run_in_threadpool(refunded_total, charge_id)
            with ledger.lock:
                if event.id in ledger.applied:
                    return {"status": "already applied", "event": event.id}
                if read > ledger.refunded.get(charge_id, (0, 0))[0]:
                    ledger.refunded[charge_id] = (read, total)
                ledger.recompute(charge_id)
                ledger.applied.add(event.id)
        else:
            with ledger.lock:
                ledger.applied.add(event.id)
        return {"status": "applied", "event": event.id}

    @app.get("/healthz")
    def health() -> dict[str, Any]:
        return {"ok": True, "ignore_refunds": config.ignore_refunds}

    @app.get("/entitlements/{charge_id}")
    def entitlement(charge_id: str) -> dict[str, Any]:
        with ledger.lock:
            grant = ledger.grants.get(charge_id)
            if grant is None:
                raise HTTPException(404, f"no entitlement for charge {charge_id}")
            return {"charge": charge_id, "seats": grant.seats}

    return app
