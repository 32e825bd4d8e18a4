"""Playing one world: its plan's actions on its lane (the agent's refund and report, settlements,
the contradiction, the outage, the delivery faults), then the wait for its end and the cleanup;
the judging is :class:`bench._worlds.judge.Judgement`'s."""

from __future__ import annotations

import asyncio
import contextlib
import time
import traceback
from collections.abc import Awaitable
from dataclasses import asdict
from typing import Any

from bench._worlds.bounds import (
    AMOUNT,
    CONTRACT,
    LATE_REFUND_STATES,
    LOST_BOUND_S,
    OTHER_AMOUNT,
    SETTLE_S,
    STABLE_S,
)
from bench._worlds.harness import HarnessError, retrying
from bench._worlds.judge import Judgement
from bench._worlds.lanes import Lane
from bench._worlds.outcome import Outcome, allowed
from bench._worlds.plan import Plan
from bench._worlds.relay import Relay
from bench._worlds.watch import Watcher
from tests.e2e.worlds import World, contradicting_refund_created

__all__ = ["Play"]


class Play(Judgement):
    """Plays one :class:`Plan` on one lane."""

    def __init__(
        self,
        plan: Plan,
        lane: Lane,
        relay: Relay,
        api_url: str,
        poll_s: float,
        *,
        show_timeline: bool = False,
    ) -> None:
        self.plan = plan
        self.lane = lane
        self.relay = relay
        self.world = World(api_url, lane.workspace)
        self.watcher = Watcher(self.world, poll_s)
        self.t0 = time.monotonic()
        self.wall_offset = time.time() - time.monotonic()
        self.result = Outcome(plan.index, plan.seed, plan.classes(), asdict(plan))
        self.events: list[str] = []  # the world's own actions, for the timeline
        self.last_action = self.t0
        self.outage: tuple[float, float] | None = None  # monotonic start, end (provider readable)
        self.posted: list[tuple[float, str]] = []  # (ack, event id) of contradictions posted
        self.second_created: list[tuple[float, str]] = []  # (created, refund id) at the sandbox
        self.refund_status = ""
        self.tasks: list[asyncio.Task[None]] = []  # background actions, awaited before the end
        self.releaser: asyncio.Task[None] | None = None
        self.final_before_contradiction = False
        self.late_refund_made: float | None = None  # when the late refund was made
        self.show_timeline = show_timeline  # --timelines: kept even when the world passes

    def _note(self, text: str) -> None:
        now = time.monotonic()
        self.last_action = max(self.last_action, now)
        self.events.append(f"{now - self.t0:7.3f} {text}")

    async def _control(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return await retrying(lambda: self.world.control(path, body))
        except AssertionError as exc:
            raise HarnessError(f"sandbox control {path}: {exc}") from None

    async def _stripe_post(self, path: str, data: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """A provider call that waits out an outage (503) rather than failing the world."""
        deadline = time.monotonic() + 45
        while True:
            response = await self.world.stripe.post(path, data=data, **kw)
            if response.status_code == 200:
                result = response.json()
                assert isinstance(result, dict)
                return result
            if response.status_code != 503 or time.monotonic() > deadline:
                raise HarnessError(f"POST {path}: {response.status_code} {response.text[:200]}")
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------------ the world's actions
    async def _releaser(self) -> None:
        while True:
            await asyncio.sleep(self.plan.release_every_s)
            await self._control("release")

    async def _outage(self, start_after: float) -> None:
        assert self.plan.outage_at_s is not None
        await asyncio.sleep(max(0.0, start_after + self.plan.outage_at_s - time.monotonic()))
        sent = time.monotonic()
        await self._control("outage", {"seconds": self.plan.outage_s})
        self.outage = (sent, time.monotonic() + self.plan.outage_s)
        self._note(f"outage {self.plan.outage_s:.2f} s")
        await asyncio.sleep(self.plan.outage_s)
        self._note("outage over")

    async def _settle(self, status: str) -> None:
        await self._control(f"refunds/{self.world.refund_id}/status", {"status": status})
        self._note(f"agent refund set {status}")
        if status == "succeeded" and self.plan.outcome == "succeeded_then_failed":

            async def later() -> None:
                # A collision: the failure in the same second as the success (two
                # refund.updated of one second that disagree on the status).
                await asyncio.sleep(0.0 if self.plan.collide else SETTLE_S)
                await self._control(f"refunds/{self.world.refund_id}/status", {"status": "failed"})
                self._note("agent refund set failed")

            self.tasks.append(asyncio.ensure_future(later()))

    async def _contradict(self) -> None:
        if self.plan.second == "posted":
            event = contradicting_refund_created(
                self.world.charge, OTHER_AMOUNT, created=int(time.time())
            )
            try:
                acked = await self.world.post_event(event)
            except AssertionError as exc:
                raise HarnessError(f"posting the contradiction: {exc}") from None
            self.posted.append((acked, str(event["id"])))
            self._note(f"posted refund.created {event['id']} (acked {self._rel(acked)})")
        else:
            other = await self._stripe_post(
                "/v1/refunds",
                {
                    "charge": self.world.charge,
                    "amount": OTHER_AMOUNT,
                    "metadata[sandbox_outcome]": "succeeded",
                },
            )
            created = time.monotonic()
            self.second_created.append((created, str(other["id"])))
            self._note(f"second refund {other['id']} made at the sandbox")

    async def _after_verified(self, budget_s: float) -> None:
        seen = await self.watcher.until(lambda p: p.final, timeout_s=budget_s)
        if seen is not None and seen.state != "VERIFIED":
            self.final_before_contradiction = True  # only a VERIFIED is watched after
        if seen is None or seen.state != "VERIFIED":
            self.result.notes.append(
                "after: no VERIFIED to contradict"
                + (f" ({seen.state} {seen.reason})" if seen else " (not final)")
            )
        await asyncio.sleep(self.plan.gap_s)
        await self._contradict()

    async def _late_refund(self) -> None:
        """The refund the agent reported as rejected is made after all, under the operation's
        key, ``late_refund_s`` after the FAILED (or after waiting for one)."""
        assert self.plan.late_refund_s is not None
        seen = await self.watcher.until(lambda p: p.final, timeout_s=45 + self.plan.outage_s)
        if seen is None or seen.state != "FAILED":
            self.result.notes.append(
                "late refund: no FAILED first"
                + (f" ({seen.state} {seen.reason})" if seen else " (not final)")
            )
        await asyncio.sleep(self.plan.late_refund_s)
        refund = await self._stripe_post(
            "/v1/refunds",
            {
                "charge": self.world.charge,
                "amount": AMOUNT,
                "metadata[sandbox_outcome]": "succeeded",
            },
            headers={"Idempotency-Key": self.world.op_id},
        )
        self.world.refund_id = str(refund["id"])
        self.late_refund_made = time.monotonic()
        self._note(f"late refund {refund['id']} under the operation's key")

    async def _fail_after_verified(self, budget_s: float) -> None:
        """The refund fails after Provely showed it VERIFIED (or, if it never did within the
        budget, then); with ``backwards_at_failure`` its reads lag 10 min from that moment: a
        404 for a refund read before, a listing without it (World B of #30). Without a VERIFIED
        the reads stay current: an open operation's readings that go backwards wait for a
        consistent one, which a 10 min lag would put past the world's bounds."""
        seen = await self.watcher.until(lambda p: p.state == "VERIFIED", timeout_s=budget_s)
        if seen is None:
            self.result.notes.append("late failure: no VERIFIED seen within the budget")
        await asyncio.sleep(self.plan.fail_after_s)
        if self.plan.backwards_at_failure and seen is not None:
            await self._control(f"refunds/{self.world.refund_id}/read_lag", {"ms": 600_000})
            self._note("agent refund reads lag 600 s (404 from now)")
        await self._control(f"refunds/{self.world.refund_id}/status", {"status": "failed"})
        self._note("agent refund set failed (after VERIFIED)")

    async def _stuck_then_succeeded(self) -> None:
        await asyncio.sleep(self.plan.stuck_s)
        await self._settle("succeeded")

    async def _around(self) -> None:
        read = await self.watcher.until(
            lambda p: p.reason == "still_transitional", timeout_s=45 + self.plan.outage_s
        )
        if read is None:
            self.result.notes.append("around: Provely never read the refund pending")
        target = {"canceled": "canceled", "failed": "failed"}.get(self.plan.outcome, "succeeded")
        if self.plan.contradiction_first:
            await self._contradict()
            await asyncio.sleep(self.plan.gap_s)
            await self._settle(target)
        else:
            await self._settle(target)
            await asyncio.sleep(self.plan.gap_s)
            await self._contradict()

    # ------------------------------------------------------------------ the whole world
    async def run(self) -> Outcome:
        plan = self.plan
        result = self.result
        try:
            faults = {
                "duplicate": plan.duplicate,
                "order": plan.order,
                "shuffle_seed": plan.shuffle_seed,
                "delay_ms": plan.delay_ms,
                "drop_types": (["refund.updated"] if plan.drop_updated else [])
                + (["refund.created"] if plan.drop_created else []),
                "read_lag_ms": plan.read_lag_ms,
            }
            await self._control("faults", faults)
            try:
                op = await self.world.charge_and_create(amount=AMOUNT, contract=CONTRACT)
            except AssertionError as exc:
                raise HarnessError(f"creating the operation: {exc}") from None
            result.op_id, result.charge = self.world.op_id, self.world.charge
            result.contract_version = str(op["contract"]["version"])
            self._note(f"operation {result.op_id} on {result.charge}")
            self.watcher.start()
            if plan.order != "in_order":
                self.releaser = asyncio.ensure_future(self._releaser())
            await self._play()
            await self._wait_end()
        except HarnessError as exc:
            result.harness_error = str(exc)
        except Exception as exc:  # every failure of the harness is reported, with its world
            result.harness_error = f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
        finally:
            try:
                await self._cleanup()
            except Exception as exc:
                result.harness_error = result.harness_error or (
                    f"cleanup: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
                )
        if result.harness_error is None:
            try:
                await self._judge()
            except HarnessError as exc:
                result.harness_error = str(exc)
            except Exception as exc:
                result.harness_error = (
                    f"judging: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=4)}"
                )
        if result.failed or self.show_timeline:
            result.timeline = self._timeline()
        result.duration_s = round(time.monotonic() - self.t0, 2)
        await self.world.close()
        return result

    async def _play(self) -> None:
        plan = self.plan
        refund: dict[str, Any] | None = None
        if plan.report != "rejected_nothing":
            meta = (
                "stuck_pending"
                if plan.when == "around" or plan.outcome == "stuck_then_succeeded"
                else plan.outcome
            )
            refund = await self._stripe_post(
                "/v1/refunds",
                {"charge": self.world.charge, "amount": AMOUNT, "metadata[sandbox_outcome]": meta},
                headers={"Idempotency-Key": self.world.op_id},
            )
            self.world.refund_id = str(refund["id"])
            self._note(f"agent refund {refund['id']} ({meta})")
        made = time.monotonic()
        if plan.outage_at_s is not None:
            self.tasks.append(asyncio.ensure_future(self._outage(made)))
        try:
            if plan.report == "correct":
                assert refund is not None
                await self.world.report({"phase": "result", "http_status": 200, "result": refund})
            else:
                error = {"error": {"type": "invalid_request_error", "message": "made up"}}
                await self.world.report({"phase": "error", "http_status": 400, "error": error})
        except AssertionError as exc:
            raise HarnessError(f"reporting the action: {exc}") from None
        self._note(f"reported {plan.report}")
        steps: list[Awaitable[None]] = []
        if plan.outcome == "stuck_then_succeeded" and plan.when != "around" and refund:
            steps.append(self._stuck_then_succeeded())
        if plan.late_refund_s is not None:
            steps.append(self._late_refund())
        if plan.when == "around":
            steps.append(self._around())
        elif plan.when == "before":
            steps.append(self._before(made))
        elif plan.when == "after":
            # A succeeded refund whose refund.updated never arrives is never VERIFIED: its
            # contradiction comes once the refund has settled, without waiting for a verdict.
            budget = SETTLE_S + plan.stuck_s + 4.0 if plan.drop_updated else 45.0
            steps.append(self._after_verified(budget + plan.outage_s + plan.stuck_s))
        if plan.fail_after_verified:
            budget = SETTLE_S + plan.stuck_s + 4.0 if plan.drop_updated else 45.0
            steps.append(self._fail_after_verified(budget + plan.outage_s + plan.stuck_s))
        await asyncio.gather(*steps)
        # The world's background actions (a later failure, the outage) finish before the end.
        done = 0
        while done < len(self.tasks):  # a settlement may add a later failure meanwhile
            await self.tasks[done]
            done += 1

    async def _before(self, made: float) -> None:
        await asyncio.sleep(max(0.0, made + self.plan.gap_s - time.monotonic()))
        await self._contradict()

    def _expected(self) -> tuple[set[str], bool]:
        """Final states the planned truth allows, and whether a non-final PENDING is."""
        plan = self.plan
        if plan.late_refund_s is not None:
            return set(LATE_REFUND_STATES), False
        return allowed(plan.final_status, plan.second != "none", plan.drop_updated)

    async def _wait_end(self) -> None:
        accepted, pending_ok = self._expected()
        if self.final_before_contradiction:
            # A final verdict other than VERIFIED came before the contradiction; it stays.
            await asyncio.sleep(max(0.0, self.last_action + 2.0 - time.monotonic()))
        elif pending_ok:
            until = self.last_action + STABLE_S
            await asyncio.sleep(max(0.0, until - time.monotonic()))
            last = self.watcher.last
            if last is not None and last.final and last.state not in accepted:
                # A final state: give it the same bound as any other world to become an allowed one.
                await self.watcher.until(
                    lambda p: p.final and p.state in accepted,
                    timeout_s=max(0.0, self.last_action + LOST_BOUND_S - time.monotonic()),
                )
        else:
            await self.watcher.until(
                lambda p: p.final and p.state in accepted,
                timeout_s=max(0.0, self.last_action + LOST_BOUND_S - time.monotonic()),
            )
        await asyncio.sleep(0.5)  # keep watching: a VERIFIED must not come back

    async def _cleanup(self) -> None:
        if self.releaser is not None:
            self.tasks.append(self.releaser)
        for task in self.tasks:
            task.cancel()
        for task in self.tasks:
            with contextlib.suppress(asyncio.CancelledError, HarnessError):
                await task
        await self.watcher.stop()
        await self._control("outage", {"enabled": False})
        await self._control(
            "faults",
            {
                "duplicate": 1,
                "order": "in_order",
                "delay_ms": 0,
                "drop_types": [],
                "read_lag_ms": 0,
            },
        )
        if self.world.refund_id:  # the truth is read without lag
            await self._control(f"refunds/{self.world.refund_id}/read_lag", {"ms": 0})
        await self._control("release")
