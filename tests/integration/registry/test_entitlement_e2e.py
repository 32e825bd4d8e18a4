"""Seed 003 end to end: ``app.entitlement.revoked`` against the example app, every part a real
server — the distributed Provely (ingress, observer, verdict, sweeper on PostgreSQL and Redis),
a Stripe sandbox process and the example app process (``python -m examples.entitlement_app``).

A checkout grants 5 seats; the agent refunds the charge with the operation id as idempotency
key and reports it. Provely reads the app's entitlement over the workspace's generic ``http``
connection and Stripe's ``charge.refunded`` events over its Stripe connection:

- the correct app drops to the seats the remaining amount pays for → VERIFIED;
- the app started with ``IGNORE_REFUNDS=1`` keeps 5 seats → CONTRADICTED
  ``entitlement_not_revoked`` (class ``stale entitlement``);
- the replayed ``charge.refunded`` changes neither: same verdict, same timeline, same seats.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.cli.spawn import free_port
from services.sandbox.client import SandboxControl
from tests.e2e.launcher import DistributedSystem, running_system

pytestmark = pytest.mark.e2e

CONTRACT = "app.entitlement.revoked"
FINAL_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def system(
    postgres_url: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[DistributedSystem]:
    workdir = tmp_path_factory.mktemp("ent")
    with running_system(postgres_url, redis_url, workdir, name="entitlement-e2e") as running:
        yield running


@dataclass
class World:
    """One workspace wired to one sandbox and one example app."""

    system: DistributedSystem
    api: httpx.Client
    stripe: httpx.Client
    control: SandboxControl
    app_url: str
    ignore_refunds: bool

    def seats(self, charge: str) -> int:
        response = httpx.get(f"{self.app_url}/entitlements/{charge}", timeout=10)
        assert response.status_code == 200, response.text
        return int(response.json()["seats"])

    def operation(self, op_id: str) -> dict[str, Any]:
        response = self.api.get(f"/v1/operations/{op_id}")
        assert response.status_code == 200, response.text
        data: dict[str, Any] = response.json()
        return data

    def timeline(self, op_id: str) -> Any:
        response = self.api.get(f"/v1/operations/{op_id}/timeline")
        assert response.status_code == 200, response.text
        return response.json()


def _wait_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the example app did not start:\n" + log.read_text()) from None
            time.sleep(0.05)


@pytest.fixture(params=[False, True], ids=["correct_app", "refund_ignoring_app"])
def world(
    request: pytest.FixtureRequest, system: DistributedSystem, tmp_path: Path
) -> Iterator[World]:
    ignore_refunds: bool = request.param
    sandbox = system.new_sandbox()
    stripe = httpx.Client(
        base_url=sandbox.base_url,
        headers={"Authorization": f"Bearer {sandbox.api_key}"},
        timeout=30,
    )
    workspace, api_key = system.create_workspace("seed 003")
    provely_endpoint = stripe.post(
        "/v1/webhook_endpoints",
        data={"url": f"{system.api_url}/v1/events/stripe/{workspace}", "enabled_events[]": "*"},
    )
    assert provely_endpoint.status_code == 200, provely_endpoint.text
    system.connect_stripe(
        workspace,
        webhook_secret=provely_endpoint.json()["secret"],
        api_key=sandbox.api_key,
        base_url=sandbox.base_url,
    )

    port = free_port()
    app_url = f"http://127.0.0.1:{port}"
    app_endpoint = stripe.post(
        "/v1/webhook_endpoints",
        data={
            "url": f"{app_url}/webhooks/stripe",
            "enabled_events[]": ["checkout.session.completed", "charge.refunded"],
        },
    )
    assert app_endpoint.status_code == 200, app_endpoint.text
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PROVELY_", "STRIPE_"))}
    env.update(
        STRIPE_WEBHOOK_SECRET=app_endpoint.json()["secret"],
        STRIPE_API_KEY=sandbox.api_key,
        STRIPE_API_BASE=sandbox.base_url,
        IGNORE_REFUNDS="1" if ignore_refunds else "0",
    )
    log = tmp_path / "app.log"
    with log.open("ab") as out:
        app = subprocess.Popen(
            [sys.executable, "-m", "examples.entitlement_app", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        _wait_port(port, app, log)
        # The app is reached through a generic http connection (the readback credential is
        # sent as a bearer token; the example app does not check it).
        system.cli(
            [
                "connection",
                "set",
                "--workspace",
                workspace,
                "--provider",
                "http",
                "--base-url",
                app_url,
                "--api-key",
                "app-readback-key",
                "--signature-scheme",
                "standard_webhooks",
                "--webhook-secret",
                "whsec_app_events_unused",
            ]
        )
        api = httpx.Client(
            base_url=system.api_url, headers={"Authorization": f"Bearer {api_key}"}, timeout=30
        )
        with SandboxControl(sandbox.base_url) as control:
            yield World(system, api, stripe, control, app_url, ignore_refunds)
        api.close()
    finally:
        app.terminate()
        try:
            app.wait(timeout=10)
        except subprocess.TimeoutExpired:
            app.kill()
        stripe.close()


def _buy(world: World, *, amount: int = 5000, seats: int = 5) -> str:
    paid = world.control.complete_checkout(
        amount=amount, quantity=seats, metadata={"seats": str(seats)}
    )
    world.control.flush()
    charge = str(paid["charge"]["id"])
    assert world.seats(charge) == seats
    return charge


def _refund_operation(world: World, charge: str, *, refund: int, total: int, seats: int) -> str:
    created = world.api.post(
        "/v1/operations",
        json={
            "contract": CONTRACT,
            "input": {"charge": charge, "amount_refunded": total, "expected_seats": seats},
        },
    )
    assert created.status_code == 201, created.text
    op_id = str(created.json()["id"])
    assert created.json()["contract"]["version"] == "1.0.0"
    assert world.api.post(f"/v1/operations/{op_id}/action", json={"phase": "started"}).is_success
    refunded = world.stripe.post(
        "/v1/refunds",
        data={"charge": charge, "amount": refund},
        headers={"Idempotency-Key": op_id},
    )
    assert refunded.status_code == 200, refunded.text
    reported = world.api.post(
        f"/v1/operations/{op_id}/action",
        json={"phase": "result", "result": refunded.json(), "http_status": 200},
    )
    assert reported.status_code == 200, reported.text
    world.control.flush()
    return op_id


def _wait_final(world: World, op_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + FINAL_TIMEOUT_S
    while True:
        op = world.operation(op_id)
        if op.get("final"):
            return op
        if time.monotonic() > deadline:
            raise AssertionError(
                f"no final verdict: {op.get('state')} {op.get('verdict')} {op.get('reason')}\n"
                + world.system.log_tail()
            )
        time.sleep(0.2)


def _replay_refund_event(world: World, op_id: str, charge: str) -> None:
    before = (world.operation(op_id), world.timeline(op_id), world.seats(charge))
    deliveries = world.control.deliveries(type="charge.refunded")
    event_ids = {d["event_id"] for d in deliveries}
    assert len(event_ids) == 1
    world.control.resend(event_ids.pop())
    world.control.flush()
    time.sleep(2.0)  # room for a (wrong) wake, readback and decision to happen
    after = (world.operation(op_id), world.timeline(op_id), world.seats(charge))
    keys = ("state", "verdict", "reason", "final", "class")
    assert {k: after[0].get(k) for k in keys} == {k: before[0].get(k) for k in keys}
    assert after[1] == before[1]
    assert after[2] == before[2]


def test_full_refund(world: World) -> None:
    charge = _buy(world)
    op_id = _refund_operation(world, charge, refund=5000, total=5000, seats=0)
    op = _wait_final(world, op_id)
    if world.ignore_refunds:
        assert world.seats(charge) == 5
        assert (op["state"], op["verdict"], op["reason"]) == (
            "CONTRADICTED",
            "CONTRADICTED",
            "entitlement_not_revoked",
        ), op
        assert op["class"] == "stale entitlement"
    else:
        assert world.seats(charge) == 0
        assert (op["state"], op["verdict"], op["reason"]) == (
            "VERIFIED",
            "VERIFIED",
            "all_conditions_hold",
        ), op
    conditions = {c["id"]: c for c in op["conditions"]}
    assert conditions["charge_refund_event_received"]["holds"] is True
    assert conditions["refunded_total_matches"]["observed"] == 5000
    assert conditions["entitlement_seats_match"]["observed"] == (5 if world.ignore_refunds else 0)
    assert conditions["entitlement_not_revoked"]["holds"] is world.ignore_refunds
    evidence = {e["channel"]: e for e in op["evidence"]}
    assert evidence["entitlement_readback"]["used"] is True
    if not world.ignore_refunds:
        assert evidence["charge_refunded_events"]["used"] is True
    receipt = world.api.get(f"/v1/operations/{op_id}/receipt")
    assert receipt.status_code == 200, receipt.text
    _replay_refund_event(world, op_id, charge)


def test_partial_refund_keeps_what_the_rest_pays_for(world: World) -> None:
    charge = _buy(world)
    op_id = _refund_operation(world, charge, refund=2000, total=2000, seats=3)
    op = _wait_final(world, op_id)
    if world.ignore_refunds:
        assert world.seats(charge) == 5
        assert (op["verdict"], op["reason"]) == ("CONTRADICTED", "entitlement_not_revoked"), op
    else:
        assert world.seats(charge) == 3
        assert (op["verdict"], op["reason"]) == ("VERIFIED", "all_conditions_hold"), op
