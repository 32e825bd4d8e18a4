"""Request plumbing shared by the routers: settings, engine, clock, the caller's API key."""

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
from shared.db.tenants import Authenticated, authenticate
from shared.runtime.settings import Settings

__all__ = [
    "AdminCaller",
    "Caller",
    "app_engine",
    "app_settings",
    "caller",
    "now",
    "transaction",
]

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


def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Authenticated:
    """The workspace of the request's API key; 401 when it is missing, unknown or revoked."""
    challenge = {"WWW-Authenticate": 'Bearer realm="provely"'}
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise ApiError(
            401, "unauthenticated", "send `Authorization: Bearer <api key>`", headers=challenge
        )
    with transaction(app_engine(request)) as session:
        found = authenticate(session, credentials.credentials, now=now())
    if found is None:
        raise ApiError(
            401, "unauthenticated", "the API key is unknown or revoked", headers=challenge
        )
    return found


def admin_caller(who: Annotated[Authenticated, Depends(caller)]) -> Authenticated:
    if not who.admin:
        raise ApiError(403, "forbidden", "this needs an API key with the admin scope")
    return who


Caller = Annotated[Authenticated, Depends(caller)]
AdminCaller = Annotated[Authenticated, Depends(admin_caller)]
