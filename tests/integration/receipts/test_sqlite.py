"""The embedded default (SQLite): receipts are issued, superseded and verified the same way."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine, func, select

from shared.core.receipt import document_bytes
from shared.db.models import Operation, Receipt
from shared.db.session import session_scope
from shared.lifecycle.late_evidence import CheckOutcome, check_late_evidence
from shared.lifecycle.receipt_check import Verification, verify_receipt_document
from shared.lifecycle.receipt_keyring import keyring_from_rows
from shared.lifecycle.receipt_keys import list_receipt_keys
from shared.lifecycle.receipts import receipt_document_for
from shared.runtime.settings import get_settings
from tests.integration.receipts.conftest import T0, RefundFlow

pytestmark = pytest.mark.integration


@pytest.fixture
def sqlite_flow(
    sqlite_engine: Engine, sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[RefundFlow]:
    monkeypatch.setenv("PROVELY_DATABASE_URL", sqlite_url)
    monkeypatch.setenv("PROVELY_SECRET_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("PROVELY_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.delenv("PROVELY_RECEIPT_KEY_FILE", raising=False)
    get_settings.cache_clear()
    yield RefundFlow(engine=sqlite_engine)
    get_settings.cache_clear()


def test_verified_then_contradicted_on_sqlite(sqlite_flow: RefundFlow) -> None:
    flow = sqlite_flow
    with session_scope(flow.engine) as s:
        flow.verified(s)
    later = T0 + timedelta(minutes=5)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        flow.observe(s, op, "failed", later)
        outcome, receipt = check_late_evidence(s, op, flow.decide(s, op, later), now=later)
        assert outcome is CheckOutcome.FLAGGED
        assert receipt is not None
    with session_scope(flow.engine) as s:
        rows = list(s.execute(select(Receipt).order_by(Receipt.created_at)).scalars())
        assert [r.current for r in rows] == [False, True]
        assert rows[1].supersedes == rows[0].id
        assert s.scalar(select(func.count()).select_from(Receipt).where(Receipt.current)) == 1
        ring = keyring_from_rows(list_receipt_keys(s))
        documents = [receipt_document_for(r) for r in rows]
    for document in documents:
        result = verify_receipt_document(document_bytes(document), ring)
        assert result.status is Verification.VALID, result.reason
