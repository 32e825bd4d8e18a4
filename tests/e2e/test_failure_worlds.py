"""Worlds A and B of #30 on the distributed system (PostgreSQL, Redis, Celery workers and the
sandbox as separate processes): a provider whose refund readback lags behind the refund's
real state (``/_sandbox/refunds/{id}/read_lag``), and a refund that fails after it succeeded.

- **World A** — the refund succeeds, then fails; ``refund.failed`` is stored before the agent
  reports; the first readback, served from the lagging view, still says ``succeeded``. It must
  never be VERIFIED: the stored failure event holds the decision back until the readback shows
  the failure (FAILED ``terminal_failure``).
- **World B** — VERIFIED; then the refund fails and its ``refund.updated`` (failed) and
  ``refund.failed`` are stored while the readback (lagging) answers 404 for the refund and the
  listing of the charge lost it. Those readings go backwards and settle nothing; the failure
  events supersede the VERIFIED on their own (HUMAN_REVIEW ``late_contradiction``) within 5 s
  of the intake's 200 for ``refund.failed``.

Each world runs in 15 copies at once. On the code before #30 (contracts 1.1.0, no failure
channel, a recheck that settles on a 404) World A ended VERIFIED and World B stayed VERIFIED
in every copy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from services.cli.demo.scenarios.workspace import Workspace, open_workspace
from tests.e2e.launcher import DistributedSystem
from tests.e2e.worlds import World

pytestmark = pytest.mark.e2e

COPIES = 15
CONCURRENCY = 12
SETTLE_S = 2.0  # the launcher's sandbox settles a refund 2 s after each step
SUPERSEDE_BOUND_S = 5.0


def _run(system: DistributedSystem, body: Callable[[Workspace], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        sandbox = system.new_sandbox()
        workspace = await open_workspace(system, sandbox, "failure-worlds")
        return await body(workspace)

    return asyncio.run(main())


async def _copies(one: Callable[[int], Awaitable[dict[str, Any]]]) -> list[dict[str, Any]]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def guarded(i: int) -> dict[str, Any]:
        async with gate:
            return await one(i)

    return list(await asyncio.gather(*(guarded(i) for i in range(COPIES))))


async def _delivered(world: World, event_type: str, *, timeout_s: float = 30) -> None:
    """Wait until the sandbox delivered (200 from the intake) ``event_type`` of the refund."""
    deadline = time.monotonic() + timeout_s
    while True:
        response = await world.stripe.get(
            "/_sandbox/deliveries", params={"type": event_type, "status": "delivered"}
        )
        rows = response.json()["data"]
        if any(world.refund_id in row["payload"] for row in rows):
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"{event_type} of {world.refund_id} was not delivered")
        await asyncio.sleep(0.05)


def test_world_a_a_stored_failure_is_never_verified_on_a_lagging_readback(
    distributed: DistributedSystem,
) -> None:
    async def body(workspace: Workspace) -> list[dict[str, Any]]:
        async def one(_: int) -> dict[str, Any]:
            world = World(distributed.api_url, workspace)
            try:
                await world.charge_and_create()
                status, refund = await world.refund(
                    outcome="succeeded_then_failed", idempotency_key=world.op_id
                )
                assert status == 200, refund
                made = time.monotonic()
                world.refund_id = str(refund["id"])
                # succeeded at +2 s, failed at +4 s; both events stored before the report.
                await _delivered(world, "refund.failed")
                watcher = world.watcher()
                watcher.start()
                # The first readback comes initial_delay (1 s) after the report: serve it the
                # state of +3 s, in the middle of the succeeded window.
                lag_ms = int((time.monotonic() - made + 1.0 - 1.5 * SETTLE_S) * 1000)
                await world.control(f"refunds/{world.refund_id}/read_lag", {"ms": lag_ms})
                await world.report({"phase": "result", "http_status": 200, "result": refund})
                final = await world.wait(
                    lambda op: op["final"], timeout_s=60, what="the refund's verdict"
                )
                await asyncio.sleep(0.3)
                await watcher.stop()
                return {
                    "op": world.op_id,
                    "outcome": f"{final['state']}/{final['reason']}",
                    "verified_polls": len(watcher.verified_after(0.0)),
                    "held_back": any(
                        p.reason == "failure_event_after_success" for p in watcher.polls
                    ),
                }
            finally:
                await world.close()

        return await _copies(one)

    results = _run(distributed, body)
    held = sum(r["held_back"] for r in results)
    print(f"world A: {len(results)} copies, {held} seen held back by the failure event")
    assert [r for r in results if r["verified_polls"]] == []
    assert [r for r in results if r["outcome"] != "FAILED/terminal_failure"] == []
    # The lagging readback was really met: the failure event held some decisions back.
    assert held >= 1


def test_world_b_failure_events_supersede_while_the_readback_goes_backwards(
    distributed: DistributedSystem,
) -> None:
    async def body(workspace: Workspace) -> list[dict[str, Any]]:
        async def one(_: int) -> dict[str, Any]:
            world = World(distributed.api_url, workspace)
            try:
                await world.agent_refund(outcome="succeeded")
                verified = await world.wait(
                    lambda op: op["final"], timeout_s=60, what="the refund's verdict"
                )
                assert verified["state"] == "VERIFIED", verified
                # From now on a read of the refund is served from before it existed: 404, and
                # a listing of the charge without it.
                await world.control(f"refunds/{world.refund_id}/read_lag", {"ms": 600_000})
                await world.control(f"refunds/{world.refund_id}/status", {"status": "failed"})
                failed_at = time.monotonic()
                await _delivered(world, "refund.failed")
                stored_in_s = time.monotonic() - failed_at
                try:
                    final = await world.wait(
                        lambda op: op["state"] != "VERIFIED",
                        timeout_s=SUPERSEDE_BOUND_S + 10,
                        what="the late failure to supersede",
                    )
                except AssertionError:
                    final = await world.get()
                superseded_in_s = time.monotonic() - failed_at
                receipt = (await world.receipt())["receipt"]
                return {
                    "op": world.op_id,
                    "outcome": f"{final['state']}/{final['reason']}",
                    "stored_in_s": stored_in_s,
                    "superseded_in_s": superseded_in_s,
                    "supersedes": receipt.get("supersedes"),
                }
            finally:
                await world.close()

        return await _copies(one)

    results = _run(distributed, body)
    after_stored = [r["superseded_in_s"] - r["stored_in_s"] for r in results]
    print(
        f"world B: {len(results)} copies, slowest supersession {max(after_stored):.2f} s after "
        f"refund.failed was stored ({max(r['superseded_in_s'] for r in results):.2f} s after "
        "the refund failed)"
    )
    assert [r for r in results if r["outcome"] != "HUMAN_REVIEW/late_contradiction"] == []
    assert all(r["supersedes"] for r in results), results
    # The bound runs from the failure's storage (the intake's 200 for refund.failed).
    late = [r for r in results if r["superseded_in_s"] - r["stored_in_s"] > SUPERSEDE_BOUND_S]
    assert late == [], late
