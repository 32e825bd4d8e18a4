"""Acceptance: stripe.refund.succeeded 1.1.0 catches a duplicate refund with no event at all.

Separate processes (uvicorn ingress, Celery observer and verdict workers, sweeper) on real
PostgreSQL and Redis, against a Stripe sandbox process whose webhook deliveries are switched off
(every event type dropped: the endpoint is registered, nothing ever reaches it). The agent's
refund plus a second refund of the same charge made directly at the sandbox must end
CONTRADICTED ``duplicate_refund_by_readback`` — never VERIFIED on any poll — and a single refund
with no events must stay PENDING (1.1.0 still requires the refund.updated event to verify).
An operation that asks for 1.0.0 is still decided under 1.0.0's rules.
"""

from __future__ import annotations

import asyncio
import gc
import json
import time
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import httpx
import pytest
from sqlalchemy import Engine, func, select
from sqlalchemy.orm import Session

from services.cli.demo.scenarios.agent import Agent
from services.cli.demo.scenarios.system import Sandbox
from services.cli.demo.scenarios.workspace import Workspace
from shared.db.models import Event, Observation
from shared.db.session import make_engine
from tests.e2e.launcher import DistributedSystem, running_system

pytestmark = pytest.mark.e2e

EVERY_EVENT = [
    "charge.succeeded",
    "charge.refunded",
    "refund.created",
    "refund.updated",
    "refund.failed",
    "checkout.session.completed",
]
INPUT_AMOUNT = 2000


@pytest.fixture(scope="module")
def system(
    postgres_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DistributedSystem]:
    workdir = tmp_path_factory.mktemp("readback-duplicates")
    with running_system(postgres_url, redis_url, workdir, name="readback-duplicates") as running:
        yield running


@pytest.fixture(scope="module")
def engine(system: DistributedSystem) -> Iterator[Engine]:
    made = make_engine(system.postgres_url)
    yield made
    made.dispose()


def _new_sandbox(system: DistributedSystem) -> Sandbox:
    # The launcher leaves the sandbox's log file object to the garbage collector.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        sandbox = system.new_sandbox()
        gc.collect()
    return sandbox


async def _workspace(system: DistributedSystem, name: str, *, events: bool) -> Agent:
    sandbox = await asyncio.to_thread(_new_sandbox, system)
    created = json.loads(await asyncio.to_thread(system.cli, ["workspace", "create", name]))
    workspace_id, api_key = created["workspace_id"], created["api_key"]
    async with httpx.AsyncClient(
        base_url=sandbox.base_url, auth=(sandbox.api_key, ""), timeout=30
    ) as client:
        response = await client.post(
            "/v1/webhook_endpoints",
            data={
                "url": f"{system.api_url}/v1/events/stripe/{workspace_id}",
                "enabled_events[]": "*",
            },
        )
    assert response.status_code == 200, response.text
    await asyncio.to_thread(
        system.cli,
        [
            "connection", "set", "--workspace", workspace_id, "--provider", "stripe",
            "--webhook-secret", response.json()["secret"], "--api-key", sandbox.api_key,
            "--base-url", sandbox.base_url,
        ],
    )  # fmt: skip
    agent = Agent(name, system.api_url, Workspace(workspace_id, api_key, sandbox), lambda *_: None)
    if not events:
        await agent.control("faults", {"drop_types": EVERY_EVENT})
    return agent


class Polls:
    """Every view of the operation the test saw; none of them may say VERIFIED."""

    def __init__(self) -> None:
        self.seen: list[Mapping[str, Any]] = []

    def record(self, op: Mapping[str, Any]) -> bool:
        self.seen.append(op)
        return True

    def verified(self) -> list[Mapping[str, Any]]:
        return [
            op
            for op in self.seen
            if op.get("verdict") == "VERIFIED"
            or op.get("state") == "VERIFIED"
            or op.get("safe_to_claim_complete") is True
        ]


async def _wait(
    agent: Agent, op_id: str, polls: Polls, until: Any, what: str, timeout_s: float = 60.0
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        op = await agent.get(op_id)
        polls.record(op)
        if until(op):
            return op
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}; last view {op}")
        await asyncio.sleep(0.1)


async def _start(agent: Agent, *, version: str | None) -> tuple[str, str, dict[str, Any]]:
    """A charge, an operation (the newest version unless one is asked for), the agent's refund
    under the operation id as idempotency key, and its report."""
    charge = await agent.create_charge(amount=5000)
    body: dict[str, Any] = {
        "contract": "stripe.refund.succeeded",
        "input": {"charge": charge, "amount": INPUT_AMOUNT, "currency": "usd"},
    }
    if version is not None:
        body["contract_version"] = version
    response = await agent.api.post("/v1/operations", json=body)
    assert response.status_code == 201, response.text
    op = response.json()
    await agent.report(op["id"], {"phase": "started"})
    status, refund = await agent.refund(charge, INPUT_AMOUNT, idempotency_key=op["id"])
    assert status == 200, refund
    await agent.report(op["id"], {"phase": "result", "result": refund, "http_status": status})
    return op["id"], charge, op


async def _second_refund(agent: Agent, charge: str) -> str:
    """Someone else refunds the same charge at the provider: no idempotency key of ours."""
    status, other = await agent.stripe_post("/v1/refunds", {"charge": charge, "amount": 1000})
    assert status == 200, other
    return str(other["id"])


def _stored_events(engine: Engine, workspace_id: str) -> int:
    with Session(engine) as session:
        return int(
            session.scalar(
                select(func.count()).select_from(Event).where(Event.workspace_id == workspace_id)
            )
            or 0
        )


