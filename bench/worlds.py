"""Worlds: a seeded, replayable randomized stress of orderings, duplicates, delays and outages
against the running distributed system (ingress, observer, verdict and sweeper as processes, on
a private PostgreSQL database and Redis index, Stripe sandboxes as processes).

Each world is one agent refund operation of ``stripe.refund.succeeded`` (the newest version) on
a charge of its own. Its randomness comes from ``random.Random(f"{seed}:{k}")`` alone, so world
``k`` can be replayed by itself (``--world K``). It draws:

- the agent's refund outcome: ``succeeded``, ``failed``, ``canceled``, ``stuck_then_succeeded``
  (pending until the harness settles it 1-4 s later), ``succeeded_then_failed``;
- what the agent reports: the refund (``correct``), a 400 rejection although the refund was made
  under the operation's idempotency key (``rejected_with_refund``), or a 400 with nothing made
  (``rejected_nothing``);
- a contradiction: a second refund on the same charge made at the sandbox (``sandbox``: a real
  duplicate, its ``refund.created`` delivered by the sandbox), or only a second refund's
  ``refund.created`` posted to the intake (``posted``), or none; and when: ``before`` the
  decision (0-1.5 s after the agent's refund), ``around`` it (the agent's refund is held pending
  until Provely has read it pending, then settled, and the contradiction lands 0-50 ms before or
  after the settlement, in both orders), ``after`` the VERIFIED (0.5-5 s after it was first
  seen), or ``never``;
- delivery faults of its sandbox: ``duplicate`` 1-5 copies, ``reversed`` / ``shuffled`` order (the
  world releases the held deliveries every 0.2-1.5 s), ``delay_ms`` 0-300, dropping every
  ``refund.updated`` (and, with ``--drop-created``, every ``refund.created``, the agent's own
  included: a draw made last, so the other draws of a world do not change with the flag);
- a provider outage of 0-10 s starting 0-6 s after the agent's refund.

Sandbox-wide faults are never shared: the harness runs ``--concurrency`` lanes, each a sandbox
process with a workspace of its own, and a lane runs one world at a time (its faults are set at
the start of the world and cleared at its end, an outage is ended, held deliveries released).

Acknowledgement times. Events the harness posts are timed at the intake's 200. Sandbox
deliveries go through a relay in this process (the workspace's webhook endpoint at the sandbox
names it; it forwards body and signature unchanged to the intake and answers with the intake's
status), which times the intake's 200 of every delivery: the sandbox's own attempt log has whole
seconds only.

What is checked, per world, against the truth (the sandbox's refunds on the charge, read at the
end) and against what Provely said (a poll of the operation every ``--poll-ms``, each with the
time its request left and its answer came back; the receipts, superseded ones fetched through
``GET /v1/receipts/{id}`` following ``supersedes``):

- **false VERIFIED**: a VERIFIED receipt whose ``decided_at`` is at or after the acknowledgement
  of contradicting evidence (a second refund's ``refund.created``; a ``refund.updated`` /
  ``refund.failed`` of the agent's refund saying failed or canceled); or a world whose truth is a
  duplicate or a failed refund that ends VERIFIED, never superseded; or a VERIFIED whose charge
  listing (``charge_refunds`` in the receipt) was read more than 1 s after a second refund was
  created at the sandbox;
- **other verdicts decided past a second refund**: a FAILED (or UNVERIFIABLE, EXPIRED)
  receipt decided at or after a second refund's ``refund.created`` was acknowledged. The
  negative conditions come before the verdict map, so the decision did not see that refund as
  a duplicate, and a FAILED lets the agent refund again. (A FAILED decided before any
  contradiction stays: only a VERIFIED is watched.);
- **late contradictions**: contradicting evidence acknowledged after the VERIFIED was decided
  must show HUMAN_REVIEW ``late_contradiction`` through the API within 5 s of the
  acknowledgement. When the provider was down at some point of those 5 s the recheck cannot
  read; those are counted apart as *waited for the provider*, with their times. Their recheck is
  retried on the contract's backoff (5 s, 10 s, 20 s ... after each try that could not read), so
  a failure is one not superseded within 5 s of the first retry due after the provider answered
  again (plus 2.5 s for the sweeper to send an overdue recheck); the count of those not
  superseded within 5 s of the outage's end (a stricter bound the backoff does not promise) is
  printed beside it;
- **lost operations**: an operation that does not reach a final state its truth allows within
  ``LOST_BOUND_S`` (60 s) after the world's last action (the last fault, settlement,
  contradiction or outage end). Where the truth allows a non-final state it must be PENDING
  (never VERIFIED) once ``STABLE_S`` (8 s) have passed: a succeeded refund whose every
  ``refund.updated`` was dropped (the contract needs one), a rejection reported with nothing
  made while another refund exists on the charge;
- **wrong retry advice**: any poll that showed ``retry.action`` other than ``never`` while a
  refund under the operation's idempotency key exists at the sandbox and did not fail;
- **unexpected verdicts**: a final state the truth does not allow (not one of the above; e.g. a
  CONTRADICTED single refund), listed;
- **harness errors**: a world the harness could not play (an HTTP error of the sandbox, a
  timeout): reported with its index and seed, never dropped.

Usage (from the repository root)::

    .venv/bin/python bench/worlds.py [--worlds 1000] [--seed 1] [--concurrency 12]
        [--world K ...] [--poll-ms 100] [--drop-created] [--timelines] [--records FILE]
        [--json] [--pg URL] [--redis URL]

``--world K`` (repeatable; alias ``--only-seed-of``) replays world K of ``--seed`` alone;
``--timelines`` prints every world's timeline (its actions, each delivery's first 200, each
receipt's ``decided_at``, the polls where what Provely said changed), not only the failing
worlds'; ``--records`` writes every world as a JSON line.

Progress goes to stderr every few seconds, the figures to stdout at the end; the exit status is
non-zero when any failure count or harness error is. The system gets a database of its own on
``--pg``'s server and claims an empty index on ``--redis``'s server (``tests.e2e.launcher``);
both are dropped / flushed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import os
import random
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
from starlette.applications import Starlette  # noqa: E402
from starlette.requests import Request  # noqa: E402
from starlette.responses import Response  # noqa: E402
from starlette.routing import Route  # noqa: E402

from services.cli.demo.scenarios.system import Sandbox  # noqa: E402
from services.cli.demo.scenarios.workspace import Workspace  # noqa: E402
from services.sandbox.runner import run_app  # noqa: E402
from tests.e2e.launcher import DistributedSystem, running_system  # noqa: E402
from tests.e2e.worlds import World, contradicting_refund_created  # noqa: E402

CONTRACT = "stripe.refund.succeeded"
AMOUNT, OTHER_AMOUNT = 2000, 700
SUPERSEDE_BOUND_S = 5.0
LOST_BOUND_S = 60.0
STABLE_S = 8.0
WAIT_STEP_S = 0.05
SETTLE_S = 2.0  # the sandbox's settle_ms in the launcher (DEFAULT_SANDBOX_OPTIONS)
RECHECK_BACKOFF_MS = (5000, 2, 60000)  # the 1.1.0 contract's poll_interval, factor, max
OUTAGE_TRY_SLACK_S = 2.5  # the sweeper's grace and interval, before an overdue recheck is sent
CONTRADICTING_STATUSES = ("failed", "canceled")
DROP_CREATED = False  # --drop-created: also drop every refund.created in 15 % of the worlds
SHOW_TIMELINES = False  # --timelines: keep every world's timeline, not only the failing ones
FINAL_STATES = ("VERIFIED", "FAILED", "CONTRADICTED", "HUMAN_REVIEW", "UNVERIFIABLE", "EXPIRED")


T = TypeVar("T")


class HarnessError(Exception):
    """The harness could not play the world (not a finding about Provely)."""


# --------------------------------------------------------------------------------------------
# The plan of a world: every draw from its own random.Random(f"{seed}:{k}")
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    index: int
    seed: str
    outcome: str
    report: str
    second: str  # none | sandbox | posted
    when: str  # never | before | around | after
    contradiction_first: bool  # around: the contradiction before the settlement
    gap_s: float
    stuck_s: float
    duplicate: int
    order: str
    shuffle_seed: int
    release_every_s: float
    delay_ms: int
    drop_updated: bool
    outage_at_s: float | None
    outage_s: float
    drop_created: bool = False  # only with --drop-created

    @property
    def final_status(self) -> str | None:
        """The agent refund's status at the end, as planned (None: no refund made)."""
        if self.report == "rejected_nothing":
            return None
        return {
            "succeeded": "succeeded",
            "stuck_then_succeeded": "succeeded",
            "failed": "failed",
            "canceled": "canceled",
            "succeeded_then_failed": "failed",
        }[self.outcome]

    def classes(self) -> dict[str, str]:
        faults = []
        if self.duplicate > 1:
            faults.append(f"dup{self.duplicate}")
        if self.order != "in_order":
            faults.append(self.order)
        if self.delay_ms:
            faults.append("delay")
        if self.drop_updated:
            faults.append("drop_updated")
        if self.drop_created:
            faults.append("drop_created")
        return {
            "outcome": self.outcome if self.report != "rejected_nothing" else "none",
            "report": self.report,
            "contradiction": f"{self.second}/{self.when}",
            "delivery": "+".join(faults) or "clean",
            "outage": "outage" if self.outage_at_s is not None else "no_outage",
        }


