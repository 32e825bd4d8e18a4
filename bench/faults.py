"""Fault suite: operations in flight through broker, database and worker failures.

The distributed shape as separate processes (``provely serve ingress|observer|verdict|
sweeper`` and a ``provely sandbox stripe``), on a PostgreSQL cluster and a Redis server that
this run starts for itself on free ports in a temporary directory (never the shared ones), and
with no outside process manager: a service that exits stays dead, except a Celery worker,
which its ``provely serve`` process restarts.

While ``--operations`` refund operations are played (``--concurrency`` agents: charge,
operation, refund with the operation id as idempotency key, action report), the faults run one
after another, ``--fault-every`` seconds apart: ``--redis-restarts`` Redis crashes (SIGKILL,
start again on the same port; nothing persisted), a PostgreSQL crash (``pg_ctl stop -m
immediate``, start again: WAL recovery), kill -9 of the observer's and of the verdict's Celery
worker, and a Redis FLUSHALL. Then it waits for every operation to be final and checks, in
PostgreSQL and at the sandbox:

- operations lost: not final, or final but not VERIFIED (every refund here succeeds);
- double transitions: an operation with two transitions into a final state, or a transition
  chain that does not verify (``provely audit verify``);
- acknowledged webhooks missing: deliveries the ingress answered 2xx whose event is not stored.

    .venv/bin/python bench/faults.py [--operations 300] [--concurrency 12] [--redis-restarts 10]

Exit 0 when nothing was lost; prints the figures as Markdown (docs/reliability.md keeps the last
ones).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.faults import FaultWorld
from tests.e2e.launcher import running_system
from tests.servers import PrivatePostgres, PrivateRedis


def _stamp(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--operations", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument("--redis-restarts", type=int, default=10)
    parser.add_argument("--fault-every", type=float, default=3.0)
    parser.add_argument("--settle-timeout", type=float, default=900.0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="provely-faults-"))
    # The PostgreSQL cluster below belongs to the postgres user when this runs as root: it must
    # reach its directory (traverse only; nothing here is secret).
    os.chmod(root, 0o711)  # noqa: S103
    _stamp(f"working in {root}")
    with (
        PrivatePostgres(root / "pg") as postgres,
        PrivateRedis(root / "redis") as redis,
        running_system(
            postgres.url, redis.url, root / "system", name="faults", restart_services=False
        ) as system,
    ):
        world = FaultWorld(system=system, redis=redis, postgres=postgres, log=_stamp)
        world.open_workspace()
        serve_pids = {role: world.serve_pid(role) for role in ("observer", "verdict")}
        faults = [world.restart_redis] * max(0, args.redis_restarts - 5)
        faults += [
            lambda: world.kill_worker("observer"),
            world.restart_redis,
            world.restart_postgres,
            world.restart_redis,
            lambda: world.kill_worker("verdict"),
            world.restart_redis,
            world.flush_redis,
            world.restart_redis,
            world.restart_redis,
        ]
        _stamp(
            f"{args.operations} operations, {args.concurrency} agents, {len(faults)} faults "
            f"every {args.fault_every:g} s"
        )
        elapsed = asyncio.run(
            world.run_operations(
                args.operations,
                concurrency=args.concurrency,
                faults=faults,
                fault_every_s=args.fault_every,
                settle_timeout_s=args.settle_timeout,
            )
        )
        check = world.check()
        alive = {role: world.serve_pid(role) == pid for role, pid in serve_pids.items()}
        logs = {
            role: (root / "system" / "logs" / f"{role}.log").read_text("utf-8", errors="replace")
            for role in ("observer", "verdict")
        }
        restarts = {role: text.count("worker.restarting") for role, text in logs.items()}
        crashes = {role: text.count("Unrecoverable error") for role, text in logs.items()}
        print()
        print(f"## Fault suite ({datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {platform.node()})")
        print()
        print("| figure | value |")
        print("| --- | --- |")
        print(f"| operations | {check.operations} |")
        print(f"| final VERIFIED | {check.verified} |")
        print(f"| operations lost (not VERIFIED) | {len(check.not_verified)} |")
        print(f"| double transitions | {len(check.double_transitions)} |")
        print(f"| audit chain | {'intact' if check.audit_ok else 'BROKEN'} |")
        print(f"| webhooks acknowledged (2xx) | {check.webhooks_acknowledged} |")
        print(f"| acknowledged webhooks missing | {len(check.webhooks_missing)} |")
        print(f"| Redis restarts | {redis.restarts} |")
        print(f"| Redis FLUSHALL | {world.faults.count('redis FLUSHALL')} |")
        print(f"| PostgreSQL crash-restarts | {postgres.restarts} |")
        print(f"| workers killed (kill -9) | {sum(world.worker_kills.values())} |")
        print(f"| worker restarts by provely serve | {restarts} |")
        print(f"| worker crashes (Unrecoverable error) | {crashes} |")
        print(f"| serve processes alive, never restarted | {alive} |")
        print(f"| agent calls retried after a fault | {world.api_retries} |")
        print(f"| first operation to last verdict | {elapsed:.0f} s |")
        print(f"| verdicts | {check.verdicts} |")
        if check.not_verified:
            print("not verified:", dict(list(check.not_verified.items())[:10]))
        if check.webhooks_missing:
            print("missing webhooks:", check.webhooks_missing[:10])
        if not check.ok or not all(alive.values()):
            print(system.log_tail(40))
        ok = check.ok and all(alive.values())
    if not args.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
