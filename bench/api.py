"""Benchmark: agent round trips per second through the HTTP API on PostgreSQL.

One round trip is what an agent does for one refund: ``POST /v1/operations`` (input checked
against the contract, row and audit transition written), ``POST /v1/operations/{id}/action``
with the provider's result (ACTION_ACCEPTED then OBSERVING, first observation scheduled in
PostgreSQL, the ``observe`` message sent after commit) and ``GET /v1/operations/{id}``.

The server is uvicorn on loopback in its own process(es) (``--workers``), against a scratch
PostgreSQL database migrated with the real migrations (dropped at the end). The client is
asyncio + httpx with ``--concurrency`` agents in a closed loop for ``--duration`` seconds after
a warm-up. The broker is Redis, as in production: a private ``redis-server`` started on a free
port for the run (nothing consumes the messages, and no shared Redis database is filled);
``--broker embedded`` uses kombu's SQLAlchemy transport in a temporary file instead, and
``--broker URL`` any other broker.

    .venv/bin/python bench/api.py [--duration 15] [--concurrency 16] [--workers 1] [--write]

Prints a Markdown row; ``--write`` adds it to the table of ``docs/benchmarks.md``'s "## API".
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import secrets
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import httpx
import psycopg
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.doc_rows import add_row  # noqa: E402
from shared.db.migrate import upgrade  # noqa: E402
from shared.db.session import make_engine, session_scope  # noqa: E402
from shared.db.tenants import create_workspace  # noqa: E402

PG = os.environ.get("PROVELY_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
INPUT = {"charge": "ch_bench", "amount": 500, "currency": "usd"}
SECTION = "## API"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def scratch_database() -> tuple[str, str]:
    name = f"provely_bench_{secrets.token_hex(5)}"
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return name, f"{PG.replace('postgresql://', 'postgresql+psycopg://')}/{name}"


def drop_database(name: str) -> None:
    with psycopg.connect(f"{PG}/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def agent(
    client: httpx.AsyncClient, stop_at: float, record: bool, latencies: list[float]
) -> int:
    done = 0
    while time.perf_counter() < stop_at:
        started = time.perf_counter()
        created = await client.post(
            "/v1/operations", json={"contract": "stripe.refund.succeeded", "input": INPUT}
        )
        if created.status_code != 201:
            raise RuntimeError(f"create answered {created.status_code}: {created.text}")
        op_id = created.json()["id"]
        reported = await client.post(
            f"/v1/operations/{op_id}/action",
            json={
                "phase": "result",
                "http_status": 200,
                "result": {"id": f"re_{op_id[3:]}", "object": "refund", "status": "pending"},
            },
        )
        if reported.status_code != 200:
            raise RuntimeError(f"report answered {reported.status_code}: {reported.text}")
        got = await client.get(f"/v1/operations/{op_id}")
        if got.status_code != 200 or got.json()["state"] != "OBSERVING":
            raise RuntimeError(f"get answered {got.status_code}: {got.text}")
        if record:
            latencies.append(time.perf_counter() - started)
            done += 1
    return done


async def run_load(
    base_url: str, key: str, concurrency: int, warmup: float, duration: float
) -> tuple[int, float, list[float]]:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=60
    ) as client:
        warm_until = time.perf_counter() + warmup
        await asyncio.gather(*(agent(client, warm_until, False, []) for _ in range(concurrency)))
        latencies: list[float] = []
        started = time.perf_counter()
        stop_at = started + duration
        counts = await asyncio.gather(
            *(agent(client, stop_at, True, latencies) for _ in range(concurrency))
        )
        elapsed = time.perf_counter() - started
    return sum(counts), elapsed, latencies


def wait_ready(base_url: str, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("uvicorn exited before it was ready")
        try:
            if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise RuntimeError("uvicorn did not become ready")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument(
        "--broker",
        default="private-redis",
        help="private-redis (default), embedded, or a Celery broker URL",
    )
    parser.add_argument("--write", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()

    name, url = scratch_database()
    tmp = Path(tempfile.mkdtemp(prefix="provely-bench-api-"))
    process: subprocess.Popen[bytes] | None = None
    redis: subprocess.Popen[bytes] | None = None
    try:
        if args.broker == "private-redis":
            redis_port = free_port()
            redis = subprocess.Popen(
                ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
                 "--save", "", "--appendonly", "no", "--dir", str(tmp)],
                stdout=subprocess.DEVNULL,
            )  # fmt: skip
            broker_url = f"redis://127.0.0.1:{redis_port}/0"
        elif args.broker == "embedded":
            broker_url = f"sqla+sqlite:///{tmp / 'broker.db'}"
        else:
            broker_url = args.broker
        upgrade(url)
        secret = Fernet.generate_key().decode()
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")} | {
            "PROVELY_DATABASE_URL": url,
            "PROVELY_SECRET_KEY": secret,
            "PROVELY_DATA_DIR": str(tmp),
            "PROVELY_BROKER_URL": broker_url,
            "PROVELY_LOG_LEVEL": "WARNING",
        }
        os.environ["PROVELY_SECRET_KEY"] = secret
        engine = make_engine(url)
        with session_scope(engine) as session:
            _, key = create_workspace(session, "bench", now=datetime.now(UTC))
        engine.dispose()
        port = free_port()
        base_url = f"http://127.0.0.1:{port}"
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "--factory",
                "services.ingress.app:create_app",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--workers",
                str(args.workers),
                "--log-level",
                "warning",
                "--no-access-log",
            ],
            cwd=ROOT,
            env=env,
        )
        wait_ready(base_url, process)
        count, elapsed, latencies = asyncio.run(
            run_load(base_url, key, args.concurrency, args.warmup, args.duration)
        )
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)
        if redis is not None:
            redis.terminate()
            redis.wait(timeout=30)
        drop_database(name)

    rate = count / elapsed
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000
    load = os.getloadavg()[0]
    broker = {"private-redis": "Redis", "embedded": "embedded (SQLite)"}.get(
        args.broker, args.broker.split("://")[0]
    )
    row = (
        f"| {datetime.now(UTC):%Y-%m-%d %H:%M} | {platform.python_version()} "
        f"| {platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f} "
        f"| {args.workers} | {args.concurrency} | {broker} | {count} "
        f"| {rate:,.0f} | {rate * 3:,.0f} | {p50:.0f} | {p99:.0f} |"
    )
    header = (
        "| measured (UTC) | python | machine | uvicorn workers | agents | broker "
        "| round trips | round trips/s | requests/s | p50 ms | p99 ms |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|"
    )
    print(header)
    print(row)
    if args.write:
        write(header, row)


def write(header: str, row: str) -> None:
    add_row(SECTION, header, row)


if __name__ == "__main__":
    main()
