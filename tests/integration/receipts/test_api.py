"""Receipts over HTTP on PostgreSQL, and `provely receipts verify --keys URL` against the real
API served by uvicorn."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from fastapi import FastAPI

from services.ingress.app import create_app
from shared.core.receipt import document_bytes
from shared.db.models import Operation
from shared.db.session import session_scope
from shared.db.tenants import create_workspace
from shared.lifecycle.late_evidence import check_late_evidence
from shared.runtime.settings import Settings
from tests.integration.api.live import LiveServer
from tests.integration.receipts.conftest import T0, RefundFlow
from tests.integration.receipts.test_audit_cli import provely

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration


@pytest.fixture
def app(settings: Settings, tmp_path: Path) -> FastAPI:
    return create_app(
        settings.model_copy(update={"broker_url": f"sqla+sqlite:///{tmp_path / 'broker.db'}"})
    )


@pytest.fixture
def client(app: FastAPI) -> Iterator[TestClient]:
    with TestClient(app) as test_client:
        yield test_client


def _tenant(flow: RefundFlow) -> str:
    with session_scope(flow.engine) as s:
        ws, key = create_workspace(s, "acme", now=datetime.now(UTC))
        flow.workspace_id = ws.id
    return key


def test_keys_are_public_and_published_before_the_first_receipt(client: TestClient) -> None:
    response = client.get("/v1/receipts/keys")
    assert response.status_code == 200
    assert "max-age" in response.headers["cache-control"]
    keys = response.json()["keys"]
    assert len(keys) == 1
    assert keys[0]["status"] == "active"
    assert keys[0]["alg"] == "Ed25519"
    assert set(keys[0]) == {"key_id", "alg", "public_key", "status", "created_at", "retired_at"}
    assert client.get("/v1/receipts/keys").json() == response.json()  # generated once


def test_receipt_404_while_open_then_served(flow: RefundFlow, client: TestClient) -> None:
    key = _tenant(flow)
    headers = {"Authorization": f"Bearer {key}"}
    with session_scope(flow.engine) as s:
        op = flow.create(s)
        at = T0 + timedelta(seconds=3)
        flow.observe(s, op, "pending", at)
        assert flow.write(s, op, flow.decide(s, op, at), at)
    response = client.get("/v1/operations/op_1/receipt", headers=headers)
    assert response.status_code == 404
    assert response.headers["content-type"].startswith("application/problem+json")
    assert "open" in response.json()["detail"]
    assert client.get("/v1/operations/op_1/receipt").status_code == 401

    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        at = T0 + timedelta(seconds=8)
        flow.add_event(s, "evt_ok", "refund.updated", "succeeded", at - timedelta(seconds=1))
        flow.observe(s, op, "succeeded", at)
        assert flow.write(s, op, flow.decide(s, op, at), at)
    response = client.get("/v1/operations/op_1/receipt", headers=headers)
    assert response.status_code == 200
    document = response.json()
    assert set(document) == {"receipt", "signature", "key_id", "alg"}
    assert document["receipt"]["verdict"] == "VERIFIED"
    by_id = client.get(f"/v1/receipts/{document['receipt']['id']}", headers=headers)
    assert by_id.json() == document
    # Another workspace sees nothing.
    other = _tenant(RefundFlow(flow.engine))
    foreign = {"Authorization": f"Bearer {other}"}
    assert client.get("/v1/operations/op_1/receipt", headers=foreign).status_code == 404
    assert (
        client.get(f"/v1/receipts/{document['receipt']['id']}", headers=foreign).status_code == 404
    )


def test_verify_against_the_live_key_url(
    flow: RefundFlow, app: FastAPI, settings: Settings, tmp_path: Path
) -> None:
    key = _tenant(flow)
    headers = {"Authorization": f"Bearer {key}"}
    with session_scope(flow.engine) as s:
        flow.verified(s)
    later = T0 + timedelta(minutes=5)
    with session_scope(flow.engine) as s:
        op = s.get(Operation, "op_1")
        assert op is not None
        flow.observe(s, op, "failed", later)
        check_late_evidence(s, op, flow.decide(s, op, later), now=later)
    with LiveServer(app) as server, TestClient(app) as client:
        current = client.get("/v1/operations/op_1/receipt", headers=headers).json()
        old_id = current["receipt"]["supersedes"]
        assert old_id is not None
        old = client.get(f"/v1/receipts/{old_id}", headers=headers).json()
        assert old["receipt"]["verdict"] == "VERIFIED"
        for name, document in (("current.json", current), ("old.json", old)):
            path = tmp_path / name
            path.write_bytes(document_bytes(document))
            done = provely(
                settings,
                "receipts",
                "verify",
                str(path),
                "--keys",
                f"{server.url}/v1/receipts/keys",
            )
            assert done.returncode == 0, done.stderr
            assert done.stdout.startswith("valid: ")
        # The same check without --keys reads the local database's keys.
        done = provely(settings, "receipts", "verify", str(tmp_path / "current.json"))
        assert done.returncode == 0, done.stderr
        assert f"supersedes {old_id}" in done.stdout
        # `provely receipts show` exports the same document.
        done = provely(settings, "receipts", "show", "op_1")
        assert done.returncode == 0, done.stderr
        assert done.stdout.encode() == document_bytes(current)
        done = provely(settings, "receipts", "show", "op_1", "--all")
        assert done.returncode == 0
        assert done.stdout.count('"receipt":') == 2
        done = provely(settings, "receipts", "show", "op_nope")
        assert done.returncode == 1
        # Rotation through the CLI: both receipts still verify against the live key list.
        done = provely(settings, "receipts", "rotate-key")
        assert done.returncode == 0, done.stderr
        assert "retired" in done.stdout
        keys = client.get("/v1/receipts/keys").json()["keys"]
        assert [k["status"] for k in keys] == ["active", "retired"]
        done = provely(
            settings,
            "receipts",
            "verify",
            str(tmp_path / "old.json"),
            "--keys",
            f"{server.url}/v1/receipts/keys",
            "--json",
        )
        assert done.returncode == 0, done.stderr
        assert '"key_status": "retired"' in done.stdout
