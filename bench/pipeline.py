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
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psycopg  # noqa: E402
import redis  # noqa: E402
from kombu import Queue  # noqa: E402

from shared.runtime.celery_app import app  # noqa: E402

PG_ADMIN = os.environ.get("BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
REDIS_BASE = os.environ.get("BENCH_REDIS", "redis://127.0.0.1:6379")
CELERY = str(ROOT / ".venv" / "bin" / "celery")
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


# --------------------------------------------------------------------------------------------


class Provider:
    """A loopback refund API: ``status`` for every refund, created at first read."""

    def __init__(self, status: str) -> None:
        self.status = status
        self.created: dict[str, int] = {}
        provider = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            # Headers and body leave in one write (buffered, flushed after each request), with
            # Nagle off: written apart, the body waited on the client's delayed ACK.
            wbufsize = -1
            disable_nagle_algorithm = True

            def do_GET(self) -> None:
                refund_id = self.path.rsplit("/", 1)[-1]
                created = provider.created.setdefault(refund_id, int(time.time()))
                body = json.dumps(
                    {
                        "id": refund_id,
                        "object": "refund",
                        "amount": 1000,
                        "currency": "usd",
                        "charge": f"ch_{refund_id[3:]}",
                        "status": provider.status,
                        "created": created,
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class Workers:
    def __init__(self, env: dict[str, str], logs: Path) -> None:
        self.env = env
        self.logs = logs
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, queues: str, concurrency: int, app_path: str) -> None:
        log = self.logs / f"{name}.log"
        handle = log.open("ab")
        offset = log.stat().st_size
        proc = subprocess.Popen(
            [CELERY, "-A", app_path, "worker", "-Q", queues, "-c", str(concurrency),
             "-n", f"{name}-{time.monotonic_ns()}@%h", "-P", POOL, "--without-gossip",
             "--without-mingle",
             "--without-heartbeat", "-l", "INFO"],
            cwd=ROOT, env=self.env, stdout=handle, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        handle.close()
        self.procs[name] = proc
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(log.read_text()[-2000:])
            with log.open("rb") as fh:
                fh.seek(offset)
                ready = b"ready" in fh.read()
                if ready or (POOL == "prefork" and self._has_children(proc.pid, concurrency)):
                    time.sleep(0.5)
                    return
            time.sleep(0.2)
        raise RuntimeError(f"{name} not ready")

    @staticmethod
    def _has_children(pid: int, count: int) -> bool:
        return len(_children(pid)) >= count

    def start_sweeper(self) -> None:
        """The sweeper, as production runs it next to the workers."""
        log = (self.logs / "sweeper.log").open("ab")
        code = "from services.verdict.sweeper import run_forever; run_forever()"
        self.procs["sweeper"] = subprocess.Popen(
            [sys.executable, "-c", code], cwd=ROOT, env=self.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        log.close()

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)

    def rss_mb(self, name: str) -> float:
        pid = self.procs[name].pid
        total = 0
        for p in [pid, *_children(pid)]:
            try:
                for line in Path(f"/proc/{p}/status").read_text().splitlines():
                    if line.startswith("VmRSS:"):
                        total += int(line.split()[1])
            except OSError:
                continue
        return total / 1024


def _children(pid: int) -> list[int]:
    found: list[int] = []
    try:
        for task in Path(f"/proc/{pid}/task").iterdir():
            text = (task / "children").read_text().split()
            for child in text:
                found.append(int(child))
                found.extend(_children(int(child)))
    except OSError:
        pass
    return found


def wait_until(predicate: Callable[[], bool], timeout: float, interval: float = 0.05) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.monotonic()
        time.sleep(interval)
    raise TimeoutError("benchmark did not finish in time")


# --------------------------------------------------------------------------------------------


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


def _setup_tenant(engine: Any, provider_url: str, name: str) -> str:
    from shared.db.models import Connection, Workspace
    from shared.db.session import session_scope
    from shared.trust.secrets import encrypt, encrypt_webhook_secrets

    now = datetime.now(UTC)
    ws = f"ws_{name}"
    with session_scope(engine) as session:
        session.add(Workspace(id=ws, name=name, created_at=now))
        session.flush()
        session.add(
            Connection(
                id=f"conn_{name}",
                workspace_id=ws,
                provider="stripe",
                base_url=provider_url,
                signature_scheme="stripe",
                signature_tolerance_seconds=300,
                webhook_secrets_enc=encrypt_webhook_secrets(["whsec_bench"]),
                api_key_enc=encrypt(b"sk_test_bench"),
                auth_scheme="bearer",
                rate_limit_per_second=100_000.0,
                created_at=now,
                updated_at=now,
            )
        )
    return ws


def _create_ops(
    engine: Any, ws: str, contract_id: str, prefix: str, count: int, delay_ms: int | None = None
) -> float:
    """Operations with their action reported and first observation scheduled (after the
    contract's initial delay, or ``delay_ms``); returns when they are due (epoch seconds)."""
    from shared.core.contract import contract_hash
    from shared.db.models import Operation
    from shared.db.session import session_scope
    from shared.lifecycle.contracts import find_contract
    from shared.lifecycle.scheduling import dispatch_observe, schedule_observation

    made: list[tuple[str, int]] = []
    with session_scope(engine) as session:
        contract = find_contract(session, ws, contract_id).contract
        digest = contract_hash(contract)
        delay = contract.timing.initial_delay_ms if delay_ms is None else delay_ms
        now = datetime.now(UTC)
        for i in range(count):
            refund = f"re_{prefix}{i:06d}"
            op = Operation(
                id=f"op_{prefix}{i:06d}", workspace_id=ws, contract_id=contract.id,
                contract_version=contract.version, contract_hash=digest,
                completion_level=contract.completion_level, state="OBSERVING", verdict="PENDING",
                reason="awaiting_evidence", final=False, version=1,
                input={"charge": f"ch_{prefix}{i:06d}", "amount": 1000, "currency": "usd"},
                action_phase="accepted", action_result={"id": refund, "object": "refund"},
                action_http_status=200, action_reported_at=now, subject_id=refund,
                learned_keys={}, attempts=0, fence=0, created_at=now, updated_at=now,
            )  # fmt: skip
            session.add(op)
            if i % 500 == 499:
                session.flush()
        session.flush()
        ops = session.query(Operation).filter(Operation.id.like(f"op_{prefix}%")).all()
        for op in ops:
            made.append((op.id, schedule_observation(session, op, delay_ms=delay, now=now)))
    due = now.timestamp() + delay / 1000
    for op_id, fence in made:
        dispatch_observe(op_id, fence, countdown_s=max(0.0, due - time.time()))
    return due


def _count_final(engine: Any, spaces: list[str]) -> int:
    from sqlalchemy import func, select

    from shared.db.models import Operation
    from shared.db.session import session_scope

    with session_scope(engine) as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Operation)
                .where(Operation.workspace_id.in_(spaces), Operation.final.is_(True))
            )
            or 0
        )


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
    workers = Workers(env, logs)
    provider = Provider("succeeded")
    results: dict[str, Any] = {}
    try:
        results["bare_per_s"] = bare_round_trips(workers, client, args.ops)
        print(f"bare round trips: {results['bare_per_s']:.0f}/s", flush=True)

        workers.start("observer", "observe", OBSERVERS, "shared.runtime.celery_app")
        workers.start("verdict", "verdict", VERDICTS, "shared.runtime.celery_app")
        workers.start_sweeper()
        spaces = [_setup_tenant(engine, provider.url, f"decide{w}") for w in range(args.workspaces)]
        share = args.ops // len(spaces)
        due = max(
            _create_ops(engine, ws, "stripe.refund.created", f"d{w}_", share)
            for w, ws in enumerate(spaces)
        )
        total = share * len(spaces)
        done = wait_until(lambda: _count_final(engine, spaces) >= total, timeout=900, interval=0.2)
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
        ws_open = _setup_tenant(engine, provider.url, "open")
        checkpoints = [1000, args.open]
        created = 0
        for target in checkpoints:
            batch = target - created
            # Each open operation waits for its next poll: a countdown message the observer
            # holds until it is due (the steady state of operations in long backoff).
            _create_ops(engine, ws_open, "stripe.refund.succeeded", f"o{created}_", batch,
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
    print()
    print(
        f"| {datetime.now(UTC):%Y-%m-%d %H:%M} | {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {load:.1f} | {args.ops:,} in {args.workspaces} ws | {results['bare_per_s']:,.0f} | "
        f"{results['pipeline_per_s']:,.0f} | {ratio:.2f}x | "
        f"{r1[0]:.0f} / {r1[1]:.0f} | {rn[0]:.0f} / {rn[1]:.0f} |"
    )


if __name__ == "__main__":
    main()
