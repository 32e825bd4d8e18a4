"""Benchmark: agent round trips per second through the HTTP API on PostgreSQL, beside its floor.

One round trip is what an agent does for one refund: ``POST /v1/operations`` (input checked
against the contract, row and audit transition written), ``POST /v1/operations/{id}/action``
with the provider's result (ACTION_ACCEPTED then OBSERVING, first observation scheduled in
PostgreSQL, the ``observe`` message sent after commit) and ``GET /v1/operations/{id}``.

The floor is measured in the same run: a bare FastAPI + psycopg app (``bench/_api/bare.py``)
doing the same requests' row writes and reads — key lookup, operation row, audit rows, the
Redis message after commit — served by the same uvicorn with the same flags (a keep-alive of
75 s, so that no connection an agent holds is closed under it on a loaded machine), loaded by
the same client. The two sides alternate (``--rounds`` pairs, bare first) and the ratio is
Provely's round trips/s over the bare side's, per pair and as the median.

Provely is served by the factory of ``provely serve ingress`` (``services.cli.serve:ingress_app``:
its logging set-up, the registry loaded, ``gc.freeze``). Both servers are uvicorn on loopback in
their own process(es) (``--workers``), against a scratch PostgreSQL database migrated with the
real migrations (dropped at the end). The client is asyncio + httpx with ``--concurrency``
agents in a closed loop for ``--duration`` seconds after a warm-up. The broker is Redis, as in
production: a private ``redis-server`` started on a free port for the run (nothing consumes the
messages, and no shared Redis database is filled); ``--broker embedded`` uses kombu's SQLAlchemy
transport in a temporary file instead, and ``--broker URL`` any other broker (the bare side
always pushes to the private Redis).

Each request's p99 (create, report, read) is printed per side beside the round trip's.

Each request's p99 (create, report, read) is printed per side beside the round trip's.

``--statements`` first runs a few round trips in this process against the app itself and
prints, per request, the SQL statements and transactions Provely spends (and the bare side's,
by construction: 2, 3 and 2 statements in one transaction each).

    .venv/bin/python bench/api.py [--duration 15] [--concurrency 16] [--workers 1]
                                  [--rounds 1] [--statements] [--write]

Prints Markdown rows and the ratio; ``--write`` adds the rows to docs/benchmarks.md's "## API".
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
from typing import Any

import httpx
import psycopg
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient
from sqlalchemy import event
from sqlalchemy.engine import Engine

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._api.bare import prepare  # noqa: E402
from bench._results import emit  # noqa: E402
from bench.doc_rows import add_row  # noqa: E402
from services.cli.serve import ingress_app  # noqa: E402
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


REQUESTS = ("create", "report", "read")


async def agent(
    client: httpx.AsyncClient,
    stop_at: float,
    record: bool,
    latencies: list[float],
    per_request: dict[str, list[float]],
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
        created_at = time.perf_counter()
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
        reported_at = time.perf_counter()
        got = await client.get(f"/v1/operations/{op_id}")
        if got.status_code != 200 or got.json()["state"] != "OBSERVING":
            raise RuntimeError(f"get answered {got.status_code}: {got.text}")
        if record:
            read_at = time.perf_counter()
            latencies.append(read_at - started)
            per_request["create"].append(created_at - started)
            per_request["report"].append(reported_at - created_at)
            per_request["read"].append(read_at - reported_at)
            done += 1
    return done


Run = tuple[int, float, list[float], dict[str, list[float]]]
"""Round trips, seconds, each round trip's latency, each request's latency by kind."""


async def run_load(
    base_url: str, key: str, concurrency: int, warmup: float, duration: float
) -> Run:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(
        base_url=base_url, headers=headers, limits=limits, timeout=60
    ) as client:
        warm_until = time.perf_counter() + warmup
        warm: dict[str, list[float]] = {name: [] for name in REQUESTS}
        await asyncio.gather(
            *(agent(client, warm_until, False, [], warm) for _ in range(concurrency))
        )
        latencies: list[float] = []
        per_request: dict[str, list[float]] = {name: [] for name in REQUESTS}
        started = time.perf_counter()
        stop_at = started + duration
        counts = await asyncio.gather(
            *(agent(client, stop_at, True, latencies, per_request) for _ in range(concurrency))
        )
        elapsed = time.perf_counter() - started
    return sum(counts), elapsed, latencies, per_request


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


def serve(factory: str, env: dict[str, str], workers: int) -> tuple[str, subprocess.Popen[bytes]]:
    """uvicorn on a free loopback port with the flags both sides share; returns its base URL."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--factory", factory, "--host", "127.0.0.1",
         "--port", str(port), "--workers", str(workers), "--log-level", "warning",
         "--no-access-log", "--timeout-keep-alive", "75"],
        cwd=ROOT,
        env=env,
    )  # fmt: skip
    base_url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(base_url, process)
    except RuntimeError:
        stop(process)
        raise
    return base_url, process


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def measure(factory: str, env: dict[str, str], key: str, args: argparse.Namespace) -> Run:
    base_url, process = serve(factory, env, args.workers)
    try:
        return asyncio.run(run_load(base_url, key, args.concurrency, args.warmup, args.duration))
    finally:
        stop(process)


