"""Wake benchmark: from a provider callback's 200 to VERIFIED in the API, beside its floor.

The distributed shape as the end-to-end tests start it (``tests.e2e.launcher``: ingress,
observer, verdict worker and sweeper as separate processes on PostgreSQL and Redis, a Stripe
sandbox). Each of ``--ops`` operations (``stripe.refund.succeeded``, the newest version) is a
refund the sandbox keeps ``pending`` (outcome ``stuck_pending``), reported by the agent and read
back once (pending: the operation waits in backoff, its next reading seconds away). Then the
refund succeeds at the provider and its ``refund.updated`` — which the sandbox does not deliver
(``drop_types``), so the bench holds it — is delivered signed to the webhook intake: the
callback. Measured: from the intake's 200 to the first ``GET /v1/operations/{id}`` that answers
VERIFIED (polled every ``--poll-ms``). That is the wake path: stored → correlated → woken →
read back → decided.

The floor is the same chain's hops with no work in them (``bench/_wake/bare.py``): a bare
intake that stores the body and sends a message, a correlate hop, an observe hop that reads the
refund at the same sandbox, an evaluate hop that writes the state, a bare read; the same broker,
the same Celery configuration, worker processes of the same kind and pool size, the same
database server. Bare and Provely wakes alternate, one at a time, in the same run.

Usage: ``.venv/bin/python bench/wake.py [--ops 100] [--poll-ms 5] [--gap 0.1]``. It creates
and drops its own database and claims one empty Redis index (flushed at the end, that index
only). Prints p50/p99 of both sides, the ratio and a Markdown row; exits 1 when a wake does not
reach VERIFIED within 30 s.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pipeline.workers import Workers  # noqa: E402
from bench._results import emit  # noqa: E402
from bench._wake.bare import CORRELATE, EVALUATE, OBSERVE, SCHEMA  # noqa: E402
from services.cli.demo.scenarios.workspace import Workspace, open_workspace  # noqa: E402
from tests.e2e.launcher import DistributedSystem, free_port, running_system  # noqa: E402
from tests.e2e.worlds import World  # noqa: E402

PG = os.environ.get("BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379/0")
TIMEOUT_S = 30.0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


async def _until(read: Any, done: Any, poll_s: float, what: str) -> Any:
    deadline = time.monotonic() + TIMEOUT_S
    while True:
        value = await read()
        if done(value):
            return value
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {TIMEOUT_S:g} s for {what}; last read {value}")
        await asyncio.sleep(poll_s)


async def _refund_event(world: World, refund_id: str) -> dict[str, Any]:
    """The sandbox's ``refund.updated`` of ``refund_id`` with status succeeded (not delivered)."""
    answer = await world.stripe.get("/v1/events", params={"type": "refund.updated", "limit": 20})
    for event in answer.json()["data"]:
        refund = event["data"]["object"]
        if refund["id"] == refund_id and refund["status"] == "succeeded":
            return dict(event)
    raise RuntimeError(f"no refund.updated (succeeded) for {refund_id}")


async def provely_wake(world: World, poll_s: float) -> float:
    """One operation read back pending, then its callback: seconds from the 200 to VERIFIED."""
    await world.agent_refund(outcome="stuck_pending")
    await _until(
        world.get, lambda op: op["attempts"] >= 1, poll_s, "the first readback"
    )  # now in backoff: the next scheduled reading is seconds away
    await world.control(f"refunds/{world.refund_id}/status", {"status": "succeeded"})
    event = await _refund_event(world, world.refund_id)
    acknowledged = await world.post_event(event)
    op = await _until(world.get, lambda op: op["final"], poll_s, "the verdict")
    if op["state"] != "VERIFIED":
        raise RuntimeError(f"{world.op_id} ended {op['state']} {op.get('reason')}")
    return time.monotonic() - acknowledged


async def bare_wake(
    world: World, bare: httpx.AsyncClient, db: psycopg.AsyncConnection[Any], poll_s: float
) -> float:
    """The same refund and callback through the bare chain."""
    await world.charge_and_create()
    status, refund = await world.refund(outcome="stuck_pending")
    if status != 200:
        raise RuntimeError(f"refund answered {status}: {refund}")
    op_id = f"bare_{refund['id']}"
    await db.execute(
        "INSERT INTO bare_wake_ops (id, refund_id, state) VALUES (%s, %s, 'OBSERVING')",
        (op_id, refund["id"]),
    )
    await world.control(f"refunds/{refund['id']}/status", {"status": "succeeded"})
    event = await _refund_event(world, refund["id"])
    answer = await bare.post(f"/hook/{op_id}", json=event)
    acknowledged = time.monotonic()
    if answer.status_code != 200:
        raise RuntimeError(f"bare hook answered {answer.status_code}")

    async def read() -> str:
        return str((await bare.get(f"/ops/{op_id}")).json()["state"])

    await _until(read, lambda state: state == "VERIFIED", poll_s, "the bare verdict")
    return time.monotonic() - acknowledged


