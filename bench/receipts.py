"""What a receipt costs: signing and checking in memory, and issuing one on PostgreSQL.

Run: ``.venv/bin/python bench/receipts.py [--operations 300] [--write]``

1. **sign**: build the body of a realistic VERIFIED receipt (7 conditions, 4 pieces of evidence),
   canonicalise it and sign it with Ed25519 — per second, one core.
2. **verify**: what ``provely receipts verify`` does per document once the key list is loaded:
   strict parse, canonicalise, check the signature.
3. **issue**: ``issue_receipt`` inside its own transaction on PostgreSQL (the work a final state
   change adds): load the contract, resolve the evidence digests from the stored readings and
   events, sign, insert. Operations are pre-written in their final state with their readings
   and events; p50/p99 are per receipt. The database is a fresh one, dropped afterwards.

``--write`` adds the figures to the table of ``docs/benchmarks.md``'s "## Receipts".
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import secrets
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.doc_rows import add_row  # noqa: E402
from shared.core.receipt import receipt_document, signing_payload  # noqa: E402
from shared.lifecycle.receipt_check import verify_receipt_document  # noqa: E402
from shared.lifecycle.receipt_keyring import (  # noqa: E402
    KeyRing,
    generate_private_key,
    key_id_for,
    public_key_b64,
    sign_payload,
)
from tests.unit.receipts.factory import sample_body  # noqa: E402

PG = os.environ.get("PROVELY_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres")


def bench_memory(seconds: float) -> tuple[float, float]:
    private = generate_private_key()
    key_id = key_id_for(private.public_key())
    ring = KeyRing.from_document(
        {
            "keys": [
                {
                    "key_id": key_id,
                    "public_key": public_key_b64(private.public_key()),
                    "status": "active",
                }
            ]
        }
    )
    signed = 0
    documents: list[bytes] = []
    start = time.process_time()
    while time.process_time() - start < seconds:
        body = sample_body(receipt_id=f"rcpt_{signed:032d}")
        signature = sign_payload(private, signing_payload(body))
        if len(documents) < 2_000:
            document = receipt_document(body, signature=signature, key_id=key_id)
            documents.append(json.dumps(document).encode())
        signed += 1
    sign_rate = signed / (time.process_time() - start)
    checked = 0
    start = time.process_time()
    while time.process_time() - start < seconds:
        result = verify_receipt_document(documents[checked % len(documents)], ring)
        assert result.status == 0
        checked += 1
    return sign_rate, checked / (time.process_time() - start)


def bench_issue(operations: int) -> list[float]:
    import psycopg
    from cryptography.fernet import Fernet

    from shared.db.migrate import upgrade
    from shared.db.models import Operation
    from shared.db.session import make_engine, session_scope
    from shared.lifecycle.receipts import issue_receipt
    from shared.runtime.settings import Settings, get_settings
    from tests.integration.receipts.conftest import RefundFlow

    name = f"provely_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = PG.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://") + f"/{name}"
    os.environ.update(
        PROVELY_DATABASE_URL=url,
        PROVELY_SECRET_KEY=Fernet.generate_key().decode(),
        PROVELY_DATA_DIR=str(Path("/tmp") / name),
    )
    get_settings.cache_clear()
    settings: Settings = get_settings()
    engine = make_engine(url)
    try:
        upgrade(url)
        ids: list[str] = []
        for i in range(operations):
            flow = RefundFlow(engine, operation_id=f"op_{i:06d}", refund_id=f"re_{i:06d}")
            with session_scope(engine) as session:
                flow.verified(session)  # writes the VERIFIED state and its first receipt
            ids.append(flow.operation_id)
        timings: list[float] = []
        now = datetime.now(UTC)
        for i, op_id in enumerate(ids):
            started = time.perf_counter()
            with session_scope(engine) as session:
                op = session.get(Operation, op_id)
                assert op is not None
                issue_receipt(session, op, now=now + timedelta(seconds=i), settings=settings)
            timings.append((time.perf_counter() - started) * 1000.0)
        return timings
    finally:
        engine.dispose()
        with psycopg.connect(PG, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--operations", type=int, default=300)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    sign_rate, verify_rate = bench_memory(args.seconds)
    timings = bench_issue(args.operations)
    p50 = statistics.median(timings)
    p99 = sorted(timings)[max(0, int(len(timings) * 0.99) - 1)]
    per_s = 1000.0 / statistics.mean(timings)
    load = os.getloadavg()[0]
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M")
    machine = f"{platform.machine()}, {os.cpu_count()} CPUs, load {load:.1f}"
    row = (
        f"| {stamp} | {platform.python_version()} | {machine} | {sign_rate:,.0f} | "
        f"{verify_rate:,.0f} | {len(timings)} | {per_s:,.0f} | {p50:.1f} | {p99:.1f} |"
    )
    print(
        f"sign {sign_rate:,.0f}/s, verify {verify_rate:,.0f}/s (CPU); issue on PostgreSQL: "
        f"{per_s:,.0f}/s sequential, p50 {p50:.1f} ms, p99 {p99:.1f} ms"
    )
    if args.write:
        header = (
            "| measured (UTC) | python | machine | sign/s (CPU) | verify/s (CPU) | receipts "
            "issued | issued/s | p50 ms | p99 ms |\n"
            "|---|---|---|---|---|---|---|---|---|"
        )
        add_row("## Receipts", header, row)


if __name__ == "__main__":
    main()