def _round_trip(client: Any, counts: dict[str, int]) -> dict[str, tuple[int, int]]:
    """One create → report → read; the statements and transactions each request spent."""
    spent: dict[str, tuple[int, int]] = {}
    op_id = ""
    for step, method, expect in (("create", "POST", 201), ("report", "POST", 200),
                                 ("read", "GET", 200)):  # fmt: skip
        counts.update(statements=0, transactions=0)
        if step == "create":
            body: dict[str, Any] | None = {"contract": "stripe.refund.succeeded", "input": INPUT}
            path = "/v1/operations"
        elif step == "report":
            result = {"id": f"re_{op_id[3:]}", "object": "refund", "status": "pending"}
            body = {"phase": "result", "http_status": 200, "result": result}
            path = f"/v1/operations/{op_id}/action"
        else:
            body, path = None, f"/v1/operations/{op_id}"
        answer = client.request(method, path, json=body)
        if answer.status_code != expect:
            raise RuntimeError(f"{step} answered {answer.status_code}: {answer.text}")
        op_id = op_id or answer.json()["id"]
        spent[step] = (counts["statements"], counts["transactions"])
    return spent


def count_statements(env: dict[str, str], key: str) -> dict[str, tuple[float, float]]:
    """SQL statements and transactions per request, Provely's app in this process.

    Five round trips one request at a time after one to warm the caches; SQLAlchemy's engine
    events count every statement sent (``before_cursor_execute``) and every transaction begun.
    """
    os.environ.update(env)
    counts = {"statements": 0, "transactions": 0}

    def statement(*_: object) -> None:
        counts["statements"] += 1

    def begin(*_: object) -> None:
        counts["transactions"] += 1

    event.listen(Engine, "before_cursor_execute", statement)
    event.listen(Engine, "begin", begin)
    totals = {"create": [0, 0], "report": [0, 0], "read": [0, 0]}
    try:
        app = ingress_app()  # as served: logging at PROVELY_LOG_LEVEL, the registry loaded
        with TestClient(app, headers={"Authorization": f"Bearer {key}"}) as client:
            _round_trip(client, counts)
            for _ in range(5):
                for step, (sql, transactions) in _round_trip(client, counts).items():
                    totals[step][0] += sql
                    totals[step][1] += transactions
    finally:
        event.remove(Engine, "before_cursor_execute", statement)
        event.remove(Engine, "begin", begin)
    return {step: (sql / 5, transactions / 5) for step, (sql, transactions) in totals.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=15.0)
    parser.add_argument("--warmup", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=1, help="pairs of (bare, Provely) runs")
    parser.add_argument(
        "--broker",
        default="private-redis",
        help="private-redis (default), embedded, or a Celery broker URL",
    )
    parser.add_argument("--statements", action="store_true", help="count SQL per request first")
    parser.add_argument("--write", action="store_true", help="append to docs/benchmarks.md")
    args = parser.parse_args()
    if args.rounds < 1 or args.duration <= 0 or args.concurrency < 1 or args.workers < 1:
        parser.error("--rounds, --duration, --concurrency and --workers must be positive")

    name, url = scratch_database()
    dsn = f"{PG}/{name}"
    tmp = Path(tempfile.mkdtemp(prefix="provely-bench-api-"))
    redis_port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1",
         "--save", "", "--appendonly", "no", "--dir", str(tmp)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    redis_url = f"redis://127.0.0.1:{redis_port}/0"
    results: list[tuple[str, int, float, list[float], dict[str, list[float]]]] = []
    statements: dict[str, tuple[float, float]] | None = None
    try:
        if args.broker == "private-redis":
            broker_url = redis_url
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
        prepare(dsn, key)
        bare_env = env | {"PROVELY_BENCH_BARE_DSN": dsn, "PROVELY_BENCH_BARE_REDIS": redis_url}
        if args.statements:
            statements = count_statements(env, key)
        for _ in range(args.rounds):
            results.append(("bare", *measure("bench._api.bare:create_app", bare_env, key, args)))
            results.append(("Provely", *measure("services.cli.serve:ingress_app", env, key, args)))
    finally:
        redis.terminate()
        redis.wait(timeout=30)
        drop_database(name)

    broker = {"private-redis": "Redis", "embedded": "embedded (SQLite)"}.get(
        args.broker, args.broker.split("://")[0]
    )
    header = (
        "| measured (UTC) | python | machine | side | uvicorn workers | agents | broker "
        "| round trips | round trips/s | requests/s | p50 ms | p99 ms | p99 ms per request "
        "| ratio to bare |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    print(header)
    rows: list[str] = []
    ratios: list[float] = []
    bare_rate = 0.0
    for side, count, elapsed, latencies, _ in results:
        rate = count / elapsed
        latencies.sort()
        p50 = statistics.median(latencies) * 1000
        p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000
        if side == "bare":
            bare_rate = rate
            ratio = "1"
        else:
            ratios.append(rate / bare_rate)
            ratio = f"{rate / bare_rate:.2f}x"
        load = os.getloadavg()[0]
        row = (
            f"| {datetime.now(UTC):%Y-%m-%d %H:%M} | {platform.python_version()} "
            f"| {platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f} | {side} "
            f"| {args.workers} | {args.concurrency} | {broker} | {count} "
            f"| {rate:,.0f} | {rate * 3:,.0f} | {p50:.0f} | {p99:.0f} | {p99 / 3:.0f} | {ratio} |"
        )
        rows.append(row)
        print(row)
    ratio_median = statistics.median(ratios)
    print(f"ratio Provely / bare (round trips/s): median {ratio_median:.2f}x")
    provely = [r for r in results if r[0] == "Provely"]
    bare = [r for r in results if r[0] == "bare"]
    p99_request = statistics.median(
        sorted(latencies)[max(0, int(len(latencies) * 0.99) - 1)] * 1000 / 3
        for _, _, _, latencies, _ in provely
    )
    print_per_request(bare=[run[4] for run in bare], provely=[run[4] for run in provely])
    emit(
        "API",
        figure=f"{statistics.median(c / e for _, c, e, _, _ in provely):,.0f} round trips/s, "
        f"p99 {p99_request:.0f} ms per request",
        floor=f"{statistics.median(c / e for _, c, e, _, _ in bare):,.0f} round trips/s (bare)",
        ratio=f"{ratio_median:.2f}x",
        target=">= 0.5x, p99 <= 100 ms per request",
        met=ratio_median >= 0.5 and p99_request <= 100,
    )
    if statements is not None:
        print("\nper request (Provely; the bare side: 2, 3, 2 statements in 1 transaction each)")
        print("| request | SQL statements | transactions |\n|---|---|---|")
        for step, (count_sql, count_tx) in statements.items():
            print(f"| {step} | {count_sql:.1f} | {count_tx:.1f} |")
    if args.write:
        for row in rows:
            write(header, row)


def print_per_request(
    *, bare: list[dict[str, list[float]]], provely: list[dict[str, list[float]]]
) -> None:
    """Each request's p99 (create, report, read), the median over the rounds, per side."""
    print("\np99 ms of each request (median over the rounds)")
    print("| side | create | report | read |\n|---|---|---|---|")
    for side, runs in (("bare", bare), ("Provely", provely)):
        cells = [f"{statistics.median(_p99(run[name]) for run in runs):.0f}" for name in REQUESTS]
        print(f"| {side} | {' | '.join(cells)} |")


def _p99(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000 if ordered else 0.0


def write(header: str, row: str) -> None:
    add_row(SECTION, header, row)


if __name__ == "__main__":
    main()
