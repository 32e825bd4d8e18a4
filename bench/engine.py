"""Decisions per second of the pure verdict engine, on one core, for stripe.refund.succeeded.

Run: ``.venv/bin/python bench/engine.py [--seconds 2] [--rounds 5] [--write]``

The workload is a mix of realistic operations (distinct ids, amounts and charges), each with
the observations the verdict service hands to ``decide``: VERIFIED, PENDING (no event yet,
still transitional, stale reading, no subject yet), CONTRADICTED (amount, charge, duplicate
refund, canceled), FAILED, UNVERIFIABLE (channel outage). Webhook reductions are computed
once beforehand (they are the observer's work, not the engine's). The best round is reported;
``--write`` adds the figure to the table of ``docs/benchmarks.md``'s "## Engine".
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench._results import emit  # noqa: E402
from bench.doc_rows import add_row  # noqa: E402
from shared.core.context import build_context  # noqa: E402
from shared.core.contract import Contract  # noqa: E402
from shared.core.engine import decide  # noqa: E402
from shared.core.events import reduce_events  # noqa: E402
from shared.core.types import (  # noqa: E402
    EventRecord,
    Observation,
    ObservationStatus,
    OperationFacts,
)

TARGET = 20_000
API_VERSION = "2026-08-26"


def load_contract() -> Contract:
    path = ROOT / "contracts" / "stripe" / "refund.succeeded.yaml"
    return Contract.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


def build_case(
    contract: Contract, i: int, kind: str
) -> tuple[OperationFacts, list[Observation], datetime]:
    created = datetime(2026, 9, 10, 12, 0, 0, tzinfo=UTC) + timedelta(
        seconds=i, microseconds=i * 7 % 1_000_000
    )
    now = created + timedelta(seconds=45)
    refund_id = f"re_{i:06d}"
    charge = f"ch_{i:06d}"
    amount = 100 + i % 9_000
    facts = OperationFacts(
        id=f"op_{i:06d}",
        created_at=created,
        input={"charge": charge, "amount": amount, "currency": "usd"},
        action_result=None if kind == "uncorrelated" else {"id": refund_id, "status": "pending"},
        action_reported_at=created + timedelta(milliseconds=300),
    )
    refund: dict[str, Any] = {
        "id": refund_id,
        "object": "refund",
        "status": "succeeded",
        "amount": amount,
        "currency": "usd",
        "charge": charge,
        "created": int(created.timestamp()),
    }
    age = timedelta(seconds=2)
    if kind == "pending_transitional":
        refund["status"] = "pending"
    elif kind == "contradicted_amount":
        refund["amount"] = amount + 1
    elif kind == "contradicted_charge":
        refund["charge"] = "ch_other"
    elif kind == "canceled":
        refund["status"] = "canceled"
    elif kind == "failed":
        refund["status"] = "failed"
    elif kind == "stale":
        age = timedelta(seconds=30)
    readback = Observation("refund_readback", now - age, ObservationStatus.OK, refund, digest="d")
    if kind == "unverifiable":
        readback = Observation("refund_readback", now - age, ObservationStatus.UNAVAILABLE)

    def event(event_id: str, type_: str, **obj: Any) -> EventRecord:
        at = created + timedelta(seconds=3)
        body = {"id": event_id, "type": type_, "api_version": API_VERSION, "data": {"object": obj}}
        return EventRecord(event_id, type_, at, body, API_VERSION)

    events = [event(f"evt_c_{i}", "refund.created", id=refund_id, charge=charge, status="pending")]
    if kind != "pending_no_event":
        events.append(
            event(f"evt_u_{i}", "refund.updated", id=refund_id, charge=charge, status="succeeded")
        )
    if kind == "duplicate":
        events.append(event(f"evt_c2_{i}", "refund.created", id=f"{refund_id}b", charge=charge))
    context = build_context(contract, facts)
    observations = [readback]
    for name in ("refund_succeeded_events", "refund_created_events"):
        channel = contract.channel(name)
        assert channel is not None
        value = reduce_events(
            channel,
            events,
            context=context,
            operation_created_at=created,
            api_versions=contract.provider_api_versions,
        )
        observations.append(
            Observation(name, now - timedelta(seconds=1), ObservationStatus.OK, value)
        )
    return facts, observations, now


# Weighted like a busy day: most operations verify or wait; a few go wrong.
MIX = (
    ["verified"] * 8
    + ["pending_no_event"] * 4
    + ["pending_transitional"] * 3
    + ["stale", "uncorrelated", "unverifiable", "failed", "canceled"]
    + ["contradicted_amount", "contradicted_charge", "duplicate"]
)


def measure(seconds: float, rounds: int) -> tuple[float, float, Counter[str]]:
    """(decisions per CPU-second, decisions per wall-second, verdict mix), best rounds.

    Decisions per CPU-second of this single-threaded process is the figure for one core: it
    does not drop when other processes share the machine; the wall-clock figure does.
    """
    contract = load_contract()
    cases = [build_case(contract, i, MIX[i % len(MIX)]) for i in range(2_000)]
    verdicts: Counter[str] = Counter()
    for facts, observations, now in cases:
        verdicts[decide(contract, facts, observations, now).verdict.value] += 1
    best_cpu = best_wall = 0.0
    for _ in range(rounds):
        done = 0
        wall = time.perf_counter()
        cpu = time.process_time()
        deadline = wall + seconds
        while time.perf_counter() < deadline:
            for facts, observations, now in cases:
                decide(contract, facts, observations, now)
            done += len(cases)
        best_cpu = max(best_cpu, done / (time.process_time() - cpu))
        best_wall = max(best_wall, done / (time.perf_counter() - wall))
    return best_cpu, best_wall, verdicts


def write_section(rate: float, wall: float) -> None:
    header = (
        "| measured (UTC) | python | machine | decisions/s (CPU) | decisions/s (wall) | target |\n"
        "|---|---|---|---|---|---|"
    )
    row = (
        f"| {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} | {platform.python_version()} | "
        f"{platform.machine()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} | "
        f"{rate:,.0f} | {wall:,.0f} | ≥ {TARGET:,} |"
    )
    add_row("## Engine", header, row)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=2.0, help="length of one round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--write", action="store_true", help="record the figure in docs/benchmarks.md"
    )
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    rate, wall, verdicts = measure(args.seconds, args.rounds)
    print(
        f"engine: {rate:,.0f} decisions/s on one core (per CPU-second; {wall:,.0f}/s wall "
        f"clock, load {os.getloadavg()[0]:.1f}); target {TARGET:,}; mix {dict(verdicts)}"
    )
    emit(
        "Engine",
        figure=f"{rate:,.0f} decisions per CPU-second",
        target=f">= {TARGET:,}",
        met=rate >= TARGET,
    )
    if args.write:
        write_section(rate, wall)
    return 0 if rate >= TARGET else 1


if __name__ == "__main__":
    raise SystemExit(main())
