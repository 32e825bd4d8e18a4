"""Nothing is lost: a killed observer worker, or a Redis that forgot every message.

200 open operations with four expected outcomes run through real worker processes; in the
middle the observer worker is SIGKILLed (and restarted), or the Redis database is flushed.
Every operation must reach its expected verdict, each fence is read at most once per channel,
and the observations recorded match the attempts counted.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import func, select

from shared.db.models import Observation, Operation
from shared.db.session import session_scope
from tests.integration.workers.conftest import (
    Cluster,
    FakeProvider,
    Tenant,
    create_operations,
    flush_redis,
    make_tenant,
    short_contract,
    wait_for,
)

pytestmark = pytest.mark.integration

COUNT = 200
EXPECTED = {
    0: ("VERIFIED", "all_conditions_hold"),  # pending on the first read, then succeeded
    1: ("VERIFIED", "all_conditions_hold"),
    2: ("FAILED", "terminal_failure"),
    3: ("CONTRADICTED", "refund_amount_mismatch"),
}


def _populate(cluster: Cluster, provider: FakeProvider, name: str) -> tuple[Tenant, dict[str, str]]:
    contract = short_contract(
        contract_id=f"tests.{name}",
        initial_ms=300,
        poll_ms=300,
        max_ms=600,
        max_attempts=30,
        timeout_ms=120_000,
    )
    tenant = make_tenant(cluster, provider.url, contract, name=name)
    refunds: list[tuple[str, str, int]] = []
    kinds: dict[str, int] = {}
    for i in range(COUNT):
        refund_id = f"re_{name}_{i:03d}"
        kind = i % 4
        charge = f"ch_{name}_{i:03d}"
        provider.refund(
            refund_id,
            charge=charge,
            amount=999 if kind == 3 else 1000,
            status="failed" if kind == 2 else "succeeded",
            pending_reads=1 if kind == 0 else 0,
        )
        refunds.append((refund_id, charge, 1000))
        kinds[f"op_{refund_id}"] = kind
    return tenant, {op: str(kind) for op, kind in kinds.items()}


def _final_count(cluster: Cluster, workspace_id: str) -> int:
    with session_scope(cluster.engine) as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Operation)
                .where(Operation.workspace_id == workspace_id, Operation.final.is_(True))
            )
            or 0
        )


def _open_summary(cluster: Cluster, workspace_id: str) -> str:
    with session_scope(cluster.engine) as session:
        rows = session.execute(
            select(
                Operation.id,
                Operation.state,
                Operation.reason,
                Operation.fence,
                Operation.attempts,
                Operation.next_observation_at,
                Operation.enqueued_at,
            )
            .where(Operation.workspace_id == workspace_id, Operation.final.is_(False))
            .limit(8)
        ).all()
    return "\n".join(str(tuple(row)) for row in rows)


def _wait_all_final(cluster: Cluster, workspace_id: str, what: str) -> None:
    try:
        wait_for(
            lambda: _final_count(cluster, workspace_id) == COUNT,
            timeout=90,
            interval=0.25,
            what=what,
        )
    except AssertionError as exc:
        raise AssertionError(
            f"{exc}; still open (first 8):\n{_open_summary(cluster, workspace_id)}"
            f"\nnow {time.time()}"
        ) from None


def _check_outcomes(cluster: Cluster, workspace_id: str, kinds: dict[str, str]) -> None:
    with session_scope(cluster.engine) as session:
        ops = session.execute(
            select(Operation.id, Operation.verdict, Operation.reason, Operation.attempts).where(
                Operation.workspace_id == workspace_id
            )
        ).all()
        per_fence = session.execute(
            select(Observation.operation_id, Observation.fence, Observation.channel, func.count())
            .where(Observation.workspace_id == workspace_id)
            .group_by(Observation.operation_id, Observation.fence, Observation.channel)
        ).all()
        readings = dict(
            session.execute(
                select(Observation.operation_id, func.count())
                .where(
                    Observation.workspace_id == workspace_id,
                    Observation.channel == "refund_readback",
                )
                .group_by(Observation.operation_id)
            ).all()
        )
    assert len(ops) == COUNT
    wrong = [
        (op_id, verdict, reason)
        for op_id, verdict, reason, _ in ops
        if (verdict, reason) != EXPECTED[int(kinds[op_id])]
    ]
    assert wrong == [], wrong[:10]
    assert all(count == 1 for *_, count in per_fence), "a fence was observed twice"
    mismatched = [
        (op_id, a, readings.get(op_id)) for op_id, *_, a in ops if readings.get(op_id) != a
    ]
    assert mismatched == [], mismatched[:10]


def test_a_killed_observer_worker_loses_no_operation(
    cluster: Cluster, provider: FakeProvider
) -> None:
    tenant, kinds = _populate(cluster, provider, "kill")
    started = time.monotonic()
    create_operations(cluster, tenant, [(op[3:], f"ch_{op[6:]}", 1000) for op in sorted(kinds)])
    wait_for(
        lambda: _final_count(cluster, tenant.workspace_id) >= COUNT // 5,
        timeout=60,
        what="a fifth of the operations decided",
    )
    cluster.kill("observer")
    decided_at_kill = _final_count(cluster, tenant.workspace_id)
    assert decided_at_kill < COUNT, "the kill must land in the middle"
    time.sleep(1.0)
    cluster.start_observer()
    _wait_all_final(cluster, tenant.workspace_id, "every operation decided after the restart")
    _check_outcomes(cluster, tenant.workspace_id, kinds)
    print(
        f"kill: {decided_at_kill} decided at the kill, all {COUNT} in "
        f"{time.monotonic() - started:.1f}s"
    )


def test_a_flushed_redis_loses_no_operation(cluster: Cluster, provider: FakeProvider) -> None:
    tenant, kinds = _populate(cluster, provider, "flush")
    create_operations(cluster, tenant, [(op[3:], f"ch_{op[6:]}", 1000) for op in sorted(kinds)])
    wait_for(
        lambda: _final_count(cluster, tenant.workspace_id) >= COUNT // 10,
        timeout=60,
        what="a tenth of the operations decided",
    )
    flush_redis(cluster.env["PROVELY_BROKER_URL"])
    decided_at_flush = _final_count(cluster, tenant.workspace_id)
    assert decided_at_flush < COUNT, "the flush must land in the middle"
    _wait_all_final(cluster, tenant.workspace_id, "every operation decided after the flush")
    _check_outcomes(cluster, tenant.workspace_id, kinds)
