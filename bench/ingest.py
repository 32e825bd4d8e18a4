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

Prints a Markdown table; the figures of record are in ``docs/benchmarks.md`` ("Ingest").
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import Response

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# the bare endpoint, served by ``uvicorn ingest:bare_app`` (only reads the body)
bare_app = FastAPI()


@bare_app.post("/v1/events/{provider}/{workspace}")
async def _bare(provider: str, workspace: str, request: Request) -> Response:
    await request.body()
    return Response(b'{"received":true}', media_type="application/json")


SECRET = "whsec_bench_" + "5a" * 16
LUA = r"""
-- A wall clock for the paced runs' schedule (LuaJIT's FFI: wrk's scripts have no other).
local ffi = require("ffi")
ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clk_id, bench_timespec *tp);
]]
local clock = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, clock)  -- CLOCK_MONOTONIC
  return tonumber(clock.tv_sec) * 1000 + tonumber(clock.tv_nsec) / 1e6
end

local bodies, sigs = {}, {}
local counter = 0
local next_id = 0
local interval, slot = 0, 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

-- Each thread loads only its own file of bodies (``<prefix>.<thread>``): wrk starts a thread
-- as soon as its init has run, so the first thread sends while the next one loads; smaller
-- files keep that head start short.
function init(args)
  local f = assert(io.open(args[1] .. "." .. tid, "r"))
  while true do
    local sig = f:read("*l")
    if not sig then break end
    local body = f:read("*l")
    table.insert(sigs, sig)
    table.insert(bodies, body)
  end
  f:close()
  interval = tonumber(args[2] or "0")
end

-- Paced runs (``interval`` > 0, in ms): the thread's requests start on a schedule, one per
-- interval; a connection whose response came waits for the next free start (a late one starts
-- at once, and the schedule goes on from there: the rate reached says if it kept up).
function delay()
  if interval <= 0 then return 0 end
  local now = now_ms()
  slot = math.max(slot + interval, now)
  return math.floor(slot - now + 0.5)
end

function request()
  local i = (counter % #bodies) + 1
  counter = counter + 1
  return wrk.format("POST", nil,
    {["Stripe-Signature"] = sigs[i], ["Content-Type"] = "application/json"}, bodies[i])
end
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Scratch:
    pg_admin: str
    name: str
    url: str
    redis_url: str


def create_database(pg_admin: str) -> Scratch:
    import psycopg

    name = f"provely_bench_{secrets.token_hex(4)}"
    with psycopg.connect(pg_admin, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = pg_admin.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://")
    return Scratch(pg_admin, name, f"{base}/{name}", "")


def drop_database(scratch: Scratch) -> None:
    import psycopg

    with psycopg.connect(scratch.pg_admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{scratch.name}" WITH (FORCE)')


def seed(url: str, fernet_key: str, operations: int) -> tuple[str, list[str]]:
    """A workspace with a Stripe connection and ``operations`` open operations (subject ids)."""
    from sqlalchemy.orm import Session

    from shared.db.migrate import upgrade
    from shared.db.models import Operation
    from shared.db.session import make_engine
    from shared.db.tenants import create_workspace, new_id, set_connection
    from shared.runtime.settings import Settings
    from shared.trust.registry import get_registry

    upgrade(url)
    settings = Settings(database_url=url, secret_key=fernet_key)
    engine = make_engine(url)
    entry = get_registry().entry("stripe.refund.succeeded")
    now = datetime.now(UTC) - timedelta(minutes=1)
    subjects = [f"re_bench_{i:06d}" for i in range(operations)]
    with Session(engine) as session, session.begin():
        workspace, _ = create_workspace(session, "bench", now=now)
        set_connection(
            session,
            workspace.id,
            provider="stripe",
            webhook_secrets=[SECRET],
            api_key="sk_test_bench",
            base_url="http://127.0.0.1:9",
            signature_scheme="stripe",
            settings=settings,
            now=now,
        )
        for n, subject in enumerate(subjects):
            session.add(
                Operation(
                    id=new_id("op"),
                    workspace_id=workspace.id,
                    contract_id=entry.contract.id,
                    contract_version=entry.contract.version,
                    contract_hash=entry.hash,
                    completion_level=entry.contract.completion_level,
                    state="OBSERVING",
                    verdict="PENDING",
                    final=False,
                    version=1,
                    input={"charge": f"ch_bench_{n:06d}", "amount": 1000, "currency": "usd"},
                    action_phase="result",
                    action_result={"id": subject},
                    action_reported_at=now,
                    subject_id=subject,
                    learned_keys={},
                    attempts=0,
                    fence=1,
                    next_observation_at=now + timedelta(days=1),
                    deadline=now + timedelta(days=7),
                    created_at=now,
                    updated_at=now,
                )
            )
        workspace_id = workspace.id
    engine.dispose()
    return workspace_id, subjects


def signed_bodies(path: Path, run: str, count: int, subjects: list[str], threads: int) -> None:
    """``count`` distinct signed refund.updated events, one per subject in turn, dealt to
    ``threads`` files (``<path>.0`` …), one for each wrk thread (see ``LUA``)."""
    from shared.trust.signatures import STRIPE

    t = int(time.time())
    with contextlib.ExitStack() as files:
        outs = [files.enter_context(Path(f"{path}.{tid}").open("w")) for tid in range(threads)]
        for i in range(count):
            n = i % len(subjects)
            subject = subjects[n]
            body = json.dumps(
                {
                    "id": f"evt_{run}_{i:07d}",
                    "object": "event",
                    "type": "refund.updated",
                    "created": t,
                    "api_version": "2026-08-26",
                    "data": {
                        "object": {
                            "id": subject,
                            "object": "refund",
                            "amount": 1000,
                            "currency": "usd",
                            "charge": f"ch_bench_{n:06d}",
                            "status": "succeeded",
                            "created": t,
                        }
                    },
                    "request": {"id": None, "idempotency_key": None},
                },
                separators=(",", ":"),
            ).encode()
            header = STRIPE.sign(body=body, secrets=[SECRET], timestamp=t)["Stripe-Signature"]
            outs[i % threads].write(header + "\n" + body.decode() + "\n")


def remove_bodies(path: Path, threads: int) -> None:
    for tid in range(threads):
        Path(f"{path}.{tid}").unlink(missing_ok=True)


def start_server(argv: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(argv, cwd=ROOT, env=env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited: {' '.join(argv)}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise SystemExit("server did not start")


def uvicorn_argv(
    target: str, port: int, *, factory: bool, app_dir: str | None, workers: int = 1
) -> list[str]:
    argv = [sys.executable, "-m", "uvicorn", target]
    if factory:
        argv.append("--factory")
    if app_dir:
        argv += ["--app-dir", app_dir]
    return [
        *argv,
        "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
        "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip


@dataclass
class WrkResult:
    rps: float
    p50_ms: float
    p99_ms: float
    requests: int
    non_2xx: int


def _ms(text: str) -> float:
    value, unit = re.match(r"([\d.]+)(us|ms|s)", text).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def run_wrk(
    url: str,
    script: Path,
    bodies: Path,
    *,
    threads: int,
    connections: int,
    duration: int,
    interval_ms: float = 0,
) -> WrkResult:
    """wrk; each thread sends the bodies of its file in turn (``signed_bodies`` with as many
    ``threads``); with ``interval_ms`` it starts a request every that many ms (paced: its
    connections wait for their turn, see ``LUA``)."""
    out = subprocess.run(
        [
            "wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency",
            "-s", str(script), url, "--", str(bodies), str(interval_ms),
        ],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _ms(re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    p99 = _ms(re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1))  # type: ignore[union-attr]
    total = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return WrkResult(rps, p50, p99, total, int(bad.group(1)) if bad else 0)


@dataclass
class IntakeRun:
    connections: int
    wrk: WrkResult
    before: tuple[int, int, int, int]
    after: tuple[int, int, int, int]
    answered_s: float
    drain_s: float
    window_s: float  # from the first new event's arrival until the correlator caught up
    cpu: dict[str, float]  # CPU seconds from the start of the run until caught up
    wal: tuple[int, int, int] | None  # WAL bytes, full-page images, checkpoints begun

    @property
    def new_events(self) -> int:
        return self.after[0] - self.before[0]

    @property
    def processed(self) -> float:
        """Events stored, correlated and woken per second, from the first one's arrival until
        the correlator caught up (not from wrk's start: its threads load their bodies first)."""
        return self.new_events / self.window_s


def count_rows(url: str) -> tuple[int, int, int, int]:
    """Events, correlations, wakes and events not yet correlated, in one statement."""
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        events, links, wakes, waiting = conn.execute(
            text(
                "SELECT (SELECT count(*) FROM events), (SELECT count(*) FROM operation_events), "
                "(SELECT coalesce(sum(fence - 1), 0) FROM operations), "
                "(SELECT count(*) FROM event_backlog)"
            )
        ).one()
    engine.dispose()
    return int(events), int(links), int(wakes), int(waiting)


def first_arrival(url: str, since: datetime) -> datetime:
    """When the intake received the first event after ``since`` (its ``received_at``: this
    machine's clock, as the bench's)."""
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        row = conn.execute(
            "SELECT min(received_at) FROM events WHERE received_at >= %s", (since,)
        ).fetchone()
    if row is None or not isinstance(row[0], datetime):
        raise SystemExit("no event arrived during the run")
    return row[0]


def wal_snapshot(url: str) -> tuple[int, int, int] | None:
    """WAL bytes and full-page images written so far, and checkpoints begun (the server's
    counters: PostgreSQL 14 to 16); None where the server has no such views."""
    import psycopg

    try:
        with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
            row = conn.execute(
                "SELECT wal_bytes::bigint, wal_fpi, "
                "(SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter) "
                "FROM pg_stat_wal"
            ).fetchone()
    except psycopg.Error:
        return None
    return None if row is None else (int(row[0]), int(row[1]), int(row[2]))


def libpq_dsn(url: str) -> str:
    """The scratch database's SQLAlchemy URL as psycopg connects to it."""
    return url.replace("postgresql+psycopg://", "postgresql://")


class StandInObservers(threading.Thread):
    """Observers that begin to read every woken operation within ``interval_s``: they claim its
    fence (``reading_fence = fence``, rows locked in id order as the correlator locks them) and
    read nothing. Each claim lets the next event of that operation wake it again."""

    def __init__(self, url: str, interval_s: float) -> None:
        super().__init__(daemon=True)
        self.dsn = libpq_dsn(url)
        self.interval_s = interval_s
        self.claims = 0
        self.done = threading.Event()

    def run(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.done.wait(self.interval_s):
                cursor = conn.execute(
                    "WITH woken AS (SELECT id FROM operations "
                    "WHERE reading_fence IS DISTINCT FROM fence ORDER BY id FOR NO KEY UPDATE) "
                    "UPDATE operations o SET reading_fence = o.fence "
                    "FROM woken WHERE o.id = woken.id"
                )
                self.claims += cursor.rowcount

    def stop(self) -> None:
        self.done.set()
        self.join()


_TICK = os.sysconf("SC_CLK_TCK")


_Stat = tuple[str, list[str]]


def _stat(pid: int) -> _Stat | None:
    """A process's command name and the fields of its ``stat`` after it (from the state on)."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:  # gone meanwhile
        return None
    return text[text.index("(") + 1 : text.rindex(")")], text[text.rindex(")") + 2 :].split()


def _tree_cpu(root: int, stats: dict[int, _Stat]) -> float:
    """CPU seconds of a process and its descendants, those that exited and were waited for
    included (the parent's children counters)."""
    children: dict[int, list[int]] = {}
    for pid, (_, fields) in stats.items():
        children.setdefault(int(fields[1]), []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:  # utime, stime, cutime, cstime
            total += sum(int(f) for f in stats[pid][1][11:15]) / _TICK
        todo.extend(children.get(pid, ()))
    return total


def cpu_snapshot(processes: dict[str, int]) -> dict[str, float]:
    """CPU seconds so far of each named process tree, of PostgreSQL (all its processes: the
    postmaster counts the backends that exited), of the load tool (this process's waited-for
    children: ``wrk``) and of this process (stand-in observers, polls)."""
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (found := _stat(int(entry.name))) is not None:
            stats[int(entry.name)] = found
    snapshot = {name: _tree_cpu(pid, stats) for name, pid in processes.items()}
    postmasters = [
        pid
        for pid, (comm, fields) in stats.items()
        if comm == "postgres" and stats.get(int(fields[1]), ("", []))[0] != "postgres"
    ]
    snapshot["PostgreSQL"] = sum(_tree_cpu(pid, stats) for pid in postmasters)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    snapshot["wrk"] = children.ru_utime + children.ru_stime
    own = resource.getrusage(resource.RUSAGE_SELF)
    snapshot["bench"] = own.ru_utime + own.ru_stime
    return snapshot


def _delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: after[name] - before[name] for name in after}


def vacuum(url: str) -> None:
    """``VACUUM (ANALYZE)`` the scratch database between runs, untimed: what autovacuum (off on
    these machines) would have done meanwhile; without it every run inherits the dead row
    versions and stale statistics of the runs before."""
    import psycopg

    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")


def wait_correlated(url: str, timeout_s: float = 300.0) -> float:
    """Poll until no event waits for correlation; the seconds it took. One connection, and a
    probe that reads one index entry at most: the wait must not load the database it waits for
    (it used to count the rows of four tables each 50 ms, on a new connection each time)."""
    import psycopg

    started = time.monotonic()
    with psycopg.connect(libpq_dsn(url), autocommit=True) as conn:
        while conn.execute("SELECT EXISTS (SELECT 1 FROM event_backlog)").fetchone() == (True,):
            if time.monotonic() - started > timeout_s:
                raise SystemExit("the correlator did not catch up")
            time.sleep(0.05)
    return time.monotonic() - started


def main() -> None:
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
            bare_cpu.append(_delta(cpu_before, cpu_snapshot(tracked)))
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
            cpu, wal_after = _delta(cpu_before, cpu_snapshot(tracked)), wal_snapshot(scratch.url)
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
