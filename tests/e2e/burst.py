"""A burst of refund operations created at once on a running Provely, each refund succeeded at
once and its events delivered: how long each takes from creation to its final verdict.

Shared by the end-to-end test of concurrency (``tests/e2e/test_concurrency.py``) and the
benchmark ``bench/embedded.py``. The shapes are the production commands: the embedded system
(``provely up``'s SQLite database and SQLite broker) and the distributed one (PostgreSQL and
Redis, :class:`tests.e2e.launcher.DistributedSystem`). Both load :func:`burst_skill_env`'s skill,
a copy of ``stripe.refund.succeeded`` that polls every 300 ms; the sandbox settles refunds at
once (``settle_ms=0``) and delivers each event as it happens.

The observer's ``provely.observe`` and ``provely.observe_many`` messages are counted from the
lines its worker logs when it receives a task (Celery's ``Task … received``), so a broker that
hands out one message every two seconds shows as such, whatever the verdicts say.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import httpx

from services.cli.demo.embedded import EmbeddedDemoSystem
from services.cli.demo.scenarios.refund_contract import REFUND_CONTRACT, write_short_timing_skill
from services.sandbox.runner import RunningSandbox, run_sandbox
from tests.e2e.launcher import DistributedSystem, claimed_redis_db, own_database

__all__ = [
    "BURST_TIMING",
    "BURST_VERSION",
    "Burst",
    "burst_skill_env",
    "distributed_system",
    "embedded_system",
    "run_burst",
    "summary",
]

BURST_VERSION = "1.0.2"
"""The burst's copy of ``stripe.refund.succeeded`` (1.0.0's rules, :data:`BURST_TIMING`)."""

BURST_TIMING: dict[str, Any] = {
    "initial_delay_ms": 200,
    "poll_interval_ms": 300,
    "backoff": {"kind": "exponential", "factor": 2, "max_ms": 300},
    "max_attempts": 200,
    "timeout_ms": 60_000,
}
"""First observation after 200 ms, then one every 300 ms, for up to a minute."""

_RECEIVED = re.compile(r"Task (provely\.observe(?:_many)?)\[[^\]]+\] received")


class System(Protocol):
    """What a burst needs of a running Provely (both launchers have it)."""

    @property
    def api_url(self) -> str: ...

    def create_workspace(self, name: str) -> tuple[str, str]: ...

    def connect_stripe(
        self, workspace_id: str, *, webhook_secret: str, api_key: str, base_url: str
    ) -> None: ...

    def wait_ready(self) -> None: ...


@dataclass
class Burst:
    """What a burst found: each operation's final resource and its creation → final time."""

    operations: int
    started: float
    ended: float
    finals: dict[str, dict[str, Any]] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)
    observe_messages: int = 0

    @property
    def verified(self) -> int:
        return sum(
            1 for op in self.finals.values() if op.get("final") and op.get("verdict") == "VERIFIED"
        )

    @property
    def elapsed_s(self) -> float:
        return self.ended - self.started

    def percentile(self, q: float) -> float:
        """The ``q`` quantile (0..1) of creation → final, in seconds (inf for an open one)."""
        times = sorted(self.seconds.get(op, float("inf")) for op in self.finals)
        times += [float("inf")] * (self.operations - len(times))
        if not times:
            return float("nan")
        return times[min(len(times) - 1, max(0, round(q * len(times) + 0.5) - 1))]

    def describe(self) -> str:
        verdicts: dict[str, int] = {}
        for op in self.finals.values():
            key = f"{op.get('state')} {op.get('verdict')} ({op.get('reason')})"
            verdicts[key] = verdicts.get(key, 0) + 1
        return (
            f"{self.verified}/{self.operations} VERIFIED in {self.elapsed_s:.1f} s, "
            f"{self.observe_messages} observe messages; {verdicts}"
        )


def burst_skill_env(directory: Path) -> dict[str, str]:
    """Write the burst's signed skill under ``directory``; the environment that loads it."""
    return write_short_timing_skill(directory, version=BURST_VERSION, timing=BURST_TIMING)


def observe_messages(log_dir: Path) -> int:
    """The observe messages the observer's worker received, from its log files."""
    count = 0
    for path in log_dir.glob("observer*.log"):
        count += len(_RECEIVED.findall(path.read_text("utf-8", errors="replace")))
    return count


@contextlib.contextmanager
def embedded_system(workdir: Path) -> Iterator[EmbeddedDemoSystem]:
    """``provely up``'s system (SQLite database and broker) loading the burst's skill."""
    with EmbeddedDemoSystem(
        data_dir=workdir / "data", extra_env=burst_skill_env(workdir / "skill")
    ) as system:
        system.wait_ready()
        yield system


