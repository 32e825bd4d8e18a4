"""End to end on separate processes (uvicorn ingress, observer, verdict, sweeper, Stripe
sandboxes) with real PostgreSQL and Redis: the sandbox's signed deliveries, a timed-out action
that verifies through its idempotency key, an event that comes before the action report, and
the same events in reverse order giving the same verdict."""

from __future__ import annotations

import asyncio
import gc
import json
import threading
import time
import warnings
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import stripe
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from services.cli.demo.scenarios.agent import Agent
from services.cli.demo.scenarios.refund_contract import STANDARD_VERSION
from services.cli.demo.scenarios.system import Sandbox
from services.cli.demo.scenarios.workspace import Workspace
from shared.db.models import Event, OperationEvent
from shared.db.session import make_engine
from shared.trust.signatures import STRIPE
from tests.e2e.launcher import DistributedSystem, running_system

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def system(
    postgres_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DistributedSystem]:
    workdir = tmp_path_factory.mktemp("webhooks-e2e")
    with running_system(postgres_url, redis_url, workdir, name="webhooks-e2e") as running:
        yield running


@pytest.fixture(scope="module")
def engine(system: DistributedSystem) -> Iterator[Engine]:
    made = make_engine(system.postgres_url)
    yield made
    made.dispose()


def new_sandbox(system: DistributedSystem) -> Sandbox:
    # The launcher leaves the sandbox's log file object to the garbage collector; its
    # ResourceWarning is not about this code.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        sandbox = system.new_sandbox()
        gc.collect()
    return sandbox


async def register_endpoint(sandbox: Sandbox, url: str) -> str:
    async with httpx.AsyncClient(
        base_url=sandbox.base_url, auth=(sandbox.api_key, ""), timeout=30
    ) as client:
        response = await client.post(
            "/v1/webhook_endpoints", data={"url": url, "enabled_events[]": "*"}
        )
    assert response.status_code == 200, response.text
    return str(response.json()["secret"])


async def open_workspace(system: DistributedSystem, name: str, **faults: Any) -> Agent:
    sandbox = await asyncio.to_thread(new_sandbox, system)
    created = json.loads(await asyncio.to_thread(system.cli, ["workspace", "create", name]))
    workspace_id, api_key = created["workspace_id"], created["api_key"]
    secret = await register_endpoint(sandbox, f"{system.api_url}/v1/events/stripe/{workspace_id}")
    await asyncio.to_thread(
        system.cli,
        [
            "connection", "set", "--workspace", workspace_id, "--provider", "stripe",
            "--webhook-secret", secret, "--api-key", sandbox.api_key,
            "--base-url", sandbox.base_url,
        ],
    )  # fmt: skip
    agent = Agent(name, system.api_url, Workspace(workspace_id, api_key, sandbox), lambda *_: None)
    if faults:
        await agent.control("faults", faults)
    return agent


def stored_events(engine: Engine, workspace_id: str) -> list[tuple[str, str | None]]:
    with Session(engine) as session:
        rows = session.execute(
            select(Event.type, Event.object_id).where(Event.workspace_id == workspace_id)
        ).all()
    return [(t, o) for t, o in rows]


async def wait_for(predicate: Any, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout_s} s for {what}")
        await asyncio.sleep(0.1)


# ---------------------------------------------------------------------------------------------


