"""The demo's scenarios: one engine that plays an agent against a running Provely and sandbox.

The engine knows nothing of how the system runs. A *system* (``provely demo`` starts the
embedded one; the end-to-end tests start separate processes on PostgreSQL and Redis) gives it
the API's URL, a way to run admin commands, and Stripe sandboxes. Everything else goes over
HTTP, the way an agent and a provider would talk to Provely:

1. the operator creates a workspace (``provely workspace create``), registers the workspace's
   webhook endpoint at the sandbox and stores the connection (``provely connection set``);
2. the agent creates an operation, performs the action at the sandbox with the operation id as
   ``Idempotency-Key``, reports what happened, and reads the verdict;
3. the sandbox delivers signed events to the ingress; Provely observes and decides.

Each scenario states the verdict it must reach and why. Settlement never waits on a sleep: the
sandbox's clock is advanced (``/_sandbox/advance``) once Provely has seen the refund pending.
Scenarios that need a deadline within seconds run on a short-timing copy of
``stripe.refund.succeeded``, signed into a demo skill with a key generated for the run
(:func:`write_short_timing_skill`), never by allowing unsigned skills.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol

import httpx

__all__ = [
    "DEFAULT_SANDBOX_OPTIONS",
    "SCENARIOS",
    "SHORT_VERSION",
    "STANDARD_VERSION",
    "Expected",
    "Outcome",
    "ProgressSink",
    "Sandbox",
    "Scenario",
    "ScenarioFailed",
    "System",
    "Workspace",
    "explain",
    "open_workspace",
    "run_scenarios",
    "scenario_names",
    "write_short_timing_skill",
]

REFUND_CONTRACT = "stripe.refund.succeeded"
STANDARD_VERSION = "1.1.0"
SHORT_VERSION = "1.0.1"
"""The short-timing copy of 1.0.0: its rules, a deadline of seconds instead of seven days."""

SHORT_TIMING: dict[str, Any] = {
    "initial_delay_ms": 500,
    "poll_interval_ms": 1000,
    "backoff": {"kind": "exponential", "factor": 2, "max_ms": 2000},
    "max_attempts": 6,
    "timeout_ms": 6000,
}

SETTLE_S = 2.0
DEFAULT_SANDBOX_OPTIONS: dict[str, Any] = {"settle_ms": int(SETTLE_S * 1000)}
"""Refunds settle 2 s after creation on the sandbox clock: later than the first observation
(1 s), so Provely sees them pending first; the agent then advances the clock."""

POLL_S = 0.1
SCENARIO_TIMEOUT_S = 120.0
STEP_TIMEOUT_S = 45.0
"""Generous on purpose: each step takes a second or two, but a busy machine must not turn a
slow answer into a wrong one."""
FRESH_CONNECTIONS = httpx.Limits(max_keepalive_connections=0)
"""One connection per request: a keep-alive connection the server closed while it sat idle
would fail the next request with a read error, and an action report must not be sent twice."""


# --------------------------------------------------------------------------------------------
# What the engine needs from a running system
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sandbox:
    """A running Stripe sandbox: its base URL and the secret key its API accepts."""

    base_url: str
    api_key: str = "sk_test_provely_demo"


class System(Protocol):
    """A running Provely: the engine's only view of how it was started."""

    @property
    def api_url(self) -> str: ...

    def create_workspace(self, name: str) -> tuple[str, str]:
        """Create a workspace as its operator would; return ``(workspace_id, api_key)``."""
        ...

    def connect_stripe(
        self, workspace_id: str, *, webhook_secret: str, api_key: str, base_url: str
    ) -> None:
        """Store the workspace's Stripe connection (``provely connection set``)."""
        ...

    def connect_http(self, workspace_id: str, *, base_url: str) -> None:
        """Store the workspace's generic http connection to an app of the user's own."""
        ...

    def new_sandbox(self) -> Sandbox:
        """Start a fresh sandbox (its faults and clock are this caller's alone)."""
        ...

    def wait_ready(self) -> None:
        """Block until the API answers (the engine sets up workspaces meanwhile)."""
        ...


ProgressSink = Callable[[str, Mapping[str, Any]], None]
"""``sink(scenario, update)``: ``update`` holds ``note`` (what happens now) and/or ``op``
(the latest operation resource)."""


class ScenarioFailed(Exception):
    """A scenario did not reach what it promised (the message says what happened)."""


# --------------------------------------------------------------------------------------------
# The agent: HTTP to Provely and to the sandbox
# --------------------------------------------------------------------------------------------


@dataclass
class Workspace:
    id: str
    api_key: str
    sandbox: Sandbox
    webhook_secret: str = ""  # the sandbox endpoint's whsec_ secret (to sign events in tests)