def draw_plan(seed: int, index: int) -> Plan:
    rng = random.Random(f"{seed}:{index}")
    outcome = rng.choices(
        ["succeeded", "failed", "canceled", "stuck_then_succeeded", "succeeded_then_failed"],
        weights=[40, 12, 10, 18, 20],
    )[0]
    report = rng.choices(
        ["correct", "rejected_with_refund", "rejected_nothing"], weights=[76, 12, 12]
    )[0]
    second = rng.choices(["none", "sandbox", "posted"], weights=[36, 32, 32])[0]
    when = "never" if second == "none" else rng.choice(["before", "around", "after"])
    if when == "around" and report == "rejected_nothing":
        when = "before"  # nothing to settle
    contradiction_first = rng.random() < 0.5
    gap_s = {
        "never": 0.0,
        "before": rng.uniform(0.0, 1.5),
        "around": rng.uniform(0.0, 0.05),
        "after": rng.uniform(0.5, 5.0),
    }[when]
    stuck_s = rng.uniform(1.0, 4.0)
    duplicate = 1 if rng.random() < 0.5 else rng.randint(2, 5)
    order = rng.choices(["in_order", "reversed", "shuffled"], weights=[60, 20, 20])[0]
    shuffle_seed = rng.randrange(1 << 30)
    release_every_s = rng.uniform(0.2, 1.5)
    delay_ms = 0 if rng.random() < 0.5 else rng.randint(0, 300)
    drop_updated = rng.random() < 0.15
    outage = rng.random() < 0.2
    outage_at_s = rng.uniform(0.0, 6.0) if outage else None
    outage_s = rng.uniform(0.0, 10.0) if outage else 0.0
    drop_created = rng.random() < 0.15  # drawn last: the draws above stay what they were
    return Plan(
        index=index,
        seed=f"{seed}:{index}",
        outcome=outcome,
        report=report,
        second=second,
        when=when,
        contradiction_first=contradiction_first,
        gap_s=gap_s,
        stuck_s=stuck_s,
        duplicate=duplicate,
        order=order,
        shuffle_seed=shuffle_seed,
        release_every_s=release_every_s,
        delay_ms=delay_ms,
        drop_updated=drop_updated,
        outage_at_s=outage_at_s,
        outage_s=outage_s,
        drop_created=drop_created and DROP_CREATED,
    )


