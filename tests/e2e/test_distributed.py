"""End to end on the distributed deployment: separate processes, real PostgreSQL and Redis.

The demo's scenario engine plays the agent against uvicorn, one observer worker, one verdict
worker, one sweeper and sandbox processes. Every scenario must reach its expected verdict with a
verified receipt — while the verdict worker is killed (SIGKILL) and restarted in the middle.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time

import pytest

from services.cli.scenarios import SCENARIOS, Outcome, run_scenarios
from tests.e2e.launcher import DistributedSystem

pytestmark = pytest.mark.e2e


def _describe(outcomes: list[Outcome]) -> str:
    lines = []
    for o in outcomes:
        op = o.operation or {}
        lines.append(
            f"{o.scenario}: {'ok' if o.ok else 'FAILED'} — {op.get('state')} {op.get('verdict')} "
            f"({op.get('reason')}) seen={o.seen} error={o.error}"
        )
    return "\n".join(lines)


def test_every_scenario_survives_a_killed_verdict_worker(distributed: DistributedSystem) -> None:
    supervisor = distributed.supervisor
    assert supervisor is not None
    killed: list[int] = []

    def crash_and_restart() -> None:
        time.sleep(4.0)  # scenarios are mid-flight: operations open, observations scheduled
        pid = supervisor.pid("verdict")
        assert pid is not None
        killed.append(pid)
        supervisor.kill("verdict", signal.SIGKILL)
        time.sleep(1.5)
        supervisor.restart("verdict")

    chaos = threading.Thread(target=crash_and_restart, daemon=True)
    chaos.start()
    outcomes = asyncio.run(run_scenarios(list(SCENARIOS), distributed))
    chaos.join(timeout=30)
    assert killed, "the verdict worker was never killed"
    assert supervisor.pid("verdict") not in (None, killed[0])
    failed = [o for o in outcomes if not o.ok]
    assert not failed, _describe(outcomes) + "\n" + distributed.log_tail()
    for o in outcomes:
        if o.expected.final:
            assert o.receipt_ok, o
    assert {o.scenario for o in outcomes} == set(SCENARIOS)