class _Capture(BaseHTTPRequestHandler):
    received: list[tuple[bytes, str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.received.append((body, self.headers.get("Stripe-Signature", "")))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


def test_sandbox_deliveries_verify_with_the_stripe_library(system: DistributedSystem) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Capture)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/hook"

    async def play() -> str:
        sandbox = await asyncio.to_thread(new_sandbox, system)
        secret = await register_endpoint(sandbox, url)
        agent = Agent(
            "capture", system.api_url, Workspace("ws_unused", "", sandbox), lambda *_: None
        )
        charge = await agent.create_charge()
        await agent.refund(charge, 1000, idempotency_key="op_capture")
        await agent.advance()
        await agent.control("flush")
        await agent.close()
        return secret

    try:
        secret = asyncio.run(play())
    finally:
        server.shutdown()
        server.server_close()
    assert len(_Capture.received) >= 3  # charge.succeeded, refund.created, refund.updated …
    for body, header in _Capture.received:
        event = stripe.Webhook.construct_event(body, header, secret)
        ours = STRIPE.verify(
            body=body, headers={"Stripe-Signature": header}, secrets=[secret], now=time.time()
        )
        assert ours.timestamp is not None
        assert event["id"].startswith("evt_")
    created = [
        json.loads(b) for b, _ in _Capture.received if json.loads(b)["type"] == "refund.created"
    ]
    assert created[0]["request"]["idempotency_key"] == "op_capture"


def test_timed_out_action_reaches_verified_through_the_idempotency_key(
    system: DistributedSystem, engine: Engine
) -> None:
    async def play() -> tuple[str, str, dict[str, Any]]:
        agent = await open_workspace(system, "timeout")
        try:
            charge = await agent.create_charge()
            op = await agent.create_operation(
                {"charge": charge, "amount": 2000, "currency": "usd"}, version=STANDARD_VERSION
            )
            await agent.report(op["id"], {"phase": "started"})
            status, refund = await agent.refund(charge, 2000, idempotency_key=op["id"])
            assert status == 200
            # The answer is lost: the agent only knows that it timed out.
            await agent.report(
                op["id"],
                {"phase": "error", "http_status": None, "error": {"type": "timeout"}},
            )
            await agent.advance()
            final = await agent.wait_final(op["id"], timeout_s=60)
            return op["id"], refund["id"], final
        finally:
            await agent.close()

    op_id, refund_id, final = asyncio.run(play())
    assert (final["state"], final["verdict"]) == ("VERIFIED", "VERIFIED"), final
    with Session(engine) as session:
        strategies = set(
            session.execute(
                select(OperationEvent.strategy, OperationEvent.assurance).where(
                    OperationEvent.operation_id == op_id
                )
            ).all()
        )
    assert ("idempotency_key", "strong") in strategies
    assert ("resource_id", "strong") in strategies
    from shared.db.models import Operation

    with Session(engine) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        assert op.subject_id == refund_id
        assert op.learned_keys == {"refund_id": refund_id}
        assert op.action_result is None


def test_refund_updated_before_the_action_report_still_counts(
    system: DistributedSystem, engine: Engine
) -> None:
    async def play() -> tuple[str, dict[str, Any]]:
        # refund.created is never delivered: nothing can teach the operation its refund id
        # before the report.
        agent = await open_workspace(system, "early", drop_types=["refund.created"])
        try:
            charge = await agent.create_charge()
            op = await agent.create_operation(
                {"charge": charge, "amount": 2000, "currency": "usd"}, version=STANDARD_VERSION
            )
            await agent.report(op["id"], {"phase": "started"})
            status, refund = await agent.refund(charge, 2000, idempotency_key=op["id"])
            assert status == 200
            await agent.advance()
            await agent.control("flush")
            ws = agent.workspace.id
            await wait_for(
                lambda: ("refund.updated", refund["id"]) in stored_events(engine, ws),
                "the refund.updated delivery",
            )
            # Only now does the agent report the (pending) answer it got.
            await agent.report(op["id"], {"phase": "result", "result": refund, "http_status": 200})
            final = await agent.wait_final(op["id"], timeout_s=60)
            return op["id"], final
        finally:
            await agent.close()

    _op_id, final = asyncio.run(play())
    assert (final["state"], final["verdict"]) == ("VERIFIED", "VERIFIED"), final
    conditions = {c["id"]: c for c in final.get("conditions") or []}
    assert conditions["refund_event_succeeded"]["holds"] is True


def test_the_same_events_in_reverse_order_give_the_same_verdict(
    system: DistributedSystem, engine: Engine
) -> None:
    async def run(name: str, order: str) -> dict[str, Any]:
        agent = await open_workspace(system, name, order=order)
        try:
            op_id, _charge, _refund = await agent.refund_operation()
            await agent.advance()
            if order != "in_order":
                released = await agent.control("release")
                assert released
            return await agent.wait_final(op_id, timeout_s=60)
        finally:
            await agent.close()

    async def both() -> tuple[dict[str, Any], dict[str, Any]]:
        forward, backward = await asyncio.gather(
            run("forward", "in_order"), run("backward", "reversed")
        )
        return forward, backward

    forward, backward = asyncio.run(both())

    def verdict(op: dict[str, Any]) -> tuple[Any, ...]:
        held = sorted((c["id"], c["holds"]) for c in op.get("conditions") or [])
        return op["state"], op["verdict"], op["reason"], held

    assert verdict(forward) == verdict(backward)
    assert forward["verdict"] == "VERIFIED"
