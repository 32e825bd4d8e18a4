"""Running scenarios concurrently against a system: each on a workspace of the shared sandbox, or
on a sandbox of its own when it changes the provider's global state; each judged."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Sequence

import httpx

from services.cli.demo.scenarios.agent import Agent
from services.cli.demo.scenarios.catalog import SCENARIOS
from services.cli.demo.scenarios.judging import judge, timeline, verify_receipt
from services.cli.demo.scenarios.scenario import Outcome, Scenario
from services.cli.demo.scenarios.system import ProgressSink, ScenarioFailed, System
from services.cli.demo.scenarios.workspace import Workspace, open_workspace

__all__ = ["SCENARIO_TIMEOUT_S", "run_scenarios"]

SCENARIO_TIMEOUT_S = 120.0


async def _run_one(
    scenario: Scenario, system: System, workspace: Workspace, sink: ProgressSink
) -> Outcome:
    started = time.monotonic()
    agent = Agent(scenario.name, system.api_url, workspace, sink)
    outcome = Outcome(scenario.name, ok=False, expected=scenario.expected)
    try:
        assert scenario.play is not None
        op_id = await asyncio.wait_for(scenario.play(agent), SCENARIO_TIMEOUT_S)
        op = await agent.get(op_id)
        if scenario.expected.final and not op.get("final"):
            op = await agent.wait_final(op_id)
        outcome.operation = op
        outcome.error = judge(scenario, agent, op)
        if op.get("final"):
            outcome.receipt_ok, outcome.receipt = await verify_receipt(agent.api, op)
            if not outcome.receipt_ok and outcome.error is None:
                outcome.error = f"receipt not verified: {outcome.receipt}"
        outcome.timeline = await timeline(agent.api, op_id)
    except TimeoutError:
        outcome.error = f"did not finish within {SCENARIO_TIMEOUT_S:.0f} s"
    except ScenarioFailed as exc:
        outcome.error = str(exc)
    except httpx.HTTPError as exc:
        outcome.error = f"{exc.__class__.__name__}: {exc}"
    finally:
        if outcome.operation is None:
            outcome.operation = agent.last  # what the operation looked like when it failed
        outcome.seen = list(agent.seen)
        outcome.elapsed_s = time.monotonic() - started
        await agent.close()
    outcome.ok = outcome.error is None
    sink(scenario.name, {"done": outcome})
    return outcome


async def run_scenarios(
    names: Sequence[str], system: System, sink: ProgressSink | None = None
) -> list[Outcome]:
    """Run the named scenarios concurrently; scenarios that change the provider's global
    state (an outage) get a sandbox and a workspace of their own."""
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown:
        raise ValueError(f"unknown scenario(s): {', '.join(unknown)}")
    sink = sink or (lambda _name, _update: None)
    scenarios = [SCENARIOS[n] for n in names]
    ready = asyncio.ensure_future(asyncio.to_thread(system.wait_ready))

    shared_needed = any(not s.own_sandbox for s in scenarios)
    shared_sandbox = await asyncio.to_thread(system.new_sandbox) if shared_needed else None
    setups: dict[str, Awaitable[Workspace]] = {}
    shared_ws: asyncio.Task[Workspace] | None = None
    if shared_sandbox is not None:
        shared_ws = asyncio.ensure_future(open_workspace(system, shared_sandbox, "demo"))
    for s in scenarios:
        if s.custom is not None:
            continue
        if s.own_sandbox:
            sandbox = await asyncio.to_thread(system.new_sandbox)
            setups[s.name] = asyncio.ensure_future(
                open_workspace(system, sandbox, f"demo-{s.name}")
            )
        else:
            assert shared_ws is not None
            setups[s.name] = shared_ws
    for s in scenarios:
        sink(s.name, {"note": "setting up the workspace and the provider connection"})

    async def run(s: Scenario) -> Outcome:
        if s.custom is not None:
            return await s.custom(system, sink)
        try:
            workspace = await setups[s.name]
            await asyncio.shield(ready)
        except (ScenarioFailed, httpx.HTTPError, RuntimeError, KeyError, ValueError) as exc:
            outcome = Outcome(s.name, ok=False, expected=s.expected, error=f"setup: {exc}")
            sink(s.name, {"done": outcome})
            return outcome
        return await _run_one(s, system, workspace, sink)

    return list(await asyncio.gather(*(run(s) for s in scenarios)))
