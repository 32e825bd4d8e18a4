"""Webhook intake route: ``POST /v1/events/{provider}/{workspace}`` (no API key).

The route reads like the house rule: read the raw body (bounded while reading) → load the
workspace's connection → verify the signature on the exact bytes → parse by the skill's event
shape → store once, correlate, wake (``shared.intake``) → commit → dispatch the wakes → 200.

Answers (RFC 9457 problem+json for every refusal):

- 200 the event is stored (or was already: ``"duplicate": true``) and committed;
- 400 the signature does not hold, or the verified body is not an event (nothing is stored);
- 404 no such workspace, or no connection to that provider — the same answer for both;
- 413 the body is larger than ``settings.webhook_max_body_bytes`` (reading stops at the cap);
- 503 the database cannot be reached, or the connection's secrets cannot be opened (a wrong
  ``PROVELY_SECRET_KEY``): the provider retries later.
"""

from __future__ import annotations

import asyncio
import logging
import re
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

import anyio
import anyio.to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from sqlalchemy import Engine, select
from sqlalchemy.exc import DBAPIError, DisconnectionError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.requests import ClientDisconnect

from services.ingress.problems import problem_response
from shared.db.models import Connection
from shared.intake import (
    IntakeResult,
    MalformedEvent,
    event_shape_for,
    fingerprint_key_names,
    ingest_event,
    parse_event,
)
from shared.secrets import SecretError
from shared.settings import Settings, get_settings
from shared.signatures import SignatureError, UnknownSchemeError, scheme_for

__all__ = ["BodyTooLarge", "read_limited_body", "router"]

log = logging.getLogger(__name__)

router = APIRouter(tags=["events"])

_PROVIDER = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
_WORKSPACE = re.compile(r"^[A-Za-z0-9_\-]{1,40}$")


INTAKE_THREADS = 16
"""Deliveries processed at once per process (each holds a database connection); more only
contend for the interpreter lock, the rest wait their turn."""
_limiters: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, anyio.CapacityLimiter] = (
    weakref.WeakKeyDictionary()
)


def _limiter() -> anyio.CapacityLimiter:
    # One limiter per event loop (a limiter belongs to the loop that made it).
    loop = asyncio.get_running_loop()
    found = _limiters.get(loop)
    if found is None:
        found = _limiters[loop] = anyio.CapacityLimiter(INTAKE_THREADS)
    return found


class BodyTooLarge(Exception):
    """The request body passed the configured limit."""


class _NotFound(Exception):
    pass


class _Unavailable(Exception):
    pass


@dataclass(frozen=True, slots=True)
class _Outcome:
    event_id: str
    result: IntakeResult


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