# --------------------------------------------------------------------------------------------
# The relay: sandbox deliveries to the intake, each 200 timed
# --------------------------------------------------------------------------------------------


@dataclass
class Delivered:
    event_id: str
    type: str
    object_id: str
    charge: str
    status: str | None
    acks: list[float] = field(default_factory=list)  # monotonic times of the intake's 200s
    refused: list[int] = field(default_factory=list)


class Relay:
    """Forwards ``POST /{workspace}`` to the intake's ``/v1/events/stripe/{workspace}``."""

    def __init__(self, ingress_url: str) -> None:
        self.ingress_url = ingress_url
        self.by_charge: dict[str, dict[str, Delivered]] = {}
        self.forwarded = 0
        self.failed = 0
        self._lock = threading.Lock()
        self._client: httpx.AsyncClient | None = None

    def app(self) -> Starlette:
        @contextlib.asynccontextmanager
        async def lifespan(_app: Starlette) -> AsyncIterator[None]:
            self._client = httpx.AsyncClient(
                base_url=self.ingress_url,
                timeout=30.0,
                limits=httpx.Limits(
                    max_keepalive_connections=8, max_connections=32, keepalive_expiry=1.0
                ),
            )
            try:
                yield
            finally:
                await self._client.aclose()

        return Starlette(
            routes=[Route("/{workspace}", self._relay, methods=["POST"])], lifespan=lifespan
        )

    async def _relay(self, request: Request) -> Response:
        assert self._client is not None
        body = await request.body()
        headers = {
            "Content-Type": request.headers.get("content-type", "application/json"),
            "Stripe-Signature": request.headers.get("stripe-signature", ""),
        }
        workspace = request.path_params["workspace"]
        try:
            answer = await self._client.post(
                f"/v1/events/stripe/{workspace}", content=body, headers=headers
            )
        except httpx.HTTPError:
            with self._lock:
                self.failed += 1
            return Response(status_code=502)
        acked = time.monotonic()
        self._note(body, answer.status_code, acked)
        return Response(
            content=answer.content,
            status_code=answer.status_code,
            media_type=answer.headers.get("content-type"),
        )

    def _note(self, body: bytes, status_code: int, acked: float) -> None:
        try:
            event = json.loads(body)
            obj = event["data"]["object"]
            event_id, type_ = str(event["id"]), str(event["type"])
        except (ValueError, KeyError, TypeError):
            return
        charge = str(obj.get("charge") or (obj.get("id") if obj.get("object") == "charge" else ""))
        with self._lock:
            self.forwarded += 1
            events = self.by_charge.setdefault(charge, {})
            entry = events.get(event_id)
            if entry is None:
                entry = events[event_id] = Delivered(
                    event_id, type_, str(obj.get("id")), charge, obj.get("status")
                )
            if 200 <= status_code < 300:
                entry.acks.append(acked)
            else:
                entry.refused.append(status_code)

    def for_charge(self, charge: str) -> list[Delivered]:
        with self._lock:
            return [
                Delivered(d.event_id, d.type, d.object_id, d.charge, d.status, list(d.acks))
                for d in self.by_charge.get(charge, {}).values()
            ]


