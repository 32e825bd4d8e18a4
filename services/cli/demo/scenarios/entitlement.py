"""The entitlement scenario (seed 003): after a full refund, does the user's app take the seats
back? It sets up its own world (two copies of ``examples/entitlement_app``, a workspace each)
and judges itself."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

import httpx

from services.cli.demo.scenarios.agent import FRESH_CONNECTIONS, Agent
from services.cli.demo.scenarios.judging import judge, timeline, verify_receipt
from services.cli.demo.scenarios.scenario import Expected, Outcome, Scenario
from services.cli.demo.scenarios.system import ProgressSink, ScenarioFailed, System
from services.cli.demo.scenarios.workspace import open_workspace

__all__ = ["ENTITLEMENT", "ENTITLEMENT_CONTRACT"]

ENTITLEMENT_CONTRACT = "app.entitlement.revoked"
SEATS = 5
SEAT_PRICE = 1000


# pay down (C901): the scenario's steps inline
async def _run_entitlement(system: System, sink: ProgressSink) -> Outcome:  # noqa: C901
    """Seed 003: after a full refund, does the app take the seats back?

    Two copies of the example app (``examples/entitlement_app``) sell 5 seats on
    ``checkout.session.completed``: one revokes them on ``charge.refunded``, the other ignores
    refunds. Each gets its own workspace, whose http connection reads that app's entitlement
    endpoint and whose Stripe connection receives the sandbox's signed events. The agent fully
    refunds each charge; the correct app must come out VERIFIED, the refund-ignoring one
    CONTRADICTED (``entitlement_not_revoked``); replaying ``charge.refunded`` changes neither
    the seats nor the verdicts.
    """
    name = "entitlement"
    scenario = ENTITLEMENT
    started = time.monotonic()
    outcome = Outcome(name, ok=False, expected=scenario.expected)
    agents: list[Agent] = []
    try:
        from examples.entitlement_app import create_app
    except ImportError as exc:
        # Say what is missing: the example needs the official `stripe` library (the `demo`
        # extra, which `scripts/demo` installs) and the repository's `examples/` directory.
        outcome.error = (
            f"the example app (examples/entitlement_app) cannot be imported: {exc} "
            "(run from a checkout with the demo extra: pip install -e '.[demo]', "
            "or bash scripts/demo)"
        )
        sink(name, {"done": outcome})
        return outcome
    from services.sandbox.runner import run_app

    with contextlib.ExitStack() as stack:
        try:
            sandbox = await asyncio.to_thread(system.new_sandbox)
            results: dict[str, dict[str, Any]] = {}
            charges: dict[str, str] = {}
            apps: dict[str, Any] = {}
            for variant, ignore in (("revokes", False), ("ignores", True)):
                app = create_app(
                    api_key=sandbox.api_key, api_base=sandbox.base_url, ignore_refunds=ignore
                )
                url = stack.enter_context(run_app(app))
                apps[variant] = (app, url)
                workspace = await open_workspace(system, sandbox, f"demo-entitlement-{variant}")
                await asyncio.to_thread(partial(system.connect_http, workspace.id, base_url=url))
                agent = Agent(name, system.api_url, workspace, sink)
                agents.append(agent)
                _, endpoint = await agent.stripe_post(
                    "/v1/webhook_endpoints",
                    {
                        "url": f"{url}/webhooks/stripe",
                        "enabled_events[]": ["checkout.session.completed", "charge.refunded"],
                    },
                )
                app.state.config.webhook_secret = endpoint["secret"]
            await asyncio.shield(asyncio.to_thread(system.wait_ready))
            for (variant, (_app, url)), agent in zip(apps.items(), agents, strict=True):
                paid = await agent.control(
                    "checkout/complete",
                    {
                        "amount": SEATS * SEAT_PRICE,
                        "quantity": SEATS,
                        "metadata": {"seats": str(SEATS)},
                    },
                )
                charge = str(paid["charge"]["id"])
                charges[variant] = charge
                await agent.control("flush")
                seats = await _app_seats(url, charge)
                agent.note(f"{variant} app: checkout paid {charge}, {seats} seats granted")
                if seats != SEATS:
                    raise ScenarioFailed(f"the {variant} app granted {seats} seats, not {SEATS}")
                op = await agent.create_operation(
                    {
                        "charge": charge,
                        "amount_refunded": SEATS * SEAT_PRICE,
                        "expected_seats": 0,
                    },
                    version="1.0.0",
                    contract=ENTITLEMENT_CONTRACT,
                )
                await agent.report(op["id"], {"phase": "started"})
                status, refund = await agent.stripe_post(
                    "/v1/refunds", {"charge": charge}, idempotency_key=op["id"]
                )
                if status != 200:
                    raise ScenarioFailed(f"the sandbox refused the refund: {status} {refund}")
                await agent.report(
                    op["id"], {"phase": "result", "result": refund, "http_status": status}
                )
                agent.note(f"{variant} app: full refund {refund['id']} reported")
                results[variant] = op
            for variant, agent in zip(apps, agents, strict=True):
                results[variant] = await agent.wait_final(results[variant]["id"])
            revokes, ignores = results["revokes"], results["ignores"]
            outcome.operation = revokes
            outcome.others = [ignores]
            error = judge(scenario, agents[0], revokes)
            if error is None and (ignores.get("verdict"), ignores.get("reason")) != (
                "CONTRADICTED",
                "entitlement_not_revoked",
            ):
                error = (
                    "the refund-ignoring app should be CONTRADICTED (entitlement_not_revoked); "
                    f"got {ignores.get('verdict')} ({ignores.get('reason')})"
                )
            if error is None:
                error = await _replay_changes_nothing(agents, apps, charges, results)
            outcome.error = error
            if revokes.get("final"):
                outcome.receipt_ok, outcome.receipt = await verify_receipt(agents[0].api, revokes)
                if not outcome.receipt_ok and outcome.error is None:
                    outcome.error = f"receipt not verified: {outcome.receipt}"
            outcome.timeline = await timeline(agents[0].api, revokes["id"])
        except (ScenarioFailed, httpx.HTTPError, RuntimeError, KeyError, ValueError) as exc:
            outcome.error = f"{exc.__class__.__name__}: {exc}"
        finally:
            if agents:
                outcome.seen = list(agents[0].seen)
            for agent in agents:
                await agent.close()
    outcome.elapsed_s = time.monotonic() - started
    outcome.ok = outcome.error is None
    sink(name, {"done": outcome})
    return outcome


async def _app_seats(url: str, charge: str) -> int | None:
    async with httpx.AsyncClient(base_url=url, timeout=10.0, limits=FRESH_CONNECTIONS) as client:
        response = await client.get(f"/entitlements/{charge}")
    if response.status_code != 200:
        return None
    return int(response.json()["seats"])


async def _replay_changes_nothing(
    agents: Sequence[Agent],
    apps: Mapping[str, Any],
    charges: Mapping[str, str],
    results: Mapping[str, Mapping[str, Any]],
) -> str | None:
    """Deliver each charge.refunded again: seats and verdicts must stay as they are."""
    agent = agents[0]
    listed = await agent.stripe.get("/v1/events", params={"type": "charge.refunded"})
    events = listed.json().get("data", [])
    for variant, (_app, url) in apps.items():
        before = await _app_seats(url, charges[variant])
        mine = [e for e in events if e["data"]["object"]["id"] == charges[variant]]
        if not mine:
            return f"no charge.refunded event for the {variant} app's charge"
        for event in mine:
            await agent.control(f"events/{event['id']}/resend")
        await agent.control("flush")
        after = await _app_seats(url, charges[variant])
        if after != before:
            return (
                f"replaying charge.refunded changed the {variant} app's seats: {before} → {after}"
            )
        agent.note(f"{variant} app: charge.refunded replayed, still {after} seats")
    for variant, other in zip(apps, agents, strict=True):
        op = await other.get(str(results[variant]["id"]))
        was = results[variant]
        if (op.get("verdict"), op.get("reason"), op.get("state")) != (
            was.get("verdict"),
            was.get("reason"),
            was.get("state"),
        ):
            return f"the replay changed the {variant} app's verdict: {was} → {op}"
    return None


ENTITLEMENT = Scenario(
    "entitlement",
    "The app takes the seats back after a refund",
    "Two apps sell 5 seats; after a full refund the correct one shows 0 (VERIFIED), "
    "the one that ignores refunds still 5 (CONTRADICTED); a replay changes neither.",
    Expected("VERIFIED", "all_conditions_hold", "VERIFIED"),
    None,
    own_sandbox=True,
    custom=_run_entitlement,
)
