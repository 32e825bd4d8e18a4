"""The refund traps: how the agent plays each (a refund that succeeds, a duplicate, a wrong
amount, failures at the provider, an outage, timeouts before and after the write) and the
verdict each must reach."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from services.cli.demo.scenarios.agent import STEP_TIMEOUT_S, Agent
from services.cli.demo.scenarios.refund_contract import SHORT_VERSION, STANDARD_VERSION
from services.cli.demo.scenarios.scenario import Expected, Scenario
from services.cli.demo.scenarios.system import ScenarioFailed

__all__ = ["REFUNDS"]


async def _play_refund(agent: Agent) -> str:
    op_id, _, _ = await agent.refund_operation()
    await agent.settle_after_pending(op_id)
    return op_id


async def _play_duplicate(agent: Agent) -> str:
    charge = await agent.create_charge(5000)
    op = await agent.create_operation(
        {"charge": charge, "amount": 2000, "currency": "usd"}, version=STANDARD_VERSION
    )
    await agent.report(op["id"], {"phase": "started"})
    status, refund = await agent.refund(charge, 2000, idempotency_key=op["id"])
    # A retry without the idempotency key: the provider refunds the charge a second time.
    await agent.refund(charge, 2000, idempotency_key=None)
    agent.note("a retry without the idempotency key refunded the charge twice")
    await agent.report(op["id"], {"phase": "result", "result": refund, "http_status": status})
    await agent.settle_after_pending(op["id"])
    return str(op["id"])


async def _play_wrong_amount(agent: Agent) -> str:
    op_id, _, _ = await agent.refund_operation(amount=2000, refunded_amount=1500)
    agent.note("the agent asked for 2000 but the provider refunded 1500")
    await agent.settle_after_pending(op_id)
    return op_id


def _outcome_play(outcome: str) -> Callable[[Agent], Awaitable[str]]:
    async def play(agent: Agent) -> str:
        op_id, _, _ = await agent.refund_operation(outcome=outcome)
        await agent.settle_after_pending(op_id)
        return op_id

    return play


async def _play_requires_action(agent: Agent) -> str:
    op_id, _, _ = await agent.refund_operation(outcome="requires_action")
    await agent.settle_after_pending(op_id)
    await agent.wait(
        op_id,
        lambda op: _observed_status(op) == "requires_action",
        timeout_s=STEP_TIMEOUT_S,
        what="a readback in requires_action",
    )
    agent.note("the provider needs the customer to act: the refund can still succeed")
    return op_id


async def _play_stuck(agent: Agent) -> str:
    op_id, _, _ = await agent.refund_operation(version=SHORT_VERSION, outcome="stuck_pending")
    agent.note("the refund never leaves pending; the short-timing contract's deadline is 6 s")
    await agent.wait_final(op_id)
    return op_id


async def _play_outage(agent: Agent) -> str:
    charge = await agent.create_charge()
    op = await agent.create_operation(
        {"charge": charge, "amount": 2000, "currency": "usd"}, version=STANDARD_VERSION
    )
    await agent.report(op["id"], {"phase": "started"})
    status, refund = await agent.refund(charge, 2000, idempotency_key=op["id"])
    await agent.control("outage", {"enabled": True})
    agent.note("provider outage: its API answers 503")
    await agent.report(op["id"], {"phase": "result", "result": refund, "http_status": status})
    await agent.wait(
        op["id"],
        lambda op: op.get("verdict") == "UNVERIFIABLE" or bool(op.get("final")),
        timeout_s=STEP_TIMEOUT_S,
        what="UNVERIFIABLE during the outage",
    )
    await agent.control("outage", {"enabled": False})
    agent.note("the provider is back")
    await agent.advance()
    return str(op["id"])


def _check_outage(agent: Agent, op: Mapping[str, Any]) -> None:
    if not any(v == "UNVERIFIABLE" and r == "evidence_unavailable" for _, v, r in agent.seen):
        raise ScenarioFailed("the outage never showed as UNVERIFIABLE evidence_unavailable")


async def _play_timeout_before(agent: Agent) -> str:
    charge = await agent.create_charge()
    op = await agent.create_operation(
        {"charge": charge, "amount": 2000, "currency": "usd"}, version=SHORT_VERSION
    )
    await agent.report(op["id"], {"phase": "started"})
    agent.note("the refund request timed out before the provider wrote anything")
    await agent.report(
        op["id"],
        {
            "phase": "error",
            "http_status": None,
            "error": {"type": "timeout", "message": "no answer from the provider in 30 s"},
        },
    )
    await agent.wait_final(op["id"])
    return str(op["id"])


async def _play_timeout_after(agent: Agent) -> str:
    charge = await agent.create_charge()
    op = await agent.create_operation(
        {"charge": charge, "amount": 2000, "currency": "usd"}, version=STANDARD_VERSION
    )
    await agent.report(op["id"], {"phase": "started"})
    await agent.refund(charge, 2000, idempotency_key=op["id"])
    agent.note("the provider refunded, but the answer was lost: the agent saw a timeout")
    await agent.report(
        op["id"],
        {
            "phase": "error",
            "http_status": None,
            "error": {"type": "timeout", "message": "read timed out after 30 s"},
        },
    )
    await agent.wait(
        op["id"],
        lambda op: bool((op.get("subject") or {}).get("id")) or bool(op.get("final")),
        timeout_s=STEP_TIMEOUT_S,
        what="the refund id learned from the refund.created event",
    )
    agent.note("refund id learned from refund.created (same idempotency key)")
    await agent.settle_after_pending(op["id"])
    return str(op["id"])


def _observed_status(op: Mapping[str, Any]) -> Any:
    for condition in op.get("conditions") or []:
        if condition.get("id") == "refund_status_succeeded":
            return condition.get("observed")
    return None


REFUNDS: tuple[Scenario, ...] = (
    Scenario(
        "refund",
        "Refund that succeeds",
        "The agent refunds 2000 of a 5000 charge; the provider settles it.",
        Expected("VERIFIED", "all_conditions_hold", "VERIFIED"),
        _play_refund,
    ),
    Scenario(
        "duplicate_refund",
        "Duplicate refund",
        "A retry without the idempotency key refunds the same charge a second time.",
        Expected("CONTRADICTED", "duplicate_refund_present", "CONTRADICTED"),
        _play_duplicate,
    ),
    Scenario(
        "wrong_amount",
        "Wrong amount",
        "The agent declared 2000 but the provider refunded 1500.",
        Expected("CONTRADICTED", "refund_amount_mismatch", "CONTRADICTED"),
        _play_wrong_amount,
    ),
    Scenario(
        "failed",
        "Refund fails at the provider",
        "The provider accepts the refund, then reports it failed.",
        Expected("FAILED", "terminal_failure", "FAILED"),
        _outcome_play("failed"),
    ),
    Scenario(
        "canceled",
        "Refund canceled",
        "The provider cancels the refund: no money will move.",
        Expected("CONTRADICTED", "canceled", "CONTRADICTED"),
        _outcome_play("canceled"),
    ),
    Scenario(
        "requires_action",
        "Refund requires action",
        "The provider waits for the customer; the refund may still succeed.",
        Expected("PENDING", "still_transitional", "PENDING", final=False),
        _play_requires_action,
    ),
    Scenario(
        "stuck_pending",
        "Stuck pending until the deadline",
        "The refund stays pending past the (short-timing) contract's deadline.",
        Expected("UNVERIFIABLE", "evidence_unavailable_before_timeout", "HUMAN_REVIEW"),
        _play_stuck,
        short_timing=True,
    ),
    Scenario(
        "provider_outage",
        "Provider outage that recovers",
        "Readbacks get 503 for a while; verification resumes by itself when it recovers.",
        Expected("VERIFIED", "all_conditions_hold", "VERIFIED"),
        _play_outage,
        own_sandbox=True,
        check=_check_outage,
    ),
    Scenario(
        "timeout_before_write",
        "Action timed out before the provider wrote anything",
        "The refund call timed out and no refund exists; nothing can prove it either way.",
        Expected("UNVERIFIABLE", "evidence_unavailable_before_timeout", "HUMAN_REVIEW"),
        _play_timeout_before,
        short_timing=True,
    ),
    Scenario(
        "timeout_after_write",
        "Action timed out after the provider refunded",
        "The agent never saw the refund id; Provely finds it through the idempotency key.",
        Expected("VERIFIED", "all_conditions_hold", "VERIFIED"),
        _play_timeout_after,
    ),
)