# --------------------------------------------------------------------------------------------
# Lanes: a sandbox and a workspace each, one world at a time
# --------------------------------------------------------------------------------------------


@dataclass
class Lane:
    number: int
    workspace: Workspace


async def open_lane(system: DistributedSystem, relay_url: str, number: int) -> Lane:
    sandbox: Sandbox = await asyncio.to_thread(system.new_sandbox)
    workspace_id, api_key = await asyncio.to_thread(system.create_workspace, f"worlds-{number}")
    async with httpx.AsyncClient(
        base_url=sandbox.base_url,
        headers={"Authorization": f"Bearer {sandbox.api_key}"},
        timeout=30.0,
    ) as stripe:
        response = await stripe.post(
            "/v1/webhook_endpoints",
            data={"url": f"{relay_url}/{workspace_id}", "enabled_events[]": "*"},
        )
    if response.status_code != 200:
        raise HarnessError(f"cannot register the webhook endpoint: {response.text[:300]}")
    secret = str(response.json()["secret"])
    await asyncio.to_thread(
        lambda: system.connect_stripe(
            workspace_id, webhook_secret=secret, api_key=sandbox.api_key, base_url=sandbox.base_url
        )
    )
    return Lane(number, Workspace(workspace_id, api_key, sandbox, secret))


# --------------------------------------------------------------------------------------------
# Watching the operation
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Poll:
    sent: float
    received: float
    state: str
    verdict: str | None
    reason: str | None
    safe: bool
    final: bool
    retry: str


class Watcher:
    def __init__(self, world: World, interval_s: float) -> None:
        self.world = world
        self.interval_s = interval_s
        self.polls: list[Poll] = []
        self.errors = 0
        self._task: asyncio.Task[None] | None = None

    @property
    def last(self) -> Poll | None:
        return self.polls[-1] if self.polls else None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self._run())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
        while True:
            sent = time.monotonic()
            try:
                response = await self.world.api.get(f"/v1/operations/{self.world.op_id}")
            except httpx.HTTPError:
                self.errors += 1
                await asyncio.sleep(self.interval_s)
                continue
            received = time.monotonic()
            if response.status_code == 200:
                op = response.json()
                self.polls.append(
                    Poll(
                        sent,
                        received,
                        str(op["state"]),
                        op.get("verdict"),
                        op.get("reason"),
                        bool(op.get("safe_to_claim_complete")),
                        bool(op.get("final")),
                        str(op["retry"]["action"]),
                    )
                )
            else:
                self.errors += 1
            await asyncio.sleep(self.interval_s)

    async def until(self, predicate: Callable[[Poll], bool], *, timeout_s: float) -> Poll | None:
        deadline = time.monotonic() + timeout_s
        seen = 0
        while time.monotonic() < deadline:
            for poll in self.polls[seen:]:
                if predicate(poll):
                    return poll
            seen = len(self.polls)
            await asyncio.sleep(WAIT_STEP_S)
        return None


