"""Receipts on the real record: settings pointing at the migrated PostgreSQL database, and a
Stripe refund operation driven through the real engine and ``apply_decision``."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine
from sqlalchemy.orm import Session

from shared.core.context import build_context
from shared.core.engine import decide
from shared.core.events import reduce_events
from shared.core.types import Decision, EventRecord, Observation, ObservationStatus
from shared.db.audit import append_transition
from shared.db.models import Event, Operation, OperationEvent, Workspace
from shared.db.models import Observation as ObservationRow
from shared.evidence.webhooks import evidence_keys
from shared.lifecycle.contracts import contract_for, find_contract
from shared.lifecycle.operations import facts_for
from shared.lifecycle.steps import apply_decision
from shared.lifecycle.watch import start_watch, watch_until
from shared.runtime.settings import Settings, get_settings

T0 = datetime(2026, 11, 30, 8, 0, 0, 250000, tzinfo=UTC)


@pytest.fixture
def settings(
    migrated_postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Settings]:
    """Process settings for the test: the steps issue receipts with ``get_settings()``."""
    monkeypatch.setenv("PROVELY_DATABASE_URL", migrated_postgres_url)
    monkeypatch.setenv("PROVELY_SECRET_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("PROVELY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PROVELY_RECEIPT_KEY_FILE", raising=False)
    get_settings.cache_clear()
    yield get_settings()
    get_settings.cache_clear()


def sha(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


@dataclass
class RefundFlow:
    """One stripe.refund.succeeded operation whose evidence the test writes as rows."""

    engine: Engine
    workspace_id: str = "ws_a"
    operation_id: str = "op_1"
    refund_id: str = "re_1"
    fence: int = 0

    @property
    def charge(self) -> str:
        return "ch_" + self.refund_id.removeprefix("re_")

    def create(self, session: Session) -> Operation:
        if session.get(Workspace, self.workspace_id) is None:
            session.add(Workspace(id=self.workspace_id, name=self.workspace_id, created_at=T0))
            session.flush()
        resolved = find_contract(session, self.workspace_id, "stripe.refund.succeeded")
        op = Operation(
            id=self.operation_id,
            workspace_id=self.workspace_id,
            contract_id=resolved.contract.id,
            contract_version=resolved.contract.version,
            contract_hash=resolved.hash,
            completion_level=resolved.contract.completion_level,
            state="OBSERVING",
            input={"charge": self.charge, "amount": 500, "currency": "usd"},
            action_phase="accepted",
            action_result={"id": self.refund_id, "object": "refund", "status": "pending"},
            action_reported_at=T0,
            subject_id=self.refund_id,
            learned_keys={},
            created_at=T0,
            updated_at=T0,
        )
        session.add(op)
        session.flush()
        append_transition(
            session,
            workspace_id=self.workspace_id,
            operation_id=op.id,
            from_state=None,
            to_state="OBSERVING",
            verdict=None,
            reason=None,
            cause="test_setup",
            now=T0,
        )
        return op

    def refund(self, status: str) -> dict[str, Any]:
        return {
            "id": self.refund_id,
            "object": "refund",
            "amount": 500,
            "currency": "usd",
            "charge": self.charge,
            "status": status,
            "created": int(T0.timestamp()) + 1,
        }

    def add_event(
        self, session: Session, event_id: str, event_type: str, status: str, at: datetime
    ) -> Event:
        event_id = f"{event_id}_{self.operation_id}"
        body = {
            "id": event_id,
            "object": "event",
            "type": event_type,
            "created": int(at.timestamp()),
            "api_version": "2026-08-26",
            "data": {"object": self.refund(status)},
        }
        raw = json.dumps(body).encode()
        row = Event(
            workspace_id=self.workspace_id,
            provider="stripe",
            event_id=event_id,
            type=event_type,
            provider_timestamp=at.replace(microsecond=0),
            api_version="2026-08-26",
            object_id=self.refund_id,
            body=body,
            raw=raw,
            digest=sha(raw),
            duplicates=0,
            received_at=at + timedelta(milliseconds=300),
        )
        session.add(row)
        session.flush()
        session.add(
            OperationEvent(
                operation_id=self.operation_id,
                event_pk=row.id,
                workspace_id=self.workspace_id,
                strategy="resource_id",
                assurance="strong",
                created_at=at,
            )
        )
        session.flush()
        return row

    def observe(self, session: Session, op: Operation, status: str, at: datetime) -> None:
        """One fence: a readback with ``status``, the listing of the charge's refunds (1.1.0)
        and the webhook channels' reductions."""
        self.fence += 1
        contract = contract_for(session, op)
        context = build_context(contract, facts_for(op))
        raw = json.dumps(self.refund(status)).encode()
        rows = [
            ObservationRow(
                operation_id=op.id,
                workspace_id=op.workspace_id,
                fence=self.fence,
                channel="refund_readback",
                status="ok",
                value=self.refund(status),
                raw=raw,
                digest=sha(raw),
                http_status=200,
                observed_at=at,
            )
        ]
        events = [
            EventRecord(
                event_id=e.event_id,
                type=e.type,
                provider_timestamp=e.provider_timestamp,
                body=e.body,
                api_version=e.api_version,
                received_at=e.received_at,
            )
            for e in session.query(Event).filter(Event.workspace_id == op.workspace_id)
        ]
        for channel in contract.channels:
            if channel.http is not None and channel.http.paginate is not None:
                # 1.1.0's listing of the charge's refunds: this refund alone.
                data = [self.refund(status)]
                listing = {"object": "list", "data": data, "has_more": False, "count": 1}
                listed = json.dumps(listing, sort_keys=True, separators=(",", ":")).encode()
                rows.append(
                    ObservationRow(
                        operation_id=op.id,
                        workspace_id=op.workspace_id,
                        fence=self.fence,
                        channel=channel.name,
                        status="ok",
                        value=listing,
                        raw=listed,
                        digest=sha(listed),
                        http_status=200,
                        observed_at=at,
                    )
                )
            if channel.verifier != "webhook":
                continue
            value = reduce_events(
                channel,
                events,
                context=context,
                operation_created_at=op.created_at,
                api_versions=contract.provider_api_versions,
            )
            reduced = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
            rows.append(
                ObservationRow(
                    operation_id=op.id,
                    workspace_id=op.workspace_id,
                    fence=self.fence,
                    channel=channel.name,
                    status="ok",
                    value=value,
                    raw=reduced,
                    digest=sha(reduced),
                    observed_at=at,
                )
            )
        session.add_all(rows)
        session.flush()

    def decide(self, session: Session, op: Operation, now: datetime) -> Decision:
        from sqlalchemy import func, select

        newest = (
            select(ObservationRow.channel, func.max(ObservationRow.id).label("id"))
            .where(ObservationRow.operation_id == op.id)
            .group_by(ObservationRow.channel)
            .subquery()
        )
        rows = session.execute(
            select(ObservationRow).join(newest, ObservationRow.id == newest.c.id)
        ).scalars()
        observations = [
            Observation(
                channel=r.channel,
                observed_at=r.observed_at,
                status=ObservationStatus(r.status),
                value=r.value,
                provider_timestamp=r.provider_timestamp,
                digest=r.digest,
            )
            for r in rows
        ]
        return decide(contract_for(session, op), facts_for(op), observations, now)

    def write(
        self,
        session: Session,
        op: Operation,
        decision: Decision,
        now: datetime,
        changes: dict[str, Any] | None = None,
    ) -> bool:
        return apply_decision(
            session,
            op,
            decision,
            cause="evaluation",
            changes=changes or {},
            now=now,
            readings=None,
        )

    def verified(self, session: Session) -> Operation:
        """Create the operation and drive it to VERIFIED on real rows, watched as the
        evaluation watches it (``shared.lifecycle.watch``)."""
        op = self.create(session)
        self.add_event(session, "evt_created", "refund.created", "pending", T0)
        self.add_event(
            session, "evt_succeeded", "refund.updated", "succeeded", T0 + timedelta(seconds=2)
        )
        at = T0 + timedelta(seconds=3)
        self.observe(session, op, "succeeded", at)
        decision = self.decide(session, op, at)
        assert decision.verdict == "VERIFIED", decision
        contract = contract_for(session, op)
        until = watch_until(contract, at)
        changes = {"watch_until": until, "fence": self.fence}  # the fence it observed
        assert self.write(session, op, decision, at, changes=changes)
        keys = evidence_keys(op, contract, build_context(contract, facts_for(op)))
        start_watch(session, op, keys, until=until)
        return op


@pytest.fixture
def flow(pg_engine: Engine, settings: Settings) -> RefundFlow:
    return RefundFlow(engine=pg_engine)
