"""End to end on the distributed deployment: separate processes, real PostgreSQL and Redis.

The demo's scenario engine plays the agent against uvicorn, one observer worker, one verdict
worker, one sweeper and sandbox processes. Every scenario must reach its expected verdict with a
verified receipt — while the verdict worker is killed (SIGKILL) and restarted in the middle, and
the observer is stopped gracefully (SIGTERM) and replaced.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

import pytest

from services.cli.demo.scenarios.catalog import SCENARIOS
from services.cli.demo.scenarios.running import run_scenarios
from services.cli.demo.scenarios.scenario import Outcome
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
    in_flight = threading.Event()
    restarted_at: list[float] = []
    finished_at: dict[str, float] = {}
    killed: list[int] = []
    observer_exit: list[int] = []

    def sink(name: str, update: Mapping[str, Any]) -> None:
        op = update.get("op") or {}
        if op.get("state") in ("OBSERVING", "PENDING"):
            in_flight.set()  # operations are open, observations scheduled
        if "done" in update:
            finished_at[name] = time.monotonic()

    def crash_and_restart() -> None:
        if not in_flight.wait(timeout=60):
            return
        time.sleep(0.5)
        pid = supervisor.pid("verdict")
        assert pid is not None
        killed.append(pid)
        supervisor.kill("verdict", signal.SIGKILL)
        time.sleep(2.0)
        supervisor.restart("verdict")
        restarted_at.append(time.monotonic())
        # A graceful stop of the observer mid-run: it finishes (or hands back) its tasks and
        # exits 0; its replacement carries on.
        supervisor.kill("observer", signal.SIGTERM)
        observer_exit.append(supervisor.wait("observer", timeout_s=60))
        supervisor.restart("observer")

    chaos = threading.Thread(target=crash_and_restart, daemon=True)
    chaos.start()
    outcomes = asyncio.run(run_scenarios(list(SCENARIOS), distributed, sink))
    chaos.join(timeout=30)
    assert killed, "the verdict worker was never killed"
    assert restarted_at, "the verdict worker was never restarted"
    assert supervisor.pid("verdict") not in (None, killed[0])
    assert observer_exit == [0], "the observer did not stop gracefully on SIGTERM"
    failed = [o for o in outcomes if not o.ok]
    assert not failed, _describe(outcomes) + "\n" + distributed.log_tail()
    # The kill happened mid-flight: scenarios were still deciding after the restart.
    assert any(at > restarted_at[0] for at in finished_at.values()), finished_at
    for o in outcomes:
        if o.expected.final:
            assert o.receipt_ok, o
    assert {o.scenario for o in outcomes} == set(SCENARIOS)
