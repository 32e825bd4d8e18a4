"""Judging a played world: the truth (the sandbox's refunds on the charge, read at the end) against
what Provely said (the polls, the receipts following ``supersedes``); and the world's timeline.

:class:`Judgement` is the part of :class:`bench._worlds.play.Play` that reads and judges once the
world's actions are over; ``Play`` sets what it reads.
"""

from __future__ import annotations

import asyncio
import time
from datetime import datetime
from functools import partial
from typing import Any

from bench._worlds.bounds import (
    CONTRADICTING_STATUSES,
    LATE_REFUND_STATES,
    LOST_BOUND_S,
    OUTAGE_TRY_SLACK_S,
    RECHECK_BACKOFF_MS,
    SUPERSEDE_BOUND_S,
)
from bench._worlds.harness import HarnessError, retrying
from bench._worlds.outcome import Outcome, allowed
from bench._worlds.plan import Plan
from bench._worlds.relay import Relay
from bench._worlds.watch import Watcher
from tests.e2e.worlds import World

__all__ = ["Judgement"]


class Judgement:
    """Reads the truth and what Provely said of one world, and judges them into its result."""

    plan: Plan
    relay: Relay
    world: World
    watcher: Watcher
    t0: float
    wall_offset: float
    result: Outcome
    events: list[str]
    last_action: float
    outage: tuple[float, float] | None
    posted: list[tuple[float, str]]
    second_created: list[tuple[float, str]]
    late_refund_made: float | None

    def _rel(self, t: float) -> float:
        return round(t - self.t0, 3)

    async def _stripe_get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + 45
        while True:
            response = await retrying(lambda: self.world.stripe.get(path, params=params))
            if response.status_code == 200:
                result = response.json()
                assert isinstance(result, dict)
                return result
            if response.status_code != 503 or time.monotonic() > deadline:
                raise HarnessError(f"GET {path}: {response.status_code} {response.text[:200]}")
            await asyncio.sleep(0.2)

    async def _receipts(self) -> list[dict[str, Any]]:
        """The operation's receipts, newest first, following ``supersedes``."""
        response = await retrying(
            lambda: self.world.api.get(f"/v1/operations/{self.world.op_id}/receipt")
        )
        if response.status_code == 404:
            return []
        if response.status_code != 200:
            raise HarnessError(f"GET receipt: {response.status_code} {response.text[:200]}")
        chain = [response.json()["receipt"]]
        while chain[-1].get("supersedes"):
            url = f"/v1/receipts/{chain[-1]['supersedes']}"
            old = await retrying(partial(self.world.api.get, url))
            if old.status_code != 200:
                raise HarnessError(f"GET superseded receipt: {old.status_code} {old.text[:200]}")
            chain.append(old.json()["receipt"])
        return chain

    def _mono(self, iso: str) -> float:
        return datetime.fromisoformat(iso).timestamp() - self.wall_offset

    # pay down (C901): one branch per kind of world; a judge per kind
    async def _judge(self) -> None:  # noqa: C901
        plan, result = self.plan, self.result
        # The truth: the charge's refunds at the sandbox.
        listing = await self._stripe_get("/v1/refunds", {"charge": self.world.charge, "limit": 100})
        refunds = listing["data"]
        ours = [r for r in refunds if r["id"] == self.world.refund_id]
        result.agent_status = str(ours[0]["status"]) if ours else None
        others = [r for r in refunds if r["id"] != self.world.refund_id]
        result.other_refunds = len(others)
        if plan.report != "rejected_nothing" and not ours:
            raise HarnessError("the agent's refund is not listed on its charge")
        if (result.agent_status or None) != plan.final_status:
            result.notes.append(f"planned {plan.final_status}, sandbox says {result.agent_status}")
        duplicate = bool(others) or bool(self.posted)
        result.truth = (
            ("duplicate" if others else "duplicate_event" if self.posted else "single")
            + "/"
            + (result.agent_status or "nothing")
        )

        # Contradicting evidence and when it was acknowledged.
        contradictions: list[tuple[float, str]] = [(t, f"posted {e}") for t, e in self.posted]
        for delivered in self.relay.for_charge(self.world.charge):
            if not delivered.acks:
                continue
            first = min(delivered.acks)
            self.events.append(
                f"{first - self.t0:7.3f} delivered: {delivered.type} {delivered.object_id} "
                f"{delivered.status or ''} (200s: {len(delivered.acks)})"
            )
            if delivered.type == "refund.created" and delivered.object_id != self.world.refund_id:
                contradictions.append((first, f"delivered refund.created {delivered.object_id}"))
            elif (
                delivered.object_id == self.world.refund_id
                and delivered.type in ("refund.updated", "refund.failed")
                and delivered.status in CONTRADICTING_STATUSES
            ):
                contradictions.append((first, f"delivered {delivered.type} {delivered.status}"))
        contradictions.sort()
        for t, what in contradictions:
            self.events.append(f"{t - self.t0:7.3f} ack: {what}")

        receipts = await self._receipts()
        for receipt in receipts:
            decided_at = self._mono(str(receipt["decided_at"]))
            counts = ", ".join(
                f"{c['id']} observed {c.get('observed')}"
                for c in receipt.get("conditions", [])
                if isinstance(c, dict)
                and c.get("id") in ("duplicate_refund_present", "duplicate_refund_by_readback")
            )
            self.events.append(
                f"{decided_at - self.t0:7.3f} decided: receipt {receipt['id']} "
                f"{receipt.get('verdict')} ({receipt.get('reason')}), "
                f"supersedes {receipt.get('supersedes')}; {counts}"
            )
        verified = [r for r in receipts if r.get("verdict") == "VERIFIED"]
        polls = self.watcher.polls
        last = polls[-1] if polls else None
        if last is None:
            raise HarnessError("no poll of the operation answered")
        result.final_state, result.final_reason = last.state, last.reason
        accepted, pending_ok = allowed(result.agent_status, duplicate, plan.drop_updated)
        if plan.late_refund_s is not None:
            accepted, pending_ok = set(LATE_REFUND_STATES), False
        if plan.report == "rejected_with_refund" and plan.drop_created:
            # The agent said "rejected" and its refund's refund.created never came: nothing ties
            # the refund to the operation (the listing carries no key), so it waits, PENDING and
            # never a retry, for its deadline and a person.
            pending_ok = True
        # A second refund made at the sandbox counts from its creation (its event may be dropped).
        first_contradiction = min(
            [t for t, _ in contradictions] + [t for t, _ in self.second_created], default=None
        )
        failed_first = [
            r
            for r in receipts
            if r.get("verdict") == "FAILED"
            and first_contradiction is not None
            and self._mono(str(r["decided_at"])) < first_contradiction
        ]
        if failed_first:
            accepted.add("FAILED")  # decided before any contradiction came; FAILED is not watched
        result.accepted = sorted(accepted) + (["PENDING (non-final)"] if pending_ok else [])

        # False VERIFIED: decided at or after contradicting evidence was acknowledged.
        for receipt in verified:
            decided = self._mono(str(receipt["decided_at"]))
            early = [(t, w) for t, w in contradictions if t <= decided]
            if early:
                t, what = early[0]
                result.false_verified.append(
                    f"receipt {receipt['id']} decided at {self._rel(decided)} s, "
                    f"{what} acknowledged at {self._rel(t)} s"
                )
            listed = next(
                (
                    e
                    for e in receipt.get("evidence", [])
                    if isinstance(e, dict) and e.get("channel") == "charge_refunds"
                ),
                None,
            )
            if listed and listed.get("observed_at") and self.second_created:
                read = self._mono(str(listed["observed_at"]))
                # A lagging provider lists the refund read_lag_ms after it was made: a listing
                # read before then cannot show it (its event is what catches it, and a late
                # contradiction must then supersede as any other).
                made = self.second_created[0][0] + plan.read_lag_ms / 1000
                if read > made + 1.0:
                    result.false_verified.append(
                        f"receipt {receipt['id']}: charge listed at {self._rel(read)} s, "
                        f"the second refund was readable since {self._rel(made)} s"
                    )
        # Any other final decision made after a second refund was acknowledged: the negative
        # conditions come first, so a FAILED decided then did not count it (and allows a retry).
        seconds = [(t, w) for t, w in contradictions if "refund.created" in w or "posted" in w]
        for receipt in receipts:
            if receipt.get("verdict") not in ("FAILED", "UNVERIFIABLE", "EXPIRED") or not seconds:
                continue
            decided = self._mono(str(receipt["decided_at"]))
            if decided >= seconds[0][0]:
                result.ignored_contradiction = (
                    f"receipt {receipt['id']} {receipt.get('verdict')} ({receipt.get('reason')}) "
                    f"decided at {self._rel(decided)} s, {seconds[0][1]} acknowledged at "
                    f"{self._rel(seconds[0][0])} s"
                )
        bad_truth = duplicate or result.agent_status in CONTRADICTING_STATUSES
        if (
            bad_truth
            and last.state == "VERIFIED"
            and receipts
            and receipts[0].get("verdict") == "VERIFIED"
        ):
            result.false_verified.append(f"ends VERIFIED, never superseded, truth {result.truth}")

        # Late contradictions: evidence acknowledged after the VERIFIED was decided.
        if verified:
            decided = self._mono(str(verified[-1]["decided_at"]))
            late = [(t, w) for t, w in contradictions if t > decided]
            if late:
                await self._late(late[0], decided, receipts, verified[-1])

        # Lost, unexpected, stable non-final.
        if plan.late_refund_s is not None and last.state == "FAILED":
            result.failed_standing = (
                f"ends FAILED ({last.reason}), retry {last.retry}, though refund "
                f"{self.world.refund_id} was made under its key at "
                f"{self._rel(self.late_refund_made or 0.0)} s"
            )
        elif last.final and last.state not in accepted:
            result.unexpected = f"ends {last.state} ({last.reason}); allowed {result.accepted}"
        elif not last.final and not pending_ok:
            result.lost = (
                f"still {last.state} ({last.reason}) {LOST_BOUND_S:.0f} s after the last "
                f"action at {self._rel(self.last_action)} s"
            )
        if any(p.state == "VERIFIED" for p in polls) and last.state == "VERIFIED" and pending_ok:
            result.notes.append("VERIFIED without any refund.updated delivered")

        # Retry advice. After a late refund under the key, the FAILED that allowed a retry is
        # given the supersession bound (and any outage) to be superseded.
        if self.late_refund_made is not None:
            made = self.late_refund_made
            superseded = next(
                (p for p in polls if p.sent >= made and p.state == "HUMAN_REVIEW"), None
            )
            if superseded is not None:
                result.late_refund_supersede_s = round(superseded.received - made, 3)
            bound = made + SUPERSEDE_BOUND_S + self.plan.outage_s
            wrong = [p for p in polls if p.sent > bound and p.retry != "never"]
            if wrong:
                p = wrong[0]
                result.wrong_retry = (
                    f"retry.action {p.retry} at {self._rel(p.sent)} s ({p.state} {p.reason}), "
                    f"{p.sent - made:.2f} s after refund {self.world.refund_id} was made under "
                    "the operation's key"
                )
        elif result.agent_status is not None and result.agent_status != "failed":
            wrong = [p for p in polls if p.retry != "never"]
            if wrong:
                p = wrong[0]
                result.wrong_retry = (
                    f"retry.action {p.retry} at {self._rel(p.sent)} s ({p.state} {p.reason}) "
                    f"while refund {self.world.refund_id} is {result.agent_status}"
                )

    async def _late(
        self,
        first: tuple[float, str],
        decided: float,
        receipts: list[dict[str, Any]],
        verified: dict[str, Any],
    ) -> None:
        result = self.result
        ack, what = first
        polls = self.watcher.polls
        shown = next((p for p in polls if p.state == "HUMAN_REVIEW"), None)
        superseded = any(r.get("supersedes") == verified["id"] for r in receipts)
        visible = shown.received if shown else None
        took = None if visible is None else max(0.0, visible - ack)
        result.late = {
            "ack_s": self._rel(ack),
            "what": what,
            "decided_s": self._rel(decided),
            "human_review_s": None if visible is None else self._rel(visible),
            "reason": shown.reason if shown else None,
            "superseded": superseded,
            "took_s": None if took is None else round(took, 3),
        }
        outage = self.outage
        if outage is not None and outage[0] < ack + SUPERSEDE_BOUND_S and outage[1] > ack:
            result.waited_for_provider = True
            bound = self._first_try_after(ack, outage[1]) + SUPERSEDE_BOUND_S
            result.late["readable_s"] = self._rel(outage[1])
            result.late["bound_s"] = self._rel(bound)
            result.late["within_5s_of_readable"] = (
                visible is not None and visible <= outage[1] + SUPERSEDE_BOUND_S
            )
        else:
            bound = ack + SUPERSEDE_BOUND_S
            result.supersede_s = took
        if visible is None or visible > bound or not superseded:
            result.late_failure = (
                f"{what} acknowledged at {self._rel(ack)} s after the VERIFIED decided at "
                f"{self._rel(decided)} s; "
                + (
                    f"HUMAN_REVIEW ({shown.reason}) visible at {self._rel(visible)} s"
                    if shown and visible is not None
                    else "never HUMAN_REVIEW"
                )
                + f", bound {self._rel(bound)} s, superseding receipt: {superseded}"
            )
        elif shown is not None and shown.reason != "late_contradiction":
            result.notes.append(f"HUMAN_REVIEW reason {shown.reason}")

    @staticmethod
    def _first_try_after(ack: float, readable: float) -> float:
        """When the first recheck try after ``readable`` is due, on the contract's backoff
        (a try at the acknowledgement, then poll_interval, times factor, capped), plus the
        sweeper's slack."""
        interval_ms, factor, cap_ms = RECHECK_BACKOFF_MS
        t, delay = ack, float(interval_ms)
        while t < readable:
            t += delay / 1000
            delay = min(cap_ms, delay * factor)
        return t + OUTAGE_TRY_SLACK_S

    def _timeline(self) -> list[str]:
        lines = list(self.events)
        previous: tuple[Any, ...] | None = None
        for p in self.watcher.polls:
            key = (p.state, p.reason, p.safe, p.retry)
            if key != previous:
                lines.append(
                    f"{p.sent - self.t0:7.3f} poll: {p.state} {p.verdict} ({p.reason}) "
                    f"safe={p.safe} retry={p.retry} [answered {p.received - self.t0:.3f}]"
                )
                previous = key
        return sorted(lines, key=lambda line: float(line.split()[0]))
