"""The intake in front of the framework: its own answers, its own PostgreSQL connections."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
from sqlalchemy import Engine, select, text
from sqlalchemy.orm import Session

from services.ingress.intake import webhook_batches
from shared.db.models import Event

from .conftest import Tenant, TestClient, counts, refund, signed, stripe_event

pytestmark = pytest.mark.integration


def body_for(event_id: str) -> bytes:
    now = int(time.time())
    return stripe_event(
        event_id, "refund.updated", refund("re_front", status="succeeded", created=now), created=now
    )


def test_other_methods_get_a_405_problem(client: TestClient, tenant: Tenant) -> None:
    response = client.get(tenant.path)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 405


def test_a_longer_path_is_the_api_s_404(client: TestClient, tenant: Tenant) -> None:
    response = client.post(tenant.path + "/more", content=b"{}")
    assert response.status_code == 404
    assert response.headers["content-type"] == "application/problem+json"


def test_the_openapi_document_describes_the_intake(client: TestClient) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    post = paths["/v1/events/{provider}/{workspace}"]["post"]
    in_path = {p["name"] for p in post["parameters"] if p["in"] == "path"}
    assert in_path == {"provider", "workspace"}
    # The rest are the signature headers of each scheme, none required (test_openapi_docs).
    assert all(p["in"] == "header" and not p["required"] for p in post["parameters"]
               if p["in"] != "path")  # fmt: skip
    assert set(post["responses"]) == {"200", "400", "404", "405", "413", "503"}
    assert "422" not in post["responses"]  # it never answers one


def test_a_connection_the_database_dropped_is_replaced(
    client: TestClient,
    tenant: Tenant,
    pg_engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Idle connections are pinged first: after a database restart (here: the intake's
    backends terminated) the next delivery is stored, not answered 503."""
    monkeypatch.setattr(webhook_batches, "IDLE_PING_AFTER_S", 0.0)
    first = body_for("evt_front_before")
    assert client.post(tenant.path, content=first, headers=signed(first)).status_code == 200
    with pg_engine.connect() as conn:
        killed = conn.execute(
            text(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = :name"
            ),
            {"name": webhook_batches.APPLICATION_NAME},
        ).scalar_one()
    assert killed == 1  # the intake's idle connection
    second = body_for("evt_front_after")
    response = client.post(tenant.path, content=second, headers=signed(second))
    assert response.status_code == 200, response.text
    assert response.json()["duplicate"] is False
    assert counts(pg_engine)[0] == 2


@pytest.mark.parametrize(
    ("event_id", "encode"),
    [
        ("evt_front_utf16", lambda text: text.encode("utf-16")),
        ("evt_front_utf8_bom", lambda text: text.encode("utf-8-sig")),
    ],
)
def test_a_body_that_is_not_plain_utf8_is_stored_as_its_document(
    client: TestClient, tenant: Tenant, pg_engine: Engine, event_id: str, encode: Any
) -> None:
    """The body column takes the raw text when it is plain UTF-8; JSON in UTF-16 or after a
    UTF-8 byte order mark (valid, if rare) is written out from the parsed document instead."""
    document = json.loads(body_for(event_id))
    raw = encode(json.dumps(document))
    response = client.post(tenant.path, content=raw, headers=signed(raw))
    assert response.status_code == 200, response.text
    with Session(pg_engine) as session:
        row = session.execute(select(Event).where(Event.event_id == event_id)).scalar_one()
    assert row.body == document
    assert bytes(row.raw) == raw
