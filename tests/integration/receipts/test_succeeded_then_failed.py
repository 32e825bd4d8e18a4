"""End to end: a sandbox refund with the outcome `succeeded_then_failed`, through the
distributed deployment (uvicorn ingress, observer, verdict and sweeper processes, PostgreSQL,
Redis). The operation is VERIFIED with a receipt; when the refund fails later, the webhook asks
for a recheck, the operation goes to HUMAN_REVIEW and a superseding receipt names the first."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from services.cli.demo.scenarios.agent import Agent
from services.cli.demo.scenarios.system import Sandbox
from services.cli.demo.scenarios.workspace import open_workspace
from services.cli.spawn import free_port, provely_argv
from tests.e2e.launcher import DistributedSystem, running_system

pytestmark = pytest.mark.e2e

SETTLE_S = 10.0  # succeeded at +10 s, failed at +20 s on the sandbox clock


def _sandbox(system: DistributedSystem) -> Sandbox:
    """A sandbox whose refunds settle slowly, so each step happens when the test says."""
    port = free_port()
    (system.workdir / "logs").mkdir(parents=True, exist_ok=True)
    with (system.workdir / "logs" / f"sandbox-{port}.log").open("ab") as log:
        process = subprocess.Popen(
            provely_argv(
                "sandbox", "stripe", "--port", str(port), "--settle-ms", str(int(SETTLE_S * 1000))
            ),
            env=system.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    system._sandboxes.append(process)
    deadline = time.monotonic() + 30
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            assert process.poll() is None, system.log_tail()
            assert time.monotonic() < deadline, system.log_tail()
            time.sleep(0.05)
    return Sandbox(base_url=f"http://127.0.0.1:{port}")


@pytest.fixture
def system(postgres_url: str, redis_url: str, tmp_path: Path) -> Iterator[DistributedSystem]:
    with running_system(postgres_url, redis_url, tmp_path / "e2e", name="receipts-e2e") as running:
        yield running


def _verify(system: DistributedSystem, document: dict[str, Any], tmp: Path) -> str:
    path = tmp / f"{document['receipt']['id']}.json"
    path.write_text(json.dumps(document))
    run = subprocess.run(
        provely_argv(
            "receipts", "verify", str(path), "--keys", f"{system.api_url}/v1/receipts/keys"
        ),
        env=system.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    return run.stdout


async def _play(system: DistributedSystem, tmp: Path) -> None:
    workspace = await open_workspace(system, _sandbox(system), "late failure")
    agent = Agent("succeeded_then_failed", system.api_url, workspace, lambda *_: None)
    try:
        op_id, _charge, refund = await agent.refund_operation(outcome="succeeded_then_failed")
        await agent.wait(
            op_id,
            lambda op: op.get("reason") == "still_transitional" or bool(op.get("final")),
            timeout_s=20.0,
            what="the pending readback",
        )
        await agent.advance(SETTLE_S)  # the refund succeeds now; it fails SETTLE_S later
        op = await agent.wait_final(op_id, timeout_s=SETTLE_S - 1)
        assert (op["state"], op["verdict"]) == ("VERIFIED", "VERIFIED"), op
        first = (await agent.api.get(f"/v1/operations/{op_id}/receipt")).json()
        assert first["receipt"]["verdict"] == "VERIFIED"
        assert first["receipt"]["supersedes"] is None
        assert first["receipt"]["safe_to_claim_complete"] is True
        _verify(system, first, tmp)

        await agent.advance(SETTLE_S)  # the refund fails: refund.updated + refund.failed
        op = await agent.wait(
            op_id,
            lambda op: op.get("state") == "HUMAN_REVIEW",
            timeout_s=30.0,
            what="the late contradiction",
        )
        assert (op["verdict"], op["reason"]) == ("CONTRADICTED", "late_contradiction")
        second = (await agent.api.get(f"/v1/operations/{op_id}/receipt")).json()
        body = second["receipt"]
        assert body["supersedes"] == first["receipt"]["id"]
        assert body["verdict"] == "CONTRADICTED"
        assert body["safe_to_claim_complete"] is False
        assert any(c["id"] == "terminal_failure" and c["holds"] for c in body["conditions"])
        assert "supersedes" in _verify(system, second, tmp)
        # The first receipt is still served, unchanged, and still verifies.
        again = (await agent.api.get(f"/v1/receipts/{first['receipt']['id']}")).json()
        assert again == first
        _verify(system, again, tmp)
        # The audit trail holds and shows the flag.
        timeline = (await agent.api.get(f"/v1/operations/{op_id}/timeline")).json()
        text = json.dumps(timeline)
        assert "late_contradiction" in text
        assert refund["id"] == body["subject"]["id"]
    finally:
        await agent.close()
    run = subprocess.run(
        provely_argv("audit", "verify", "--workspace", workspace.id),
        env=system.env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert run.returncode == 0, run.stdout + run.stderr


def test_succeeded_then_failed_supersedes_the_verified_receipt(
    system: DistributedSystem, tmp_path: Path
) -> None:
    try:
        asyncio.run(_play(system, tmp_path))
    except (AssertionError, httpx.HTTPError) as exc:
        raise AssertionError(f"{exc}\n{system.log_tail(60)}") from exc
