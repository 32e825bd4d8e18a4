"""The agent a scenario plays: HTTP to Provely (operations, action reports, verdicts) and to the
sandbox (charges, refunds, its control endpoints), reporting its progress to a sink."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

import httpx

from services.cli.demo.scenarios.refund_contract import REFUND_CONTRACT, STANDARD_VERSION
from services.cli.demo.scenarios.system import SETTLE_S, ProgressSink, ScenarioFailed
from services.cli.demo.scenarios.workspace import Workspace

__all__ = ["FRESH_CONNECTIONS", "POLL_S", "STEP_TIMEOUT_S", "Agent"]

POLL_S = 0.1
STEP_TIMEOUT_S = 45.0
"""Generous on purpose: each step takes a second or two, but a busy machine must not turn a
slow answer into a wrong one."""
FRESH_CONNECTIONS = httpx.Limits(max_keepalive_connections=0)
"""One connection per request: a keep-alive connection the server closed while it sat idle
would fail the next request with a read error, and an action report must not be sent twice."""


class Agent:
    """One scenario's agent, with its own HTTP clients and progress channel."""

    def __init__(self, name: str, api_url: str, workspace: Workspace, sink: ProgressSink) -> None:
        self.name = name
        self.workspace = workspace
        self.sandbox = workspace.sandbox
        self._sink = sink
        self.api = httpx.AsyncClient(
            base_url=api_url,
            headers={"Authorization": f"Bearer {workspace.api_key}"},
            timeout=30.0,
            limits=FRESH_CONNECTIONS,
        )
        self.stripe = httpx.AsyncClient(
            base_url=workspace.sandbox.base_url,
            headers={"Authorization": f"Bearer {workspace.sandbox.api_key}"},
            timeout=30.0,
            limits=FRESH_CONNECTIONS,
        )
        self.seen: list[tuple[str, str | None, str | None]] = []
        self.ops: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None

    async def close(self) -> None:
        await self.api.aclose()
        await self.stripe.aclose()

    def note(self, text: str) -> None:
        self._sink(self.name, {"note": text})

    # ------------------------------------------------------------------ Provely API
    async def _api(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = await self.api.request(method, path, **kwargs)
        if response.status_code >= 300:
            raise ScenarioFailed(
                f"{method} {path} answered {response.status_code}: {response.text[:300]}"
            )
        data = response.json()
        if not isinstance(data, dict):
            raise ScenarioFailed(f"{method} {path} answered {data!r}")
        return data

    async def create_operation(
        self, inputs: Mapping[str, Any], *, version: str, contract: str = REFUND_CONTRACT
    ) -> dict[str, Any]:
        op = await self._api(
            "POST",
            "/v1/operations",
            json={"contract": contract, "contract_version": version, "input": dict(inputs)},
        )
        self.ops.append(op)
        self._track(op)
        self.note(f"operation {op['id']} created ({contract} {version})")
        return op

    async def report(self, op_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        op = await self._api("POST", f"/v1/operations/{op_id}/action", json=dict(body))
        self._track(op)
        return op

    async def get(self, op_id: str) -> dict[str, Any]:
        op = await self._api("GET", f"/v1/operations/{op_id}")
        self._track(op)
        return op

    def _track(self, op: Mapping[str, Any]) -> None:
        if "state" not in op:
            return
        self.last = dict(op)
        key = (str(op["state"]), op.get("verdict"), op.get("reason"))
        if not self.seen or self.seen[-1] != key:
            self.seen.append(key)
        self._sink(self.name, {"op": dict(op)})

    async def wait(
        self,
        op_id: str,
        until: Callable[[Mapping[str, Any]], bool],
        *,
        timeout_s: float,
        what: str,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            op = await self.get(op_id)
            if until(op):
                return op
            if time.monotonic() > deadline:
                raise ScenarioFailed(
                    f"waited {timeout_s:.0f} s for {what}; the operation is {op.get('state')} "
                    f"{op.get('verdict')} ({op.get('reason')})"
                )
            await asyncio.sleep(POLL_S)

    async def wait_final(self, op_id: str, timeout_s: float = STEP_TIMEOUT_S) -> dict[str, Any]:
        return await self.wait(
            op_id, lambda op: bool(op.get("final")), timeout_s=timeout_s, what="a final verdict"
        )

    # ------------------------------------------------------------------ the provider
    async def stripe_post(
        self, path: str, data: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        response = await self.stripe.post(path, data=dict(data), headers=headers)
        return response.status_code, response.json()

    async def create_charge(self, amount: int = 5000) -> str:
        status, body = await self.stripe_post(
            "/v1/charges", {"amount": amount, "currency": "usd", "source": "tok_visa"}
        )
        if status != 200:
            raise ScenarioFailed(f"the sandbox refused the charge: {status} {body}")
        self.note(f"charge {body['id']} of {amount} cents created at the provider")
        return str(body["id"])

    async def refund(
        self,
        charge: str,
        amount: int,
        *,
        outcome: str = "succeeded",
        idempotency_key: str | None,
    ) -> tuple[int, dict[str, Any]]:
        status, body = await self.stripe_post(
            "/v1/refunds",
            {"charge": charge, "amount": amount, "metadata[sandbox_outcome]": outcome},
            idempotency_key=idempotency_key,
        )
        if status == 200:
            self.note(f"refund {body['id']} of {amount} cents: provider answered pending")
        return status, body

    async def control(self, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        response = await self.stripe.post(f"/_sandbox/{path}", json=dict(body or {}))
        if response.status_code != 200:
            raise ScenarioFailed(f"sandbox control {path}: {response.status_code} {response.text}")
        data = response.json()
        return data if isinstance(data, dict) else {}

    async def advance(self, seconds: float = SETTLE_S) -> None:
        """The provider settles now: move the sandbox clock instead of sleeping."""
        await self.control("advance", {"seconds": seconds})
        self.note(f"provider clock advanced {seconds:g} s: the refund settles")

    # ------------------------------------------------------------------ the usual agent turn
    async def refund_operation(
        self,
        *,
        version: str = STANDARD_VERSION,
        amount: int = 2000,
        refunded_amount: int | None = None,
        outcome: str = "succeeded",
    ) -> tuple[str, str, dict[str, Any]]:
        """Charge, create the operation, refund with its id as idempotency key, report."""
        charge = await self.create_charge()
        op = await self.create_operation(
            {"charge": charge, "amount": amount, "currency": "usd"}, version=version
        )
        await self.report(op["id"], {"phase": "started"})
        status, refund = await self.refund(
            charge, refunded_amount or amount, outcome=outcome, idempotency_key=op["id"]
        )
        if status != 200:
            raise ScenarioFailed(f"the sandbox refused the refund: {status} {refund}")
        await self.report(op["id"], {"phase": "result", "result": refund, "http_status": status})
        self.note("result reported; Provely observes the provider")
        return op["id"], charge, refund

    async def settle_after_pending(self, op_id: str) -> None:
        """Once Provely has read the refund pending (or decided), settle it at the provider."""
        op = await self.wait(
            op_id,
            lambda op: bool(op.get("final")) or op.get("reason") == "still_transitional",
            timeout_s=STEP_TIMEOUT_S,
            what="the first readback",
        )
        if not op.get("final"):
            await self.advance()
