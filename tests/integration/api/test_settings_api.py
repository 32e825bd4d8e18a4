"""The settings API (#36): API keys and provider connections managed through documented
endpoints on the real app and database — scopes refused, revocation effective on the next
request, the last admin key kept, secrets never echoed, the connection check against a real
sandbox."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from services.sandbox.runner import RunningSandbox, run_sandbox
from shared.db.models import ApiKey, Connection
from shared.db.tenants import LastAdminKey, revoke_api_key
from shared.trust.secrets import hash_api_key
from tests.integration.api.conftest import Api

pytestmark = pytest.mark.integration

SANDBOX_KEY = "sk_test_settings_api"
SECRET = "whsec_settings_" + "d4" * 16
READ_KEY = "rk_test_settings_" + "e5" * 8

SETTINGS_CALLS: list[tuple[str, str, dict[str, Any] | None]] = [
    ("GET", "/v1/api-keys", None),
    ("POST", "/v1/api-keys", {"scope": "admin"}),
    ("DELETE", "/v1/api-keys/key_whatever", None),
    ("GET", "/v1/connections", None),
    ("PUT", "/v1/connections/stripe", {"webhook_secrets": [SECRET]}),
    ("POST", "/v1/connections/stripe/webhook-secrets", {"secret": SECRET}),
    ("POST", "/v1/connections/stripe/check", None),
]


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def call(api: Api, method: str, path: str, key: str, body: Any = None) -> httpx.Response:
    return api.client.request(method, path, headers=bearer(key), json=body)


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with run_sandbox(api_key=SANDBOX_KEY) as running:
        yield running


@pytest.mark.parametrize(("method", "path", "body"), SETTINGS_CALLS)
def test_every_settings_call_needs_an_admin_key(
    pg_api: Api, method: str, path: str, body: dict[str, Any] | None
) -> None:
    refused = call(pg_api, method, path, pg_api.a.agent_key, body)
    assert refused.status_code == 403, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert refused.json()["type"].endswith("/forbidden")
    anonymous = pg_api.client.request(method, path, json=body)
    assert anonymous.status_code == 401


def test_a_key_is_created_listed_with_its_last_use_and_refused_once_revoked(pg_api: Api) -> None:
    admin = pg_api.a.admin_key
    created = call(pg_api, "POST", "/v1/api-keys", admin, {"scope": "agent", "name": "bot"})
    assert created.status_code == 201, created.text
    assert created.headers["cache-control"] == "no-store"
    new = created.json()
    assert new["api_key"].startswith("pv_")
    assert new["scope"] == "agent"
    assert new["last_used_at"] is None
    assert new["revoked_at"] is None

    assert call(pg_api, "GET", "/v1/operations", new["api_key"]).status_code == 200
    listed = call(pg_api, "GET", "/v1/api-keys", admin)
    assert listed.status_code == 200
    assert new["api_key"] not in listed.text
    rows = {row["id"]: row for row in listed.json()["data"]}
    assert rows[new["id"]]["last_used_at"] is not None
    assert rows[new["id"]]["prefix"] == new["api_key"][:9]

    revoked = call(pg_api, "DELETE", f"/v1/api-keys/{new['id']}", admin)
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_at"] is not None
    refused = call(pg_api, "GET", "/v1/operations", new["api_key"])
    assert refused.status_code == 401
    assert refused.json()["detail"] == "the API key is unknown or revoked"
    again = call(pg_api, "DELETE", f"/v1/api-keys/{new['id']}", admin)
    assert again.json()["revoked_at"] == revoked.json()["revoked_at"]


def test_an_admin_key_made_through_the_api_manages_settings(pg_api: Api) -> None:
    made = call(pg_api, "POST", "/v1/api-keys", pg_api.a.admin_key, {"scope": "admin"}).json()
    assert made["scope"] == "admin"
    assert call(pg_api, "GET", "/v1/connections", made["api_key"]).status_code == 200


def test_the_last_admin_key_is_kept_and_a_key_may_revoke_itself(pg_api: Api) -> None:
    first = pg_api.a.admin_key
    first_id = _key_id(pg_api, first)
    kept = call(pg_api, "DELETE", f"/v1/api-keys/{first_id}", first)
    assert kept.status_code == 409
    assert kept.json()["type"].endswith("/last-admin-key")
    assert call(pg_api, "GET", "/v1/api-keys", first).status_code == 200

    second = call(pg_api, "POST", "/v1/api-keys", first, {"scope": "admin"}).json()
    assert call(pg_api, "DELETE", f"/v1/api-keys/{first_id}", first).status_code == 200
    assert call(pg_api, "GET", "/v1/api-keys", first).status_code == 401
    last = call(pg_api, "DELETE", f"/v1/api-keys/{second['id']}", second["api_key"])
    assert last.status_code == 409
    # Agent keys do not count as admin keys, and revoking them is never refused.
    agent = call(pg_api, "DELETE", f"/v1/api-keys/{pg_api.a.agent_key_id}", second["api_key"])
    assert agent.status_code == 200


def test_another_workspaces_key_is_not_found_and_stays_valid(pg_api: Api) -> None:
    gone = call(pg_api, "DELETE", f"/v1/api-keys/{pg_api.b.agent_key_id}", pg_api.a.admin_key)
    assert gone.status_code == 404
    assert call(pg_api, "GET", "/v1/operations", pg_api.b.agent_key).status_code == 200
    listed = call(pg_api, "GET", "/v1/api-keys", pg_api.a.admin_key).json()["data"]
    assert pg_api.b.agent_key_id not in {row["id"] for row in listed}


def test_last_use_is_written_at_most_once_a_minute(pg_api: Api) -> None:
    key, key_id = pg_api.a.agent_key, pg_api.a.agent_key_id
    for _ in range(3):
        assert call(pg_api, "GET", "/v1/operations", key).status_code == 200
    first = _last_used(pg_api, key_id)
    assert first is not None
    for _ in range(3):
        assert call(pg_api, "GET", "/v1/operations", key).status_code == 200
    assert _last_used(pg_api, key_id) == first  # within the minute: not written again

    stale = datetime.now(UTC) - timedelta(minutes=2)
    with Session(pg_api.engine) as session, session.begin():
        session.execute(update(ApiKey).where(ApiKey.id == key_id).values(last_used_at=stale))
    assert call(pg_api, "GET", "/v1/operations", key).status_code == 200
    later = _last_used(pg_api, key_id)
    assert later is not None
    assert later > stale + timedelta(minutes=1)


def test_a_connection_is_set_listed_and_never_echoes_its_secrets(api: Api) -> None:
    admin = api.a.admin_key
    body = {"webhook_secrets": [SECRET], "api_key": READ_KEY, "base_url": "https://api.example"}
    saved = call(api, "PUT", "/v1/connections/stripe", admin, body)
    assert saved.status_code == 200, saved.text
    out = saved.json()
    assert out["signature_scheme"] == "stripe"
    assert out["api_key_set"] is True
    assert out["webhook_secrets"] == [{"position": 0, "until": None}]
    assert out["webhook_url_path"] == f"/v1/events/stripe/{api.a.workspace_id}"
    listed = call(api, "GET", "/v1/connections", admin)
    assert [c["provider"] for c in listed.json()["data"]] == ["stripe"]
    for text in (saved.text, listed.text):
        assert SECRET not in text
        assert READ_KEY not in text
    with Session(api.engine) as session:
        row = session.execute(select(Connection)).scalar_one()
        assert SECRET.encode() not in bytes(row.webhook_secrets_enc)
        assert row.api_key_enc is not None
        assert READ_KEY.encode() not in bytes(row.api_key_enc)
    assert call(api, "GET", "/v1/connections", api.b.admin_key).json()["data"] == []


@pytest.mark.parametrize(
    ("provider", "body", "says"),
    [
        ("http", {"webhook_secrets": [SECRET]}, "needs a base URL"),
        (
            "stripe",
            {"webhook_secrets": [SECRET], "base_url": "http://169.254.169.254/latest"},
            "is refused",
        ),
        ("stripe", {"webhook_secrets": [SECRET], "auth_header": "Host"}, "cannot carry"),
        ("stripe", {"webhook_secrets": []}, "webhook_secrets"),
        ("stripe", {"webhook_secrets": ["a\x00b"]}, "NUL"),
    ],
)
def test_bad_connection_settings_are_a_problem_naming_why(
    pg_api: Api, provider: str, body: dict[str, Any], says: str
) -> None:
    refused = call(pg_api, "PUT", f"/v1/connections/{provider}", pg_api.a.admin_key, body)
    assert refused.status_code == 422, refused.text
    assert refused.headers["content-type"] == "application/problem+json"
    assert says in refused.text


def test_a_rotation_keeps_the_old_secret_until_the_overlap_ends(pg_api: Api) -> None:
    admin = pg_api.a.admin_key
    path = "/v1/connections/stripe/webhook-secrets"
    missing = call(pg_api, "POST", path, admin, {"secret": "whsec_new"})
    assert missing.status_code == 404
    call(pg_api, "PUT", "/v1/connections/stripe", admin, {"webhook_secrets": [SECRET]})
    before = datetime.now(UTC)
    rotated = call(pg_api, "POST", path, admin, {"secret": "whsec_new"})
    assert rotated.status_code == 200, rotated.text
    first, old = rotated.json()["webhook_secrets"]
    assert first == {"position": 0, "until": None}
    until = datetime.fromisoformat(old["until"])
    assert before + timedelta(hours=24) <= until <= datetime.now(UTC) + timedelta(hours=24)
    assert "whsec_new" not in rotated.text
    assert SECRET not in rotated.text

    far = call(pg_api, "POST", path, admin, {"secret": "x", "overlap_until": "2099-01-01T00:00Z"})
    assert far.status_code == 422
    assert "overlap_until is at most 30 days" in far.text
    naive = call(pg_api, "POST", path, admin, {"secret": "x", "overlap_until": "2026-12-02T09:00"})
    assert naive.status_code == 422
    # A time already past ends every secret before the new one at once (the one added above
    # with its 24-hour overlap, and the one that had none).
    past = call(pg_api, "POST", path, admin, {"secret": "y", "overlap_until": "2020-01-01T00:00Z"})
    assert past.status_code == 200, past.text
    newest, *ended = past.json()["webhook_secrets"]
    assert newest["until"] is None
    assert len(ended) == 2
    assert all(datetime.fromisoformat(s["until"]) <= datetime.now(UTC) for s in ended)
    # The next rotation drops them: an ended secret never verifies again.
    again = call(pg_api, "POST", path, admin, {"secret": "z"})
    assert len(again.json()["webhook_secrets"]) == 2


def test_the_check_reads_the_providers_endpoints_with_the_stored_credential(
    pg_api: Api, sandbox: RunningSandbox
) -> None:
    admin, ws = pg_api.a.admin_key, pg_api.a.workspace_id
    path = "/v1/connections/stripe/check"
    assert call(pg_api, "POST", path, admin).status_code == 404
    body = {"webhook_secrets": [SECRET], "api_key": SANDBOX_KEY, "base_url": sandbox.base_url}
    assert call(pg_api, "PUT", "/v1/connections/stripe", admin, body).status_code == 200
    nothing = call(pg_api, "POST", path, admin)
    assert nothing.status_code == 200, nothing.text
    assert nothing.json()["problems"] == [f"no stripe endpoint delivers to /v1/events/stripe/{ws}"]

    created = httpx.post(
        f"{sandbox.base_url}/v1/webhook_endpoints",
        headers=bearer(SANDBOX_KEY),
        data={
            "url": f"https://provely.example/v1/events/stripe/{ws}",
            "enabled_events[]": "*",
            "api_version": "2025-03-31.basil",
        },
    )
    assert created.status_code == 200, created.text
    found = call(pg_api, "POST", path, admin).json()
    assert [e["id"] for e in found["endpoints"]] == [created.json()["id"]]
    assert "sends api_version 2025-03-31.basil" in found["problems"][0]
    assert SANDBOX_KEY not in str(found)

    body["api_key"] = "rk_live_not_a_test_key"  # the sandbox takes any sk_test_ key
    assert call(pg_api, "PUT", "/v1/connections/stripe", admin, body).status_code == 200
    unreadable = call(pg_api, "POST", path, admin)
    assert unreadable.status_code == 502
    assert unreadable.json()["type"].endswith("/provider-unreadable")


def _key_id(api: Api, plain: str) -> str:
    with Session(api.engine) as session:
        return str(
            session.execute(
                select(ApiKey.id).where(ApiKey.key_hash == hash_api_key(plain))
            ).scalar_one()
        )


def _last_used(api: Api, key_id: str) -> datetime | None:
    with Session(api.engine) as session:
        row = session.get(ApiKey, key_id)
        assert row is not None
        return row.last_used_at


def test_two_revocations_racing_cannot_leave_a_workspace_without_an_admin_key(
    pg_api: Api,
) -> None:
    """The workspace row is locked before the admin keys are counted: while one revocation is
    uncommitted, the other waits for it and then counts it (without the lock each would see
    the other's key still active and both would pass)."""
    admin = pg_api.a.admin_key
    other = call(pg_api, "POST", "/v1/api-keys", admin, {"scope": "admin"}).json()["id"]
    first_id = _key_id(pg_api, admin)
    outcome: list[str] = []

    def second() -> None:
        with Session(pg_api.engine) as session, session.begin():
            try:
                revoke_api_key(session, other, now=datetime.now(UTC))
                outcome.append("revoked")
            except LastAdminKey:
                outcome.append("kept")

    with Session(pg_api.engine) as session, session.begin():
        revoke_api_key(session, first_id, now=datetime.now(UTC))
        racing = threading.Thread(target=second)
        racing.start()
        racing.join(timeout=1.0)
        assert racing.is_alive(), "the second revocation did not wait for the first"
    racing.join(timeout=30)
    assert outcome == ["kept"]
    with Session(pg_api.engine) as session:
        active = session.execute(
            select(ApiKey.id).where(
                ApiKey.workspace_id == pg_api.a.workspace_id,
                ApiKey.revoked_at.is_(None),
                ApiKey.scopes.like("%admin%"),
            )
        ).scalars()
        assert list(active) == [other]
