"""Signed webhook deliveries: Stripe's ``Stripe-Signature`` scheme and the async dispatcher.

A delivery is signed at send time as Stripe does: ``t`` is the send time in epoch seconds,
``v1`` the hex HMAC-SHA256 of ``"{t}.{payload}"`` keyed with the endpoint's ``whsec_`` secret.
Deliveries to one endpoint go out one at a time in the order they are due (so a reversed or
shuffled release is observable at the receiver); endpoints are served concurrently.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from collections.abc import Callable
from typing import Any

import httpx

from services.sandbox.model import Sandbox

__all__ = ["USER_AGENT", "Dispatcher", "sign"]

USER_AGENT = "Stripe/1.0 (+https://stripe.com/docs/webhooks)"


def sign(payload: str, secret: str, timestamp: int) -> str:
    """The ``Stripe-Signature`` header value for ``payload`` at ``timestamp``."""
    mac = hmac.new(secret.encode("utf-8"), f"{timestamp}.{payload}".encode(), hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


class Dispatcher:
    """Sends due deliveries and reports each attempt back to the :class:`Sandbox`."""

    def __init__(
        self,
        sandbox: Sandbox,
        *,
        on_change: Callable[[], None],
        timeout_s: float = 10.0,
        transport: httpx.AsyncBaseTransport | None = None,
        on_attempt: Callable[[dict[str, Any], int | None, str | None], None] | None = None,
    ) -> None:
        """``on_attempt(delivery, status_code, error)`` is told of every attempt once recorded
        (the live ``-->`` lines of ``provely sandbox stripe``)."""
        self._sandbox = sandbox
        self._on_attempt = on_attempt
        self._on_change = on_change
        self._timeout_s = timeout_s
        self._transport = transport
        self._client: httpx.AsyncClient | None = None
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        self._client = httpx.AsyncClient(
            timeout=self._timeout_s, follow_redirects=False, transport=self._transport
        )

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    async def dispatch_due(self) -> int:
        """Attempt every delivery that is due now; returns how many were attempted."""
        async with self._lock:
            due = self._sandbox.due_deliveries()
            if not due:
                return 0
            by_endpoint: dict[str, list[dict[str, Any]]] = {}
            for delivery in due:
                by_endpoint.setdefault(delivery["endpoint_id"], []).append(delivery)
            try:
                await asyncio.gather(
                    *(self._send_in_order(group) for group in by_endpoint.values())
                )
            finally:
                self._on_change()
            return len(due)

    async def _send_in_order(self, deliveries: list[dict[str, Any]]) -> None:
        for delivery in deliveries:
            await self._send(delivery)

    async def _send(self, delivery: dict[str, Any]) -> None:
        secret = self._sandbox.signing_secret(delivery)
        if secret is None or self._client is None:
            self._sandbox.cancel_delivery(delivery)
            return
        payload: str = delivery["payload"]
        headers = {
            "Content-Type": "application/json; charset=utf-8",
            "User-Agent": USER_AGENT,
            "Stripe-Signature": sign(payload, secret, self._sandbox.clock.signing_stamp()),
        }
        started = time.perf_counter()
        status_code: int | None = None
        error: str | None = None
        try:
            response = await self._client.post(
                delivery["url"], content=payload.encode("utf-8"), headers=headers
            )
            status_code = response.status_code
        except httpx.HTTPError as exc:
            error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        duration_ms = int((time.perf_counter() - started) * 1000)
        self._sandbox.record_attempt(
            delivery, status_code=status_code, error=error, duration_ms=duration_ms
        )
        if self._on_attempt is not None:
            self._on_attempt(delivery, status_code, error)
