"""Pipeline benchmark: operations decided per second through observe → evaluate, and worker memory.

Runs on loopback against real PostgreSQL and Redis with real Celery worker processes (prefork,
the same settings as production):

1. **bare**: a no-op round trip with the same shape — a task on one queue that sends a task to a
   second queue, which counts in Redis. Messages per second through both hops.
2. **pipeline**: operations of ``stripe.refund.created`` whose first readback decides (a loopback
   provider answers at once), created together and due together. Operations decided per second
   from the due time to the last final verdict, each through ``observe`` (readback, webhook
   reduction, observations stored) and ``evaluate`` (decision, fenced transition, receipt).
3. **memory**: open operations of ``stripe.refund.succeeded`` waiting for their next poll, each
   holding it as a countdown message in the observer (the steady state of operations in long
   backoff). Resident memory (RSS, every process of each worker) after 1,000 and 10,000.

Usage: ``.venv/bin/python bench/pipeline.py [--ops 1000] [--open 10000]``. It creates and drops
its own database and uses one Redis db index (FLUSHDB on that index only). Prints a Markdown row
for ``docs/benchmarks.md``.

The bench's parts (the loopback provider, the worker processes, the operations it writes and
counts) are the modules of ``bench/_pipeline/``.
"""

from __future__ import annotations

import argparse
import os
import platform
import secrets
import signal
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import redis  # noqa: E402
from kombu import Queue  # noqa: E402

from bench._pipeline.operations import count_final, create_ops, setup_tenant  # noqa: E402
from bench._pipeline.provider import Provider  # noqa: E402
from bench._pipeline.workers import Workers, wait_until  # noqa: E402
from bench._results import emit  # noqa: E402
from shared.runtime.celery_app import app  # noqa: E402

PG_ADMIN = os.environ.get("BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_BASE = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379")
HOP1, HOP2 = "bench_hop1", "bench_hop2"
OBSERVERS, VERDICTS = 4, 4  # pool size of each worker, the same for both measurements
POOL = "prefork"
COUNTER = "provely:bench:done"

# Two no-op hops for the bare round trip, on their own queues of the same app.
app.conf.task_queues = (*app.conf.task_queues, Queue(HOP1), Queue(HOP2))
app.conf.task_routes = {
    **app.conf.task_routes,
    "bench.hop1": {"queue": HOP1},
    "bench.hop2": {"queue": HOP2},
}
_redis_client: Any = None


@app.task(name="bench.hop1", ignore_result=True)  # type: ignore[untyped-decorator]
def hop1(n: int) -> None:
    app.send_task("bench.hop2", args=[n])


@app.task(name="bench.hop2", ignore_result=True)  # type: ignore[untyped-decorator]
def hop2(n: int) -> None:
    global _redis_client
    if _redis_client is None:
        _redis_client = redis.Redis.from_url(os.environ["PROVELY_BROKER_URL"])
    _redis_client.incr(COUNTER)


def bare_round_trips(workers: Workers, client: Any, count: int) -> float:
    client.delete(COUNTER)
    workers.start("bare1", HOP1, OBSERVERS, "bench.pipeline")
    workers.start("bare2", HOP2, VERDICTS, "bench.pipeline")
    try:
        started = time.monotonic()
        with app.producer_or_acquire() as producer:
            for n in range(count):
                app.send_task("bench.hop1", args=[n], producer=producer)
        done = wait_until(lambda: int(client.get(COUNTER) or 0) >= count, timeout=600)
        return count / (done - started)
    finally:
        workers.stop("bare1")
        workers.stop("bare2")


OPEN_DELAY_MS = 500_000