# --------------------------------------------------------------------------------------------
# One world
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What the harness measured in one world (times are seconds from the world's start)."""

    index: int
    seed: str
    classes: dict[str, str]
    plan: dict[str, Any]
    op_id: str = ""
    charge: str = ""
    contract_version: str = ""
    harness_error: str | None = None
    truth: str = ""
    agent_status: str | None = None
    other_refunds: int = 0
    final_state: str = ""
    final_reason: str | None = None
    accepted: list[str] = field(default_factory=list)
    false_verified: list[str] = field(default_factory=list)
    ignored_contradiction: str | None = None
    late: dict[str, Any] | None = None
    late_failure: str | None = None
    waited_for_provider: bool = False
    lost: str | None = None
    unexpected: str | None = None
    wrong_retry: str | None = None
    supersede_s: float | None = None
    duration_s: float = 0.0
    timeline: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return bool(
            self.harness_error
            or self.false_verified
            or self.ignored_contradiction
            or self.late_failure
            or self.lost
            or self.wrong_retry
            or self.unexpected
        )


async def _retrying(request: Callable[[], Awaitable[T]], *, tries: int = 4) -> T:
    """An idempotent request (a read, a sandbox control call) tried again when the connection
    breaks: a keep-alive connection the server closed while it sat idle fails the next request
    without an answer, which says nothing about the system under test."""
    for attempt in range(tries):
        try:
            return await request()
        except httpx.TransportError:
            if attempt == tries - 1:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def allowed(status: str | None, contradiction: bool, drop_updated: bool) -> tuple[set[str], bool]:
    """Final states a truth allows, and whether a non-final PENDING is allowed: ``status`` is
    the agent refund's (None: none made), ``contradiction`` a second refund or its event."""
    if status is None:
        if contradiction:  # another refund on the charge: no confirmation that nothing was made
            return {"CONTRADICTED", "HUMAN_REVIEW"}, True
        return {"FAILED"}, False
    if contradiction:
        return {"CONTRADICTED", "HUMAN_REVIEW"} | (
            {"FAILED"} if status == "failed" else set()
        ), False
    if status == "succeeded":
        return {"VERIFIED"}, drop_updated  # the contract needs a refund.updated
    if status == "failed":
        return {"FAILED", "HUMAN_REVIEW"}, False  # HUMAN_REVIEW: it had succeeded first
    if status == "canceled":
        return {"CONTRADICTED"}, False
    return set(), True  # still pending


class Play:
    """Plays one :class:`Plan` on one lane."""

    def __init__(self, plan: Plan, lane: Lane, relay: Relay, api_url: str, poll_s: float) -> None:
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

    def _note(self, text: str) -> None:
        now = time.monotonic()
        self.last_action = max(self.last_action, now)
        self.events.append(f"{now - self.t0:7.3f} {text}")

    def _rel(self, t: float) -> float:
        return round(t - self.t0, 3)

    async def _control(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        try:
            return await _retrying(lambda: self.world.control(path, body))
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

    async def _stripe_get(self, path: str, params: dict[str, Any]) -> dict[str, Any]:
        deadline = time.monotonic() + 45
        while True:
            response = await _retrying(lambda: self.world.stripe.get(path, params=params))
            if response.status_code == 200:
                result = response.json()
                assert isinstance(result, dict)
                return result
            if response.status_code != 503 or time.monotonic() > deadline:
                raise HarnessError(f"GET {path}: {response.status_code} {response.text[:200]}")
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
                await asyncio.sleep(SETTLE_S)
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
        if result.failed or SHOW_TIMELINES:
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
        if plan.when == "around":
            steps.append(self._around())
        elif plan.when == "before":
            steps.append(self._before(made))
        elif plan.when == "after":
            # A succeeded refund whose refund.updated never arrives is never VERIFIED: its
            # contradiction comes once the refund has settled, without waiting for a verdict.
            budget = SETTLE_S + plan.stuck_s + 4.0 if plan.drop_updated else 45.0
            steps.append(self._after_verified(budget + plan.outage_s + plan.stuck_s))
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
            {"duplicate": 1, "order": "in_order", "delay_ms": 0, "drop_types": []},
        )
        await self._control("release")

    # ------------------------------------------------------------------ judging
    async def _receipts(self) -> list[dict[str, Any]]:
        """The operation's receipts, newest first, following ``supersedes``."""
        response = await _retrying(
            lambda: self.world.api.get(f"/v1/operations/{self.world.op_id}/receipt")
        )
        if response.status_code == 404:
            return []
        if response.status_code != 200:
            raise HarnessError(f"GET receipt: {response.status_code} {response.text[:200]}")
        chain = [response.json()["receipt"]]
        while chain[-1].get("supersedes"):
            url = f"/v1/receipts/{chain[-1]['supersedes']}"
            old = await _retrying(partial(self.world.api.get, url))
            if old.status_code != 200:
                raise HarnessError(f"GET superseded receipt: {old.status_code} {old.text[:200]}")
            chain.append(old.json()["receipt"])
        return chain

    def _mono(self, iso: str) -> float:
        return datetime.fromisoformat(iso).timestamp() - self.wall_offset

    async def _judge(self) -> None:
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
                made = self.second_created[0][0]
                if read > made + 1.0:
                    result.false_verified.append(
                        f"receipt {receipt['id']}: charge listed at {self._rel(read)} s, "
                        f"the second refund existed since {self._rel(made)} s"
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
        if last.final and last.state not in accepted:
            result.unexpected = f"ends {last.state} ({last.reason}); allowed {result.accepted}"
        elif not last.final and not pending_ok:
            result.lost = (
                f"still {last.state} ({last.reason}) {LOST_BOUND_S:.0f} s after the last "
                f"action at {self._rel(self.last_action)} s"
            )
        if any(p.state == "VERIFIED" for p in polls) and last.state == "VERIFIED" and pending_ok:
            result.notes.append("VERIFIED without any refund.updated delivered")

        # Retry advice.
        if result.agent_status is not None and result.agent_status != "failed":
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


# --------------------------------------------------------------------------------------------
# Running many
# --------------------------------------------------------------------------------------------


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(q / 100 * len(ordered)) - 1))  # nearest rank
    return ordered[rank]


