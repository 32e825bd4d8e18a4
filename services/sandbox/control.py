"""The sandbox's ``/_sandbox`` control API: JSON bodies that drive time, outcomes and faults
(no auth: bind it to loopback)."""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from services.sandbox.errors import StripeError
from services.sandbox.events import RequestContext
from services.sandbox.model import Sandbox
from services.sandbox.runtime import SandboxRuntime
from services.sandbox.settings import OUTCOMES, Faults, SandboxSettings
from services.sandbox.wire import Params, json_response

__all__ = ["control_routes"]

log = logging.getLogger("provely.sandbox")


class _Control(BaseModel):
    model_config = ConfigDict(extra="forbid")


class _Advance(_Control):
    seconds: float = Field(ge=0)


class _Outage(_Control):
    seconds: float | None = Field(None, gt=0)
    enabled: bool | None = None


class _Outcome(_Control):
    outcome: str


class _Status(_Control):
    status: str


class _ReadLag(_Control):
    ms: int


class _Resend(_Control):
    endpoint: str | None = None


class _Checkout(_Control):
    amount: int = Field(gt=0)
    currency: str = Field("usd", pattern=r"^[A-Za-z]{3}$")
    quantity: int = Field(1, gt=0)
    metadata: dict[str, str] = Field(default_factory=dict)
    customer: str | None = None


