"""An outcome judged: the verdict, reason, state and finality against what the scenario expected
(and its own check), the receipt verified offline with the served keys; the timeline read."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import httpx

from services.cli.demo.scenarios.agent import Agent
from services.cli.demo.scenarios.scenario import Scenario
from services.cli.demo.scenarios.system import ScenarioFailed

__all__ = ["judge", "timeline", "verify_receipt"]


async def verify_receipt(api: httpx.AsyncClient, op: Mapping[str, Any]) -> tuple[bool, str]:
    """Check the operation's receipt offline with the served keys; it must also say what the
    operation resource says about claiming completion (one rule for every view)."""
    from shared.lifecycle.receipt_check import Verification, verify_receipt_document
    from shared.lifecycle.receipt_keyring import KeyRing, KeyRingError

    receipt = await api.get(f"/v1/operations/{op['id']}/receipt")
    if receipt.status_code != 200:
        return False, f"no receipt: HTTP {receipt.status_code}"
    claimed = receipt.json()["receipt"].get("safe_to_claim_complete")
    if claimed != op.get("safe_to_claim_complete"):
        return False, (
            f"the receipt says safe_to_claim_complete={claimed}, the operation "
            f"{op.get('safe_to_claim_complete')}"
        )
    keys = await api.get("/v1/receipts/keys")
    try:
        keyring = KeyRing.from_document(keys.content)
    except KeyRingError as exc:
        return False, f"cannot read the receipt keys: {exc}"
    result = verify_receipt_document(receipt.content, keyring)
    return result.status == Verification.VALID, result.reason


async def timeline(api: httpx.AsyncClient, op_id: str) -> list[dict[str, Any]]:
    response = await api.get(f"/v1/operations/{op_id}/timeline")
    if response.status_code != 200:
        return []
    data = response.json()
    items = data.get("entries", []) if isinstance(data, dict) else data
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def judge(scenario: Scenario, agent: Agent, op: Mapping[str, Any]) -> str | None:
    e = scenario.expected
    got = (op.get("verdict"), op.get("reason"), op.get("state"), bool(op.get("final")))
    want = (e.verdict, e.reason, e.state, e.final)
    if got != want:
        return (
            f"expected {e.verdict} ({e.reason}), state {e.state}, final={e.final}; "
            f"got {got[0]} ({got[1]}), state {got[2]}, final={got[3]}"
        )
    if scenario.check is not None:
        try:
            scenario.check(agent, op)
        except ScenarioFailed as exc:
            return str(exc)
    return None
