"""Benchmark: signed Stripe deliveries accepted per second by the webhook intake.

Each accepted delivery is the intake's path: read the body, verify the signature, insert the
event once (``ON CONFLICT DO NOTHING``) with its keys, commit, answer 200 (a ``correlate``
message for the batches committed meanwhile, at most one each 100 ms). A real correlator worker
(``provely serve observer --queues correlate --pool solo``; ``--correlators N`` runs a prefork
pool of N processes instead) runs at the same time on the same machine: it links each event with
its open operation (strong, by subject id) and wakes it (fence + next observation in PostgreSQL,
then the ``observe`` message on Redis after commit — or, when the operation's due message has
not been claimed by an observer yet, keeps that one). No observer reads: stand-in observers (a
thread of this process) claim every woken fence each ``--claim-every-ms`` (100 ms by default),
as observers that begin each reading within that time would, so later events wake the operation
again; ``--claim-every-ms 0`` claims nothing (idle observers: after its first wake an
operation's message stays pending and every later event keeps it). The run reports both rates:
deliveries answered per second while ``wrk`` runs, and deliveries fully processed (stored,
correlated, woken) per second from the first one's arrival until the correlator has caught up;
and for each run the CPU each process used per request or event (``/proc``: the servers, the
correlator, all of PostgreSQL, ``wrk``, this process) and the WAL each event wrote.

The reference is a bare FastAPI endpoint that only reads the body, served by the same uvicorn
settings, measured in the same run with the same load tool:

- throughput: ``wrk`` (closed loop) with a Lua script that rotates pre-generated signed bodies,
  each a distinct event (so every request is a new row), at each of ``--connections`` (32, 64,
  128 and 256 connections by default), the bare endpoint and then the intake at each count
  (side by side, so a slower spell of the machine falls on both); each endpoint's maximum is its
  best rate over them (the intake batches deliveries, so it may need more requests in flight
  than the bare endpoint to reach its maximum). After each intake run the correlator is let catch
  up and the database is vacuumed (``VACUUM (ANALYZE)``, untimed, as autovacuum would), so
  runs inherit neither each other's backlog nor their dead row versions. The fully processed
  rate counts from the first event's arrival (``received_at``) until the correlator caught up:
  wrk's threads load their bodies before they send, and that time processes nothing;
- latency: ``wrk`` again at half of the intake's maximum rate, for both endpoints: 64
  connections whose requests start on a schedule (the Lua ``delay`` hook: each thread starts
  one every ``interval``; a connection whose response came waits for the next free start), so
  the rate is the one asked as long as the server keeps up, whatever its latency (32 connections
  left too few free when the latency rose: 93 to 96 % of the rate reached).

Needs PostgreSQL (a scratch database is created and dropped) and Redis, as the tests do::

    .venv/bin/python bench/ingest.py [--duration 15] [--connections 32 64 128 256]
                                     [--operations 2000] [--correlators 1]
                                     [--claim-every-ms 100]

Prints a Markdown table; the figures of record are in ``docs/benchmarks.md`` ("Ingest"). The
bench's parts (the scratch database, the bodies, ``wrk``, the servers, the counts, the CPU, the
stand-in observers) are the modules of ``bench/_ingest/``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench._ingest.bodies import remove_bodies, signed_bodies  # noqa: E402
from bench._ingest.cpu import cpu_delta, cpu_snapshot  # noqa: E402
from bench._ingest.observers import StandInObservers  # noqa: E402
from bench._ingest.rows import (  # noqa: E402
    IntakeRun,
    count_rows,
    first_arrival,
    wait_correlated,
    wal_snapshot,
)
from bench._ingest.scratch import create_database, drop_database, seed, vacuum  # noqa: E402
from bench._ingest.servers import free_port, start_server, uvicorn_argv  # noqa: E402
from bench._ingest.wrk import LUA, WrkResult, run_wrk  # noqa: E402
from bench._results import emit  # noqa: E402

# the bare endpoint, served by ``uvicorn ingest:bare_app`` (only reads the body)
bare_app = FastAPI()


@bare_app.post("/v1/events/{provider}/{workspace}")
async def _bare(provider: str, workspace: str, request: Request) -> Response:
    await request.body()
    return Response(b'{"received":true}', media_type="application/json")


def main() -> None:  # noqa: C901  # pay down: options, run and report in one; a function each
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=int, default=15)
    parser.add_argument(
        "--connections",
        type=int,
        nargs="+",
        default=[32, 64, 128, 256],
        help="wrk connection counts; each endpoint's maximum over them is compared",
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1, help="uvicorn workers of each server")
    parser.add_argument("--operations", type=int, default=2000)
    parser.add_argument(
        "--correlators",
        type=int,
        default=1,
        help="correlating processes: 1 runs one solo process; more, a prefork pool of that "
        "many (the observer's default pool is prefork, 2)",
    )
    parser.add_argument(
        "--claim-every-ms",
        type=int,
        default=100,
        help="stand-in observers claim every woken fence this often (0: never, idle observers)",
    )
    parser.add_argument("--latency-seconds", type=float, default=15.0)
    parser.add_argument(
        "--pg",
        default=os.environ.get("PROVELY_BENCH_PG", "postgresql://postgres@127.0.0.1:5432/postgres"),
    )
    parser.add_argument(
        "--redis", default=None, help="Redis URL (default: an empty index of the local Redis)"
    )
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed (apt-get install -y wrk)")

    from cryptography.fernet import Fernet

    from tests.e2e.launcher import claimed_redis_db

    # A Redis index of its own (claimed while empty, as the tests claim theirs, and emptied at
    # the end): the workers leave their bindings there, and a test run must find it empty.
    claim = None if args.redis else claimed_redis_db("redis://127.0.0.1:6379/0", owner="bench")
    redis_url = args.redis or claim.__enter__()  # type: ignore[union-attr]
    scratch = create_database(args.pg)
    work = Path(tempfile.mkdtemp(prefix="provely-bench-ingest-"))
    processes: list[subprocess.Popen[bytes]] = []
    observers: StandInObservers | None = None
    try:
        fernet_key = Fernet.generate_key().decode()
        workspace_id, subjects = seed(scratch.url, fernet_key, args.operations)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
        env.update(
            PROVELY_DATABASE_URL=scratch.url,
            PROVELY_BROKER_URL=redis_url,
            PROVELY_REDIS_URL=redis_url,
            PROVELY_SECRET_KEY=fernet_key,
            PROVELY_DATA_DIR=str(work / "data"),
            PROVELY_LOG_LEVEL="WARNING",
            PYTHONPATH=str(ROOT),
        )
        ingest_port, bare_port = free_port(), free_port()
        processes.append(
            start_server(
                uvicorn_argv(
                    "services.cli.serve:ingress_app",
                    ingest_port,
                    factory=True,
                    app_dir=None,
                    workers=args.workers,
                ),
                env,
                ingest_port,
            )
        )
        processes.append(
            start_server(
                uvicorn_argv(
                    "ingest:bare_app",
                    bare_port,
                    factory=False,
                    app_dir=str(ROOT / "bench"),
                    workers=args.workers,
                ),
                env,
                bare_port,
            )
        )
        processes.append(
            subprocess.Popen(
                [
                    str(Path(sys.executable).with_name("provely")), "serve", "observer",
                    "--queues", "correlate", *(
                        ["--pool", "solo"] if args.correlators == 1
                        else ["--concurrency", str(args.correlators)]
                    ),
                ],
                cwd=ROOT, env=env,
            )
        )  # fmt: skip
        tracked = {  # whose CPU each run counts (besides PostgreSQL, wrk and this process)
            "intake": processes[0].pid,
            "bare": processes[1].pid,
            "correlator": processes[2].pid,
        }
        path = f"/v1/events/stripe/{workspace_id}"
        ingest_url = f"http://127.0.0.1:{ingest_port}{path}"
        bare_url = f"http://127.0.0.1:{bare_port}{path}"
        script = work / "rotate.lua"
        script.write_text(LUA)
        # Distinct events for one intake run: more than it can take in (a repeat is answered
        # from the unique index and stores nothing, so a pool that wraps flatters the rate).
        per_run = max(80_000, 15_000 * args.duration)

        if args.claim_every_ms > 0:
            observers = StandInObservers(scratch.url, args.claim_every_ms / 1000)
            observers.start()
        # warm-up of both (imports, pools, caches), then the measured runs
        warm = work / "warm.txt"
        signed_bodies(warm, "warm", 2000, subjects, threads=1)
        for url in (ingest_url, bare_url):
            run_wrk(url, script, warm, threads=1, connections=4, duration=2)
        wait_correlated(scratch.url)

        # Each endpoint's maximum: the best rate over the connection counts (a server that
        # batches needs more requests in flight to reach its maximum than one that does not).
        # The two endpoints alternate, bare then intake at each count, so that a slower or
        # faster spell of this shared machine falls on both sides of the ratio.
        bodies = work / "bare.txt"
        signed_bodies(bodies, "bare", 20_000, subjects, args.threads)  # stores nothing
        bare_runs: list[WrkResult] = []
        bare_cpu: list[dict[str, float]] = []
        intake_runs: list[IntakeRun] = []
        for n, c in enumerate(args.connections):
            cpu_before = cpu_snapshot(tracked)
            bare_runs.append(
                run_wrk(
                    bare_url,
                    script,
                    bodies,
                    threads=args.threads,
                    connections=c,
                    duration=args.duration,
                )
            )
            bare_cpu.append(cpu_delta(cpu_before, cpu_snapshot(tracked)))
            intake_bodies = work / f"ingest-{n}.txt"  # a file per run: wrk loads only that run's
            signed_bodies(intake_bodies, f"ingest{n}", per_run, subjects, args.threads)
            vacuum(scratch.url)
            before = count_rows(scratch.url)
            cpu_before, wal_before = cpu_snapshot(tracked), wal_snapshot(scratch.url)
            started, launched = time.monotonic(), datetime.now(UTC)
            result = run_wrk(
                ingest_url, script, intake_bodies, threads=args.threads, connections=c,
                duration=args.duration,
            )  # fmt: skip
            answered = time.monotonic() - started
            drain = wait_correlated(scratch.url)
            caught_up = datetime.now(UTC)
            cpu, wal_after = cpu_delta(cpu_before, cpu_snapshot(tracked)), wal_snapshot(scratch.url)
            window = (caught_up - first_arrival(scratch.url, launched)).total_seconds()
            wal = (
                None
                if wal_before is None or wal_after is None
                else (
                    wal_after[0] - wal_before[0],
                    wal_after[1] - wal_before[1],
                    wal_after[2] - wal_before[2],
                )
            )
            after = count_rows(scratch.url)
            intake_runs.append(
                IntakeRun(c, result, before, after, answered, drain, window, cpu, wal)
            )
            remove_bodies(intake_bodies, args.threads)
        bare = max(bare_runs, key=lambda r: r.rps)
        best = max(intake_runs, key=lambda r: r.wrk.rps)

        # Latency at half the intake's maximum: wrk's requests on a schedule (each thread starts
        # one every ``interval`` ms), the same for both endpoints. The connections only wait for
        # their turn: enough of them that one is free at each start even when the latency rises
        # (32 per thread: 26 ms at 2,400 req/s).
        rate = max(1.0, best.wrk.rps / 2)
        paced, paced_threads = 64, 2
        interval_ms = paced_threads * 1000 / rate  # each thread's share of the rate
        bodies = work / "latency.txt"
        signed_bodies(
            bodies,
            "latency",
            int(rate * (args.latency_seconds + 5)) + 100,
            subjects,
            threads=paced_threads,
        )
        wait_correlated(scratch.url)
        vacuum(scratch.url)
        latency = run_wrk(
            ingest_url, script, bodies, threads=paced_threads, connections=paced,
            duration=int(args.latency_seconds), interval_ms=interval_ms,
        )  # fmt: skip
        bare_latency = run_wrk(
            bare_url, script, bodies, threads=paced_threads, connections=paced,
            duration=int(args.latency_seconds), interval_ms=interval_ms,
        )  # fmt: skip
        wait_correlated(scratch.url)
        final = count_rows(scratch.url)
        if observers is not None:
            observers.stop()
        claims = (
            f"stand-in observers claim every woken fence each {args.claim_every_ms} ms "
            f"({observers.claims} claims)"
            if observers is not None
            else "no observer claims a fence (idle observers)"
        )

        print(
            f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, python {sys.version.split()[0]}, "
            f"cpus: {os.cpu_count()}, load average {os.getloadavg()[0]:.1f}, uvicorn "
            f"{args.workers} worker(s) each, wrk -t{args.threads} -d{args.duration}s at "
            f"{', '.join(f'-c{c}' for c in args.connections)}, {args.operations} open operations, "
            f"{args.correlators} correlating process(es), {claims}"
        )
        print()
        print(
            "| endpoint | connections | requests/s | p50 ms | p99 ms | requests | non-2xx "
            "| fully processed /s | correlator caught up after |"
        )
        print("|---|---|---|---|---|---|---|---|---|")
        for c, r in zip(args.connections, bare_runs, strict=True):
            print(
                f"| bare FastAPI (reads the body) | {c} | {r.rps:.0f} | {r.p50_ms:.1f} "
                f"| {r.p99_ms:.1f} | {r.requests} | {r.non_2xx} | — | — |"
            )
        for run in intake_runs:
            r = run.wrk
            print(
                f"| intake (verify, store, correlate, wake) | {run.connections} | {r.rps:.0f} "
                f"| {r.p50_ms:.1f} | {r.p99_ms:.1f} | {r.requests} | {r.non_2xx} "
                f"| {run.processed:.0f} | {run.drain_s:.1f} s |"
            )
        processed = max(run.processed for run in intake_runs)
        print()
        print(
            f"maximum rates: bare {bare.rps:.0f} req/s, intake answered {best.wrk.rps:.0f} "
            f"req/s (-c{best.connections}), intake fully processed {processed:.0f} events/s"
        )
        print(f"ratio intake answered / bare: {best.wrk.rps / bare.rps:.2f}")
        print(f"ratio intake fully processed / bare: {processed / bare.rps:.2f}")
        emit(
            "Ingest",
            figure=f"{processed:,.0f} events/s fully processed, {best.wrk.rps:,.0f}/s answered",
            floor=f"{bare.rps:,.0f} req/s (bare endpoint)",
            ratio=f"{processed / bare.rps:.2f}x processed, {best.wrk.rps / bare.rps:.2f}x answered",
            target=">= 0.7x fully processed",
            met=processed / bare.rps >= 0.7,
        )
        for run in intake_runs:
            print(
                f"intake -c{run.connections}: {run.new_events} new events, "
                f"{run.after[1] - run.before[1]} correlations, {run.after[2] - run.before[2]} "
                f"wakes for {run.wrk.requests} requests"
                + (
                    f" (more requests than the run's {per_run} distinct events: repeats flatter "
                    "the answered rate)"
                    if run.wrk.requests > per_run
                    else ""
                )
            )
        print()
        print(
            "CPU per request (bare) or per new event (intake: until the correlator caught up), "
            "µs, by process:"
        )
        print()
        columns = ["intake", "correlator", "PostgreSQL", "bare", "wrk", "bench"]
        print(f"| run | {' | '.join(columns)} | all | busy CPUs |")
        print(f"|---|{'---|' * (len(columns) + 2)}")
        rows = [
            (f"bare -c{c}", cpu, r.requests, args.duration)
            for c, cpu, r in zip(args.connections, bare_cpu, bare_runs, strict=True)
        ] + [
            (f"intake -c{run.connections}", run.cpu, run.new_events, run.answered_s + run.drain_s)
            for run in intake_runs
        ]
        for name, cpu, count, seconds in rows:
            cells = " | ".join(f"{cpu[k] * 1e6 / max(1, count):.0f}" for k in columns)
            total = sum(cpu.values())
            print(
                f"| {name} | {cells} | {total * 1e6 / max(1, count):.0f} | {total / seconds:.2f} |"
            )
        for run in intake_runs:
            if run.wal is not None:
                print(
                    f"intake -c{run.connections}: WAL {run.wal[0] / max(1, run.new_events):.0f} "
                    f"bytes and {run.wal[1] / max(1, run.new_events):.2f} full-page images per "
                    f"event, {run.wal[2]} checkpoint(s) begun during the run"
                )
        print()
        print(
            f"paced at {rate:.0f} req/s (half the intake's maximum; {paced} connections, each "
            f"of {paced_threads} threads starting a request every {interval_ms:.2f} ms) "
            f"for {args.latency_seconds:.0f} s:"
        )
        for name, r in (("intake", latency), ("bare", bare_latency)):
            print(
                f"- {name}: {r.rps:.0f} req/s, p50 {r.p50_ms:.1f} ms, p99 {r.p99_ms:.1f} ms, "
                f"non-2xx {r.non_2xx}"
            )
        print(f"rows at the end: events {final[0]}, correlations {final[1]}, wakes {final[2]}")
    finally:
        if observers is not None:
            observers.stop()
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
        drop_database(scratch)
        if claim is not None:
            claim.__exit__(None, None, None)  # empties the index it claimed
        else:
            try:
                import redis

                client = redis.Redis.from_url(redis_url)
                client.delete("observe")  # only the queue this run filled (a given index)
                client.close()
            except Exception as exc:
                print(f"could not clean the observe queue: {exc}", file=sys.stderr)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
