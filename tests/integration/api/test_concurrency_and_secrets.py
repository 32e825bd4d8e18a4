"""Races on real PostgreSQL over real HTTP, and secrets that never reach a table in plain."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select, text

from shared.db.models import Base, Operation, Transition
from shared.db.session import session_scope
from shared.db.tenants import set_connection
from shared.trust.secrets import hash_api_key
from tests.integration.api.conftest import Api
from tests.integration.api.live import LiveServer

pytestmark = pytest.mark.integration

INPUT = {"charge": "ch_123", "amount": 500, "currency": "usd"}


def test_twenty_concurrent_results_make_exactly_one_transition(api: Api) -> None:
    """On PostgreSQL (row lock + version fence) and on SQLite (serialised writers)."""
    pg_api = api
    headers = pg_api.a.headers()
    with LiveServer(pg_api.app) as server:
        with httpx.Client(base_url=server.url, headers=headers, timeout=30) as client:
            created = client.post(
                "/v1/operations", json={"contract": "stripe.refund.succeeded", "input": INPUT}
            )
            assert created.status_code == 201
            op_id = created.json()["id"]
        barrier = threading.Barrier(20)
        statuses: list[int] = []
        bodies: list[dict[str, Any]] = []
        lock = threading.Lock()

        def reporter(n: int) -> None:
            with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
                barrier.wait()
                response = client.post(
                    f"/v1/operations/{op_id}/action",
                    json={"phase": "result", "result": {"id": f"re_{n}"}, "http_status": 200},
                )
            with lock:
                statuses.append(response.status_code)
                bodies.append(response.json())

        threads = [threading.Thread(target=reporter, args=(n,)) for n in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(statuses) == [200] + [409] * 19
    assert all(b["state"] == "OBSERVING" for b in bodies)
    with session_scope(pg_api.engine) as session:
        accepted = session.execute(
            select(func.count())
            .select_from(Transition)
            .where(Transition.operation_id == op_id, Transition.cause == "action_result")
        ).scalar_one()
        op = session.get(Operation, op_id)
        assert op is not None
        assert accepted == 1
        assert op.fence == 1  # one observation scheduled
        assert op.version == 3  # created, accepted, observing
        winner = next(b for s, b in zip(statuses, bodies, strict=True) if s == 200)
        assert op.subject_id == winner["subject"]["id"]


def _dump(api: Api) -> str:
    """Every value of every table, as text (bytes decoded byte for byte)."""
    parts: list[str] = []
    with api.engine.connect() as conn:
        for table in Base.metadata.sorted_tables:
            for row in conn.execute(text(f'SELECT * FROM "{table.name}"')):  # noqa: S608
                for value in row:
                    if isinstance(value, bytes | memoryview):
                        parts.append(bytes(value).decode("latin-1"))
                    else:
                        parts.append(str(value))
    return "\n".join(parts)


def test_no_key_or_secret_in_plain_text_in_any_table(api: Api) -> None:
    webhook_secrets = ["whsec_plain_first_0123456789", "whsec_plain_second_987654321"]
    provider_key = "sk_test_plaintext_provider_key_42"
    with session_scope(api.engine) as session:
        set_connection(
            session,
            api.a.workspace_id,
            provider="stripe",
            webhook_secrets=webhook_secrets,
            api_key=provider_key,
            base_url="https://api.stripe.com",
            signature_scheme="stripe",
            settings=api.settings,
            now=datetime.now(UTC),
        )
    # Some traffic, so operations and transitions exist too.
    created = api.client.post(
        "/v1/operations",
        json={"contract": "stripe.refund.succeeded", "input": INPUT},
        headers=api.a.headers(),
    )
    assert created.status_code == 201
    dump = _dump(api)
    assert hash_api_key(api.a.admin_key) in dump  # the dump does see the tables
    for plain in (
        api.a.admin_key,
        api.a.agent_key,
        api.b.admin_key,
        api.b.agent_key,
        *webhook_secrets,
        provider_key,
    ):
        assert plain not in dump
        assert plain[3:] not in dump  # not even without its prefix
    assert api.settings.secret_key is not None
    assert api.settings.secret_key not in dump


def test_concurrent_creates_with_one_idempotency_key_make_one_operation(pg_api: Api) -> None:
    headers = {**pg_api.a.headers(), "Idempotency-Key": "same-key"}
    body = {"contract": "stripe.refund.succeeded", "input": INPUT}
    results: list[tuple[int, str]] = []
    lock = threading.Lock()
    with LiveServer(pg_api.app) as server:
        barrier = threading.Barrier(10)

        def creator() -> None:
            with httpx.Client(base_url=server.url, headers=headers, timeout=60) as client:
                barrier.wait()
                response = client.post("/v1/operations", json=body)
            with lock:
                results.append((response.status_code, response.json()["id"]))

        threads = [threading.Thread(target=creator) for _ in range(10)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(code for code, _ in results) == [200] * 9 + [201]
    assert len({op_id for _, op_id in results}) == 1
    with session_scope(pg_api.engine) as session:
        assert session.execute(select(func.count()).select_from(Operation)).scalar_one() == 1
