"""Stripe's ``/v1`` API surface of the sandbox: each route, and the handler that calls the
model for it (charges, refunds, customers, PaymentIntents, events, webhook endpoints, checkout
sessions, search), wrapped in Stripe's wire format by :mod:`services.sandbox.wire`."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.routing import Route

from services.sandbox import payments
from services.sandbox.errors import StripeError
from services.sandbox.events import RequestContext
from services.sandbox.forms import as_list
from services.sandbox.model import Sandbox
from services.sandbox.objects import public
from services.sandbox.search import search
from services.sandbox.wire import Api, ApiHandler, Params

__all__ = ["v1_routes"]


# pay down (C901): every route a closure; one per resource
def v1_routes(sandbox: Sandbox, api: Api) -> list[Route]:  # noqa: C901
    """Every ``/v1`` route, the catch-all for unknown ones last."""

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
            sandbox.readable_refunds(),
            url=url_path(request),
            params=params,
            filters={
                "charge": lambda o, v: o["charge"] == v,
                "payment_intent": lambda o, v: o["payment_intent"] == v,
            },
        )

    def get_refund(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.read_refund(request.path_params["id"])

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

    def get_balance_transaction(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.get_balance_transaction(request.path_params["id"])

    def get_balance(request: Request, params: Params, ctx: RequestContext) -> Any:
        return sandbox.balance()

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
            "/v1/balance_transactions/{id}",
            api(get_balance_transaction, mutates=False),
            methods=["GET"],
        ),
        Route("/v1/balance", api(get_balance, mutates=False), methods=["GET"]),
        Route(
            "/v1/{rest:path}",
            api(unknown, mutates=False),
            methods=["GET", "POST", "DELETE", "PUT", "PATCH"],
        ),
    ]
    return v1


def _type_matches(event_type: str, wanted: Any) -> bool:
    """Stripe's ``type`` filter: an exact type, or a ``*`` wildcard such as ``refund.*``."""
    if not isinstance(wanted, str):
        raise StripeError(400, "Invalid string: type.", param="type")
    if wanted.endswith("*"):
        return event_type.startswith(wanted[:-1])
    return event_type == wanted
