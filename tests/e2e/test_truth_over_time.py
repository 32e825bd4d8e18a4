"""A VERIFIED that stays true, on the distributed system (PostgreSQL, Redis, Celery workers and
the sandbox as separate processes): decisions on everything acknowledged, late evidence that
always supersedes, rechecks that survive an outage, and no verdict on the agent's word."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

import pytest

from services.cli.demo.scenarios.workspace import Workspace, open_workspace
from shared.trust.registry import get_registry
from tests.e2e.launcher import DistributedSystem
from tests.e2e.worlds import World, contradicting_refund_created

pytestmark = pytest.mark.e2e

NEWEST = get_registry().versions("stripe.refund.succeeded")[-1]

CONCURRENCY = 12


def _run(system: DistributedSystem, body: Callable[[Workspace], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        sandbox = system.new_sandbox()
        workspace = await open_workspace(system, sandbox, "truth")
        return await body(workspace)

    return asyncio.run(main())


async def _many(count: int, one: Callable[[int], Awaitable[Any]]) -> list[Any]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def guarded(i: int) -> Any:
        async with gate:
            return await one(i)

    return list(await asyncio.gather(*(guarded(i) for i in range(count))))


def test_an_event_acknowledged_before_the_decision_is_always_part_of_it(
    distributed: DistributedSystem,
) -> None:
    """A second refund's ``refund.created`` stored just before or just after the refund's own
    ``refund.updated`` (succeeded), 0-50 ms apart, 200 times, in the window where the decision
    is being made. A decision that began after the contradiction's 200 must count it: no
    VERIFIED decided after the acknowledgement, so no poll shows VERIFIED for such an
    operation. A decision that began before it may verify; the contradiction then supersedes
    it within seconds. Every operation ends contradicted."""
    rng = random.Random(23)
    plans = [(rng.choice(["before", "after"]), rng.uniform(0, 0.05)) for _ in range(200)]

    async def body(workspace: Workspace) -> list[dict[str, Any]]:
        async def one(i: int) -> dict[str, Any]:
            order, delay = plans[i]
            world = World(distributed.api_url, workspace)
            try:
                await world.agent_refund(outcome="stuck_pending")
                await world.wait(
                    lambda op: op["reason"] == "still_transitional",
                    timeout_s=30,
                    what="the first readback (pending)",
                )
                watcher = world.watcher()
                watcher.start()
                other = contradicting_refund_created(world.charge, 700, created=int(time.time()))
                settle = {"status": "succeeded"}
                if order == "before":
                    acked = await world.post_event(other)
                    await asyncio.sleep(delay)
                    await world.control(f"refunds/{world.refund_id}/status", settle)
                else:
                    await world.control(f"refunds/{world.refund_id}/status", settle)
                    await asyncio.sleep(delay)
                    acked = await world.post_event(other)
                acked_wall = time.time()
                final = await world.wait(
                    lambda op: op["state"] in ("CONTRADICTED", "HUMAN_REVIEW"),
                    timeout_s=30,
                    what="the contradiction",
                )
                contradicted_in_s = time.monotonic() - acked  # an upper bound
                await asyncio.sleep(0.3)  # keep watching: a VERIFIED must not come back
                await watcher.stop()
                result = {
                    "order": order,
                    "outcome": f"{final['state']}/{final['reason']}",
                    "verified_seen_after_ack": len(watcher.verified_after(acked)),
                    "verified_decided_at": None,
                    "acked_at": acked_wall,
                    "superseded_in_s": None,
                }
                if final["state"] == "HUMAN_REVIEW":
                    current = (await world.receipt())["receipt"]
                    old = await world._ok(
                        await world.api.get(f"/v1/receipts/{current['supersedes']}")
                    )
                    decided = datetime.fromisoformat(old["receipt"]["decided_at"])
                    result["verified_decided_at"] = decided.timestamp()
                    result["superseded_in_s"] = contradicted_in_s
                return result
            finally:
                await world.close()

        return await _many(len(plans), one)

    results = _run(distributed, body)
    counted = sum(r["verified_decided_at"] is None for r in results)
    print(  # the figures of the run (pytest -s shows them)
        f"window: {len(results)} runs, {counted} decided with the contradiction counted, "
        f"{len(results) - counted} verified before it arrived and superseded "
        f"(slowest {max((r['superseded_in_s'] or 0) for r in results):.2f} s)"
    )
    # A VERIFIED decided after the contradiction was acknowledged is a false VERIFIED.
    false_verified = [
        r
        for r in results
        if r["verified_decided_at"] is not None and r["verified_decided_at"] >= r["acked_at"]
    ]
    assert false_verified == [], false_verified
    for r in results:
        if r["verified_decided_at"] is None:
            assert r["outcome"] == "CONTRADICTED/duplicate_refund_present", r
            assert r["verified_seen_after_ack"] == 0, r
        else:
            assert r["outcome"] == "HUMAN_REVIEW/late_contradiction", r
            assert r["superseded_in_s"] < 5.0, r
    assert {r["order"] for r in results} == {"before", "after"}
    # The window was hit: most contradictions landed before the decision.
    assert sum(r["verified_decided_at"] is None for r in results) >= 100


async def _verified(world: World, **create: Any) -> dict[str, Any]:
    await world.agent_refund(**create)
    op = await world.wait(lambda op: op["final"], timeout_s=30, what="the refund's verdict")
    if op["state"] == "VERIFIED" and op["completion_level"] == "succeeded":
        # The terminal level: the resource and the receipt both let the agent claim it.
        assert op["safe_to_claim_complete"] is True
        assert (await world.receipt())["receipt"]["safe_to_claim_complete"] is True
    return op


def test_a_late_second_refund_supersedes_the_verified_receipt(
    distributed: DistributedSystem,
) -> None:
    """A second refund's ``refund.created`` (no idempotency key, another refund id) 0.5-5 s
    after the VERIFIED: HUMAN_REVIEW ``late_contradiction`` with a receipt that supersedes the
    VERIFIED one, 100 of 100."""
    rng = random.Random(2)
    delays = [rng.uniform(0.5, 5.0) for _ in range(100)]

    async def body(workspace: Workspace) -> list[tuple[str, float]]:
        async def one(i: int) -> tuple[str, float]:
            world = World(distributed.api_url, workspace)
            try:
                op = await _verified(world)
                assert op["state"] == "VERIFIED", op
                assert op["watch_until"] is not None
                first = await world.receipt()
                assert first["receipt"]["watch_until"] == op["watch_until"]
                await asyncio.sleep(delays[i])
                other = contradicting_refund_created(world.charge, 700, created=int(time.time()))
                acked = await world.post_event(other)
                flagged = await world.wait(
                    lambda op: op["state"] == "HUMAN_REVIEW", timeout_s=20, what="supersession"
                )
                took = time.monotonic() - acked
                receipt = await world.receipt()
                assert flagged["reason"] == "late_contradiction", flagged
                assert flagged["safe_to_claim_complete"] is False
                assert receipt["receipt"]["supersedes"] == first["receipt"]["id"]
                assert receipt["receipt"]["safe_to_claim_complete"] is False
                return flagged["reason"], took
            finally:
                await world.close()

        return await _many(len(delays), one)

    results = _run(distributed, body)
    assert [r[0] for r in results] == ["late_contradiction"] * 100


def test_a_late_second_refund_supersedes_while_the_provider_answers_503(
    distributed: DistributedSystem,
) -> None:
    """The same, 100 of 100, while every readback of the rechecks answers 503 (a 10 s outage
    from before the first contradiction): the second refund's event alone contradicts, so the
    supersession does not wait for the provider."""
    rng = random.Random(3)
    delays = [rng.uniform(0.5, 5.0) for _ in range(100)]

    async def body(workspace: Workspace) -> list[str]:
        worlds = [World(distributed.api_url, workspace) for _ in delays]
        try:
            for op in await _many(len(worlds), lambda i: _verified(worlds[i])):
                assert op["state"] == "VERIFIED", op
            await worlds[0].control("outage", {"seconds": 10})

            async def contradict(i: int) -> str:
                world = worlds[i]
                await asyncio.sleep(delays[i])
                event = contradicting_refund_created(world.charge, 700, created=int(time.time()))
                await world.post_event(event)
                flagged = await world.wait(
                    lambda op: op["state"] == "HUMAN_REVIEW", timeout_s=30, what="supersession"
                )
                assert (await world.receipt())["receipt"]["supersedes"] is not None
                return str(flagged["reason"])

            return list(await asyncio.gather(*(contradict(i) for i in range(len(worlds)))))
        finally:
            for world in worlds:
                await world.close()

    assert _run(distributed, body) == ["late_contradiction"] * 100


def test_a_refund_that_fails_after_success_while_the_provider_is_down_is_superseded_once_it_reads(
    distributed: DistributedSystem,
) -> None:
    """``refund.failed`` after the VERIFIED while every readback answers 503 for 10 s: each
    recheck that cannot read is tried again on the contract's backoff (never dropped), and the
    first one that reads the failed refund supersedes the VERIFIED receipt. Contract 1.1.0,
    which reads no failure event: only a recheck that reads can supersede there. 1.2.0 reads
    the signed failure event as a channel of its own and supersedes on it alone, outage or not
    (#30): its world is superseded before the provider answers again."""

    async def body(workspace: Workspace) -> None:
        worlds = [World(distributed.api_url, workspace) for _ in range(4)]
        newest = World(distributed.api_url, workspace)
        try:
            verified = await asyncio.gather(
                *(_verified(w, contract_version="1.1.0") for w in worlds), _verified(newest)
            )
            for op in verified:
                assert op["state"] == "VERIFIED", op
            assert verified[-1]["contract"]["version"] == NEWEST
            await worlds[0].control("outage", {"seconds": 10})
            started = time.monotonic()
            for world in [*worlds, newest]:
                await world.control(f"refunds/{world.refund_id}/status", {"status": "failed"})
            flagged = await newest.wait(
                lambda op: op["state"] == "HUMAN_REVIEW", timeout_s=60, what="supersession"
            )
            assert flagged["reason"] == "late_contradiction", flagged
            assert time.monotonic() - started < 9.0  # on the failure event, during the outage
            for world in worlds:
                flagged = await world.wait(
                    lambda op: op["state"] == "HUMAN_REVIEW", timeout_s=60, what="supersession"
                )
                assert flagged["reason"] == "late_contradiction", flagged
                assert time.monotonic() - started >= 9.0  # not before the provider answered
                receipt = await world.receipt()
                assert receipt["receipt"]["supersedes"] is not None
                timeline = await world._ok(
                    await world.api.get(f"/v1/operations/{world.op_id}/timeline")
                )
                unread = [
                    e
                    for e in timeline["entries"]
                    if e["kind"] == "observation"
                    and e["channel"] == "refund_readback"
                    and e["status"] == "unavailable"
                ]
                assert len(unread) >= 2, unread  # rechecks tried during the outage
        finally:
            for world in [*worlds, newest]:
                await world.close()

    _run(distributed, body)


def test_a_created_level_verdict_never_claims_completion(distributed: DistributedSystem) -> None:
    """``stripe.refund.created`` verifies while the refund is still pending at Stripe: the API
    and the receipt say VERIFIED at the created level, and neither lets anyone claim the refund
    succeeded."""

    async def body(workspace: Workspace) -> None:
        world = World(distributed.api_url, workspace)
        try:
            op = await _verified(world, outcome="stuck_pending", contract="stripe.refund.created")
            assert (op["state"], op["verdict"]) == ("VERIFIED", "VERIFIED")
            assert op["completion_level"] == "created"
            assert op["safe_to_claim_complete"] is False
            assert "created" in op["claim"]
            status = await world.stripe.get(f"/v1/refunds/{world.refund_id}")
            assert status.json()["status"] == "pending"
            receipt = await world.receipt()
            assert receipt["receipt"]["safe_to_claim_complete"] is False
            assert receipt["receipt"]["contract"]["completion_level"] == "created"
        finally:
            await world.close()

    _run(distributed, body)


def test_a_reported_rejection_with_a_refund_made_under_the_key_is_never_failed(
    distributed: DistributedSystem,
) -> None:
    """The agent says 400 invalid_request_error, but the refund exists under the operation's
    idempotency key: the event teaches Provely the refund, and it is judged on it (VERIFIED),
    never FAILED and never a permission to refund again."""

    async def body(workspace: Workspace) -> None:
        world = World(distributed.api_url, workspace)
        try:
            await world.charge_and_create()
            status, refund = await world.refund(idempotency_key=world.op_id)
            assert status == 200
            error = {"error": {"type": "invalid_request_error", "message": "made up"}}
            out = await world.report({"phase": "error", "http_status": 400, "error": error})
            assert (out["state"], out["final"]) == ("OBSERVING", False)
            watcher = world.watcher()
            watcher.start()
            final = await world.wait(lambda op: op["final"], timeout_s=45, what="a verdict")
            await watcher.stop()
            assert final["state"] == "VERIFIED", final
            assert final["subject"]["id"] == refund["id"]
            assert all(p.state != "FAILED" for p in watcher.polls)
            assert all(
                p.verdict != "FAILED" and not (p.final and p.state == "FAILED")
                for p in watcher.polls
            )
        finally:
            await world.close()

    _run(distributed, body)


def test_a_reported_rejection_with_nothing_created_fails_only_once_confirmed(
    distributed: DistributedSystem,
) -> None:
    """The agent says 400 and indeed made no refund: PENDING (retry ``never``) until the
    charge's refunds are listed empty and the event channel's typical latency (4 s) has passed
    with no refund.created; only then FAILED ``action_rejected``, a new operation allowed."""

    async def body(workspace: Workspace) -> None:
        world = World(distributed.api_url, workspace)
        try:
            await world.charge_and_create()
            error = {"error": {"type": "invalid_request_error", "message": "No such charge"}}
            reported = time.monotonic()
            out = await world.report({"phase": "error", "http_status": 400, "error": error})
            assert (out["state"], out["final"], out["retry"]["action"]) == (
                "OBSERVING",
                False,
                "never",
            )
            seen: list[dict[str, Any]] = []

            def done(op: dict[str, Any]) -> bool:
                seen.append(op)
                return bool(op["final"])

            final = await world.wait(done, timeout_s=45, what="the confirmation")
            assert time.monotonic() - reported >= 4.0
            assert (final["state"], final["reason"]) == ("FAILED", "action_rejected"), final
            assert final["retry"]["action"] == "allowed_as_new_operation"
            for op in seen[:-1]:
                assert op["retry"]["action"] == "never", op
                assert op["final"] is False
            assert any(op["reason"] == "awaiting_rejection_confirmation" for op in seen)
            kinds = {c["kind"] for c in final["conditions"]}
            assert "rejection" in kinds
            receipt = await world.receipt()
            assert receipt["receipt"]["reason"] == "action_rejected"
        finally:
            await world.close()

    _run(distributed, body)


def test_a_confirmed_rejection_is_watched_and_a_late_refund_under_its_key_supersedes_it(
    distributed: DistributedSystem,
) -> None:
    """FAILED ``action_rejected`` (a new operation allowed) is watched like VERIFIED: its retry
    advice says until when it stands, and a refund made later under the operation's own
    idempotency key moves it to HUMAN_REVIEW (retry ``never``) with a superseding receipt."""

    async def body(workspace: Workspace) -> None:
        world = World(distributed.api_url, workspace)
        try:
            await world.charge_and_create()
            error = {"error": {"type": "invalid_request_error", "message": "No such charge"}}
            await world.report({"phase": "error", "http_status": 400, "error": error})
            failed = await world.wait(lambda op: op["final"], timeout_s=45, what="the failure")
            assert (failed["state"], failed["reason"]) == ("FAILED", "action_rejected"), failed
            assert failed["retry"]["action"] == "allowed_as_new_operation"
            assert failed["watch_until"] is not None
            assert failed["retry"]["stands_until"] == failed["watch_until"]
            first = await world.receipt()
            assert first["receipt"]["watch_until"] == failed["watch_until"]
            # The refund the agent said was refused appears after all, under the same key.
            status, _ = await world.refund(idempotency_key=world.op_id)
            assert status == 200
            flagged = await world.wait(
                lambda op: op["state"] == "HUMAN_REVIEW", timeout_s=30, what="supersession"
            )
            assert flagged["reason"] == "late_contradiction", flagged
            assert flagged["retry"]["action"] == "never"
            assert flagged["retry"]["stands_until"] is None
            receipt = await world.receipt()
            assert receipt["receipt"]["supersedes"] == first["receipt"]["id"]
        finally:
            await world.close()

    _run(distributed, body)
