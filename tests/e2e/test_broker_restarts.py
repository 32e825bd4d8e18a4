"""Workers outlive their broker, with no process manager but ``provely serve`` itself.

The system runs on a Redis of this test's own (``tests.servers.PrivateRedis``; never the shared
one) and its services are started once and never restarted from outside. While operations are
in flight, Redis is killed (SIGKILL) and started again on the same port three times, then each
worker is killed with SIGKILL. Every operation must still reach VERIFIED, each ``provely serve``
process must be the one started at the beginning, and each killed worker must have been
replaced by ``provely serve``.

On celery 5.7.0 a Redis restart killed the worker holding unacknowledged messages
(``AttributeError: 'NoneType' object has no attribute 'hostname'``, exit 1) and nothing
started it again: the operations stayed open. The larger fault suite is ``bench/faults.py``.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli.spawn import provely_argv
from tests.e2e.faults import FaultWorld, worker_child
from tests.e2e.launcher import running_system
from tests.servers import PrivateRedis

pytestmark = pytest.mark.e2e

OPERATIONS = 12


@pytest.fixture
def world(postgres_url: str, tmp_path: Path) -> Iterator[FaultWorld]:
    with (
        PrivateRedis(tmp_path / "redis") as redis,
        running_system(
            postgres_url, redis.url, tmp_path / "system", name="restarts", restart_services=False
        ) as system,
    ):
        found = FaultWorld(system=system, redis=redis, log=lambda _line: None)
        found.open_workspace()
        yield found


def test_workers_survive_redis_restarts_and_kills(world: FaultWorld) -> None:
    parents = {role: world.serve_pid(role) for role in ("observer", "verdict")}
    children = {role: worker_child(pid) for role, pid in parents.items() if pid}
    assert all(parents.values()), parents
    assert all(children.values()), children
    killed: dict[str, int] = {}

    def kill(role: str) -> None:
        killed[role] = world.kill_worker(role)

    faults = [
        world.restart_redis,
        world.restart_redis,
        world.restart_redis,
        lambda: kill("verdict"),
        lambda: kill("observer"),
    ]
    asyncio.run(world.run_operations(OPERATIONS, concurrency=4, faults=faults, fault_every_s=2.0))
    check = world.check()
    assert check.ok, (check, world.system.log_tail())
    assert check.operations == OPERATIONS
    assert world.redis.restarts == 3
    # The same serve processes as at the start: nothing outside restarted them …
    assert {role: world.serve_pid(role) for role in parents} == parents, world.system.log_tail()
    # … and each killed worker was replaced by its serve process.
    for role, old in killed.items():
        assert world.wait_worker_replaced(role, old) != old
    logs = (world.system.workdir / "logs" / "verdict.log").read_text("utf-8", errors="replace")
    assert "worker.restarting" in logs
    # The health check sees both workers again, through the restarted broker (a worker that
    # was just replaced answers once it has started: as the compose check, retry a few times).
    for role in ("observer", "verdict"):
        answered = _ping_until_healthy(world, role)
        assert answered
        assert all(name.startswith(f"{role}.") for name in answered), answered


def _ping_until_healthy(world: FaultWorld, role: str, attempts: int = 10) -> list[str]:
    for _ in range(attempts - 1):
        try:
            return world.system.cli(["serve", "ping", role, "--timeout", "3"]).split()
        except RuntimeError:
            time.sleep(2.0)
    return world.system.cli(["serve", "ping", role, "--timeout", "3"]).split()


def _ping(broker_url: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env |= {"PROVELY_BROKER_URL": broker_url, "PROVELY_DATA_DIR": str(tmp_path / "data")}
    return subprocess.run(
        provely_argv("serve", "ping", "verdict", "--timeout", "1"),
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_the_health_check_fails_when_no_worker_answers(tmp_path: Path) -> None:
    with PrivateRedis(tmp_path / "redis") as redis:
        run = _ping(redis.url, tmp_path)
        assert run.returncode == 1, run.stderr
        assert "no verdict worker" in run.stderr
        redis.kill9()  # and when the broker itself is gone
        run = _ping(redis.url, tmp_path)
    assert run.returncode == 1, run.stderr
    assert "cannot reach the broker" in run.stderr
