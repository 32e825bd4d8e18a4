"""Webhooks of a generic ``http`` connection: delivered to ``/v1/events/http/<workspace>``,
checked with the scheme the connection names, stored once under provider ``http``."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
from sqlalchemy import select

from shared.db.models import Event
from shared.db.session import session_scope
from shared.db.tenants import set_connection
from shared.trust.signatures import scheme_for
from tests.integration.registry.conftest import Api

pytestmark = pytest.mark.integration

SECRETS = {
    "standard_webhooks": "whsec_" + base64.b64encode(b"generic-http-secret-0123456789ab").decode(),
    "github": "gh-generic-secret",
    "stripe": "whsec_generic_stripe_style",
}


@pytest.mark.parametrize("scheme", sorted(SECRETS))
def test_generic_deliveries_are_verified_then_stored_once(pg_api: Api, scheme: str) -> None:
    workspace = pg_api.a.workspace_id
    with session_scope(pg_api.engine) as session:
        set_connection(
            session,
            workspace,
            provider="http",
            webhook_secrets=[SECRETS[scheme]],
            api_key="k",
            base_url="http://127.0.0.1:9",
            signature_scheme=scheme,
            settings=pg_api.settings,
            now=datetime.now(UTC),
        )
    now = int(time.time())
    event = {
        "id": "evt_generic_1",
        "type": "entitlement.updated",
        "created": now,
        "timestamp": datetime.fromtimestamp(now, UTC).isoformat(),
        "data": {"id": "ent_1", "object": {"id": "ent_1"}, "seats": 0},
    }
    body = json.dumps(event).encode()
    headers = scheme_for(scheme).sign(
        body=body,
        secrets=[SECRETS[scheme]],
        timestamp=now,
        delivery_id="evt_generic_1",
        event_type="entitlement.updated",
    )
    headers["Content-Type"] = "application/json"
    path = f"/v1/events/http/{workspace}"

    forged = pg_api.client.post(
        path, content=body.replace(b'"seats": 0', b'"seats": 9'), headers=headers
    )
    assert forged.status_code == 400, forged.text
    with session_scope(pg_api.engine) as session:
        assert session.execute(select(Event)).first() is None

    for repeat in (False, True):
        response = pg_api.client.post(path, content=body, headers=headers)
        assert response.status_code == 200, response.text
        assert response.json()["duplicate"] is repeat
    with session_scope(pg_api.engine) as session:
        rows = session.execute(select(Event)).scalars().all()
        assert [(r.provider, r.event_id, r.type, r.duplicates) for r in rows] == [
            ("http", "evt_generic_1", "entitlement.updated", 1)
        ]
    # Another workspace's endpoint for the same provider does not take A's secret.
    other = pg_api.client.post(
        f"/v1/events/http/{pg_api.b.workspace_id}", content=body, headers=headers
    )
    assert other.status_code in (400, 404), other.text
