"""Request plumbing shared by the routers: settings, engine, clock, the caller's API key.

A route either takes :data:`Caller` (the key checked in a transaction of its own before the
route runs) or, on the agent API's hot path, :data:`BearerKey` and opens its transaction with
:func:`authorized`: the key is checked by the first statement of the request's own transaction,
and a stale ``last_used_at`` is written after it (at most once per key and minute).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy import Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from sqlalchemy.orm import Session

from services.ingress.problems import ApiError
from shared.db.session import session_scope
from shared.db.tenants import Authenticated, authenticate, record_use
from shared.runtime.logs import get_logger
from shared.runtime.settings import Settings

__all__ = [
    "AdminCaller",
    "BearerKey",
    "Caller",
    "app_engine",
    "app_settings",
    "authorized",
    "bearer_key",
    "caller",
    "now",
    "transaction",
]

log = get_logger("provely.ingress")

_bearer = HTTPBearer(
    auto_error=False,
    bearerFormat="pv_…",
    description="A workspace API key: `Authorization: Bearer pv_…`.",
)


def app_settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def app_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


def now() -> datetime:
    return datetime.now(UTC)


@contextmanager
def transaction(engine: Engine) -> Iterator[Session]:
    """The request's transaction; a database that cannot be reached answers 503."""
    try:
        with session_scope(engine) as session:
            yield session
    except (PoolTimeoutError, DisconnectionError) as exc:
        raise ApiError(503, "unavailable", "the database is unavailable; retry later") from exc
    except DBAPIError as exc:
        if exc.connection_invalidated or _is_unavailable(exc):
            raise ApiError(503, "unavailable", "the database is unavailable; retry later") from exc
        raise


def _is_unavailable(exc: DBAPIError) -> bool:
    """A database that cannot answer now (down, restarting, or SQLite busy past its timeout)."""
    name = type(exc.orig).__name__ if exc.orig is not None else ""
    message = str(exc.orig).lower()
    return name in {"OperationalError", "AdminShutdown", "CannotConnectNow"} and any(
        word in message for word in ("connect", "shutdown", "database is locked")
    )


_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="provely"'}


async def bearer_key(
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> str:
    """The plain key of ``Authorization: Bearer …``; 401 when the header is missing. A
    coroutine because it does no I/O: FastAPI runs a plain function in its threadpool, a hop
    per request that cost more CPU than the check."""
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(
            401, "unauthenticated", "send `Authorization: Bearer <api key>`", headers=_CHALLENGE
        )
    return credentials.credentials


def _unknown_key() -> ApiError:
    return ApiError(401, "unauthenticated", "the API key is unknown or revoked", headers=_CHALLENGE)


def caller(request: Request, key: Annotated[str, Depends(bearer_key)]) -> Authenticated:
    """The workspace of the request's API key; 401 when it is missing, unknown or revoked."""
    with transaction(app_engine(request)) as session:
        found = authenticate(session, key, now=now())
    if found is None:
        raise _unknown_key()
    return found


@contextmanager
def authorized(request: Request, key: str) -> Iterator[tuple[Session, Authenticated]]:
    """The request's transaction, its first statement checking ``key`` (401 when it is unknown
    or revoked: nothing else runs). The key's use is written afterwards, in a transaction of
    its own and only when ``last_used_at`` is stale, so the request never holds the key's row;
    a request that fails after the check still counts as a use."""
    engine = app_engine(request)
    who: Authenticated | None = None
    try:
        with transaction(engine) as session:
            who = authenticate(session, key)
            if who is None:
                raise _unknown_key()
            yield session, who
    finally:
        if who is not None:
            _record_use_after(engine, who)


def _record_use_after(engine: Engine, who: Authenticated) -> None:
    """Write a stale use of ``who``'s key after the request's transaction. A database that
    cannot take it now does not turn the answer into a 503 (the request's own work may have
    committed): the use stays stale and the key's next request writes it."""
    at = now()
    if not who.use_is_stale(at):
        return
    try:
        with transaction(engine) as session:
            record_use(session, who.key_id, now=at)
    except ApiError:
        log.warning("api_key.last_use_not_written", key_id=who.key_id)


def admin_caller(who: Annotated[Authenticated, Depends(caller)]) -> Authenticated:
    if not who.admin:
        raise ApiError(403, "forbidden", "this needs an API key with the admin scope")
    return who


BearerKey = Annotated[str, Depends(bearer_key)]
Caller = Annotated[Authenticated, Depends(caller)]
AdminCaller = Annotated[Authenticated, Depends(admin_caller)]