@contextlib.contextmanager
def distributed_system(
    workdir: Path, *, postgres_url: str, redis_url: str
) -> Iterator[DistributedSystem]:
    """The distributed system (PostgreSQL and Redis) loading the burst's skill, on a database
    and a Redis index of its own."""
    with contextlib.ExitStack() as stack:
        database = stack.enter_context(own_database(postgres_url))
        broker = stack.enter_context(claimed_redis_db(redis_url, owner="burst"))
        system = DistributedSystem(
            postgres_url=database,
            redis_url=broker,
            workdir=workdir,
            extra_env=burst_skill_env(workdir / "skill"),
        )
        stack.callback(system.stop)
        system.start()
        yield system


def run_burst(
    system: System, log_dir: Path, *, operations: int, timeout_s: float, name: str = "burst"
) -> Burst:
    """Create ``operations`` refund operations at once on ``system`` against a sandbox of this
    process, play each refund, and wait until every one is final or ``timeout_s`` has passed
    since the first was created."""
    with run_sandbox(settle_ms=0) as sandbox:
        workspace, api_key = system.create_workspace(name)
        with httpx.Client(
            base_url=sandbox.base_url, headers={"Authorization": f"Bearer {sandbox.api_key}"}
        ) as stripe:
            endpoint = stripe.post(
                "/v1/webhook_endpoints",
                data={
                    "url": f"{system.api_url}/v1/events/stripe/{workspace}",
                    "enabled_events[]": "*",
                },
            ).json()
        system.connect_stripe(
            workspace,
            webhook_secret=endpoint["secret"],
            api_key=sandbox.api_key,
            base_url=sandbox.base_url,
        )
        before = observe_messages(log_dir)
        burst = asyncio.run(
            _play(system.api_url, api_key, sandbox, operations=operations, timeout_s=timeout_s)
        )
        burst.observe_messages = observe_messages(log_dir) - before
        return burst


async def _play(
    api_url: str, api_key: str, sandbox: RunningSandbox, *, operations: int, timeout_s: float
) -> Burst:
    limits = httpx.Limits(max_connections=operations * 2, max_keepalive_connections=0)
    async with (
        httpx.AsyncClient(
            base_url=api_url,
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=30.0,
            limits=limits,
        ) as api,
        httpx.AsyncClient(
            base_url=sandbox.base_url,
            headers={"Authorization": f"Bearer {sandbox.api_key}"},
            timeout=30.0,
            limits=limits,
        ) as stripe,
    ):
        charges = await asyncio.gather(
            *(
                stripe.post("/v1/charges", data={"amount": 5000, "currency": "usd"})
                for _ in range(operations)
            )
        )
        burst = Burst(operations=operations, started=time.monotonic(), ended=0.0)
        deadline = burst.started + timeout_s
        await asyncio.gather(
            *(
                _one(api, stripe, charge.json()["id"], burst, deadline=deadline)
                for charge in charges
            )
        )
        burst.ended = time.monotonic()
        return burst


async def _one(
    api: httpx.AsyncClient,
    stripe: httpx.AsyncClient,
    charge: str,
    burst: Burst,
    *,
    deadline: float,
) -> None:
    created_at = time.monotonic()
    created = await api.post(
        "/v1/operations",
        json={
            "contract": REFUND_CONTRACT,
            "contract_version": BURST_VERSION,
            "input": {"charge": charge, "amount": 2000, "currency": "usd"},
        },
    )
    assert created.status_code == 201, created.text
    op_id = created.json()["id"]
    refund = await stripe.post(
        "/v1/refunds",
        data={"charge": charge, "amount": 2000},
        headers={"Idempotency-Key": op_id},
    )
    assert refund.status_code == 200, refund.text
    report = await api.post(
        f"/v1/operations/{op_id}/action",
        json={"phase": "result", "result": refund.json(), "http_status": 200},
    )
    assert report.status_code == 200, report.text
    while True:
        op = (await api.get(f"/v1/operations/{op_id}")).json()
        burst.finals[op_id] = op
        if op.get("final"):
            burst.seconds[op_id] = time.monotonic() - created_at
            return
        if time.monotonic() > deadline:
            return
        await asyncio.sleep(0.1)


def summary(burst: Burst) -> dict[str, float]:
    """The burst's figures: create → final p50/p99 and mean, decided per second, observe
    messages per second."""
    return {
        "p50_s": burst.percentile(0.5),
        "p99_s": burst.percentile(0.99),
        "mean_s": statistics.fmean(burst.seconds.values()) if burst.seconds else float("nan"),
        "decided_per_s": len(burst.seconds) / burst.elapsed_s if burst.elapsed_s else 0.0,
        "observe_per_s": burst.observe_messages / burst.elapsed_s if burst.elapsed_s else 0.0,
    }
