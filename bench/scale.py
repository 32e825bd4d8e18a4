"""Scale benchmark: open operations in long backoff on PostgreSQL, up to a million.

Each step grows the table of open operations (``stripe.refund.succeeded`` 1.0.0, OBSERVING,
action reported) to the next count — 10,000, 100,000, 1,000,000 by default — with their next
observation spread uniformly over the coming ``--spread-days`` (the steady state of operations
in long backoff: a few fall due every second). The first operation is written by the
benchmark's ORM path (``bench/_pipeline/operations.py``), the others are copied from it by one
``INSERT … SELECT`` over ``generate_series`` (new ids, refund ids and due times). Then, at each
step, with ``VACUUM (ANALYZE)`` first:

- **database size per operation**: the operations table with its indexes and TOAST, over the
  operation count (only that table: an operation in backoff has its audit transitions and
  readings besides, which grow with its history, not with the number of open operations);
- **the sweeper's cost per pass**: ``Sweeper.sweep_once()`` run ``--passes`` times (median wall
  time and SQL statements), and ``EXPLAIN (ANALYZE, BUFFERS)`` of each distinct query a pass
  sent, in a transaction rolled back: the plan's nodes, the indexes used, rows and time;
- **the observer's memory**: a real observer worker (``provely.observe`` queue, prefork) on a
  private Redis runs the whole time, reading a loopback provider that answers every refund
  ``pending``; its resident memory (all pool processes) after the passes. What falls due in
  the sweeper's horizon is sent to it and read back (and rescheduled) as in production;
- **the observe rate it sustains**: the readings written during the step's passes, per second.

    .venv/bin/python bench/scale.py [--steps 10000 100000 1000000] [--passes 3]

Creates and drops its own database and Redis server; prints a table per step and the EXPLAIN
summaries.
"""

from __future__ import annotations

import argparse
import os
import secrets
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._pipeline.operations import create_ops, setup_tenant  # noqa: E402
from bench._pipeline.provider import Provider  # noqa: E402
from bench._pipeline.workers import Workers  # noqa: E402
from bench._results import emit  # noqa: E402
from services.cli.spawn import free_port  # noqa: E402

PG_ADMIN = os.environ.get("BENCH_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")
FAR_MS = 10**9  # the template's own first observation: far away


def clone_sql(columns: list[str]) -> str:
    """Copies the template operation ``%(template)s`` into rows ``%(start)s``..``%(end)s``."""
    chosen = {
        "id": "'op_s' || lpad(g::text, 8, '0')",
        "subject_id": "'re_s' || lpad(g::text, 8, '0')",
        "action_result": "jsonb_build_object('id', 're_s' || lpad(g::text, 8, '0'), "
        "'object', 'refund')",
        "next_observation_at": "now() + interval '60 seconds' "
        "+ random() * (%(spread_days)s::float8 * interval '1 day')",
        "enqueued_at": "NULL",
        "idempotency_key": "NULL",
    }
    select = ", ".join(chosen.get(c, f"t.{c}") for c in columns)
    return (
        f"INSERT INTO operations ({', '.join(columns)}) SELECT {select} "  # noqa: S608
        "FROM operations t, generate_series(%(start)s::int, %(end)s::int) g "
        "WHERE t.id = %(template)s"
    )


def table_bytes(conn: psycopg.Connection[Any]) -> tuple[int, int, int]:
    row = conn.execute(
        "SELECT pg_total_relation_size('operations'), pg_relation_size('operations'), "
        "pg_indexes_size('operations')"
    ).fetchone()
    assert row is not None
    return int(row[0]), int(row[1]), int(row[2])


def plan_summary(plan: dict[str, Any]) -> str:
    """Node types (with their index), rows, buffers of one EXPLAIN (FORMAT JSON) plan."""
    nodes: list[str] = []

    def walk(node: dict[str, Any]) -> None:
        kind = node["Node Type"]
        if "Index Name" in node:
            kind += f" on {node['Index Name']}"
        elif kind == "Seq Scan":
            kind += f" on {node.get('Relation Name', '?')}"
        nodes.append(f"{kind} ({node.get('Actual Rows', 0)} rows)")
        for child in node.get("Plans", []):
            walk(child)

    walk(plan["Plan"])
    buffers = plan["Plan"].get("Shared Hit Blocks", 0) + plan["Plan"].get("Shared Read Blocks", 0)
    return f"{plan['Execution Time']:.2f} ms, {buffers} buffers: " + " > ".join(nodes)


def explain(engine: Any, statements: list[tuple[str, Any]]) -> list[tuple[str, str]]:
    seen: set[str] = set()
    plans: list[tuple[str, str]] = []
    with engine.connect() as conn:
        for statement, parameters in statements:
            if not statement.lstrip().upper().startswith("SELECT") or statement in seen:
                continue
            seen.add(statement)
            raw = conn.connection.dbapi_connection
            with raw.cursor() as cur:
                cur.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + statement, parameters)
                (document,) = cur.fetchone()
            raw.rollback()
            flat = " ".join(statement.split())
            where = flat.find(" WHERE ")
            first_line = (flat[:40] + " …" + flat[where:] if where > 0 else flat)[:240]
            plans.append((first_line, plan_summary(document[0])))
    return plans