async def read_limited_body(request: Request, limit: int) -> bytes:
    """The raw body, read from the ASGI stream; raises BodyTooLarge as soon as it passes
    ``limit`` (the rest is never read, so an endless chunked body costs one chunk)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise BodyTooLarge
        except ValueError:
            pass
    buffer = bytearray()
    async for chunk in request.stream():
        if len(buffer) + len(chunk) > limit:
            raise BodyTooLarge
        buffer += chunk
    return bytes(buffer)


def _settings(request: Request) -> Settings:
    found = getattr(request.app.state, "settings", None)
    return found if isinstance(found, Settings) else get_settings()


def _engine(request: Request, settings: Settings) -> Engine:
    found = getattr(request.app.state, "engine", None)
    if isinstance(found, Engine):
        return found
    from shared.db.session import get_engine

    return get_engine(settings.resolved_database_url())


_SECRETS_CACHE: dict[tuple[bytes, str | None], tuple[str, ...]] = {}
_SECRETS_CACHE_SIZE = 1024


def _connection_secrets(stored: bytes, settings: Settings) -> tuple[str, ...]:
    """The connection's active webhook secrets (a Fernet-encrypted JSON list at rest).

    Decrypted values are kept in memory by ciphertext, so a rotation (new ciphertext) takes
    effect on the next delivery.
    """
    ciphertext = bytes(stored)
    key = (ciphertext, settings.secret_key)
    found = _SECRETS_CACHE.get(key)
    if found is not None:
        return found
    from shared.secrets import decrypt_webhook_secrets

    secrets = tuple(v for v in decrypt_webhook_secrets(ciphertext, settings=settings) if v)
    if len(_SECRETS_CACHE) >= _SECRETS_CACHE_SIZE:
        _SECRETS_CACHE.clear()
    _SECRETS_CACHE[key] = secrets
    return secrets


def _ingest(
    engine: Engine,
    settings: Settings,
    *,
    provider: str,
    workspace: str,
    body: bytes,
    headers: Mapping[str, str],
    now: datetime,
) -> _Outcome:
    """Runs in a worker thread: one transaction, committed before the wakes are sent."""
    from shared.db.session import session_scope
    from shared.scheduling import dispatch_observe

    with session_scope(engine) as session:
        connection = session.execute(
            select(
                Connection.id,
                Connection.signature_scheme,
                Connection.signature_tolerance_seconds,
                Connection.webhook_secrets_enc,
            ).where(Connection.workspace_id == workspace, Connection.provider == provider)
        ).one_or_none()
        if connection is None:
            raise _NotFound
        try:
            scheme = scheme_for(connection.signature_scheme)
        except UnknownSchemeError:
            log.error("connection %s names an unknown signature scheme", connection.id)
            raise _NotFound from None
        delivery = scheme.verify(
            body=body,
            headers=headers,
            secrets=_connection_secrets(connection.webhook_secrets_enc, settings),
            tolerance_s=connection.signature_tolerance_seconds,
            now=now,
        )
        event = parse_event(
            body,
            shape=event_shape_for(provider, scheme.name),
            delivery=delivery,
            received_at=now,
            extra_keys=fingerprint_key_names(provider),
        )
        result = ingest_event(
            session, workspace_id=workspace, provider=provider, event=event, raw=body, now=now
        )
    for operation_id, fence in result.wakes:
        dispatch_observe(operation_id, fence, countdown_s=0)
    return _Outcome(event.event_id, result)


def _metric(name: str, *labels: str) -> None:
    try:
        from shared import observability
    except ImportError:  # pragma: no cover - metrics are optional
        return
    getattr(observability, name).labels(*labels).inc()


@router.post(
    "/v1/events/{provider}/{workspace}",
    summary="Receive a signed provider event",
    responses={
        400: {"description": "signature refused, or not an event"},
        404: {"description": "unknown endpoint"},
        413: {"description": "body too large"},
        503: {"description": "storage unavailable, retry later"},
    },
)
async def receive_event(provider: str, workspace: str, request: Request) -> Response:
    if not (_PROVIDER.match(provider) and _WORKSPACE.match(workspace)):
        return _not_found()
    settings = _settings(request)
    try:
        body = await read_limited_body(request, settings.webhook_max_body_bytes)
    except BodyTooLarge:
        _metric("EVENTS_REFUSED", provider, "body_too_large")
        return _problem(
            413,
            "body-too-large",
            f"the body passes the limit of {settings.webhook_max_body_bytes} bytes",
        )
    except ClientDisconnect:
        return _problem(400, "bad-request", "the client went away before the body was read")
    now = datetime.now(UTC)
    try:
        outcome = await anyio.to_thread.run_sync(
            partial(
                _ingest,
                _engine(request, settings),
                settings,
                provider=provider,
                workspace=workspace,
                body=body,
                headers=request.headers,
                now=now,
            ),
            limiter=_limiter(),
        )
    except _NotFound:
        return _not_found()
    except SignatureError as refused:
        _metric("EVENTS_REFUSED", provider, refused.reason)
        return _problem(400, "signature-refused", str(refused), reason=refused.reason)
    except MalformedEvent as malformed:
        _metric("EVENTS_REFUSED", provider, malformed.reason)
        return _problem(400, "malformed-event", str(malformed), reason=malformed.reason)
    except (OperationalError, DisconnectionError, PoolTimeoutError) as exc:
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
    return JSONResponse(
        {
            "received": True,
            "event_id": outcome.event_id,
            "duplicate": outcome.result.duplicate,
        }
    )
