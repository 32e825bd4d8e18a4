"""Webhook intake: ``POST /v1/events/{provider}/{workspace}`` (no API key).

Served by :class:`WebhookIntake`, a pure ASGI handler in front of the ingress app
(``services.ingress.app.IngressApp``): the busiest address of the service skips the framework's
middlewares and routing (its OpenAPI entry is :func:`openapi_path_item`). The path reads like
the house rule: read the raw body (bounded while reading) → load the workspace's connection →
verify the signature on the exact bytes → parse by the skill's event shape → store once with its
keys, marked not yet correlated (``shared.intake.store.store_many``) → commit → 200; a thread of the
process then sends one ``provely.correlate`` message for all the batches committed meanwhile
(at once after a quiet spell, at most one per ``MIN_SEND_INTERVAL_S`` under a stream).
Deliveries that arrive while earlier ones are being written share one transaction (group
commit, ``services.ingress.intake.webhook_batches``); each is answered only after that
transaction commits. The deliveries of a batch are checked by
``services.ingress.intake.webhook_checks``, and the correlate messages sent by
``services.ingress.intake.correlate_messages``.

Correlating the stored events with operations and waking those is an observer's work
(``shared.intake.correlator``, run by its ``provely.correlate`` task), after the answer: the
provider waits only for the durable insert. The marker is in PostgreSQL, so a lost message loses
nothing (the sweeper correlates what is still pending after its grace).

Answers (RFC 9457 problem+json for every refusal):

- 200 the event is stored (or was already: ``"duplicate": true``) and committed;
- 400 the signature does not hold, or the verified body is not JSON or not an event (nothing
  is stored). A signed JSON event is stored even when it holds what no table can hold (a NUL
  character, a lone surrogate, ``1e999``, nesting past ``MAX_JSON_DEPTH``): its raw bytes
  verbatim, and a copy with those places escaped and named (``events.escaped``);
- 404 no such workspace, or no connection to that provider — the same answer for both;
- 405 any other method;
- 413 the body is larger than ``settings.webhook_max_body_bytes`` (reading stops at the cap);
- 503 the database cannot be reached, or the connection's secrets cannot be opened (a wrong
  ``PROVELY_SECRET_KEY``): the provider retries later;
- 500 (problem+json, logged with its traceback) for anything unexpected.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import UTC, datetime
from typing import Any

import psycopg
from fastapi.responses import JSONResponse, Response
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.datastructures import Headers
from starlette.requests import ClientDisconnect
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.ingress.intake.webhook_batches import close_intake_connections, process_batcher
from services.ingress.intake.webhook_checks import Item, NotFound, Outcome
from services.ingress.problems import PROBLEM_JSON, problem_response
from shared.intake.contracts import uncounted_by_contracts
from shared.intake.parse import MalformedEvent
from shared.runtime.settings import Settings, get_settings
from shared.trust.registry import RegistryError
from shared.trust.secrets import SecretError
from shared.trust.signatures import SignatureError

__all__ = [
    "EVENTS_PATH",
    "SIGNATURE_HEADERS",
    "BodyTooLarge",
    "WebhookIntake",
    "openapi_path_item",
]

log = logging.getLogger(__name__)


_PROVIDER = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_WORKSPACE = re.compile(r"^[A-Za-z0-9_\-]{1,40}$")


class BodyTooLarge(Exception):
    """The request body passed the configured limit."""


def _problem(status: int, kind: str, detail: str, **extra: Any) -> JSONResponse:
    headers = {"Retry-After": "5"} if status == 503 else None
    if status == 413:
        # Close the connection: the server then stops reading the rest of the body instead of
        # draining it (an endless chunked body ends here).
        headers = {"Connection": "close"}
    return problem_response(status, kind, detail, headers=headers, **extra)


def _not_found() -> JSONResponse:
    # One answer for an unknown workspace and an unknown provider: it must not say which.
    return _problem(404, "not-found", "no webhook endpoint at this address")


_METRICS: dict[tuple[str, ...], Any] = {}


def _metric(name: str, *labels: str) -> None:
    """Count on the named Prometheus counter (its labelled child is looked up once)."""
    key = (name, *labels)
    child = _METRICS.get(key)
    if child is None:
        from shared.runtime import metrics

        child = _METRICS[key] = getattr(metrics, name).labels(*labels)
    child.inc()


_KNOWN_PROVIDERS: dict[str, bool] = {}


def _provider_label(provider: str) -> str:
    """``provider`` when a loaded skill (or the generic ``http``) has that id, else ``unknown``:
    the address is the sender's to choose, and a label per made-up name would grow the metric
    without bound."""
    known = _KNOWN_PROVIDERS.get(provider)
    if known is None:
        from shared.trust.registry import RegistryError, get_registry

        try:
            known = provider == "http" or get_registry().skill(provider) is not None
        except RegistryError:
            known = False
        if len(_KNOWN_PROVIDERS) < 1024:
            _KNOWN_PROVIDERS[provider] = known
    return provider if known else "unknown"


def _refused(provider: str, reason: str) -> None:
    """Count one refused delivery (stored nowhere), whatever refused it."""
    _metric("EVENTS_REFUSED", _provider_label(provider), reason)


_SAID: set[tuple[str, str, str, str]] = set()


def _count_uncounted(provider: str, workspace: str, outcome: Outcome) -> None:
    """A new event that no registered contract can count (its type, its API version) is
    counted in ``provely_events_ignored_total``, and said once per workspace and reason in the
    log: it is stored, and the operations it is linked to name it, but nothing reads it."""
    try:
        found = uncounted_by_contracts(provider, outcome.event_type, outcome.api_version)
    except RegistryError:
        return
    if found is None:
        return
    reason, detail = found
    _metric("EVENTS_IGNORED", _provider_label(provider), reason)
    said = (provider, workspace, reason, detail)
    if reason == "api_version" and said not in _SAID and len(_SAID) < 4096:
        _SAID.add(said)
        log.warning(
            "webhook intake: events to %s/%s will not count: %s (create the endpoint on a "
            "contract's API version)",
            provider,
            workspace,
            detail,
        )


EVENTS_PATH = "/v1/events/{provider}/{workspace}"
_PATH = re.compile(r"^/v1/events/([^/]+)/([^/]+)$")


class WebhookIntake:
    """Pure ASGI wrapper that serves ``POST /v1/events/{provider}/{workspace}`` itself.

    Providers call this path far more often than anything else, so it is answered here, ahead
    of the framework's routing, dependency solving and middlewares (each of which costs more per
    request than the intake's own parsing). Every other path goes on to the wrapped app. The
    settings and the engine are the application's (``scope["app"].state``), as for a route.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self.app(scope, receive, _closing_connections(send))
            return
        match = _PATH.match(scope["path"]) if scope["type"] == "http" else None
        if match is None:
            await self.app(scope, receive, send)
            return
        provider, workspace = match.group(1), match.group(2)
        if scope["method"] != "POST":
            _refused(provider, "method_not_allowed")
            response: Response = problem_response(
                405, "method-not-allowed", "this address only takes POST",
                headers={"Allow": "POST"},
            )  # fmt: skip
        else:
            try:
                response = await _receive_event(scope, receive, provider, workspace)
            except Exception:
                log.exception("webhook intake: unexpected error")
                _refused(provider, "internal_error")
                response = _problem(500, "internal", "an internal error occurred")
        await response(scope, receive, send)


