"""Operations created at once on the embedded shape (``provely up``) and on the distributed one.

Run: ``.venv/bin/python bench/embedded.py [--operations 25] [--runs 1] [--shape both]
[--pg URL] [--redis URL] [--write]``

Each run starts a fresh system — the embedded one (SQLite database, kombu's SQLAlchemy broker
on SQLite, the four ``provely serve`` children of ``provely up``) and the distributed one
(PostgreSQL and Redis: a new database on ``--pg``'s server, an empty database index claimed on
``--redis``'s, both dropped after) — loading a copy of ``stripe.refund.succeeded`` that observes
200 ms after the report and then every 300 ms, for a minute at most. Against a Stripe sandbox
that settles refunds at once (``settle_ms=0``) and delivers their events as they happen, it
creates ``--operations`` operations at once, plays each refund and reports it (the burst of
``tests/e2e/burst.py``, which the end-to-end test runs too), and reads until each is final.

Figures per shape: how many were VERIFIED; creation → final verdict p50 and p99; operations
decided per second; the ``provely.observe``/``observe_many`` messages the observer received per
second (counted from its worker's ``Task … received`` log lines) against the embedded broker's
polling floor: a worker that may take a message finds a waiting one within one polling interval
(``EMBEDDED_POLLING_INTERVAL_S``, 0.1 s), so while messages wait it receives at least 10 a
second; Redis pushes them (no floor). ``--write`` adds a row per shape to the "## Embedded"
section of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._results import emit  # noqa: E402
from bench.doc_rows import add_row  # noqa: E402
from shared.runtime.celery_app import EMBEDDED_POLLING_INTERVAL_S  # noqa: E402
from tests.e2e.burst import (  # noqa: E402
    Burst,
    distributed_system,
    embedded_system,
    run_burst,
    summary,
)

SECTION = "## Embedded"
HEADER = (
    "| measured (UTC) | machine | celery / kombu | shape | VERIFIED | create → final p50 / p99 s "
    "| decided/s | observe messages/s (floor) |\n"
    "|---|---|---|---|---|---|---|---|"
)
TIMEOUT_S = 60.0


def _embedded(operations: int) -> Burst:
    with (
        tempfile.TemporaryDirectory(prefix="provely-bench-embedded-") as tmp,
        embedded_system(Path(tmp)) as system,
    ):
        return run_burst(system, system.log_dir, operations=operations, timeout_s=TIMEOUT_S)


def _distributed(operations: int, *, pg: str, redis_url: str) -> Burst:
    with tempfile.TemporaryDirectory(prefix="provely-bench-distributed-") as tmp:
        workdir = Path(tmp)
        with distributed_system(workdir, postgres_url=pg, redis_url=redis_url) as system:
            return run_burst(system, workdir / "logs", operations=operations, timeout_s=TIMEOUT_S)


def _row(shape: str, burst: Burst, load: str) -> str:
    figures = summary(burst)
    floor = f"{1 / EMBEDDED_POLLING_INTERVAL_S:.0f}" if shape == "embedded" else "—"
    return (
        f"| {datetime.now(UTC):%Y-%m-%d %H:%M} | {platform.machine()}, {os.cpu_count()} CPUs, "
        f"load {load} | {version('celery')} / {version('kombu')} | {shape} | "
        f"{burst.verified} of {burst.operations} | "
        f"{figures['p50_s']:.1f} / {figures['p99_s']:.1f} | {figures['decided_per_s']:.2f} | "
        f"{figures['observe_per_s']:.1f} ({floor}) |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--operations", type=int, default=25)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--shape", choices=["both", "embedded", "distributed"], default="both")
    parser.add_argument("--pg", default="postgresql://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--redis", default="redis://127.0.0.1:6379/0")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    if args.operations < 1 or args.runs < 1:
        parser.error("--operations and --runs must be at least 1")
    rows = []
    shaped: list[tuple[str, Burst]] = []
    for run in range(1, args.runs + 1):
        shapes = ["embedded", "distributed"] if args.shape == "both" else [args.shape]
        for shape in shapes:
            before = os.getloadavg()[0]
            if shape == "embedded":
                burst = _embedded(args.operations)
            else:
                burst = _distributed(args.operations, pg=args.pg, redis_url=args.redis)
            load = f"{before:.1f} to {os.getloadavg()[0]:.1f}"
            print(f"run {run}, {shape}: {burst.describe()}", flush=True)
            rows.append(_row(shape, burst, load))
            shaped.append((shape, burst))
    bursts = [burst for _, burst in shaped]
    verified = sum(burst.verified for burst in bursts)
    emit(
        "Embedded",
        figure=f"{verified} of {args.operations * len(bursts)} VERIFIED ({args.shape}); "
        + ", ".join(f"{shape} p99 {burst.percentile(0.99):.1f} s" for shape, burst in shaped),
        target="every operation VERIFIED",
        met=verified == args.operations * len(bursts),
    )
    print(HEADER)
    for row in rows:
        print(row)
        if args.write:
            add_row(SECTION, HEADER, row)


if __name__ == "__main__":
    main()
