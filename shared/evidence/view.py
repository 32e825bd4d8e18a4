"""The consistent view a decision is made on: webhook channels reduced at decision time.

An observer reduces an operation's webhook channels when it stores its readbacks; the decision
comes later, in another task. Events stored in between would be missed by a decision over
those readings, so a decision does this itself, in its own transaction, before it decides:

1. take the exclusive evidence locks of every key value its webhook channels find events by
   (``shared.evidence.locks``; PostgreSQL), so no event carrying one of them commits until
   this transaction has;
2. reduce each webhook channel over the events stored now (``shared.evidence.webhooks``);
3. store a reduction as a new reading (``fence`` NULL: it belongs to no observation fence)
   unless the channel's latest reading is the same reduction and still young — then the
   decision uses that one and nothing is written.

An event the intake acknowledged before the decision began is therefore always part of the
decision, whether or not a correlator has linked it yet.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import Table, insert
from sqlalchemy.orm import Session

from shared.core.contract import Contract
from shared.core.expressions import EvaluationContext
from shared.core.verifiers import verifier_of
from shared.db.models import Observation, Operation
from shared.evidence.locks import lock_evidence
from shared.evidence.webhooks import evidence_keys, read_webhook

__all__ = ["refresh_webhook_readings"]

_INSERT = insert(cast(Table, Observation.__table__))


def refresh_webhook_readings(
    session: Session,
    op: Operation,
    contract: Contract,
    context: EvaluationContext,
    latest: Sequence[Any],
    *,
    clock: Callable[[], datetime],
) -> bool:
    """Lock, reduce and store as described above; True when a reading was stored (the caller
    reads the latest readings again). ``latest``: rows with ``channel``, ``observed_at`` and
    ``digest`` (the latest reading of each channel, read in this transaction)."""
    keys = evidence_keys(op, contract, context)
    if not keys:
        return False
    lock_evidence(
        session,
        op.workspace_id,
        [(provider, value) for provider, (values, _) in keys.items() for value in values],
    )
    newest = {row.channel: row for row in latest}
    rows: list[dict[str, Any]] = []
    for channel in contract.channels:
        if not verifier_of(channel).reduces_events:
            continue
        reading = read_webhook(
            session, op, contract=contract, channel=channel, context=context, clock=clock
        )
        known = newest.get(channel.name)
        if known is not None and known.digest == reading.digest and known.status == "ok":
            freshness = channel.freshness_ms or contract.timing.stale_read_window_ms
            if reading.observed_at - known.observed_at <= timedelta(milliseconds=freshness / 2):
                continue
        rows.append(
            {
                "operation_id": op.id,
                "workspace_id": op.workspace_id,
                "fence": None,
                "channel": reading.channel,
                "status": reading.status.value,
                "value": reading.value,
                "raw": reading.raw,
                "digest": reading.digest,
                "http_status": None,
                "error": reading.error,
                "provider_timestamp": reading.provider_timestamp,
                "observed_at": reading.observed_at,
                "latency_ms": reading.latency_ms,
            }
        )
    if rows:
        session.execute(_INSERT, rows)
    return bool(rows)