def summarize(
    results: list[Outcome], duration_s: float, args: argparse.Namespace
) -> dict[str, Any]:
    late = [r for r in results if r.late is not None]
    waited = [r for r in late if r.waited_for_provider]
    supersede = [r.supersede_s for r in results if r.supersede_s is not None]
    per_class: dict[str, Counter[str]] = {}
    for r in results:
        for axis, value in r.classes.items():
            per_class.setdefault(axis, Counter())[value] += 1
    finals = Counter(f"{r.final_state}/{r.final_reason}" for r in results if not r.harness_error)
    truths = Counter(r.truth for r in results if not r.harness_error)

    def failures(name: str) -> list[dict[str, Any]]:
        return [
            {
                "world": r.index,
                "seed": r.seed,
                "op": r.op_id,
                "classes": r.classes,
                "what": getattr(r, name),
                "truth": r.truth,
                "final": f"{r.final_state} ({r.final_reason})",
                "late": r.late,
                "notes": r.notes,
                "timeline": r.timeline,
            }
            for r in results
            if getattr(r, name)
        ]

    return {
        "seed": args.seed,
        "worlds": len(results),
        "concurrency": args.concurrency,
        "poll_ms": args.poll_ms,
        "duration_s": round(duration_s, 1),
        "contract_versions": sorted({r.contract_version for r in results if r.contract_version}),
        "false_verified": sum(bool(r.false_verified) for r in results),
        "ignored_contradiction": sum(bool(r.ignored_contradiction) for r in results),
        "late_contradictions": len(late),
        "late_not_superseded_within_5s": sum(
            bool(r.late_failure) for r in late if not r.waited_for_provider
        ),
        "waited_for_provider": len(waited),
        "waited_for_provider_failures": sum(bool(r.late_failure) for r in waited),
        "waited_for_provider_not_within_5s_of_readable": sum(
            not (r.late or {}).get("within_5s_of_readable") for r in waited
        ),
        "waited_for_provider_times_s": [
            {
                "world": r.index,
                "ack_s": (r.late or {}).get("ack_s"),
                "readable_s": (r.late or {}).get("readable_s"),
                "human_review_s": (r.late or {}).get("human_review_s"),
            }
            for r in waited
        ],
        "lost_operations": sum(bool(r.lost) for r in results),
        "wrong_retry_advice": sum(bool(r.wrong_retry) for r in results),
        "unexpected_verdicts": sum(bool(r.unexpected) for r in results),
        "harness_errors": sum(bool(r.harness_error) for r in results),
        "supersede_s": {
            "count": len(supersede),
            "p50": _percentile(supersede, 50),
            "p99": _percentile(supersede, 99),
            "max": max(supersede) if supersede else None,
        },
        "world_duration_s": {
            "p50": _percentile([r.duration_s for r in results], 50),
            "max": max((r.duration_s for r in results), default=None),
        },
        "classes": {axis: dict(sorted(c.items())) for axis, c in per_class.items()},
        "truths": dict(sorted(truths.items())),
        "final_states": dict(sorted(finals.items())),
        "notes": Counter(n.split(" (")[0] for r in results for n in r.notes).most_common(),
        "failures": {
            "false_verified": failures("false_verified"),
            "ignored_contradiction": failures("ignored_contradiction"),
            "late_not_superseded": failures("late_failure"),
            "lost": failures("lost"),
            "wrong_retry": failures("wrong_retry"),
            "unexpected": failures("unexpected"),
            "harness_errors": [
                {"world": r.index, "seed": r.seed, "op": r.op_id, "error": r.harness_error}
                for r in results
                if r.harness_error
            ],
        },
    }


