"""The Stripe sandbox as an ASGI app: Stripe's v1 API surface plus the ``/_sandbox`` control API.

``create_app(...)`` returns a Starlette app. Under ``/v1`` it speaks Stripe's wire format
(form-encoded parameters, secret-key auth, idempotency keys, list and error envelopes); under
``/_sandbox`` a JSON control API drives time, outcomes and faults (no auth: bind it to loopback).
A background task settles refunds and sends webhook deliveries on the sandbox clock.

The parts: :mod:`~services.sandbox.v1` (the ``/v1`` routes), :mod:`~services.sandbox.wire`
(Stripe's wire format around them), :mod:`~services.sandbox.control` (the ``/_sandbox``
routes) and :mod:`~services.sandbox.runtime` (dispatcher, state file, ticker).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware

from services.sandbox.control import control_routes
from services.sandbox.live import LiveRequests
from services.sandbox.model import Sandbox
from services.sandbox.runtime import SandboxRuntime
from services.sandbox.settings import Faults, SandboxSettings
from services.sandbox.store import load_state
from services.sandbox.v1 import v1_routes
from services.sandbox.wire import make_api

__all__ = ["create_app"]


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

    api = make_api(sandbox, runtime, settings)
    v1 = v1_routes(sandbox, api)
    controls = control_routes(sandbox, runtime, settings)

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