def start_bare(system: DistributedSystem, sandbox_url: str, sandbox_key: str, logs: Path) -> Any:
    """The bare intake (uvicorn, the ingress's flags) and its two workers; returns a stopper."""
    dsn = system.postgres_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SCHEMA)
    env = system.env | {
        "PROVELY_BENCH_WAKE_DSN": dsn,
        "PROVELY_BENCH_WAKE_SANDBOX": f"{sandbox_url}|{sandbox_key}",
    }
    workers = Workers(env, logs, "prefork")
    workers.start("bare-observer", f"{CORRELATE},{OBSERVE}", 2, "bench._wake.bare")
    workers.start("bare-verdict", EVALUATE, 1, "bench._wake.bare")
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", "bench._wake.bare:create_app",
         "--host", "127.0.0.1", "--port", str(port), "--workers", "1", "--log-level",
         "warning", "--no-access-log"],
        cwd=ROOT, env=env,
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if server.poll() is not None or time.monotonic() > deadline:
            workers.stop_all()
            raise RuntimeError("the bare intake did not start")
        time.sleep(0.2)

    def stop() -> None:
        server.terminate()
        server.wait(timeout=30)
        workers.stop_all()

    return f"http://127.0.0.1:{port}", dsn, stop


async def run(system: DistributedSystem, args: argparse.Namespace, logs: Path) -> dict[str, Any]:
    sandbox = system.new_sandbox()
    workspace: Workspace = await open_workspace(system, sandbox, "bench-wake")
    poll_s = args.poll_ms / 1000
    probe = World(system.api_url, workspace)
    await probe.control("faults", {"drop_types": ["refund.updated"]})
    bare_url, dsn, stop_bare = start_bare(system, sandbox.base_url, sandbox.api_key, logs)
    times: dict[str, list[float]] = {"bare": [], "Provely": []}
    try:
        async with (
            httpx.AsyncClient(base_url=bare_url, timeout=30) as bare,
            await psycopg.AsyncConnection.connect(dsn, autocommit=True) as db,
        ):
            for i in range(args.ops):
                world = World(system.api_url, workspace)
                try:
                    times["bare"].append(await bare_wake(world, bare, db, poll_s))
                    await asyncio.sleep(args.gap)
                    times["Provely"].append(await provely_wake(world, poll_s))
                    await asyncio.sleep(args.gap)
                finally:
                    await world.close()
                if (i + 1) % 20 == 0:
                    print(f"{i + 1}/{args.ops} wakes", file=sys.stderr, flush=True)
    finally:
        await probe.close()
        stop_bare()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100)
    parser.add_argument("--poll-ms", type=float, default=5.0, help="how often a verdict is read")
    parser.add_argument("--gap", type=float, default=0.1, help="seconds between wakes")
    args = parser.parse_args()
    if args.ops < 1 or args.poll_ms <= 0 or args.gap < 0:
        parser.error("--ops and --poll-ms must be positive, --gap not negative")
    with tempfile.TemporaryDirectory(prefix="provely-wake-") as workdir:
        logs = Path(workdir) / "bare-logs"
        logs.mkdir()
        with running_system(PG, REDIS, Path(workdir), name="bench-wake") as system:
            times = asyncio.run(run(system, args, logs))
    figures = {
        side: (statistics.median(values) * 1000, percentile(values, 0.99) * 1000)
        for side, values in times.items()
    }
    (b50, b99), (p50, p99) = figures["bare"], figures["Provely"]
    load = os.getloadavg()[0]
    print(f"floor (bare chain): p50 {b50:.0f} ms, p99 {b99:.0f} ms over {args.ops}")
    print(f"Provely:            p50 {p50:.0f} ms, p99 {p99:.0f} ms over {args.ops}")
    print(f"ratio p99 Provely / bare: {p99 / b99:.2f}x (target: p99 <= 100 ms and <= 2x)")
    print(
        f"| {datetime.now(UTC):%Y-%m-%d %H:%M} | {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {load:.1f} | {args.ops} | {b50:.0f} / {b99:.0f} | {p50:.0f} / {p99:.0f} "
        f"| {p50 / b50:.2f}x / {p99 / b99:.2f}x |"
    )
    emit(
        "Wake",
        figure=f"callback -> VERIFIED p50 {p50:.0f} ms, p99 {p99:.0f} ms",
        floor=f"bare chain p50 {b50:.0f} ms, p99 {b99:.0f} ms",
        ratio=f"{p99 / b99:.2f}x (p99)",
        target="p99 <= 100 ms and <= 2x",
        met=p99 <= 100 and p99 <= 2 * b99,
    )


if __name__ == "__main__":
    main()