def measure_passes(engine: Any, settings: Any, passes: int) -> tuple[float, int, Any]:
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    from services.verdict.sweeper import Sweeper

    captured: list[tuple[str, Any]] = []

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        captured.append((statement, parameters))

    times: list[float] = []
    sent = 0
    for n in range(passes):
        if n == 0:
            event.listen(Engine, "before_cursor_execute", record)
        started = time.perf_counter()
        report = Sweeper(engine, settings).sweep_once()
        times.append(time.perf_counter() - started)
        if n == 0:
            event.remove(Engine, "before_cursor_execute", record)
        sent += report.total
    return statistics.median(times), len(captured), (captured, sent)


def readings(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute("SELECT count(*) FROM observations").fetchone()
    return int(row[0]) if row else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[10_000, 100_000, 1_000_000])
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--spread-days", type=float, default=7.0)
    args = parser.parse_args()
    steps = sorted(set(args.steps))
    if not steps or steps[0] < 1 or args.passes < 1 or args.spread_days <= 0:
        parser.error("--steps and --passes must be positive, --spread-days above 0")
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))

    db = f"provely_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{db}"')
    dsn = f"{PG_ADMIN.rsplit('/', 1)[0]}/{db}"
    logs = Path(tempfile.mkdtemp(prefix="provely-bench-scale-"))
    redis_port = free_port()
    redis = subprocess.Popen(
        ["redis-server", "--port", str(redis_port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(logs)],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    broker = f"redis://127.0.0.1:{redis_port}/0"
    os.environ.update(
        {
            "PROVELY_DATABASE_URL": dsn.replace("postgresql://", "postgresql+psycopg://"),
            "PROVELY_BROKER_URL": broker,
            "PROVELY_REDIS_URL": broker,
            "PROVELY_SECRET_KEY": Fernet.generate_key().decode(),
            "PROVELY_DATA_DIR": str(logs),
            "PROVELY_LOG_LEVEL": "WARNING",
        }
    )
    from shared.db.migrate import upgrade
    from shared.db.session import make_engine
    from shared.runtime.settings import get_settings

    get_settings.cache_clear()
    settings = get_settings()
    upgrade(os.environ["PROVELY_DATABASE_URL"])
    engine = make_engine(os.environ["PROVELY_DATABASE_URL"])
    provider = Provider("pending")
    workers = Workers({**os.environ, "PYTHONPATH": str(ROOT)}, logs, "prefork")
    rows: list[str] = []
    try:
        ws = setup_tenant(engine, provider.url, "scale")
        create_ops(engine, ws, "stripe.refund.succeeded", "tpl", 1, delay_ms=FAR_MS)
        workers.start("observer", "observe", 2, "shared.runtime.celery_app")
        rss_idle = workers.rss_mb("observer")
        with psycopg.connect(dsn, autocommit=True) as conn:
            columns = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns "
                    "WHERE table_name = 'operations' ORDER BY ordinal_position"
                )
            ]
            insert = clone_sql(columns)
            made = 1
            for target in steps:
                started = time.monotonic()
                conn.execute(
                    insert,
                    {"template": "op_tpl000000", "start": made, "end": target - 1,
                     "spread_days": args.spread_days},
                )  # fmt: skip
                made = target
                conn.execute("VACUUM (ANALYZE) operations")
                filled = time.monotonic() - started
                total, heap, indexes = table_bytes(conn)
                read_before, clock_before = readings(conn), time.monotonic()
                pass_s, statements, (captured, sent) = measure_passes(engine, settings, args.passes)
                time.sleep(3.0)
                rate = (readings(conn) - read_before) / (time.monotonic() - clock_before)
                rss = workers.rss_mb("observer")
                plans = explain(engine, captured)
                print(
                    f"\n{target:,} open operations (filled in {filled:.0f} s): table "
                    f"{total / target:.0f} B per operation (heap {heap / target:.0f}, indexes "
                    f"{indexes / target:.0f}); sweeper pass median {pass_s * 1000:.1f} ms, "
                    f"{statements} statements, {sent} messages sent over {args.passes} passes; "
                    f"observer RSS {rss:.0f} MB (idle {rss_idle:.0f}); {rate:.1f} readings/s",
                    flush=True,
                )
                for statement, summary in plans:
                    print(f"  EXPLAIN {statement}\n    {summary}")
                rows.append(
                    f"| {target:,} | {total / target:.0f} B ({heap / target:.0f} + "
                    f"{indexes / target:.0f}) | {pass_s * 1000:.1f} ms | {statements} | "
                    f"{rss:.0f} MB | {rate:.1f}/s |"
                )
    finally:
        workers.stop_all()
        provider.close()
        engine.dispose()
        redis.terminate()
        redis.wait(timeout=30)
        with psycopg.connect(PG_ADMIN, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
    print(
        f"\n{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load {os.getloadavg()[0]:.1f}\n\n"
        "| open operations | operations table per operation (heap + indexes) | sweeper pass "
        "| statements per pass | observer RSS | readings/s |\n|---|---|---|---|---|---|"
    )
    for row in rows:
        print(row)
    emit(
        "Scale",
        figure=f"{steps[-1]:,} open: " + rows[-1].split("|")[3].strip() + " per sweeper pass, "
        f"observer {rows[-1].split('|')[5].strip()}",
        floor=f"{steps[0]:,} open: {rows[0].split('|')[3].strip()}, "
        f"observer {rows[0].split('|')[5].strip()}",
        target="flat or linear with a small constant",
    )


if __name__ == "__main__":
    main()