def _held(client: Any) -> int:
    """Messages still waiting in the observe queue (not yet taken by the worker)."""
    return int(client.llen("observe"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1000, help="operations decided (and trips)")
    parser.add_argument("--open", type=int, default=10_000, help="open operations for RSS")
    parser.add_argument("--redis-db", type=int, default=secrets.randbelow(15) + 1)
    parser.add_argument(
        "--workspaces",
        type=int,
        default=1,
        help="spread the decided operations over N workspaces (each has its own audit chain)",
    )
    parser.add_argument("--pool", default="prefork", help="Celery pool of every worker")
    parser.add_argument("--concurrency", type=int, default=4, help="pool size of every worker")
    args = parser.parse_args()
    global POOL, OBSERVERS, VERDICTS
    POOL, OBSERVERS, VERDICTS = args.pool, args.concurrency, args.concurrency
    # SIGTERM runs the cleanup below (workers stopped, database dropped) like Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    db = f"provely_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    base = PG_ADMIN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    db_url = f"{base}/{db}"
    broker = f"{REDIS_BASE}/{args.redis_db}"
    from cryptography.fernet import Fernet

    logs = Path(tempfile.mkdtemp(prefix="provely-bench-"))
    values = {
        "PROVELY_DATABASE_URL": db_url,
        "PROVELY_BROKER_URL": broker,
        "PROVELY_REDIS_URL": broker,
        "PROVELY_SECRET_KEY": Fernet.generate_key().decode(),
        "PROVELY_DATA_DIR": str(logs),
        "PROVELY_JITTER_RATIO": "0",
        "PROVELY_LOG_JSON": "false",
    }
    os.environ.update(values)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    from shared.db.migrate import upgrade
    from shared.db.session import make_engine
    from shared.runtime.celery_app import configure
    from shared.runtime.settings import get_settings

    get_settings.cache_clear()
    configure(app, get_settings())
    client = redis.Redis.from_url(broker)
    client.flushdb()
    upgrade(db_url)
    engine = make_engine(db_url)
    workers = Workers(env, logs, POOL)
    provider = Provider("succeeded")
    results: dict[str, Any] = {}
    try:
        results["bare_per_s"] = bare_round_trips(workers, client, args.ops)
        print(f"bare round trips: {results['bare_per_s']:.0f}/s", flush=True)

        workers.start("observer", "observe", OBSERVERS, "shared.runtime.celery_app")
        workers.start("verdict", "verdict", VERDICTS, "shared.runtime.celery_app")
        workers.start_sweeper()
        spaces = [setup_tenant(engine, provider.url, f"decide{w}") for w in range(args.workspaces)]
        share = args.ops // len(spaces)
        due = max(
            create_ops(engine, ws, "stripe.refund.created", f"d{w}_", share)
            for w, ws in enumerate(spaces)
        )
        total = share * len(spaces)
        done = wait_until(lambda: count_final(engine, spaces) >= total, timeout=900, interval=0.2)
        finished_epoch = time.time() - (time.monotonic() - done)
        results["pipeline_per_s"] = total / max(1e-6, finished_epoch - due)
        print(f"pipeline: {results['pipeline_per_s']:.0f} operations decided/s", flush=True)

        # Memory: fresh workers, open operations each holding a countdown message.
        if args.open <= 0:
            return _report(args, results)
        workers.stop_all()
        client.flushdb()
        provider.status = "pending"
        workers.start("observer", "observe", OBSERVERS, "shared.runtime.celery_app")
        workers.start("verdict", "verdict", VERDICTS, "shared.runtime.celery_app")
        results["rss_idle"] = (workers.rss_mb("observer"), workers.rss_mb("verdict"))
        ws_open = setup_tenant(engine, provider.url, "open")
        checkpoints = [1000, args.open]
        created = 0
        for target in checkpoints:
            batch = target - created
            # Each open operation waits for its next poll: a countdown message the observer
            # holds until it is due (the steady state of operations in long backoff).
            create_ops(engine, ws_open, "stripe.refund.succeeded", f"o{created}_", batch,
                        delay_ms=OPEN_DELAY_MS)  # fmt: skip
            created = target
            wait_until(lambda t=target: _held(client) == 0, timeout=600, interval=0.5)
            time.sleep(3.0)
            results[f"rss_{target}"] = (workers.rss_mb("observer"), workers.rss_mb("verdict"))
            print(f"rss at {target} open: observer {results[f'rss_{target}'][0]:.0f} MB, "
                  f"verdict {results[f'rss_{target}'][1]:.0f} MB", flush=True)  # fmt: skip
    finally:
        workers.stop_all()
        provider.close()
        client.flushdb()
        client.close()
        engine.dispose()
        from shared.db.session import dispose_engines

        dispose_engines()
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')

    _report(args, results)


def _report(args: argparse.Namespace, results: dict[str, Any]) -> None:
    load = os.getloadavg()[0]
    ratio = results["pipeline_per_s"] / results["bare_per_s"]
    r1 = results.get("rss_1000", (0.0, 0.0))
    rn = results.get(f"rss_{args.open}", (0.0, 0.0))
    emit(
        "Pipeline",
        figure=f"{results['pipeline_per_s']:,.0f} operations decided/s "
        f"({args.workspaces} workspace(s), {args.pool})",
        floor=f"{results['bare_per_s']:,.0f} bare two-hop Celery round trips/s",
        ratio=f"{ratio:.2f}x",
        target=">= 0.5x",
        met=ratio >= 0.5,
    )
    print()
    print(
        f"| {datetime.now(UTC):%Y-%m-%d %H:%M} | {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {load:.1f} | {args.ops:,} in {args.workspaces} ws | {results['bare_per_s']:,.0f} | "
        f"{results['pipeline_per_s']:,.0f} | {ratio:.2f}x | "
        f"{r1[0]:.0f} / {r1[1]:.0f} | {rn[0]:.0f} / {rn[1]:.0f} |"
    )


if __name__ == "__main__":
    main()