def _closing_connections(send: Send) -> Send:
    """The lifespan's ``send``, closing the intake's connections before shutdown completes."""

    async def wrapped(message: Message) -> None:
        if message["type"] == "lifespan.shutdown.complete":
            await close_intake_connections()
        await send(message)

    return wrapped


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    """The raw body, read from the ASGI messages; raises BodyTooLarge as soon as it passes
    ``limit`` (the rest is never read, so an endless chunked body costs one chunk) and
    ClientDisconnect when the client goes away first."""
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                if int(value) > limit:
                    raise BodyTooLarge
            except ValueError:
                pass
            break
    buffer = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            raise ClientDisconnect
        chunk = message.get("body", b"")
        if len(buffer) + len(chunk) > limit:
            raise BodyTooLarge
        buffer += chunk
        if not message.get("more_body", False):
            return bytes(buffer)


def _state(scope: Scope) -> tuple[Settings, Engine]:
    state = getattr(scope.get("app"), "state", None)
    settings = getattr(state, "settings", None)
    if not isinstance(settings, Settings):
        settings = get_settings()
    engine = getattr(state, "engine", None)
    if not isinstance(engine, Engine):
        from shared.db.session import get_engine

        engine = get_engine(settings.resolved_database_url())
    return settings, engine


class _Received(Response):
    """200 ``{"received": true, "event_id": …, "duplicate": …}``, rendered without a dict."""

    media_type = "application/json"

    def __init__(self, event_id: str, duplicate: bool) -> None:
        super().__init__(
            b'{"received":true,"event_id":'
            + json.dumps(event_id).encode()
            + (b',"duplicate":true}' if duplicate else b',"duplicate":false}')
        )


