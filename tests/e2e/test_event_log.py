"""Acceptance: the provider's event log recovers the deliveries that never came.

Separate processes (ingress, observer and verdict workers, sweeper) on real PostgreSQL and
Redis against a Stripe sandbox process. stripe.refund.succeeded from 1.3.0 reads Stripe's
event log (``GET /v1/events``) on the readback's schedule; the events it lists go through the
intake as deliveries do, once per event id:

- with every delivery dropped (the endpoint is registered, nothing reaches it) the refund is
  VERIFIED on the refund.updated event read from the log — under 1.2.0, the same world stays
  PENDING forever (``test_duplicate_by_readback``'s single refund);
- with deliveries arriving too, each of Stripe's events is stored once.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from shared.db.models import Event, Observation
from shared.trust.registry import get_registry
from tests.e2e.launcher import DistributedSystem
from tests.e2e.test_duplicate_by_readback import (  # the same world, the same helpers
    Polls,
    _no_delivery,
    _start,
    _wait,
    _workspace,
    engine,
    system,
)

__all__ = ["engine", "system"]  # the module's fixtures, shared with the readback world

NEWEST = get_registry().versions("stripe.refund.succeeded")[-1]


def _event_ids(engine: Engine, workspace_id: str) -> Counter[str]:
    with Session(engine) as session:
        rows = session.execute(
            select(Event.event_id).where(Event.workspace_id == workspace_id)
        ).scalars()
        return Counter(rows)


def _duplicates(engine: Engine, workspace_id: str) -> int:
    with Session(engine) as session:
        rows = session.execute(
            select(Event.duplicates).where(Event.workspace_id == workspace_id)
        ).scalars()
        return sum(rows)


def _log_readings(engine: Engine, op_id: str) -> list[Any]:
    with Session(engine) as session:
        return list(
            session.execute(
                select(Observation.status).where(
                    Observation.operation_id == op_id,
                    Observation.channel == "refund_event_log",
                )
            ).scalars()
        )


async def _sandbox_events(agent: Any, charge: str) -> set[str]:
    response = await agent.stripe.get("/v1/events", params={"limit": 100})
    assert response.status_code == 200, response.text
    return {
        e["id"]
        for e in response.json()["data"]
        if e["type"].startswith("refund.") and e["data"]["object"].get("charge") == charge
    }


def test_with_every_delivery_dropped_the_refund_is_verified_from_the_event_log(
    system: DistributedSystem, engine: Engine
) -> None:
    polls = Polls()

    async def play() -> tuple[Any, dict[str, Any], dict[str, Any], set[str]]:
        agent = await _workspace(system, "log-only", events=False)
        try:
            op_id, charge, created = await _start(agent, version=None)
            await agent.advance()
            final = await _wait(agent, op_id, polls, lambda op: op.get("final"), "a verdict")
            await _no_delivery(agent)
            return agent, created, final, await _sandbox_events(agent, charge)
        finally:
            await agent.close()

    agent, created, final, listed = asyncio.run(play())
    assert created["contract"]["version"] == NEWEST
    assert (final["state"], final["verdict"]) == ("VERIFIED", "VERIFIED"), final
    stored = _event_ids(engine, agent.workspace.id)
    assert listed, "the sandbox listed no refund event"
    assert listed <= set(stored), (listed, stored)
    assert set(stored.values()) == {1}
    assert "ok" in _log_readings(engine, final["id"])
    # Read again at every poll, the log's events are no repeat deliveries.
    assert _duplicates(engine, agent.workspace.id) == 0


def test_with_deliveries_arriving_too_each_event_is_stored_once(
    system: DistributedSystem, engine: Engine
) -> None:
    polls = Polls()

    async def play() -> tuple[Any, dict[str, Any], set[str]]:
        agent = await _workspace(system, "log-and-deliveries", events=True)
        try:
            op_id, charge, _ = await _start(agent, version=None)
            await agent.control("flush")
            await agent.advance()
            await agent.control("flush")
            final = await _wait(agent, op_id, polls, lambda op: op.get("final"), "a verdict")
            await agent.control("flush")
            return agent, final, await _sandbox_events(agent, charge)
        finally:
            await agent.close()

    agent, final, listed = asyncio.run(play())
    assert (final["state"], final["verdict"]) == ("VERIFIED", "VERIFIED"), final
    stored = _event_ids(engine, agent.workspace.id)
    assert listed, "the sandbox listed no refund event"
    assert listed <= set(stored), (listed, stored)
    assert set(stored.values()) == {1}, stored
    assert _log_readings(engine, final["id"])
