"""The relay: sandbox deliveries forwarded to the intake unchanged, each intake 200 timed (the
sandbox's own attempt log has whole seconds only)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

__all__ = ["Delivered", "Relay"]


@dataclass
class Delivered:
    event_id: str
    type: str
    object_id: str
    charge: str
    status: str | None
    acks: list[float] = field(default_factory=list)  # monotonic times of the intake's 200s
    refused: list[int] = field(default_factory=list)


class Relay:
    """Forwards ``POST /{workspace}`` to the intake's ``/v1/events/stripe/{workspace}``."""

    def __init__(self, ingress_url: str) -> None:
        self.ingress_url = ingress_url
        self.by_charge: dict[str, dict[str, Delivered]] = {}
        self.forwarded = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._client: httpx.AsyncClient | None = None

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            self._client = httpx.AsyncClient(
                base_url=self.ingress_url,
                timeout=30.0,
                limits=httpx.Limits(
                    max_keepalive_connections=8, max_connections=32, keepalive_expiry=1.0
                ),
            )
            try:
                yield
            finally:
                await self._client.aclose()

        return Starlette(
            routes=[Route("/{workspace}", self._relay, methods=["POST"])], lifespan=lifespan
        )

    async def _relay(self, request: Request) -> Response:
        assert self._client is not None
        body = await request.body()
        headers = {
            "Content-Type": request.headers.get("content-type", "application/json"),
            "Stripe-Signature": request.headers.get("stripe-signature", ""),
        }
        workspace = request.path_params["workspace"]
        try:
            answer = await self._client.post(
                f"/v1/events/stripe/{workspace}", content=body, headers=headers
            )
        except httpx.HTTPError:
            with self._lock:
                self.failed += 1
            return Response(status_code=502)
        acked = time.monotonic()
        self._note(body, answer.status_code, acked)
        return Response(
            content=answer.content,
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type"),
        )

    def _note(self, body: bytes, status_code: int, acked: float) -> None:
        try:
            event = json.loads(body)
            obj = event["data"]["object"]
            event_id, type_ = str(event["id"]), str(event["type"])
        except (ValueError, KeyError, TypeError):
            return
        charge = str(obj.get("charge") or (obj.get("id") if obj.get("object") == "charge" else ""))
        with self._lock:
            self.forwarded += 1
            events = self.by_charge.setdefault(charge, {})
            entry = events.get(event_id)
            if entry is None:
                entry = events[event_id] = Delivered(
                    event_id, type_, str(obj.get("id")), charge, obj.get("status")
                )
            if 200 <= status_code < 300:
                entry.acks.append(acked)
            else:
                entry.refused.append(status_code)

    def for_charge(self, charge: str) -> list[Delivered]:
        with self._lock:
            return [
                Delivered(d.event_id, d.type, d.object_id, d.charge, d.status, list(d.acks))
                for d in self.by_charge.get(charge, {}).values()
            ]