async def _receive_event(scope: Scope, receive: Receive, provider: str, workspace: str) -> Response:
    """One delivery; every answer but a 200 counts in ``provely_events_refused_total``."""
    response = await _answer_event(scope, receive, provider, workspace)
    if response.status_code != 200:
        reason = _REFUSAL_BY_STATUS.get(response.status_code)
        if reason is not None:
            _refused(provider, reason)
    return response


_REFUSAL_BY_STATUS = {404: "unknown_endpoint", 413: "body_too_large", 503: "unavailable"}
"""The reason of a refusal that is not the signature's or the body's (those name their own)."""


async def _answer_event(scope: Scope, receive: Receive, provider: str, workspace: str) -> Response:
    if not (_PROVIDER.match(provider) and _WORKSPACE.match(workspace)):
        return _not_found()
    settings, engine = _state(scope)
    try:
        body = await _read_body(scope, receive, settings.webhook_max_body_bytes)
    except BodyTooLarge:
        return _problem(
            413,
            "body-too-large",
            f"the body passes the limit of {settings.webhook_max_body_bytes} bytes",
        )
    except ClientDisconnect:
        _refused(provider, "client_disconnected")
        return _problem(400, "bad-request", "the client went away before the body was read")
    try:
        item = Item(provider, workspace, body, Headers(scope=scope), datetime.now(UTC))
        outcome = await process_batcher().submit(engine, settings, item)
    except NotFound:
        return _not_found()
    except SignatureError as refused:
        _refused(provider, refused.reason)
        return _problem(400, "signature-refused", str(refused), reason=refused.reason)
    except MalformedEvent as malformed:
        _refused(provider, malformed.reason)
        return _problem(400, "malformed-event", str(malformed), reason=malformed.reason)
    except (
        OperationalError,
        DisconnectionError,
        PoolTimeoutError,
        psycopg.OperationalError,
    ) as exc:
        log.warning("webhook intake: database unavailable: %s", exc.__class__.__name__)
        return _problem(503, "unavailable", "the event store cannot be reached")
    except DBAPIError as exc:
        if exc.connection_invalidated:
            return _problem(503, "unavailable", "the event store cannot be reached")
        raise
    except SecretError as exc:
        # The connection's secrets cannot be opened (wrong or missing PROVELY_SECRET_KEY): an
        # operator's problem; the provider retries later.
        log.error("webhook intake: cannot open the connection's secrets: %s", exc)
        return _problem(503, "unavailable", "the endpoint cannot check signatures now")
    _metric("EVENTS_RECEIVED", provider)
    if outcome.result.duplicate:
        _metric("EVENTS_DEDUPLICATED", provider)
    else:
        _count_uncounted(provider, workspace, outcome)
    return _Received(outcome.event_id, outcome.result.duplicate)


