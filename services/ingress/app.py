"""The HTTP ingress: the agent API (``/v1/operations``, ``/v1/contracts``), webhook intake
(``/v1/events/…``, see ``webhooks``), the published pages (``/verify``, no API key, see
``pages``), health and the OpenAPI document (``/openapi.json``, with explicit operation ids and
an example per answer, see ``examples``; Swagger UI at ``/docs`` and ReDoc at ``/redoc`` served
from the package, see ``docs_ui``).

``create_app(settings)`` wires it: the engine from the settings' database, the Celery broker
the observe messages go to, a body-size limit enforced while the body is read (413 without
buffering more than the limit), and one set of exception handlers that answer every error as
RFC 9457 problem+json.

Run it with ``provely serve ingress`` or ``uvicorn --factory services.ingress.app:create_app``.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from sqlalchemy import text
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.ingress.access import observed
from services.ingress.api import (
    contracts,
    custom_contracts,
    deliveries,
    operations,
    receipts,
)
from services.ingress.api.examples import add_examples
from services.ingress.api.schemas import Health
from services.ingress.console import install_console
from services.ingress.docs_ui import install_offline_docs
from services.ingress.intake import webhooks
from services.ingress.pages import install_pages
from services.ingress.problems import (
    PROBLEM_JSON,
    Problem,
    install_problem_handlers,
    problem_response,
)
from services.ingress.request_checks import check_request
from services.ingress.settings import ROUTERS as SETTINGS_ROUTERS
from shared.runtime.settings import Settings, get_settings

__all__ = ["SERVERS", "BodyLimit", "create_app"]

WEBHOOK_PREFIX = "/v1/events/"
SERVERS = [
    {"url": "/", "description": "The server that serves this document."},
    {"url": "http://127.0.0.1:8080", "description": "`provely up` on its default port."},
]
"""The OpenAPI ``servers``: a generated client's base URL (relative first, so the document
read from any deployment names that deployment)."""


class BodyLimit:
    """Refuse request bodies over ``limit`` bytes with 413, counting while they are read.

    A declared ``Content-Length`` over the limit is refused before anything is read; a chunked
    body is cut off as soon as it passes the limit. Webhook paths keep their own limit (the
    intake answers them before this middleware; any other address under the prefix is a 404).
    """

    def __init__(self, app: ASGIApp, *, limit: int, skip_prefix: str = WEBHOOK_PREFIX) -> None:
        self.app = app
        self.limit = limit
        self.skip_prefix = skip_prefix

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refused = _refuse_unstorable(scope)
        if refused is not None:
            await refused(scope, receive, send)
            return
        if scope["path"].startswith(self.skip_prefix):
            await self.app(scope, receive, send)
            return
        for name, value in scope.get("headers", ()):
            if name == b"content-length":
                try:
                    declared = int(value)
                except ValueError:
                    declared = -1
                if declared < 0 or declared > self.limit:
                    response = problem_response(
                        413 if declared > self.limit else 400,
                        "body-too-large" if declared > self.limit else "bad-request",
                        f"the body is larger than {self.limit} bytes"
                        if declared > self.limit
                        else "invalid Content-Length",
                        instance=scope["path"],
                    )
                    await response(scope, receive, send)
                    return
        received = 0
        limit = self.limit

        async def limited() -> Message:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    raise StarletteHTTPException(413, f"the body is larger than {limit} bytes")
            return message

        await self.app(scope, limited, send)


def _refuse_unstorable(scope: Scope) -> JSONResponse | None:
    """A NUL character names no resource and fits in no column: refuse it up front."""
    if "\x00" in scope["path"]:
        return problem_response(404, "not-found", "no such resource", instance=None)
    query: bytes = scope.get("query_string", b"")
    if b"%00" in query or b"\x00" in query:
        return problem_response(
            422,
            "invalid-request",
            "query parameters cannot contain NUL characters",
            instance=scope["path"].replace("\x00", ""),
        )
    return None


_VALIDATION_SCHEMAS = ("HTTPValidationError", "ValidationError")


def _problem_422(schema: dict[str, Any]) -> None:
    """Every operation that takes input answers 422 as problem+json; say so in the schema."""
    content = {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            responses = operation["responses"]
            takes_input = bool(operation.get("parameters")) or "requestBody" in operation
            if "422" in responses or takes_input:
                responses["422"] = {
                    "description": "The request is well-formed but invalid.",
                    "content": content,
                }
    components = schema.get("components", {}).get("schemas", {})
    text = json.dumps(schema.get("paths", {}))
    for name in _VALIDATION_SCHEMAS:
        if f"#/components/schemas/{name}" not in text:
            components.pop(name, None)


def _openapi(app: FastAPI) -> dict[str, Any]:
    if app.openapi_schema:
        return app.openapi_schema
    schema = get_openapi(
        title=app.title,
        version=app.version,
        description=app.description,
        routes=app.routes,
    )
    components = schema.setdefault("components", {}).setdefault("schemas", {})
    problem = Problem.model_json_schema(ref_template="#/components/schemas/{model}")
    for name, definition in problem.pop("$defs", {}).items():
        components.setdefault(name, definition)
    components["Problem"] = problem
    _problem_422(schema)
    schema["paths"][webhooks.EVENTS_PATH] = webhooks.openapi_path_item()
    schema["servers"] = SERVERS
    add_examples(schema)
    app.openapi_schema = schema
    return schema


class IngressApp(FastAPI):
    """The ingress application: FastAPI, with the webhook intake in front of it.

    Providers call the intake far more often than anything else, so it answers before the
    framework's middleware stack and router see the request (it keeps its own body limit and
    problem answers, see :class:`services.ingress.intake.webhooks.WebhookIntake`); every other
    request goes on to FastAPI.

    Outside both, every request gets its request id, its access log line and its HTTP metrics
    (:func:`services.ingress.access.observed`), the intake's deliveries included.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._served = observed(webhooks.WebhookIntake(super().__call__))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        scope["app"] = self
        await self._served(scope, receive, send)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The ingress application for ``settings`` (default: the process settings)."""
    from shared.db.session import get_engine
    from shared.trust.secrets import check_secret_key

    settings = settings or get_settings()
    check_secret_key(settings)  # fail fast: production must configure the key
    engine = get_engine(settings.resolved_database_url())

    from shared.runtime import celery_app

    celery_app.configure(celery_app.app, settings)
    from shared.runtime.celery_hooks import install_celery_hooks

    install_celery_hooks()  # the messages a request sends carry its request id

    app = IngressApp(
        title="Provely",
        version="0.1.0",
        docs_url=None,  # served from the package, not a CDN (install_offline_docs)
        redoc_url=None,
        # Undeclared query parameters and a body in another media type are refused.
        dependencies=[Depends(check_request)],
        description=(
            "Proves that a side effect really happened at a provider. Create an operation bound "
            "to a completion contract, perform the action with the operation id as idempotency "
            "key, report the result, then read the verdict."
        ),
    )
    app.state.settings = settings
    app.state.engine = engine
    install_problem_handlers(app)
    app.add_middleware(BodyLimit, limit=settings.api_max_body_bytes)
    # Metrics are served on a port of their own (``PROVELY_METRICS_PORT``), never here.
    app.include_router(operations.router)
    app.include_router(contracts.router)
    app.include_router(custom_contracts.router)
    app.include_router(receipts.router)
    app.include_router(deliveries.router)
    for router in SETTINGS_ROUTERS:  # keys and connections (services.ingress.settings)
        app.include_router(router)
    install_offline_docs(app)
    install_pages(app)  # /verify: the published pages, no API key
    install_console(app)  # /console: the operators' screens, a session of their own

    # The intake answers this address before the router sees it; the route only names its
    # template for the HTTP metrics (it never runs, and the OpenAPI entry is the intake's own).
    app.add_api_route(
        webhooks.EVENTS_PATH, _served_by_the_intake, methods=["POST"], include_in_schema=False
    )

    @app.get("/", include_in_schema=False)
    def index() -> dict[str, str]:
        """Where to go from the root: the API's documentation and its published pages."""
        return {
            "name": "Provely",
            "docs": "/docs",
            "redoc": "/redoc",
            "openapi": "/openapi.json",
            "contracts": "/v1/contracts",
            "pages": "/verify",
            "receipt_check": "/verify/receipt",
            "health": "/healthz",
        }

    @app.get(
        "/healthz",
        response_model=Health,
        tags=["health"],
        summary="The process is up",
        operation_id="get_health",
        description="Answers 200 as long as the process serves requests (a liveness probe).",
    )
    def healthz() -> Health:
        return Health(status="ok")

    @app.get(
        "/readyz",
        response_model=Health,
        tags=["health"],
        summary="The database and the broker are reachable",
        operation_id="get_readiness",
        description=(
            "200 when the database and the broker both answer, else 503 naming the one that "
            "does not (a readiness probe)."
        ),
        responses={503: {"model": Health, "description": "A dependency is unreachable."}},
    )
    def readyz(request: Request) -> Any:
        checks = {"database": _check_database(request), "broker": _check_broker()}
        ready = all(v == "ok" for v in checks.values())
        body = Health(status="ok" if ready else "unavailable", checks=checks)
        return JSONResponse(body.model_dump(), status_code=200 if ready else 503)

    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _served_by_the_intake() -> None:  # pragma: no cover - the intake answers first
    raise RuntimeError("webhook deliveries are answered by services.ingress.intake.webhooks")


def _check_database(request: Request) -> str:
    try:
        with request.app.state.engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}"
    return "ok"


def _check_broker() -> str:
    try:
        from shared.runtime.celery_app import app as celery

        with celery.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, timeout=2)
    except Exception as exc:
        return f"unreachable: {type(exc).__name__}"
    return "ok"
