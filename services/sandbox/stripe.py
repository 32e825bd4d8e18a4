"""The Stripe sandbox as an ASGI app: Stripe's v1 API surface plus the ``/_sandbox`` control API.

``create_app(...)`` returns a Starlette app. Under ``/v1`` it speaks Stripe's wire format
(form-encoded parameters, secret-key auth, idempotency keys, list and error envelopes); under
``/_sandbox`` a JSON control API drives time, outcomes and faults (no auth: bind it to loopback).
A background task settles refunds and sends webhook deliveries on the sandbox clock.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import logging
import secrets
import string
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from services.sandbox import payments
from services.sandbox.delivery import Dispatcher
from services.sandbox.errors import StripeError
from services.sandbox.events import RequestContext
from services.sandbox.expand import check_paths, expand, expand_paths
from services.sandbox.forms import FormError, as_list, decode_form, parse_body
from services.sandbox.live import LiveRequests, delivery_line
from services.sandbox.model import Sandbox
from services.sandbox.objects import public
from services.sandbox.search import search
from services.sandbox.settings import OUTCOMES, Faults, SandboxSettings
from services.sandbox.store import load_state, save_state

__all__ = ["create_app"]

log = logging.getLogger("provely.sandbox")

Params = dict[str, Any]
ApiHandler = Callable[[Request, Params, RequestContext], Any]


def _json(status: int, body: Any, headers: dict[str, str] | None = None) -> Response:
    return Response(
        json.dumps(body, indent=2) + "\n",
        status_code=status,
        media_type="application/json",
        headers=headers,
    )


def _request_id() -> str:
    alphabet = string.ascii_letters + string.digits
    return "req_" + "".join(secrets.choice(alphabet) for _ in range(14))


def _api_key(request: Request) -> str:
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    key = ""
    if scheme.lower() == "bearer":
        key = value.strip()
    elif scheme.lower() == "basic":
        try:
            key = base64.b64decode(value.strip(), validate=True).decode("utf-8").partition(":")[0]
        except (binascii.Error, UnicodeDecodeError):
            key = ""
    if not key:
        raise StripeError(
            401,
            "You did not provide an API key. Send it as 'Authorization: Bearer sk_test_...'.",
        )
    if not key.startswith("sk_test_") or len(key) <= len("sk_test_"):
        shown = key[:8] + "*" * 4 + key[-4:] if len(key) > 12 else "****"
        raise StripeError(
            401,
            f"Invalid API Key provided: {shown}. This sandbox accepts any secret test key "
            "(sk_test_...).",
            code="api_key_invalid",
        )
    return key


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


class _Resend(_Control):
    endpoint: str | None = None


class _Checkout(_Control):
    amount: int = Field(gt=0)
    currency: str = Field("usd", pattern=r"^[A-Za-z]{3}$")
    quantity: int = Field(1, gt=0)
    metadata: dict[str, str] = Field(default_factory=dict)
    customer: str | None = None


class SandboxRuntime:
    """The sandbox, its dispatcher and persistence, owned by one app (and one event loop)."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        state_file: Path | None,
        delivery_timeout_s: float,
        tick_s: float,
        live: Callable[[str], None] | None = None,
    ) -> None:
        self.sandbox = sandbox
        self.state_file = state_file
        self.tick_s = tick_s

        def attempted(delivery: dict[str, Any], status: int | None, error: str | None) -> None:
            if live is not None:
                live(delivery_line(delivery, status_code=status, error=error))

        self.dispatcher = Dispatcher(
            sandbox,
            on_change=self.save,
            timeout_s=delivery_timeout_s,
            on_attempt=attempted if live is not None else None,
        )
        self._task: asyncio.Task[None] | None = None

    def save(self) -> None:
        if self.state_file is not None:
            save_state(self.sandbox, self.state_file)

    async def start(self) -> None:
        await self.dispatcher.start()
        self._task = asyncio.create_task(self._run(), name="sandbox-ticker")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await self.dispatcher.close()
        self.save()

    async def step(self) -> dict[str, int]:
        """Settle what is due, then attempt every delivery that is due."""
        settled = self.sandbox.settle_due()
        if settled:
            self.save()
        dispatched = await self.dispatcher.dispatch_due()
        return {"settled": settled, "dispatched": dispatched}

    async def _run(self) -> None:
        while True:
            try:
                await self.step()
            except asyncio.CancelledError:
                raise
            except Exception:  # keep ticking: one bad round must not stop the sandbox
                log.exception("sandbox tick failed")
            await asyncio.sleep(self.tick_s)