class Agent:
    """One scenario's agent, with its own HTTP clients and progress channel."""

    def __init__(self, name: str, api_url: str, workspace: Workspace, sink: ProgressSink) -> None:
        self.name = name
        self.workspace = workspace
        self.sandbox = workspace.sandbox
        self._sink = sink
        self.api = httpx.AsyncClient(
            base_url=api_url,
            headers={"Authorization": f"Bearer {workspace.api_key}"},
            timeout=30.0,
            limits=FRESH_CONNECTIONS,
        )
        self.stripe = httpx.AsyncClient(
            base_url=workspace.sandbox.base_url,
            headers={"Authorization": f"Bearer {workspace.sandbox.api_key}"},
            timeout=30.0,
            limits=FRESH_CONNECTIONS,
        )
        self.seen: list[tuple[str, str | None, str | None]] = []
        self.ops: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None

    async def close(self) -> None:
        await self.api.aclose()
        await self.stripe.aclose()

    def note(self, text: str) -> None:
        self._sink(self.name, {"note": text})

    # ------------------------------------------------------------------ Provely API
    async def _api(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = await self.api.request(method, path, **kwargs)
        if response.status_code >= 300:
            raise ScenarioFailed(
                f"{method} {path} answered {response.status_code}: {response.text[:300]}"
            )
        data = response.json()
        if not isinstance(data, dict):
            raise ScenarioFailed(f"{method} {path} answered {data!r}")
        return data

    async def create_operation(
        self, inputs: Mapping[str, Any], *, version: str, contract: str = REFUND_CONTRACT
    ) -> dict[str, Any]:
        op = await self._api(
            "POST",
            "/v1/operations",
            json={"contract": contract, "contract_version": version, "input": dict(inputs)},
        )
        self.ops.append(op)
        self._track(op)
        self.note(f"operation {op['id']} created ({contract} {version})")
        return op

    async def report(self, op_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        op = await self._api("POST", f"/v1/operations/{op_id}/action", json=dict(body))
        self._track(op)
        return op

    async def get(self, op_id: str) -> dict[str, Any]:
        op = await self._api("GET", f"/v1/operations/{op_id}")
        self._track(op)
        return op

    def _track(self, op: Mapping[str, Any]) -> None:
        if "state" not in op:
            return
        self.last = dict(op)
        key = (str(op["state"]), op.get("verdict"), op.get("reason"))
        if not self.seen or self.seen[-1] != key:
            self.seen.append(key)
        self._sink(self.name, {"op": dict(op)})

    async def wait(
        self,
        op_id: str,
        until: Callable[[Mapping[str, Any]], bool],
        *,
        timeout_s: float,
        what: str,
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        while True:
            op = await self.get(op_id)
            if until(op):
                return op
            if time.monotonic() > deadline:
                raise ScenarioFailed(
                    f"waited {timeout_s:.0f} s for {what}; the operation is {op.get('state')} "
                    f"{op.get('verdict')} ({op.get('reason')})"
                )
            await asyncio.sleep(POLL_S)

    async def wait_final(self, op_id: str, timeout_s: float = STEP_TIMEOUT_S) -> dict[str, Any]:
        return await self.wait(
            op_id, lambda op: bool(op.get("final")), timeout_s=timeout_s, what="a final verdict"
        )

    # ------------------------------------------------------------------ the provider
    async def stripe_post(
        self, path: str, data: Mapping[str, Any], *, idempotency_key: str | None = None
    ) -> tuple[int, dict[str, Any]]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        response = await self.stripe.post(path, data=dict(data), headers=headers)
        return response.status_code, response.json()

    async def create_charge(self, amount: int = 5000) -> str:
        status, body = await self.stripe_post(
            "/v1/charges", {"amount": amount, "currency": "usd", "source": "tok_visa"}
        )
        if status != 200:
            raise ScenarioFailed(f"the sandbox refused the charge: {status} {body}")
        self.note(f"charge {body['id']} of {amount} cents created at the provider")
        return str(body["id"])

    async def refund(
        self,
        charge: str,
        amount: int,
        *,
        outcome: str = "succeeded",
        idempotency_key: str | None,
    ) -> tuple[int, dict[str, Any]]:
        status, body = await self.stripe_post(
            "/v1/refunds",
            {"charge": charge, "amount": amount, "metadata[sandbox_outcome]": outcome},
            idempotency_key=idempotency_key,
        )
        if status == 200:
            self.note(f"refund {body['id']} of {amount} cents: provider answered pending")
        return status, body

    async def control(self, path: str, body: Mapping[str, Any] | None = None) -> dict[str, Any]:
        response = await self.stripe.post(f"/_sandbox/{path}", json=dict(body or {}))
        if response.status_code != 200:
            raise ScenarioFailed(f"sandbox control {path}: {response.status_code} {response.text}")
        data = response.json()
        return data if isinstance(data, dict) else {}

    async def advance(self, seconds: float = SETTLE_S) -> None:
        """The provider settles now: move the sandbox clock instead of sleeping."""
        await self.control("advance", {"seconds": seconds})
        self.note(f"provider clock advanced {seconds:g} s: the refund settles")

    # ------------------------------------------------------------------ the usual agent turn
    async def refund_operation(
        self,
        *,
        version: str = STANDARD_VERSION,
        amount: int = 2000,
        refunded_amount: int | None = None,
        outcome: str = "succeeded",
    ) -> tuple[str, str, dict[str, Any]]:
        """Charge, create the operation, refund with its id as idempotency key, report."""
        charge = await self.create_charge()
        op = await self.create_operation(
            {"charge": charge, "amount": amount, "currency": "usd"}, version=version
        )
        await self.report(op["id"], {"phase": "started"})
        status, refund = await self.refund(
            charge, refunded_amount or amount, outcome=outcome, idempotency_key=op["id"]
        )
        if status != 200:
            raise ScenarioFailed(f"the sandbox refused the refund: {status} {refund}")
        await self.report(op["id"], {"phase": "result", "result": refund, "http_status": status})
        self.note("result reported; Provely observes the provider")
        return op["id"], charge, refund

    async def settle_after_pending(self, op_id: str) -> None:
        """Once Provely has read the refund pending (or decided), settle it at the provider."""
        op = await self.wait(
            op_id,
            lambda op: bool(op.get("final")) or op.get("reason") == "still_transitional",
            timeout_s=STEP_TIMEOUT_S,
            what="the first readback",
        )
        if not op.get("final"):
            await self.advance()


# --------------------------------------------------------------------------------------------
# Scenarios
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    verdict: str
    reason: str
    state: str
    final: bool = True


@dataclass(frozen=True)
class Scenario:
    name: str
    title: str
    story: str
    expected: Expected
    play: Callable[[Agent], Awaitable[str]] | None
    """Plays the agent; returns the id of the operation whose verdict is judged."""
    own_sandbox: bool = False
    short_timing: bool = False
    check: Callable[[Agent, Mapping[str, Any]], None] | None = None
    custom: Callable[[System, ProgressSink], Awaitable[Outcome]] | None = None
    """A scenario that sets up its own world (workspaces, apps) and judges itself."""


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


ENTITLEMENT_CONTRACT = "app.entitlement.revoked"
SEATS = 5
SEAT_PRICE = 1000


async def _run_entitlement(system: System, sink: ProgressSink) -> Outcome:
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
    scenario = SCENARIOS[name]
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
            error = _judge(scenario, agents[0], revokes)
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
                outcome.receipt_ok, outcome.receipt = await _verify_receipt(agents[0].api, revokes)
                if not outcome.receipt_ok and outcome.error is None:
                    outcome.error = f"receipt not verified: {outcome.receipt}"
            outcome.timeline = await _timeline(agents[0].api, revokes["id"])
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


def _observed_status(op: Mapping[str, Any]) -> Any:
    for condition in op.get("conditions") or []:
        if condition.get("id") == "refund_status_succeeded":
            return condition.get("observed")
    return None


SCENARIOS: dict[str, Scenario] = {
    s.name: s
    for s in (
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
        Scenario(
            "entitlement",
            "The app takes the seats back after a refund",
            "Two apps sell 5 seats; after a full refund the correct one shows 0 (VERIFIED), "
            "the one that ignores refunds still 5 (CONTRADICTED); a replay changes neither.",
            Expected("VERIFIED", "all_conditions_hold", "VERIFIED"),
            None,
            own_sandbox=True,
            custom=_run_entitlement,
        ),
    )
}


def scenario_names() -> list[str]:
    return list(SCENARIOS)


# --------------------------------------------------------------------------------------------
# Running
# --------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    scenario: str
    ok: bool
    expected: Expected
    operation: dict[str, Any] | None = None
    receipt: str | None = None
    """``valid: …`` when the receipt verified, else why not (None while open)."""
    receipt_ok: bool | None = None
    seen: list[tuple[str, str | None, str | None]] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    others: list[dict[str, Any]] = field(default_factory=list)
    """Further operations a scenario judged (e.g. the refund-ignoring app's)."""
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def why(self) -> str:
        """The verdict's reason in words (and that of any further operation judged)."""
        text = explain(self.operation or {})
        verdicts = [(v, r) for _, v, r in self.seen if v]
        final = (self.operation or {}).get("verdict")
        if any(v == "UNVERIFIABLE" for v, _ in verdicts) and final != "UNVERIFIABLE":
            path = " → ".join(dict.fromkeys(f"{v} ({r})" for v, r in verdicts))
            text += f"; verdicts on the way: {path}"
        for other in self.others:
            text += f"; and {other.get('verdict')} for {other.get('id')}: {explain(other)}"
        return text


def explain(op: Mapping[str, Any]) -> str:
    """A verdict's reason in words: the deciding condition with what was observed."""
    reason = op.get("reason")
    for condition in op.get("conditions") or []:
        if condition.get("id") == reason:
            return (
                f"{reason}: observed {json.dumps(condition.get('observed'))}, "
                f"expected {condition.get('kind')} {json.dumps(condition.get('expected'))}"
            )
    explanation = (op.get("decision") or {}).get("explanation") or op.get("explanation")
    return str(explanation or reason or "")


async def open_workspace(system: System, sandbox: Sandbox, name: str) -> Workspace:
    workspace_id, api_key = await asyncio.to_thread(system.create_workspace, name)
    async with httpx.AsyncClient(
        base_url=sandbox.base_url,
        headers={"Authorization": f"Bearer {sandbox.api_key}"},
        timeout=30.0,
    ) as stripe:
        response = await stripe.post(
            "/v1/webhook_endpoints",
            data={
                "url": f"{system.api_url}/v1/events/stripe/{workspace_id}",
                "enabled_events[]": "*",
            },
        )
    if response.status_code != 200:
        raise ScenarioFailed(f"cannot register the webhook endpoint: {response.text[:300]}")
    secret = str(response.json()["secret"])
    await asyncio.to_thread(
        partial(
            system.connect_stripe,
            workspace_id,
            webhook_secret=secret,
            api_key=sandbox.api_key,
            base_url=sandbox.base_url,
        )
    )
    return Workspace(workspace_id, api_key, sandbox, secret)


async def _verify_receipt(api: httpx.AsyncClient, op: Mapping[str, Any]) -> tuple[bool, str]:
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


async def _timeline(api: httpx.AsyncClient, op_id: str) -> list[dict[str, Any]]:
    response = await api.get(f"/v1/operations/{op_id}/timeline")
    if response.status_code != 200:
        return []
    data = response.json()
    items = data.get("entries", []) if isinstance(data, dict) else data
    return [i for i in items if isinstance(i, dict)] if isinstance(items, list) else []


def _judge(scenario: Scenario, agent: Agent, op: Mapping[str, Any]) -> str | None:
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
        outcome.error = _judge(scenario, agent, op)
        if op.get("final"):
            outcome.receipt_ok, outcome.receipt = await _verify_receipt(agent.api, op)
            if not outcome.receipt_ok and outcome.error is None:
                outcome.error = f"receipt not verified: {outcome.receipt}"
        outcome.timeline = await _timeline(agent.api, op_id)
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


# --------------------------------------------------------------------------------------------
# The short-timing contract, signed into a demo skill
# --------------------------------------------------------------------------------------------


def write_short_timing_skill(directory: Path) -> dict[str, str]:
    """Write a signed skill holding ``stripe.refund.succeeded`` at :data:`SHORT_VERSION` with a
    deadline of seconds; returns the environment that makes a Provely process load it."""
    import yaml

    from shared.trust.registry import SHIPPED_CONTRACTS_DIR
    from shared.trust.skills import generate_private_key, public_key_pem, sign_skill

    source_dir = SHIPPED_CONTRACTS_DIR / "stripe"
    skill_dir = directory / "contracts" / "stripe-demo"
    skill_dir.mkdir(parents=True, exist_ok=True)
    contract = yaml.safe_load((source_dir / "refund.succeeded.yaml").read_text("utf-8"))
    contract["version"] = SHORT_VERSION
    contract["title"] = str(contract.get("title", "")) + " (demo copy with a short deadline)"
    contract["timing"] = {**contract["timing"], **SHORT_TIMING}
    contract_file = "refund.succeeded.short.yaml"
    (skill_dir / contract_file).write_text(
        yaml.safe_dump(contract, sort_keys=False, allow_unicode=True), "utf-8"
    )
    manifest = yaml.safe_load((source_dir / "skill.yaml").read_text("utf-8"))
    manifest["contracts"] = [{"file": contract_file, "sha256": "0" * 64}]
    (skill_dir / "skill.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False), "utf-8")
    key = generate_private_key()
    sign_skill(skill_dir, key)
    keys_dir = directory / "keys"
    keys_dir.mkdir(parents=True, exist_ok=True)
    public_file = keys_dir / "demo-publisher.pub"
    public_file.write_bytes(public_key_pem(key.public_key()))
    return {
        "PROVELY_CONTRACT_PATHS": str(skill_dir.parent),
        "PROVELY_TRUSTED_PUBLISHER_KEYS": str(public_file),
    }
