"""Worlds for the truth-over-time tests and the stress bench: one refund operation each, with
its provider events, faults and a watcher that polls the API all along.

A :class:`World` is one agent refund on a running system (``tests.e2e.launcher``): a charge at
the sandbox, an operation, the refund made with the operation id as idempotency key, the result
reported. Contradicting evidence is made two ways:

- :meth:`World.post_event` delivers a signed event straight to the webhook intake, signed with
  the workspace endpoint's secret exactly as the sandbox signs (``t=…,v1=…``), and returns when
  the intake answered (the acknowledgement time is what a false VERIFIED is measured against);
- the sandbox itself (a second refund on the same charge, a status change, an outage).

:class:`Watcher` polls ``GET /v1/operations/{id}`` every few milliseconds and keeps every answer
with the time its request was sent, so a test can ask whether any poll begun after some moment
showed VERIFIED, and when the verdict changed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.cli.demo.scenarios.workspace import Workspace

__all__ = ["Poll", "Watcher", "World", "contradicting_refund_created", "signature_header"]

FRESH = httpx.Limits(max_keepalive_connections=4, max_connections=8, keepalive_expiry=1.0)
"""Idle connections are dropped after 1 s, well before the servers' keep-alive timeout (5 s):
reusing one the server is closing at that moment fails the request ("Server disconnected")."""


def signature_header(secret: str, body: bytes, *, t: int | None = None) -> str:
    """``Stripe-Signature`` of ``body`` under ``secret`` (the sandbox's own scheme)."""
    t = int(time.time()) if t is None else t
    mac = hmac.new(secret.encode(), f"{t}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={t},v1={mac}"


def contradicting_refund_created(charge: str, amount: int, *, created: int) -> dict[str, Any]:
    """A second refund's ``refund.created`` on ``charge``: another refund id, no idempotency
    key of ours — nothing links it to the operation but the charge."""
    refund_id = "re_other_" + secrets.token_hex(8)
    return {
        "id": "evt_other_" + secrets.token_hex(8),
        "object": "event",
        "type": "refund.created",
        "created": created,
        "api_version": "2026-08-26",
        "livemode": False,
        "pending_webhooks": 1,
        "request": {"id": "req_" + secrets.token_hex(6), "idempotency_key": None},
        "data": {
            "object": {
                "id": refund_id,
                "object": "refund",
                "amount": amount,
                "currency": "usd",
                "charge": charge,
                "status": "pending",
                "created": created,
                "metadata": {},
            }
        },
    }


@dataclass(frozen=True, slots=True)
class Poll:
    sent: float  # time.monotonic() when the request left
    state: str
    verdict: str | None
    reason: str | None
    safe: bool
    final: bool


@dataclass
class Watcher:
    """Polls one operation until stopped; every answer is kept."""

    client: httpx.AsyncClient
    op_id: str
    interval_s: float = 0.02
    polls: list[Poll] = field(default_factory=list)
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            sent = time.monotonic()
            try:
                response = await self.client.get(f"/v1/operations/{self.op_id}")
            except httpx.HTTPError:
                await asyncio.sleep(self.interval_s)
                continue
            if response.status_code == 200:
                op = response.json()
                self.polls.append(
                    Poll(
                        sent,
                        op["state"],
                        op.get("verdict"),
                        op.get("reason"),
                        bool(op.get("safe_to_claim_complete")),
                        bool(op.get("final")),
                    )
                )
            await asyncio.sleep(self.interval_s)

    def verified_after(self, moment: float) -> list[Poll]:
        """Polls sent after ``moment`` that showed VERIFIED or a claim of completion."""
        return [p for p in self.polls if p.sent >= moment and (p.state == "VERIFIED" or p.safe)]

    def first(self, state: str) -> Poll | None:
        return next((p for p in self.polls if p.state == state), None)


class World:
    """One agent refund operation in ``workspace`` on the system at ``api_url``."""

    def __init__(self, api_url: str, workspace: Workspace) -> None:
        self.workspace = workspace
        self.api = httpx.AsyncClient(
            base_url=api_url,
            headers={"Authorization": f"Bearer {workspace.api_key}"},
            timeout=30.0,
            limits=FRESH,
        )
        self.intake = httpx.AsyncClient(base_url=api_url, timeout=30.0, limits=FRESH)
        self.stripe = httpx.AsyncClient(
            base_url=workspace.sandbox.base_url,
            headers={"Authorization": f"Bearer {workspace.sandbox.api_key}"},
            timeout=30.0,
            limits=FRESH,
        )
        self.op_id = ""
        self.charge = ""
        self.refund_id = ""

    async def close(self) -> None:
        for client in (self.api, self.intake, self.stripe):
            await client.aclose()

    async def _ok(self, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 300:
            raise AssertionError(
                f"{response.request.method} {response.request.url.path}: "
                f"{response.status_code} {response.text[:300]}"
            )
        data = response.json()
        assert isinstance(data, dict)
        return data

    async def charge_and_create(
        self, *, amount: int = 2000, contract: str = "stripe.refund.succeeded", **extra: Any
    ) -> dict[str, Any]:
        charge = await self._ok(
            await self.stripe.post("/v1/charges", data={"amount": 5000, "currency": "usd"})
        )
        self.charge = str(charge["id"])
        body: dict[str, Any] = {
            "contract": contract,
            "input": {"charge": self.charge, "amount": amount, "currency": "usd"},
            **extra,
        }
        op = await self._ok(await self.api.post("/v1/operations", json=body))
        self.op_id = str(op["id"])
        return op

    async def refund(
        self, *, amount: int = 2000, outcome: str = "succeeded", idempotency_key: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        response = await self.stripe.post(
            "/v1/refunds",
            data={"charge": self.charge, "amount": amount, "metadata[sandbox_outcome]": outcome},
            headers=headers,
        )
        return response.status_code, response.json()

    async def agent_refund(
        self, *, amount: int = 2000, outcome: str = "succeeded", **create: Any
    ) -> dict[str, Any]:
        """Charge, create, refund under the operation id, report the result."""
        await self.charge_and_create(amount=amount, **create)
        status, refund = await self.refund(
            amount=amount, outcome=outcome, idempotency_key=self.op_id
        )
        assert status == 200, refund
        self.refund_id = str(refund["id"])
        return await self.report({"phase": "result", "http_status": status, "result": refund})

    async def report(self, body: Mapping[str, Any]) -> dict[str, Any]:
        return await self._ok(
            await self.api.post(f"/v1/operations/{self.op_id}/action", json=dict(body))
        )

    async def get(self) -> dict[str, Any]:
        return await self._ok(await self.api.get(f"/v1/operations/{self.op_id}"))

    async def receipt(self) -> dict[str, Any]:
        return await self._ok(await self.api.get(f"/v1/operations/{self.op_id}/receipt"))

    async def wait(self, predicate: Any, *, timeout_s: float, what: str) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            op = await self.get()
            if predicate(op):
                return op
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.op_id}: waited {timeout_s:g} s for {what}; it is {op['state']} "
                    f"{op.get('verdict')} ({op.get('reason')})"
                )
            await asyncio.sleep(0.02)

    async def post_event(self, event: Mapping[str, Any]) -> float:
        """Deliver a signed event to the intake; the monotonic time its 200 arrived."""
        body = json.dumps(event, separators=(",", ":")).encode()
        response = await self.intake.post(
            f"/v1/events/stripe/{self.workspace.id}",
            content=body,
            headers={
                "Content-Type": "application/json",
                "Stripe-Signature": signature_header(self.workspace.webhook_secret, body),
            },
        )
        acknowledged = time.monotonic()
        assert response.status_code == 200, response.text
        return acknowledged

    async def control(self, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        return await self._ok(await self.stripe.post(f"/_sandbox/{path}", json=dict(body or {})))

    def watcher(self) -> Watcher:
        return Watcher(self.api, self.op_id)