def create_app(
    *,
    state_file: str | Path | None = None,
    settle_ms: int = 1000,
    api_version: str = "2026-08-26",
    faults: Faults | dict[str, Any] | None = None,
    retry_base_ms: int = 1000,
    retry_max_attempts: int = 6,
    delivery_timeout_s: float = 10.0,
    tick_ms: int = 20,
    live: Callable[[str], None] | None = None,
) -> Starlette:
    """Build the sandbox app. With ``state_file`` the state is loaded from it (when present) and
    written back atomically after every change; ``faults`` sets faults from the start (they are
    also restored from the state file, and the explicit ones win). ``live`` is given one line
    per answered request and per delivery attempt (:mod:`services.sandbox.live`).

    Raises :class:`services.sandbox.errors.StateFileError` when the state file is unreadable.
    """
    if settle_ms < 0 or retry_base_ms < 0 or retry_max_attempts < 1 or tick_ms < 1:
        raise ValueError(
            "settle_ms/retry_base_ms must be >= 0, retry_max_attempts and tick_ms >= 1"
        )
    settings = SandboxSettings(
        settle_ms=settle_ms,
        api_version=api_version,
        retry_base_ms=retry_base_ms,
        retry_max_attempts=retry_max_attempts,
    )
    sandbox = Sandbox(settings)
    path = Path(state_file) if state_file is not None else None
    if path is not None:
        load_state(sandbox, path)
    if faults is not None:
        given = faults if isinstance(faults, Faults) else Faults.model_validate(faults)
        sandbox.faults = sandbox.faults.model_copy(update=given.model_dump(exclude_unset=True))
    runtime = SandboxRuntime(
        sandbox,
        state_file=path,
        delivery_timeout_s=delivery_timeout_s,
        tick_s=tick_ms / 1000,
        live=live,
    )

    def api(
        handler: ApiHandler, *, mutates: bool, returns: str = ""
    ) -> Callable[[Request], Awaitable[Response]]:
        """``returns``: the object type answered (``list:<type>`` for a list or search), which
        says which ``expand[]`` paths are accepted."""

        async def endpoint(request: Request) -> Response:
            request_id = _request_id()
            version = request.headers.get("stripe-version") or settings.api_version
            headers = {"Request-Id": request_id, "Stripe-Version": version}
            idem_key = request.headers.get("idempotency-key") if request.method == "POST" else None
            if idem_key:
                headers["Idempotency-Key"] = idem_key
            try:
                if sandbox.in_outage():
                    raise StripeError(
                        503,
                        "The API is temporarily unavailable (sandbox outage window). "
                        "Retry the request later.",
                        type_="api_error",
                    )
                key = _api_key(request)
                if request.method == "POST":
                    params = parse_body(await request.body())
                else:
                    params = decode_form(request.query_params.multi_items())
                paths = expand_paths(params.get("expand"))
                check_paths(returns, paths)
                store_key = f"{key}\x00{idem_key}" if idem_key else None
                if store_key is not None and store_key in sandbox.idempotency:
                    saved = sandbox.idempotency[store_key]
                    if saved["path"] != request.url.path or saved["params"] != params:
                        raise StripeError(
                            400,
                            f"The idempotency key {idem_key!r} was first used with other "
                            "parameters or another endpoint; use a new key for a new request.",
                            type_="idempotency_error",
                        )
                    headers["Idempotent-Replayed"] = "true"
                    headers["Original-Request"] = saved["request_id"]
                    return _json(saved["status"], saved["body"], headers)
                ctx = RequestContext(request_id=request_id, idempotency_key=idem_key)
                result = handler(request, params, ctx)
                body = sandbox.render(result) if "_seq" in result else result
                if paths:
                    body = expand(sandbox, body, paths)
                status = 200
                if store_key is not None:
                    sandbox.idempotency[store_key] = {
                        "path": request.url.path,
                        "params": params,
                        "status": status,
                        "body": body,
                        "request_id": request_id,
                    }
                if mutates or store_key is not None:
                    runtime.save()
                return _json(status, body, headers)
            except FormError as exc:
                err = StripeError(400, str(exc), param=exc.param)
                return _json(err.status, err.body(), headers)
            except StripeError as exc:
                return _json(exc.status, exc.body(), headers)
            except Exception:
                log.exception("sandbox API request failed")
                err = StripeError(500, "The sandbox failed on this request.", type_="api_error")
                return _json(500, err.body(), headers)

        return endpoint

    def url_path(request: Request) -> str:
        return request.url.path

    # ---- /v1 handlers ------------------------------------------------------------------
    def create_charge(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.create_charge(params, ctx)

    def list_charges(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.list_objects(
            sandbox.charges.values(),
            url=url_path(request),
            params=params,
            filters={
                "customer": lambda o, v: o["customer"] == v,
                "payment_intent": lambda o, v: o["payment_intent"] == v,
            },
        )

    def get_charge(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.get(sandbox.charges, "charge", request.path_params["id"])

    def update_charge(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.update_charge(request.path_params["id"], params)

    def create_refund(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.create_refund(params, ctx)

    def list_refunds(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.list_objects(
            sandbox.refunds.values(),
            url=url_path(request),
            params=params,
            filters={
                "charge": lambda o, v: o["charge"] == v,
                "payment_intent": lambda o, v: o["payment_intent"] == v,
            },
        )

    def get_refund(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.get(sandbox.refunds, "refund", request.path_params["id"])

    def update_refund(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.update_refund(request.path_params["id"], params, ctx)

    def cancel_refund(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.cancel_refund(request.path_params["id"], ctx)

    def list_events(request: Request, params: Params, ctx: RequestContext) -> Any:
        types = params.pop("types", None)
        if types is not None:
            wanted = set(as_list(types, param="types"))
            events: Any = [e for e in sandbox.events.values() if e["type"] in wanted]
        else:
            events = sandbox.events.values()
        return sandbox.list_objects(
            events,
            url=url_path(request),
            params=params,
            filters={"type": lambda o, v: _type_matches(o["type"], v)},
        )

    def get_event(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.get(sandbox.events, "event", request.path_params["id"])

    def create_endpoint(request: Request, params: Params, ctx: RequestContext) -> Any:
        # The secret is shown once, in the answer to the creation (as Stripe does).
        return public(sandbox.create_webhook_endpoint(params, ctx))

    def list_endpoints(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.list_objects(
            sandbox.webhook_endpoints.values(), url=url_path(request), params=params, filters={}
        )

    def get_endpoint(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.get(sandbox.webhook_endpoints, "webhook endpoint", request.path_params["id"])

    def update_endpoint(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.update_webhook_endpoint(request.path_params["id"], params)

    def delete_endpoint(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.delete_webhook_endpoint(request.path_params["id"])

    def create_session(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.create_checkout_session(params, ctx)

    def list_sessions(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.list_objects(
            sandbox.checkout_sessions.values(),
            url=url_path(request),
            params=params,
            filters={"payment_intent": lambda o, v: o["payment_intent"] == v},
        )

    def get_session(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.get(sandbox.checkout_sessions, "checkout session", request.path_params["id"])

    def get_intent(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.get(sandbox.payment_intents, "payment_intent", request.path_params["id"])

    def capture_charge(request: Request, params: Params, ctx: RequestContext) -> Any:
        return payments.capture_charge(sandbox, request.path_params["id"], params, ctx)

    def searcher(resource: str, table: str) -> ApiHandler:
        def handler(request: Request, params: Params, ctx: RequestContext) -> Any:
            rows = getattr(sandbox, table).values()
            return search(
                rows, resource=resource, params=params, url=url_path(request), render=sandbox.render
            )

        return handler

    def create_customer(request: Request, params: Params, ctx: RequestContext) -> Any:
        return payments.create_customer(sandbox, params, ctx)

    def list_customers(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.list_objects(
            sandbox.customers.values(),
            url=url_path(request),
            params=params,
            filters={"email": lambda o, v: o["email"] == v},
        )

    def get_customer(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.get(sandbox.customers, "customer", request.path_params["id"])

    def update_customer(request: Request, params: Params, ctx: RequestContext) -> Any:
        return payments.update_customer(sandbox, request.path_params["id"], params, ctx)

    def delete_customer(request: Request, params: Params, ctx: RequestContext) -> Any:
        return payments.delete_customer(sandbox, request.path_params["id"], ctx)

    def create_intent(request: Request, params: Params, ctx: RequestContext) -> Any:
        return payments.create_payment_intent(sandbox, params, ctx)

    def list_intents(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.list_objects(
            sandbox.payment_intents.values(),
            url=url_path(request),
            params=params,
            filters={"customer": lambda o, v: o["customer"] == v},
        )

    def confirm_intent(request: Request, params: Params, ctx: RequestContext) -> Any:
        return payments.confirm_payment_intent(sandbox, request.path_params["id"], params, ctx)

    def capture_intent(request: Request, params: Params, ctx: RequestContext) -> Any:
        return payments.capture_payment_intent(sandbox, request.path_params["id"], params, ctx)

    def cancel_intent(request: Request, params: Params, ctx: RequestContext) -> Any:
        return payments.cancel_payment_intent(sandbox, request.path_params["id"], params, ctx)

    def unknown(request: Request, params: Params, ctx: RequestContext) -> Any:
        raise StripeError(
            404,
            f"Unrecognized request URL ({request.method}: {request.url.path}). "
            "See docs/sandbox.md for the endpoints this sandbox serves.",
        )

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
                return _json(200, result)
            except json.JSONDecodeError as exc:
                return _json(400, {"error": {"message": f"Invalid JSON: {exc.msg}"}})
            except ValidationError as exc:
                problems = "; ".join(
                    f"{'.'.join(str(p) for p in e['loc']) or 'body'}: {e['msg']}"
                    for e in exc.errors()
                )
                return _json(400, {"error": {"message": problems}})
            except StripeError as exc:
                return _json(exc.status, {"error": {"message": exc.message}})
            except Exception:
                log.exception("sandbox control request failed")
                return _json(500, {"error": {"message": "The sandbox failed on this request."}})

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

    charge, refund, intent = "charge", "refund", "payment_intent"
    v1 = [
        Route(
            "/v1/charges/search",
            api(searcher("charges", "charges"), mutates=False, returns="list:charge"),
            methods=["GET"],
        ),
        Route("/v1/charges", api(create_charge, mutates=True, returns=charge), methods=["POST"]),
        Route(
            "/v1/charges", api(list_charges, mutates=False, returns="list:charge"), methods=["GET"]
        ),
        Route("/v1/charges/{id}", api(get_charge, mutates=False, returns=charge), methods=["GET"]),
        Route(
            "/v1/charges/{id}", api(update_charge, mutates=True, returns=charge), methods=["POST"]
        ),
        Route(
            "/v1/charges/{id}/capture",
            api(capture_charge, mutates=True, returns=charge),
            methods=["POST"],
        ),
        Route("/v1/refunds", api(create_refund, mutates=True, returns=refund), methods=["POST"]),
        Route(
            "/v1/refunds", api(list_refunds, mutates=False, returns="list:refund"), methods=["GET"]
        ),
        Route("/v1/refunds/{id}", api(get_refund, mutates=False, returns=refund), methods=["GET"]),
        Route(
            "/v1/refunds/{id}", api(update_refund, mutates=True, returns=refund), methods=["POST"]
        ),
        Route(
            "/v1/refunds/{id}/cancel",
            api(cancel_refund, mutates=True, returns=refund),
            methods=["POST"],
        ),
        Route(
            "/v1/customers/search",
            api(searcher("customers", "customers"), mutates=False, returns="list:customer"),
            methods=["GET"],
        ),
        Route("/v1/customers", api(create_customer, mutates=True), methods=["POST"]),
        Route("/v1/customers", api(list_customers, mutates=False), methods=["GET"]),
        Route("/v1/customers/{id}", api(get_customer, mutates=False), methods=["GET"]),
        Route("/v1/customers/{id}", api(update_customer, mutates=True), methods=["POST"]),
        Route("/v1/customers/{id}", api(delete_customer, mutates=True), methods=["DELETE"]),
        Route(
            "/v1/payment_intents/search",
            api(
                searcher("payment_intents", "payment_intents"),
                mutates=False,
                returns="list:" + intent,
            ),
            methods=["GET"],
        ),
        Route(
            "/v1/payment_intents",
            api(create_intent, mutates=True, returns=intent),
            methods=["POST"],
        ),
        Route(
            "/v1/payment_intents",
            api(list_intents, mutates=False, returns="list:" + intent),
            methods=["GET"],
        ),
        Route(
            "/v1/payment_intents/{id}",
            api(get_intent, mutates=False, returns=intent),
            methods=["GET"],
        ),
        Route(
            "/v1/payment_intents/{id}/confirm",
            api(confirm_intent, mutates=True, returns=intent),
            methods=["POST"],
        ),
        Route(
            "/v1/payment_intents/{id}/capture",
            api(capture_intent, mutates=True, returns=intent),
            methods=["POST"],
        ),
        Route(
            "/v1/payment_intents/{id}/cancel",
            api(cancel_intent, mutates=True, returns=intent),
            methods=["POST"],
        ),
        Route("/v1/events", api(list_events, mutates=False), methods=["GET"]),
        Route("/v1/events/{id}", api(get_event, mutates=False), methods=["GET"]),
        Route("/v1/webhook_endpoints", api(create_endpoint, mutates=True), methods=["POST"]),
        Route("/v1/webhook_endpoints", api(list_endpoints, mutates=False), methods=["GET"]),
        Route("/v1/webhook_endpoints/{id}", api(get_endpoint, mutates=False), methods=["GET"]),
        Route("/v1/webhook_endpoints/{id}", api(update_endpoint, mutates=True), methods=["POST"]),
        Route("/v1/webhook_endpoints/{id}", api(delete_endpoint, mutates=True), methods=["DELETE"]),
        Route(
            "/v1/checkout/sessions",
            api(create_session, mutates=True, returns="checkout.session"),
            methods=["POST"],
        ),
        Route(
            "/v1/checkout/sessions",
            api(list_sessions, mutates=False, returns="list:checkout.session"),
            methods=["GET"],
        ),
        Route(
            "/v1/checkout/sessions/{id}",
            api(get_session, mutates=False, returns="checkout.session"),
            methods=["GET"],
        ),
        Route(
            "/v1/{rest:path}",
            api(unknown, mutates=False),
            methods=["GET", "POST", "DELETE", "PUT", "PATCH"],
        ),
    ]
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
        Route(
            "/_sandbox/checkout/sessions/{id}/complete",
            control(c_complete_session),
            methods=["POST"],
        ),
        Route("/_sandbox/checkout/complete", control(c_checkout), methods=["POST"]),
        Route("/_sandbox/outcomes", control(c_outcomes), methods=["GET"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        await runtime.start()
        try:
            yield
        finally:
            await runtime.stop()

    middleware = [Middleware(LiveRequests, emit=live)] if live is not None else []
    app = Starlette(routes=[*v1, *controls], lifespan=lifespan, middleware=middleware)
    app.state.sandbox = sandbox
    app.state.runtime = runtime
    return app


def _type_matches(event_type: str, wanted: Any) -> bool:
    """Stripe's ``type`` filter: an exact type, or a ``*`` wildcard such as ``refund.*``."""
    if not isinstance(wanted, str):
        raise StripeError(400, "Invalid string: type.", param="type")
    if wanted.endswith("*"):
        return event_type.startswith(wanted[:-1])
    return event_type == wanted