def control_routes(  # noqa: C901  # pay down: every route a closure; one per resource
    sandbox: Sandbox, runtime: SandboxRuntime, settings: SandboxSettings
) -> list[Route]:
    """Every ``/_sandbox`` route; each answer is saved by ``runtime``."""

    # ---- /_sandbox control handlers ------------------------------------------------------
    def control(
        handler: Callable[[Request, dict[str, Any]], Awaitable[Any]],
    ) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            try:
                raw = await request.body()
                body = json.loads(raw) if raw.strip() else {}
                if not isinstance(body, dict):
                    raise StripeError(400, "The control API takes a JSON object.")
                result = await handler(request, body)
                runtime.save()
                return json_response(200, result)
            except json.JSONDecodeError as exc:
                return json_response(400, {"error": {"message": f"Invalid JSON: {exc.msg}"}})
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                    for e in exc.errors()
                )
                return json_response(400, {"error": {"message": problems}})
            except StripeError as exc:
                return json_response(exc.status, {"error": {"message": exc.message}})
            except Exception:
                log.exception("sandbox control request failed")
                return json_response(
                    500, {"error": {"message": "The sandbox failed on this request."}}
                )

        return endpoint

    def clock_view() -> dict[str, Any]:
        return {
            "now": sandbox.clock.stamp(),
            "advanced_s": sandbox.advanced_s,
            "clock_offset_s": sandbox.faults.clock_offset_s,
            "in_outage": sandbox.in_outage(),
        }

    async def c_state(request: Request, body: dict[str, Any]) -> Any:
        return {
            "clock": clock_view(),
            "settings": {
                "settle_ms": settings.settle_ms,
                "api_version": settings.api_version,
                "retry_base_ms": settings.retry_base_ms,
                "retry_max_attempts": settings.retry_max_attempts,
            },
            "faults": sandbox.faults.model_dump(),
            "charges": [sandbox.render(o) for o in sandbox.charges.values()],
            "refunds": [
                {**sandbox.render(o), "sandbox_outcome": o["_outcome"]}
                for o in sandbox.refunds.values()
            ],
            "payment_intents": [sandbox.render(o) for o in sandbox.payment_intents.values()],
            "checkout_sessions": [sandbox.render(o) for o in sandbox.checkout_sessions.values()],
            "customers": [sandbox.render(o) for o in sandbox.customers.values()],
            "webhook_endpoints": [
                {**sandbox.render(o), "secret": o["secret"]}
                for o in sandbox.webhook_endpoints.values()
            ],
            "events": [sandbox.render(o) for o in sandbox.events.values()],
            "deliveries": list(sandbox.deliveries.values()),
            "scheduled": sorted(sandbox.transitions, key=lambda t: t["due_at"]),
        }

    async def c_reset(request: Request, body: dict[str, Any]) -> Any:
        keep = body.pop("keep_faults", False)
        if body or not isinstance(keep, bool):
            raise StripeError(400, "reset takes only an optional boolean keep_faults.")
        sandbox.reset(keep_faults=keep)
        return {"reset": True, "clock": clock_view()}

    async def c_faults(request: Request, body: dict[str, Any]) -> Any:
        if request.method == "POST":
            merged = {**sandbox.faults.model_dump(), **body}
            unknown_keys = set(body) - set(Faults.model_fields)
            if unknown_keys:
                raise StripeError(400, f"Unknown fault(s): {', '.join(sorted(unknown_keys))}.")
            sandbox.faults = Faults.model_validate(merged)
        return sandbox.faults.model_dump()

    async def c_advance(request: Request, body: dict[str, Any]) -> Any:
        step = _Advance.model_validate(body)
        sandbox.advance(step.seconds)
        done = await runtime.step()
        return {**done, "clock": clock_view()}

    async def c_flush(request: Request, body: dict[str, Any]) -> Any:
        if body:
            raise StripeError(400, "flush takes no parameters.")
        done = await runtime.step()
        return {**done, "clock": clock_view()}

    async def c_outage(request: Request, body: dict[str, Any]) -> Any:
        outage = _Outage.model_validate(body)
        if outage.seconds is not None and outage.enabled is False:
            raise StripeError(400, "Give seconds to start an outage or enabled=false to end it.")
        if outage.seconds is not None:
            sandbox.faults.outage_until = sandbox.clock.sched() + outage.seconds
        elif outage.enabled:
            # Until turned off: ten years from now keeps the state file plain JSON.
            sandbox.faults.outage_until = sandbox.clock.sched() + 10 * 365 * 86400
        elif outage.enabled is False:
            sandbox.faults.outage_until = None
        else:
            raise StripeError(400, "Give seconds (> 0) or enabled (true/false).")
        return clock_view()

    async def c_release(request: Request, body: dict[str, Any]) -> Any:
        if body:
            raise StripeError(400, "release takes no parameters.")
        released = sandbox.release()
        runtime.save()
        done = await runtime.step()
        return {"released": released, "order": sandbox.faults.order, **done}

    async def c_deliveries(request: Request, body: dict[str, Any]) -> Any:
        query = request.query_params
        rows = sorted(sandbox.deliveries.values(), key=lambda d: d["seq"])
        for name, field in (
            ("event_id", "event_id"),
            ("endpoint_id", "endpoint_id"),
            ("type", "event_type"),
            ("status", "status"),
        ):
            if name in query:
                rows = [d for d in rows if d[field] == query[name]]
        return {"object": "list", "data": rows}

    async def c_resend(request: Request, body: dict[str, Any]) -> Any:
        resend = _Resend.model_validate(body)
        queued = sandbox.resend_event(request.path_params["id"], resend.endpoint)
        runtime.save()
        done = await runtime.step()
        return {"deliveries": [d["id"] for d in queued], **done}

    async def c_outcome(request: Request, body: dict[str, Any]) -> Any:
        choice = _Outcome.model_validate(body)
        refund = sandbox.set_refund_outcome(request.path_params["id"], choice.outcome)
        return {**sandbox.render(refund), "sandbox_outcome": refund["_outcome"]}

    async def c_status(request: Request, body: dict[str, Any]) -> Any:
        choice = _Status.model_validate(body)
        refund = sandbox.force_refund_status(request.path_params["id"], choice.status)
        return sandbox.render(refund)

    async def c_read_lag(request: Request, body: dict[str, Any]) -> Any:
        lag = _ReadLag.model_validate(body)
        return sandbox.set_refund_read_lag(request.path_params["id"], lag.ms)

    async def c_complete_session(request: Request, body: dict[str, Any]) -> Any:
        if body:
            raise StripeError(400, "complete takes no parameters.")
        session = sandbox.complete_checkout_session(request.path_params["id"])
        return _checkout_result(session)

    async def c_checkout(request: Request, body: dict[str, Any]) -> Any:
        spec = _Checkout.model_validate(body)
        params: Params = {
            "mode": "payment",
            "line_items": {
                "0": {
                    "price_data": {
                        "currency": spec.currency,
                        "unit_amount": str(spec.amount // spec.quantity),
                        "product_data": {"name": "sandbox purchase"},
                    },
                    "quantity": str(spec.quantity),
                }
            },
            "metadata": spec.metadata,
        }
        if spec.amount % spec.quantity:
            raise StripeError(400, "amount must be a multiple of quantity.")
        if spec.customer:
            params["customer"] = spec.customer
        session = sandbox.create_checkout_session(params, RequestContext())
        sandbox.complete_checkout_session(session["id"])
        return _checkout_result(session)

    def _checkout_result(session: dict[str, Any]) -> dict[str, Any]:
        intent = sandbox.payment_intents[session["payment_intent"]]
        charge = sandbox.charges[intent["latest_charge"]]
        return {
            "checkout_session": sandbox.render(session),
            "payment_intent": sandbox.render(intent),
            "charge": sandbox.render(charge),
        }

    async def c_outcomes(request: Request, body: dict[str, Any]) -> Any:
        return {"outcomes": list(OUTCOMES)}

    controls = [
        Route("/_sandbox/state", control(c_state), methods=["GET"]),
        Route("/_sandbox/reset", control(c_reset), methods=["POST"]),
        Route("/_sandbox/faults", control(c_faults), methods=["GET", "POST"]),
        Route("/_sandbox/advance", control(c_advance), methods=["POST"]),
        Route("/_sandbox/flush", control(c_flush), methods=["POST"]),
        Route("/_sandbox/outage", control(c_outage), methods=["POST"]),
        Route("/_sandbox/release", control(c_release), methods=["POST"]),
        Route("/_sandbox/deliveries", control(c_deliveries), methods=["GET"]),
        Route("/_sandbox/events/{id}/resend", control(c_resend), methods=["POST"]),
        Route("/_sandbox/refunds/{id}/outcome", control(c_outcome), methods=["POST"]),
        Route("/_sandbox/refunds/{id}/status", control(c_status), methods=["POST"]),
        Route("/_sandbox/refunds/{id}/read_lag", control(c_read_lag), methods=["POST"]),
        Route(
            "/_sandbox/checkout/sessions/{id}/complete",
            control(c_complete_session),
            methods=["POST"],
        ),
        Route("/_sandbox/checkout/complete", control(c_checkout), methods=["POST"]),
        Route("/_sandbox/outcomes", control(c_outcomes), methods=["GET"]),
    ]

    return controls