def _problem_content() -> dict[str, Any]:
    return {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}}


def _signature_header(name: str, description: str, example: str) -> dict[str, Any]:
    return {
        "name": name,
        "in": "header",
        "required": False,
        # Visible ASCII words (HTTP header values a server accepts), one space between them.
        "schema": {"type": "string", "minLength": 1, "pattern": r"^[!-~]+( [!-~]+)*$"},
        "description": description,
        "example": example,
    }


SIGNATURE_HEADERS = (
    _signature_header(
        "Stripe-Signature",
        "Scheme `stripe`: `t=<unix seconds>,v1=<hex HMAC-SHA256 of '<t>.<body>'>` (several "
        "`v1` during a secret rotation). Required when the connection's scheme is `stripe`.",
        "t=1764669600,v1=5257a869e7ecebeda32affa62cdca3fa51cad7e77a0e56ff536d0ce8e108d8bd",
    ),
    _signature_header(
        "webhook-id",
        "Scheme `standard_webhooks`: the message id (signed). Required with that scheme.",
        "msg_2KWPBgLlAfxdpx2AI54pPJ85f4W",
    ),
    _signature_header(
        "webhook-timestamp",
        "Scheme `standard_webhooks`: unix seconds (signed, checked against the tolerance).",
        "1764669600",
    ),
    _signature_header(
        "webhook-signature",
        "Scheme `standard_webhooks`: `v1,<base64 HMAC-SHA256 of '<id>.<timestamp>.<body>'>`, "
        "space-separated when several.",
        "v1,K5oZfzN95Z9UVu1EsfQmfVNQhnkZ2pj9o9NDN/H/pI4=",
    ),
    _signature_header(
        "X-Hub-Signature-256",
        "Scheme `github`: `sha256=<hex HMAC-SHA256 of the body>`. Required with that scheme.",
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
    ),
)
"""The signature headers of each scheme (``shared.trust.signatures``), as OpenAPI header
parameters: which one a delivery needs depends on its connection, so none is required."""


def openapi_path_item() -> dict[str, Any]:
    """The OpenAPI description of the intake (served by :class:`WebhookIntake`, which the
    framework's schema generator does not see)."""
    param = {"in": "path", "required": True, "schema": {"type": "string"}}
    return {
        "post": {
            "tags": ["events"],
            "summary": "Receive a signed provider event",
            "description": (
                "No API key: the signature of the connection's scheme is checked on the exact "
                "bytes of the body before anything else. Answered only once the event is "
                "durably stored (or known already)."
            ),
            "operationId": "receive_event",
            "parameters": [
                {"name": "provider", **param, "description": "the connection's provider"},
                {"name": "workspace", **param, "description": "the workspace id"},
                *SIGNATURE_HEADERS,
            ],
            "requestBody": {
                "required": True,
                "content": {"application/json": {"schema": {"type": "object"}}},
            },
            "responses": {
                "200": {
                    "description": "stored (or already stored: `duplicate` is true)",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "required": ["received", "event_id", "duplicate"],
                                "properties": {
                                    "received": {"type": "boolean"},
                                    "event_id": {"type": "string"},
                                    "duplicate": {"type": "boolean"},
                                },
                            }
                        }
                    },
                },
                "400": {
                    "description": "signature refused, or not an event",
                    "content": _problem_content(),
                },
                "404": {"description": "unknown endpoint", "content": _problem_content()},
                "405": {"description": "only POST", "content": _problem_content()},
                "413": {"description": "body too large", "content": _problem_content()},
                "503": {
                    "description": "storage unavailable, retry later",
                    "content": _problem_content(),
                },
            },
        }
    }