FAILING = (
    "false_verified",
    "ignored_contradiction",
    "late_not_superseded_within_5s",
    "waited_for_provider_failures",
    "lost_operations",
    "wrong_retry_advice",
    "unexpected_verdicts",
    "harness_errors",
)


def print_summary(summary: dict[str, Any]) -> None:
    s = summary
    sup = s["supersede_s"]

    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3f} s"

    print(
        f"worlds run: {s['worlds']} (seed {s['seed']}, concurrency {s['concurrency']}, "
        f"poll every {s['poll_ms']} ms, contract {', '.join(s['contract_versions'])})"
    )
    print(
        f"duration: {s['duration_s']:.0f} s (a world: p50 {s['world_duration_s']['p50']} s, "
        f"max {s['world_duration_s']['max']} s)"
    )
    print(f"false VERIFIED: {s['false_verified']}")
    print(
        "other final verdicts decided after a second refund was acknowledged: "
        f"{s['ignored_contradiction']}"
    )
    print(
        f"late contradictions: {s['late_contradictions']}; not superseded within 5 s: "
        f"{s['late_not_superseded_within_5s']}"
    )
    print(
        f"waited for the provider: {s['waited_for_provider']}; not superseded within 5 s of "
        f"the first recheck try after it read again: {s['waited_for_provider_failures']} "
        f"(not within 5 s of the outage's end: "
        f"{s['waited_for_provider_not_within_5s_of_readable']})"
    )
    for w in s["waited_for_provider_times_s"]:
        print(
            f"  world {w['world']}: acknowledged {w['ack_s']} s, provider readable "
            f"{w['readable_s']} s, HUMAN_REVIEW visible {w['human_review_s']} s"
        )
    print(f"lost operations: {s['lost_operations']}")
    print(f"wrong retry advice: {s['wrong_retry_advice']}")
    print(f"unexpected verdicts: {s['unexpected_verdicts']}")
    print(f"harness errors: {s['harness_errors']}")
    print(
        f"supersede time (contradiction's 200 to HUMAN_REVIEW visible, n={sup['count']}): "
        f"p50 {fmt(sup['p50'])}, p99 {fmt(sup['p99'])}, max {fmt(sup['max'])}"
    )
    for axis, counts in s["classes"].items():
        print(f"{axis}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print("truths: " + ", ".join(f"{k} {v}" for k, v in s["truths"].items()))
    print("final states: " + ", ".join(f"{k} {v}" for k, v in s["final_states"].items()))
    if s["notes"]:
        print("notes: " + ", ".join(f"{k} {v}" for k, v in s["notes"]))
    for name, rows in s["failures"].items():
        for row in rows:
            print(f"\n[{name}] world {row['world']} seed {row['seed']} op {row.get('op')}")
            for key in ("what", "error", "classes", "truth", "final", "late", "notes"):
                if row.get(key):
                    print(f"  {key}: {row[key]}")
            for line in row.get("timeline") or []:
                print(f"    {line}")


async def run_worlds(system: DistributedSystem, args: argparse.Namespace) -> list[Outcome]:
    indexes = sorted(set(args.world)) if args.world else list(range(args.worlds))
    plans = [draw_plan(args.seed, k) for k in indexes]
    relay = Relay(system.api_url)
    lanes_count = max(1, min(args.concurrency, len(plans)))
    results: list[Outcome] = []
    started = time.monotonic()
    with run_app(relay.app()) as relay_url:
        lanes: asyncio.Queue[Lane] = asyncio.Queue()
        opened = await asyncio.gather(
            *(open_lane(system, relay_url, n) for n in range(lanes_count))
        )
        for lane in opened:
            lanes.put_nowait(lane)
        print(f"{lanes_count} lanes open in {time.monotonic() - started:.1f} s", file=sys.stderr)

        async def one(plan: Plan) -> None:
            lane = await lanes.get()
            try:
                result = await asyncio.wait_for(
                    Play(plan, lane, relay, system.api_url, args.poll_ms / 1000).run(),
                    timeout=LOST_BOUND_S * 3 + 120,
                )
            except TimeoutError:
                result = Outcome(plan.index, plan.seed, plan.classes(), asdict(plan))
                result.harness_error = "the world did not finish within its time"
            finally:
                lanes.put_nowait(lane)
            results.append(result)

        async def progress() -> None:
            while True:
                await asyncio.sleep(5)
                bad = sum(r.failed for r in results)
                load = os.getloadavg()[0]
                print(
                    f"[{time.monotonic() - started:6.0f} s] {len(results)}/{len(plans)} worlds, "
                    f"{bad} with failures, load {load:.1f}",
                    file=sys.stderr,
                    flush=True,
                )

        reporter = asyncio.ensure_future(progress())
        try:
            await asyncio.gather(*(one(p) for p in plans))
        finally:
            reporter.cancel()
    return sorted(results, key=lambda r: r.index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument(
        "--world",
        "--only-seed-of",
        dest="world",
        type=int,
        action="append",
        default=None,
        help="replay only world K of --seed (its draws are random.Random(f'{seed}:{K}')); "
        "repeatable",
    )
    parser.add_argument("--poll-ms", type=int, default=100, help="how often each world polls")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--drop-created",
        action="store_true",
        help="also drop every refund.created (the agent's own included) in 15 %% of the worlds",
    )
    parser.add_argument(
        "--timelines", action="store_true", help="print every world's timeline, not only failing"
    )
    parser.add_argument("--records", type=Path, default=None, help="write every world (JSON lines)")
    parser.add_argument(
        "--pg",
        default=os.environ.get(
            "PROVELY_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
        help="PostgreSQL server (a database of the run's own is created and dropped there)",
    )
    parser.add_argument(
        "--redis",
        default=os.environ.get("PROVELY_BENCH_REDIS", "redis://127.0.0.1:6379/0"),
        help="Redis server (an empty index is claimed, flushed at the end; never FLUSHALL)",
    )
    args = parser.parse_args()
    global SHOW_TIMELINES, DROP_CREATED
    SHOW_TIMELINES, DROP_CREATED = args.timelines, args.drop_created
    if args.worlds < 1 or args.concurrency < 1 or args.poll_ms < 10:
        raise SystemExit("--worlds and --concurrency must be >= 1, --poll-ms >= 10")

    work = Path(tempfile.mkdtemp(prefix="provely-bench-worlds-"))
    started = time.monotonic()
    print(f"starting the system (logs under {work})", file=sys.stderr, flush=True)
    with running_system(args.pg, args.redis, work, name="bench-worlds") as system:
        results = asyncio.run(run_worlds(system, args))
    summary = summarize(results, time.monotonic() - started, args)
    if args.records is not None:
        with args.records.open("w", encoding="utf-8") as out:
            for r in results:
                out.write(json.dumps(asdict(r), default=str) + "\n")
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
        if args.timelines:
            for r in results:
                print(f"\nworld {r.index} seed {r.seed} op {r.op_id}: {r.classes}")
                print(f"  truth {r.truth}, ends {r.final_state} ({r.final_reason}), {r.notes}")
                for line in r.timeline:
                    print(f"    {line}")
    sys.exit(1 if any(summary[name] for name in FAILING) else 0)


if __name__ == "__main__":
    main()