def _channels(engine: Engine, op_id: str) -> set[str]:
    with Session(engine) as session:
        rows = session.execute(
            select(Observation.channel).where(Observation.operation_id == op_id)
        ).scalars()
        return set(rows)


async def _no_delivery(agent: Agent) -> None:
    await agent.control("flush")
    response = await agent.stripe.get("/_sandbox/deliveries")
    deliveries = response.json()["data"]
    assert deliveries, "the sandbox made no deliveries to drop"
    assert {d["status"] for d in deliveries} == {"dropped"}


def test_a_duplicate_made_before_the_first_reading_is_contradicted_by_readback_alone(
    system: DistributedSystem, engine: Engine
) -> None:
    polls = Polls()

    async def play() -> tuple[Agent, dict[str, Any], dict[str, Any]]:
        agent = await _workspace(system, "dup-early", events=False)
        try:
            op_id, charge, created = await _start(agent, version="1.2.0")
            await _second_refund(agent, charge)
            await agent.advance()  # both refunds settle: succeeded, as far as a readback goes
            final = await _wait(agent, op_id, polls, lambda op: op.get("final"), "a verdict")
            await _no_delivery(agent)
            return agent, created, final
        finally:
            await agent.close()

    agent, created, final = asyncio.run(play())
    assert created["contract"]["version"] == "1.2.0"
    assert (final["state"], final["verdict"], final["reason"]) == (
        "CONTRADICTED",
        "CONTRADICTED",
        "duplicate_refund_by_readback",
    ), final
    assert polls.verified() == []
    assert _stored_events(engine, agent.workspace.id) == 0
    assert "charge_refunds" in _channels(engine, final["id"])


def test_a_duplicate_made_after_the_refund_was_read_is_caught_at_the_next_reading(
    system: DistributedSystem, engine: Engine
) -> None:
    polls = Polls()

    async def play() -> tuple[Agent, dict[str, Any], dict[str, Any]]:
        agent = await _workspace(system, "dup-late", events=False)
        try:
            op_id, charge, _ = await _start(agent, version="1.1.0")
            await agent.advance()
            # Provely has read the refund succeeded and the charge with one refund: PENDING,
            # for 1.1.0 still waits for the refund.updated event, which never comes.
            pending = await _wait(
                agent,
                op_id,
                polls,
                lambda op: (
                    _holds(op, "refund_status_succeeded")
                    and _holds(op, "single_refund_since_operation")
                ),
                "a reading of the settled refund",
            )
            assert (pending["state"], pending["verdict"]) == ("PENDING", "PENDING"), pending
            await _second_refund(agent, charge)
            final = await _wait(agent, op_id, polls, lambda op: op.get("final"), "a verdict")
            await _no_delivery(agent)
            return agent, pending, final
        finally:
            await agent.close()

    agent, pending, final = asyncio.run(play())
    assert pending["final"] is False
    assert (final["state"], final["reason"]) == ("CONTRADICTED", "duplicate_refund_by_readback")
    assert polls.verified() == []
    assert _stored_events(engine, agent.workspace.id) == 0


def test_a_single_refund_with_no_event_stays_pending(
    system: DistributedSystem, engine: Engine
) -> None:
    polls = Polls()

    async def play() -> tuple[Agent, dict[str, Any]]:
        agent = await _workspace(system, "single", events=False)
        try:
            # 1.2.0 reads no event log: without deliveries its refund.updated never comes.
            op_id, _charge, _ = await _start(agent, version="1.2.0")
            await agent.advance()
            await _wait(
                agent,
                op_id,
                polls,
                lambda op: _holds(op, "refund_status_succeeded"),
                "a reading of the settled refund",
            )
            # Two more scheduled readings (5 s, then 10 s apart) change nothing.
            started = time.monotonic()
            while time.monotonic() - started < 7.0:
                polls.record(await agent.get(op_id))
                await asyncio.sleep(0.25)
            last = await agent.get(op_id)
            polls.record(last)
            await _no_delivery(agent)
            return agent, last
        finally:
            await agent.close()

    agent, last = asyncio.run(play())
    assert (last["state"], last["verdict"], last["final"]) == ("PENDING", "PENDING", False), last
    assert last["reason"] in ("awaiting_evidence", "stale_reading"), last
    assert _holds(last, "single_refund_since_operation")
    assert polls.verified() == []
    assert _stored_events(engine, agent.workspace.id) == 0


def test_an_operation_that_asks_for_1_0_0_is_decided_under_1_0_0(
    system: DistributedSystem, engine: Engine
) -> None:
    polls = Polls()

    async def play() -> tuple[dict[str, Any], dict[str, Any]]:
        agent = await _workspace(system, "old-version", events=True)
        try:
            op_id, charge, created = await _start(agent, version="1.0.0")
            await _second_refund(agent, charge)
            await agent.control("flush")  # both refund.created are delivered before settling
            await agent.advance()
            await agent.control("flush")
            final = await _wait(agent, op_id, polls, lambda op: op.get("final"), "a verdict")
            return created, final
        finally:
            await agent.close()

    created, final = asyncio.run(play())
    assert created["contract"]["version"] == "1.0.0"
    assert final["contract"]["version"] == "1.0.0"
    # 1.0.0 sees the duplicate by its refund.created event and reads no listing.
    assert (final["state"], final["reason"]) == ("CONTRADICTED", "duplicate_refund_present")
    assert "charge_refunds" not in _channels(engine, final["id"])
    assert polls.verified() == []


def _holds(op: Mapping[str, Any], condition: str) -> bool:
    for row in op.get("conditions") or []:
        if row.get("id") == condition:
            return row.get("holds") is True
    return False
