"""What the pipeline benchmark writes and counts in its database: a tenant with a Stripe connection
to the loopback provider, operations whose action was reported and first observation scheduled
(their ``observe`` messages sent), and how many are final."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

__all__ = ["count_final", "create_ops", "setup_tenant"]


def setup_tenant(engine: Any, provider_url: str, name: str) -> str:
    from shared.db.models import Connection, Workspace
    from shared.db.session import session_scope
    from shared.trust.secrets import encrypt, encrypt_webhook_secrets

    now = datetime.now(UTC)
    ws = f"ws_{name}"
    with session_scope(engine) as session:
        session.add(Workspace(id=ws, name=name, created_at=now))
        session.flush()
        session.add(
            Connection(
                id=f"conn_{name}",
                workspace_id=ws,
                provider="stripe",
                base_url=provider_url,
                signature_scheme="stripe",
                signature_tolerance_seconds=300,
                webhook_secrets_enc=encrypt_webhook_secrets(["whsec_bench"]),
                api_key_enc=encrypt(b"sk_test_bench"),
                auth_scheme="bearer",
                rate_limit_per_second=100_000.0,
                created_at=now,
                updated_at=now,
            )
        )
    return ws


CONTRACT_VERSION = "1.0.0"


def create_ops(
    engine: Any, ws: str, contract_id: str, prefix: str, count: int, delay_ms: int | None = None
) -> float:
    """Operations with their action reported and first observation scheduled (after the
    contract's initial delay, or ``delay_ms``); returns when they are due (epoch seconds)."""
    from shared.core.contract import contract_hash
    from shared.db.models import Operation
    from shared.db.session import session_scope
    from shared.lifecycle.contracts import find_contract
    from shared.lifecycle.messages import observe as dispatch_observe
    from shared.lifecycle.scheduling import schedule_observation

    made: list[tuple[str, int]] = []
    with session_scope(engine) as session:
        # 1.0.0: one readback of the refund, which the loopback provider serves; 1.1.0 also
        # lists the charge's refunds (GET /v1/refunds?charge=…), which it does not.
        contract = find_contract(session, ws, contract_id, CONTRACT_VERSION).contract
        digest = contract_hash(contract)
        delay = contract.timing.initial_delay_ms if delay_ms is None else delay_ms
        now = datetime.now(UTC)
        for i in range(count):
            refund = f"re_{prefix}{i:06d}"
            op = Operation(
                id=f"op_{prefix}{i:06d}", workspace_id=ws, contract_id=contract.id,
                contract_version=contract.version, contract_hash=digest,
                completion_level=contract.completion_level, state="OBSERVING", verdict="PENDING",
                reason="awaiting_evidence", final=False, version=1,
                input={"charge": f"ch_{prefix}{i:06d}", "amount": 1000, "currency": "usd"},
                action_phase="accepted", action_result={"id": refund, "object": "refund"},
                action_http_status=200, action_reported_at=now, subject_id=refund,
                learned_keys={}, attempts=0, fence=0, created_at=now, updated_at=now,
            )  # fmt: skip
            session.add(op)
            if i % 500 == 499:
                session.flush()
        session.flush()
        ops = session.query(Operation).filter(Operation.id.like(f"op_{prefix}%")).all()
        for op in ops:
            made.append((op.id, schedule_observation(session, op, delay_ms=delay, now=now)))
    due = now.timestamp() + delay / 1000
    for op_id, fence in made:
        dispatch_observe(op_id, fence, countdown_s=max(0.0, due - time.time()))
    return due


def count_final(engine: Any, spaces: list[str]) -> int:
    from sqlalchemy import func, select

    from shared.db.models import Operation
    from shared.db.session import session_scope

    with session_scope(engine) as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(Operation)
                .where(Operation.workspace_id.in_(spaces), Operation.final.is_(True))
            )
            or 0
        )
