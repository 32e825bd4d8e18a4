"""An LLM-shaped transcript: a scripted agent that knows nothing of Provely proves Stripe
refunds through ``provely mcp`` (stdio, the ``mcp`` SDK's client), following only what the tool
descriptions and the answers say.

Like an LLM left to itself, the agent is inclined to try the refund again whenever it is not
proven — after a timeout, a PENDING, an UNVERIFIABLE — unless an answer tells it not to. So it
refunds a charge twice unless the words of the tools stop it. Across a stuck refund (PENDING),
a provider outage (UNVERIFIABLE evidence_unavailable), a Stripe timeout after the refund went
through, and a refund that settles, each charge must be refunded exactly once.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
import stripe
from provely_sdk import Provely

from tests.e2e.launcher import DistributedSystem
from tests.e2e.mcp_clients import open_client, text_of
from tests.e2e.sdk_world import SilentProxy, World, new_world

pytestmark = pytest.mark.e2e

FORBIDS_REPEAT = re.compile(r"do not (repeat|call the provider again|refund again)", re.I)


@dataclass
class Refunder:
    """The agent's one power besides the tools: calling Stripe's refund endpoint."""

    world: World
    charge: str
    base_url: str | None = None
    timeout: float = 30.0
    after: Callable[[], None] | None = None
    calls: int = 0

    def __call__(self, idempotency_key: str) -> tuple[str, dict[str, Any], int | None]:
        self.calls += 1
        client = self.world.stripe_client(base_url=self.base_url, timeout=self.timeout)
        try:
            refund = client.v1.refunds.create(
                params={"charge": self.charge, "amount": 2000},
                options={"idempotency_key": idempotency_key},
            )
        except stripe.APIConnectionError as exc:
            return "no answer", {"message": str(exc)}, None
        except stripe.StripeError as exc:
            return "refused", dict(exc.json_body or {}), exc.http_status
        finally:
            if self.after is not None:
                self.after()
        return "answered", dict(refund.to_dict()), 200


@dataclass
class ScriptedAgent:
    """Reads the tool list and answers; nothing else about Provely is written here."""

    client: Any
    transcript: list[str] = field(default_factory=list)

    async def call(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        result = await self.client.call_tool(name, arguments)
        text = text_of(result)
        self.transcript.append(f"{name} -> {text[:400]}")
        assert not result.is_error, text
        loaded = json.loads(text)
        assert isinstance(loaded, dict)
        return loaded

    async def refund(self, goal: dict[str, Any], refunder: Refunder) -> dict[str, Any]:
        tools = {t.name: t.description or "" for t in (await self.client.list_tools()).tools}
        create = next(n for n, d in tools.items() if "create an operation" in d)
        report = next(n for n, d in tools.items() if "report what the provider answered" in d)
        wait = next(n for n, d in tools.items() if d.startswith("Wait up to"))
        most = int(re.search(r"at most (\d+)", tools[wait]).group(1))  # type: ignore[union-attr]
        answer: dict[str, Any] = {}
        for attempt in range(3):  # persistence: try again unless told not to
            answer = await self.call(
                create,
                {"contract": goal["contract"], "input": goal["input"],
                 "idempotency_key": f"agent-{goal['input']['charge']}-{attempt}"},
            )  # fmt: skip
            op = answer["operation_id"]
            # "Use the returned operation id as the provider's Idempotency-Key."
            seen, body, status = await asyncio.to_thread(refunder, op)
            phase = {"answered": "result", "refused": "error", "no answer": "timeout"}[seen]
            answer = await self.call(
                report, {"operation_id": op, "phase": phase, "body": body, "http_status": status}
            )
            answer = await self.call(
                wait, {"operation_id": op, "timeout_seconds": min(most, goal["patience"])}
            )
            if answer["verdict"] == "VERIFIED" or FORBIDS_REPEAT.search(answer["guidance"]):
                return answer
        return answer


async def _play(
    world: World, refunder: Refunder, *, patience: int
) -> tuple[dict[str, Any], list[str]]:
    async with open_client("stdio", api_url=world.api_url, api_key=world.api_key) as client:
        agent = ScriptedAgent(client)
        goal = {
            "contract": "stripe.refund.succeeded",
            "input": {"charge": refunder.charge, "amount": 2000, "currency": "usd"},
            "patience": patience,
        }
        answer = await agent.refund(goal, refunder)
        return answer, agent.transcript


@pytest.fixture(scope="module")
def world(distributed: DistributedSystem) -> World:
    return new_world(distributed, "transcript")


def test_a_stuck_refund_is_refunded_once(distributed: DistributedSystem) -> None:
    stuck = new_world(distributed, "transcript-stuck")
    with stuck.control() as control:
        control.faults(default_outcome="stuck_pending")
    refunder = Refunder(stuck, stuck.charge())
    answer, transcript = asyncio.run(_play(stuck, refunder, patience=5))
    assert answer["verdict"] == "PENDING", transcript
    assert refunder.calls == 1, transcript
    assert len(stuck.refunds_of(refunder.charge)) == 1


def test_an_outage_is_not_a_reason_to_refund_again(distributed: DistributedSystem) -> None:
    down = new_world(distributed, "transcript-outage")
    control = down.control()
    refunder = Refunder(down, down.charge(), after=lambda: control.outage(enabled=True))
    try:
        answer, transcript = asyncio.run(_play(down, refunder, patience=10))
    finally:
        control.outage(enabled=False)
        control.close()
    assert (answer["verdict"], answer["reason"]) == ("UNVERIFIABLE", "evidence_unavailable")
    assert refunder.calls == 1, transcript
    assert len(down.refunds_of(refunder.charge)) == 1


def test_a_stripe_timeout_is_not_a_reason_to_refund_again(distributed: DistributedSystem) -> None:
    late = new_world(distributed, "transcript-timeout")
    with late.control() as control:
        control.faults(default_outcome="stuck_pending")  # unproven while the agent decides
    proxy = SilentProxy(late.sandbox.base_url)
    charge = late.charge()
    with proxy.running():
        refunder = Refunder(late, charge, base_url=proxy.url, timeout=1.0)
        answer, transcript = asyncio.run(_play(late, refunder, patience=5))
    assert answer["verdict"] in ("PENDING", "UNVERIFIABLE"), transcript
    assert refunder.calls == 1, transcript
    (refund,) = late.refunds_of(charge)  # the refund went through; its answer was lost
    with late.control() as control:
        control.set_status(refund["id"], "succeeded")
    with Provely(late.api_url, late.api_key) as provely:
        proven = provely.wait(answer["operation_id"], timeout=90)
    assert proven.verdict == "VERIFIED", proven.guidance
    assert len(late.refunds_of(charge)) == 1


def test_a_refund_that_settles_is_verified_once(world: World) -> None:
    refunder = Refunder(world, world.charge())
    answer, transcript = asyncio.run(_play(world, refunder, patience=40))
    assert answer["verdict"] == "VERIFIED", transcript
    assert refunder.calls == 1, transcript
