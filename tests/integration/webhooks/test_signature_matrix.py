"""Over HTTP: only deliveries whose signature holds are stored; refused ones leave no row."""

from __future__ import annotations

import json
import math
import time

import pytest
import stripe
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from shared.db.models import Event
from shared.trust.signatures import STRIPE

from .conftest import (
    OLD_SECRET,
    RETIRED_SECRET,
    SECRET,
    Tenant,
    TestClient,
    counts,
    refund,
    signed,
    stripe_event,
)

pytestmark = pytest.mark.integration


def body_for(event_id: str = "evt_matrix") -> bytes:
    now = int(time.time())
    return stripe_event(
        event_id, "refund.updated", refund("re_m", status="succeeded", created=now), created=now
    )


def flip(body: bytes) -> bytes:
    return body[:20] + bytes([body[20] ^ 0x01]) + body[21:]


CASES = {
    "valid": (lambda b: (b, signed(b)), 200),
    "rotated-secret-still-active": (lambda b: (b, signed(b, OLD_SECRET)), 200),
    "flipped-body-byte": (lambda b: (flip(b), signed(b)), 400),
    "wrong-secret": (lambda b: (b, signed(b, "whsec_nobody_knows")), 400),
    "retired-secret": (lambda b: (b, signed(b, RETIRED_SECRET)), 400),
    # Whole seconds, rounded away from now: at least 301 s off when the request arrives
    # (int() of now + 301 could be 300.x s ahead by then).
    "t-now-minus-301": (lambda b: (b, signed(b, t=math.floor(time.time()) - 301)), 400),
    "t-now-plus-301": (lambda b: (b, signed(b, t=math.ceil(time.time()) + 301)), 400),
    "missing-header": (lambda b: (b, {"Content-Type": "application/json"}), 400),
    "only-v0": (
        lambda b: (
            b,
            {"Stripe-Signature": signed(b)["Stripe-Signature"].replace("v1=", "v0=")},
        ),
        400,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_signature_matrix(client: TestClient, tenant: Tenant, pg_engine: Engine, case: str) -> None:
    make, expected = CASES[case]
    body, headers = make(body_for())
    response = client.post(tenant.path, content=body, headers=headers)
    assert response.status_code == expected, response.text
    if expected == 200:
        assert response.json() == {"received": True, "event_id": "evt_matrix", "duplicate": False}
        assert counts(pg_engine)[0] == 1
    else:
        assert response.headers["content-type"].startswith("application/problem+json")
        assert response.json()["status"] == 400
        assert counts(pg_engine) == (0, 0, 0)


def test_header_made_by_the_stripe_library_is_accepted(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    body = body_for("evt_lib")
    header = stripe.WebhookSignature.generate_signature_header(body.decode(), SECRET)
    response = client.post(tenant.path, content=body, headers={"Stripe-Signature": header})
    assert response.status_code == 200, response.text
    with Session(pg_engine) as session:
        row = session.execute(select(Event)).scalar_one()
    # exactly the bytes received, and the provider timestamp is the event's created
    assert row.raw == body
    assert int(row.provider_timestamp.timestamp()) == json.loads(body)["created"]


def test_unknown_workspace_and_unknown_provider_answer_the_same_404(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    body = body_for()
    headers = signed(body)
    no_workspace = client.post("/v1/events/stripe/ws_doesnotexist", content=body, headers=headers)
    no_provider = client.post(
        f"/v1/events/paypal/{tenant.workspace_id}", content=body, headers=headers
    )
    odd = client.post("/v1/events/STRIPE!/x", content=body, headers=headers)
    assert no_workspace.status_code == no_provider.status_code == odd.status_code == 404
    assert no_workspace.json() == no_provider.json() == odd.json()
    assert counts(pg_engine) == (0, 0, 0)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "malformed_json"),
        (b"\xff\xfe", "malformed_json"),
        (b"[1, 2]", "malformed_event"),
        (b"[" * 100_000 + b"]" * 100_000, "malformed_json"),
        (
            json.dumps({"type": "refund.updated", "created": 1790000000}).encode(),
            "missing_event_id",
        ),
        (json.dumps({"id": "", "type": "x", "created": 1790000000}).encode(), "missing_event_id"),
        (json.dumps({"id": "evt_1", "created": 1790000000}).encode(), "missing_event_type"),
        (json.dumps({"id": "evt_1", "type": "refund.updated"}).encode(), "missing_event_time"),
    ],
)
def test_malformed_event_after_a_valid_signature_is_refused_and_not_stored(
    client: TestClient, tenant: Tenant, pg_engine: Engine, body: bytes, reason: str
) -> None:
    response = client.post(tenant.path, content=body, headers=signed(body))
    assert response.status_code == 400
    assert response.json()["reason"] == reason
    assert counts(pg_engine) == (0, 0, 0)


def test_repeat_delivery_answers_200_and_only_counts(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    body = body_for("evt_twice")
    first = client.post(tenant.path, content=body, headers=signed(body))
    again = client.post(tenant.path, content=body, headers=signed(body, OLD_SECRET))
    assert first.status_code == again.status_code == 200
    assert first.json()["duplicate"] is False
    assert again.json()["duplicate"] is True
    before = counts(pg_engine)
    client.post(tenant.path, content=body, headers=signed(body))
    assert counts(pg_engine) == before
    with Session(pg_engine) as session:
        row = session.execute(select(Event)).scalar_one()
    assert row.duplicates == 2


def test_a_larger_body_than_the_limit_is_refused_with_413(
    client: TestClient, tenant: Tenant, pg_engine: Engine
) -> None:
    big = b'{"id":"evt_big","pad":"' + b"x" * (1024 * 1024) + b'"}'
    response = client.post(tenant.path, content=big, headers=signed(big))
    assert response.status_code == 413
    assert counts(pg_engine) == (0, 0, 0)


def test_database_unreachable_answers_503(tenant: Tenant, settings: object) -> None:
    from shared.runtime.settings import Settings

    from .conftest import build_app

    assert isinstance(settings, Settings)
    down = settings.model_copy(
        update={"database_url": "postgresql+psycopg://postgres@127.0.0.1:1/nothing"}
    )
    with TestClient(build_app(down), raise_server_exceptions=False) as offline:
        body = body_for()
        response = offline.post(tenant.path, content=body, headers=signed(body))
    assert response.status_code == 503
    assert response.headers.get("retry-after")


def test_standard_webhooks_connection(
    client: TestClient, tenant: Tenant, pg_engine: Engine, settings: object
) -> None:
    import base64
    from datetime import UTC, datetime

    import standardwebhooks

    from shared.db.tenants import set_connection

    secret = "whsec_" + base64.b64encode(b"s" * 32).decode()
    with Session(pg_engine) as session, session.begin():
        set_connection(
            session,
            tenant.workspace_id,
            provider="acme",
            webhook_secrets=[secret],
            api_key=None,
            base_url="http://127.0.0.1:9",
            signature_scheme="standard_webhooks",
            settings=settings,  # type: ignore[arg-type]
            now=datetime.now(UTC),
        )
    body = json.dumps(
        {"type": "invoice.paid", "timestamp": "2026-11-30T07:00:00Z", "data": {"id": "inv_1"}}
    ).encode()
    now = datetime.now(UTC)
    headers = {
        "webhook-id": "msg_abc",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": standardwebhooks.Webhook(secret).sign("msg_abc", now, body.decode()),
    }
    response = client.post(f"/v1/events/acme/{tenant.workspace_id}", content=body, headers=headers)
    assert response.status_code == 200, response.text
    assert response.json()["event_id"] == "msg_abc"
    tampered = dict(headers, **{"webhook-id": "msg_other"})
    refused = client.post(f"/v1/events/acme/{tenant.workspace_id}", content=body, headers=tampered)
    assert refused.status_code == 400
    assert counts(pg_engine)[0] == 1


def test_sign_helper_matches_stripe_construct_event() -> None:
    body = body_for("evt_x")
    headers = STRIPE.sign(body=body, secrets=[SECRET], timestamp=int(time.time()))
    assert stripe.Webhook.construct_event(body, headers["Stripe-Signature"], SECRET).id == "evt_x"


def test_secrets_that_cannot_be_opened_answer_503(tenant: Tenant, settings: object) -> None:
    from cryptography.fernet import Fernet

    from shared.runtime.settings import Settings

    from .conftest import build_app

    assert isinstance(settings, Settings)
    wrong_key = settings.model_copy(update={"secret_key": Fernet.generate_key().decode()})
    with TestClient(build_app(wrong_key), raise_server_exceptions=False) as client:
        body = body_for()
        response = client.post(tenant.path, content=body, headers=signed(body))
    assert response.status_code == 503


def test_github_connection_uses_the_delivery_header_as_event_id(
    client: TestClient, tenant: Tenant, pg_engine: Engine, settings: object
) -> None:
    from datetime import UTC, datetime

    from shared.db.tenants import set_connection
    from shared.trust.signatures import GITHUB

    with Session(pg_engine) as session, session.begin():
        set_connection(
            session,
            tenant.workspace_id,
            provider="github",
            webhook_secrets=["gh-secret"],
            api_key=None,
            base_url="https://api.github.com",
            signature_scheme="github",
            settings=settings,  # type: ignore[arg-type]
            now=datetime.now(UTC),
        )
    body = json.dumps({"action": "closed", "pull_request": {"id": 7, "merged": True}}).encode()
    headers = GITHUB.sign(
        body=body, secrets=["gh-secret"], delivery_id="72d3162e-cc78", event_type="pull_request"
    )
    path = f"/v1/events/github/{tenant.workspace_id}"
    first = client.post(path, content=body, headers=headers)
    again = client.post(path, content=body, headers=headers)
    assert first.status_code == again.status_code == 200, first.text
    assert first.json()["event_id"] == "72d3162e-cc78"
    assert again.json()["duplicate"] is True
    with Session(pg_engine) as session:
        row = session.execute(select(Event)).scalar_one()
    assert (row.provider, row.type) == ("github", "pull_request")
    forged = dict(headers, **{"X-Hub-Signature-256": "sha256=" + "0" * 64})
    assert client.post(path, content=body, headers=forged).status_code == 400
    no_id = {k: v for k, v in headers.items() if k != "X-GitHub-Delivery"}
    refused = client.post(path, content=body, headers=no_id)
    assert refused.status_code == 400
    assert refused.json()["reason"] == "missing_event_id"
