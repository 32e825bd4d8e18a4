"""The delivery log on both backends (#33): the embedded system stores on SQLite through the
engine, a deployment on PostgreSQL through the intake's own connections. On each, a delivery
with a wrong signature is refused, recorded without its body, and listed; one with a NUL in a
value is stored with the place escaped."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

import pytest

from shared.db.session import session_scope
from shared.db.tenants import set_connection
from shared.trust.signatures import STRIPE

from .conftest import Api

pytestmark = pytest.mark.integration

SECRET = "whsec_backends_" + "d4" * 16


def signed(body: bytes, secret: str) -> dict[str, str]:
    headers = STRIPE.sign(body=body, secrets=[secret], timestamp=int(time.time()))
    return {**headers, "Content-Type": "application/json"}


def test_refused_and_escaped_deliveries_are_listed(api: Api) -> None:
    with session_scope(api.engine) as session:
        set_connection(
            session,
            api.a.workspace_id,
            provider="stripe",
            webhook_secrets=[SECRET],
            api_key="sk_test_x",
            base_url="http://127.0.0.1:9",
            signature_scheme="stripe",
            settings=api.settings,
            now=datetime.now(UTC),
        )
    path = f"/v1/events/stripe/{api.a.workspace_id}"
    now = int(time.time())
    doc = {
        "id": "evt_nul",
        "object": "event",
        "type": "refund.updated",
        "created": now,
        "api_version": "2026-08-26",
        "data": {"object": {"id": "re_n", "object": "refund", "note": "a\u0000b"}},
    }
    body = json.dumps(doc).encode()
    assert api.client.post(path, content=body, headers=signed(body, SECRET)).status_code == 200
    forged = json.dumps({**doc, "id": "evt_forged"}).encode()
    refused = api.client.post(path, content=forged, headers=signed(forged, "whsec_other"))
    assert refused.status_code == 400

    listed = api.client.get("/v1/deliveries", headers=api.a.headers()).json()["data"]
    # Newest first: the refusal came after the stored event.
    assert [(i["outcome"], i["event_id"]) for i in listed] == [
        ("refused", None),
        ("stored", "evt_nul"),
    ]
    stored = next(i for i in listed if i["outcome"] == "stored")
    assert stored["escaped"] == ["data.object.note"]
    gone = next(i for i in listed if i["outcome"] == "refused")
    assert (gone["reason"], gone["size"]) == ("no_matching_signature", len(forged))
    assert api.client.get("/v1/deliveries", headers=api.b.headers()).json()["data"] == []
