"""Worlds: a seeded, replayable randomized stress of orderings, duplicates, delays and outages
against the running distributed system (ingress, observer, verdict and sweeper as processes, on
a private PostgreSQL database and Redis index, Stripe sandboxes as processes) — or, with
``--shape embedded``, against the embedded system (``provely up``'s: SQLite and its SQL broker,
the same services in one supervisor; Stripe sandboxes in this process).

Each world is one agent refund operation of ``stripe.refund.succeeded`` (the newest version) on
a charge of its own. Its randomness comes from ``random.Random(f"{seed}:{k}")`` alone, so world
``k`` can be replayed by itself (``--world K``). It draws:

- the agent's refund outcome: ``succeeded``, ``failed``, ``canceled``, ``stuck_then_succeeded``
  (pending until the harness settles it 1-4 s later), ``succeeded_then_failed``;
- what the agent reports: the refund (``correct``), a 400 rejection although the refund was made
  under the operation's idempotency key (``rejected_with_refund``), or a 400 with nothing made
  (``rejected_nothing``);
- a contradiction: a second refund on the same charge made at the sandbox (``sandbox``: a real
  duplicate, its ``refund.created`` delivered by the sandbox), or only a second refund's
  ``refund.created`` posted to the intake (``posted``), or none; and when: ``before`` the
  decision (0-1.5 s after the agent's refund), ``around`` it (the agent's refund is held pending
  until Provely has read it pending, then settled, and the contradiction lands 0-50 ms before or
  after the settlement, in both orders), ``after`` the VERIFIED (0.5-5 s after it was first
  seen), or ``never``;
- delivery faults of its sandbox: ``duplicate`` 1-5 copies, ``reversed`` / ``shuffled`` order (the
  world releases the held deliveries every 0.2-1.5 s), ``delay_ms`` 0-300, dropping every
  ``refund.updated`` (and, with ``--drop-created``, every ``refund.created``, the agent's own
  included: a draw made last, so the other draws of a world do not change with the flag);
- a provider outage of 0-10 s starting 0-6 s after the agent's refund;
- provider read lag (half the worlds): the sandbox serves refund readbacks and lists as they
  were 0.5-4 s ago (a read replica): not found just after creation, an older status after a
  change, while events are not delayed;
- a failure after success (35 % of the draws; kept where the agent's refund succeeds, is
  reported correctly and no second refund is played): 0-3 s after
  Provely first showed VERIFIED the refund fails (its ``refund.updated`` and ``refund.failed``
  are delivered), and in half of those the refund's reads lag 10 min from that moment on — a
  404 for a refund read before, a listing without it (#30's World B). These draws come after
  ``drop_created``: the earlier draws of a seed are unchanged.
- drawn after those (so the draws above stay what they were): in half of the worlds whose
  agent reports a rejection with nothing made, the refund is made after all under the
  operation's idempotency key 0.5-5 s after its FAILED (``late_refund``; such a world has no
  contradiction and no dropped ``refund.created``); and in a fifth of the worlds events collide
  within one second (``collision``): a ``succeeded_then_failed`` refund fails with no gap after
  its success (two ``refund.updated`` of one second that disagree on the status), and a
  contradiction ``before`` comes with no gap after the agent's refund.

Sandbox-wide faults are never shared: the harness runs ``--concurrency`` lanes, each a sandbox
process with a workspace of its own, and a lane runs one world at a time (its faults are set at
the start of the world and cleared at its end, an outage is ended, held deliveries released).

Acknowledgement times. Events the harness posts are timed at the intake's 200. Sandbox
deliveries go through a relay in this process (the workspace's webhook endpoint at the sandbox
names it; it forwards body and signature unchanged to the intake and answers with the intake's
status), which times the intake's 200 of every delivery: the sandbox's own attempt log has whole
seconds only.

What is checked, per world, against the truth (the sandbox's refunds on the charge, read at the
end) and against what Provely said (a poll of the operation every ``--poll-ms``, each with the
time its request left and its answer came back; the receipts, superseded ones fetched through
``GET /v1/receipts/{id}`` following ``supersedes``):

- **false VERIFIED**: a VERIFIED receipt whose ``decided_at`` is at or after the acknowledgement
  of contradicting evidence (a second refund's ``refund.created``; a ``refund.updated`` /
  ``refund.failed`` of the agent's refund saying failed or canceled); or a world whose truth is a
  duplicate or a failed refund that ends VERIFIED, never superseded; or a VERIFIED whose charge
  listing (``charge_refunds`` in the receipt) was read more than 1 s after a second refund was
  created at the sandbox;
- **other verdicts decided past a second refund**: a FAILED (or UNVERIFIABLE, EXPIRED)
  receipt decided at or after a second refund's ``refund.created`` was acknowledged. The
  negative conditions come before the verdict map, so the decision did not see that refund as
  a duplicate, and a FAILED lets the agent refund again. (A FAILED decided before any
  contradiction stays: only a VERIFIED is watched.);
- **late contradictions**: contradicting evidence acknowledged after the VERIFIED was decided
  must show HUMAN_REVIEW ``late_contradiction`` through the API within 5 s of the
  acknowledgement. When the provider was down at some point of those 5 s the recheck cannot
  read; those are counted apart as *waited for the provider*, with their times. Their recheck is
  retried on the contract's backoff (5 s, 10 s, 20 s ... after each try that could not read), so
  a failure is one not superseded within 5 s of the first retry due after the provider answered
  again (plus 2.5 s for the sweeper to send an overdue recheck); the count of those not
  superseded within 5 s of the outage's end (a stricter bound the backoff does not promise) is
  printed beside it;
- **lost operations**: an operation that does not reach a final state its truth allows within
  ``LOST_BOUND_S`` (60 s) after the world's last action (the last fault, settlement,
  contradiction or outage end). Where the truth allows a non-final state it must be PENDING
  (never VERIFIED) once ``STABLE_S`` (8 s) have passed: a succeeded refund whose every
  ``refund.updated`` was dropped (the contract needs one), a rejection reported with nothing
  made while another refund exists on the charge;
- **wrong retry advice**: any poll that showed ``retry.action`` other than ``never`` while a
  refund under the operation's idempotency key exists at the sandbox and did not fail (after a
  late refund: any poll sent more than 5 s, plus the outage, after it was made);
- **FAILED with a retry left standing**: a late-refund world whose operation ends FAILED (its
  refund under the key exists); it must end HUMAN_REVIEW (the FAILED superseded) or VERIFIED
  (the refund came before the FAILED was decided); the time from the refund to the
  HUMAN_REVIEW is printed;
- **collisions**: the failures among the colliding worlds, with their false VERIFIED and their
  CONTRADICTED that the truth does not allow;
- **unexpected verdicts**: a final state the truth does not allow (not one of the above; e.g. a
  CONTRADICTED single refund), listed;
- **harness errors**: a world the harness could not play (an HTTP error of the sandbox, a
  timeout): reported with its index and seed, never dropped.

Usage (from the repository root)::

    .venv/bin/python bench/worlds.py [--worlds 1000] [--seed 1] [--concurrency 12]
        [--world K ...] [--poll-ms 100] [--drop-created] [--timelines] [--records FILE]
        [--json] [--pg URL] [--redis URL] [--shape distributed|embedded]

``--world K`` (repeatable; alias ``--only-seed-of``) replays world K of ``--seed`` alone;
``--timelines`` prints every world's timeline (its actions, each delivery's first 200, each
receipt's ``decided_at``, the polls where what Provely said changed), not only the failing
worlds'; ``--records`` writes every world as a JSON line.

Progress goes to stderr every few seconds, the figures to stdout at the end; the exit status is
non-zero when any failure count or harness error is. The system gets a database of its own on
``--pg``'s server and claims an empty index on ``--redis``'s server (``tests.e2e.launcher``);
both are dropped / flushed at the end.

The harness's parts (a world's plan, the relay, the lanes, the watcher, playing and judging a
world, the summary) are the modules of ``bench/_worlds/``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._results import emit  # noqa: E402
from bench._worlds.bounds import LOST_BOUND_S  # noqa: E402
from bench._worlds.lanes import Lane, open_lane  # noqa: E402
from bench._worlds.outcome import Outcome  # noqa: E402
from bench._worlds.plan import Plan, draw_plan  # noqa: E402
from bench._worlds.play import Play  # noqa: E402
from bench._worlds.relay import Relay  # noqa: E402
from bench._worlds.summary import FAILING, print_summary, summarize  # noqa: E402
from services.cli.demo.embedded import EmbeddedDemoSystem  # noqa: E402
from services.cli.demo.scenarios.system import System  # noqa: E402
from services.sandbox.runner import run_app  # noqa: E402
from tests.e2e.launcher import running_system  # noqa: E402


async def run_worlds(system: System, args: argparse.Namespace) -> list[Outcome]:
    indexes = sorted(set(args.world)) if args.world else list(range(args.worlds))
    plans = [draw_plan(args.seed, k, drop_created_enabled=args.drop_created) for k in indexes]
    relay = Relay(system.api_url)
    lanes_count = max(1, min(args.concurrency, len(plans)))
    results: list[Outcome] = []
    started = time.monotonic()
    with run_app(relay.app()) as relay_url:
        lanes: asyncio.Queue[Lane] = asyncio.Queue()
        opened = await asyncio.gather(
            *(open_lane(system, relay_url, n) for n in range(lanes_count))
        )
        for lane in opened:
            lanes.put_nowait(lane)
        print(f"{lanes_count} lanes open in {time.monotonic() - started:.1f} s", file=sys.stderr)

        async def one(plan: Plan) -> None:
            lane = await lanes.get()
            try:
                result = await asyncio.wait_for(
                    Play(
                        plan,
                        lane,
                        relay,
                        system.api_url,
                        args.poll_ms / 1000,
                        show_timeline=args.timelines,
                    ).run(),
                    timeout=LOST_BOUND_S * 3 + 120,
                )
            except TimeoutError:
                result = Outcome(plan.index, plan.seed, plan.classes(), asdict(plan))
                result.harness_error = "the world did not finish within its time"
            finally:
                lanes.put_nowait(lane)
            results.append(result)

        async def progress() -> None:
            while True:
                await asyncio.sleep(5)
                bad = sum(r.failed for r in results)
                load = os.getloadavg()[0]
                print(
                    f"[{time.monotonic() - started:6.0f} s] {len(results)}/{len(plans)} worlds, "
                    f"{bad} with failures, load {load:.1f}",
                    file=sys.stderr,
                    flush=True,
                )

        reporter = asyncio.ensure_future(progress())
        try:
            await asyncio.gather(*(one(p) for p in plans))
        finally:
            reporter.cancel()
    return sorted(results, key=lambda r: r.index)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worlds", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=12)
    parser.add_argument(
        "--world",
        "--only-seed-of",
        dest="world",
        type=int,
        action="append",
        default=None,
        help="replay only world K of --seed (its draws are random.Random(f'{seed}:{K}')); "
        "repeatable",
    )
    parser.add_argument("--poll-ms", type=int, default=100, help="how often each world polls")
    parser.add_argument("--json", action="store_true", help="print the summary as JSON")
    parser.add_argument(
        "--drop-created",
        action="store_true",
        help="also drop every refund.created (the agent's own included) in 15 %% of the worlds",
    )
    parser.add_argument(
        "--timelines", action="store_true", help="print every world's timeline, not only failing"
    )
    parser.add_argument("--records", type=Path, default=None, help="write every world (JSON lines)")
    parser.add_argument(
        "--pg",
        default=os.environ.get(
            "PROVELY_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
        help="PostgreSQL server (a database of the run's own is created and dropped there)",
    )
    parser.add_argument(
        "--redis",
        default=os.environ.get("PROVELY_BENCH_REDIS", "redis://127.0.0.1:6379/0"),
        help="Redis server (an empty index is claimed, flushed at the end; never FLUSHALL)",
    )
    parser.add_argument(
        "--shape",
        choices=["distributed", "embedded"],
        default="distributed",
        help="the system under test: services as processes on PostgreSQL and Redis, or the "
        "embedded one (SQLite, its SQL broker; --pg and --redis unused)",
    )
    args = parser.parse_args()
    if args.worlds < 1 or args.concurrency < 1 or args.poll_ms < 10:
        raise SystemExit("--worlds and --concurrency must be >= 1, --poll-ms >= 10")

    work = Path(tempfile.mkdtemp(prefix="provely-bench-worlds-"))
    started = time.monotonic()
    print(f"starting the system (logs under {work})", file=sys.stderr, flush=True)
    if args.shape == "embedded":
        with EmbeddedDemoSystem(work) as embedded:
            embedded.wait_ready()
            results = asyncio.run(run_worlds(embedded, args))
    else:
        with running_system(args.pg, args.redis, work, name="bench-worlds") as system:
            results = asyncio.run(run_worlds(system, args))
    summary = summarize(results, time.monotonic() - started, args)
    if args.records is not None:
        with args.records.open("w", encoding="utf-8") as out:
            for r in results:
                out.write(json.dumps(asdict(r), default=str) + "\n")
    if args.json:
        print(json.dumps(summary, indent=2, default=str))
    else:
        print_summary(summary)
        if args.timelines:
            for r in results:
                print(f"\nworld {r.index} seed {r.seed} op {r.op_id}: {r.classes}")
                print(f"  truth {r.truth}, ends {r.final_state} ({r.final_reason}), {r.notes}")
                for line in r.timeline:
                    print(f"    {line}")
    failing = {name: summary[name] for name in FAILING if summary[name]}
    emit(
        "Worlds",
        figure=f"{args.worlds} worlds ({args.shape}, seed {args.seed}): "
        + (", ".join(f"{name} {count}" for name, count in failing.items()) or "every count 0"),
        target="every count 0",
        met=not failing,
    )
    sys.exit(1 if failing else 0)


if __name__ == "__main__":
    main()
