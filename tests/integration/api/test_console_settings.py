"""The console's settings screens through HTTP on the real app and database (#36): API keys,
provider connections and workspace contracts — each form does what its API endpoint does, bad
input is a sentence on the page (never a 500), a form without the session's token changes
nothing, and nothing of another workspace is reachable."""

from __future__ import annotations

import re
import time
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from services.sandbox.runner import RunningSandbox, run_sandbox
from shared.db.models import ApiKey, Connection, CustomContract
from shared.db.session import session_scope
from shared.trust.registry import SHIPPED_CONTRACTS_DIR
from shared.trust.signatures import STRIPE
from tests.integration.api.conftest import Api
from tests.integration.api.test_console import csrf_of, sign_in, signed_in_client

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from fastapi.testclient import TestClient

pytestmark = pytest.mark.integration

SECRET = "whsec_console_" + "a1" * 16
NEW_SECRET = "whsec_console_new_" + "b2" * 16
SANDBOX_KEY = "sk_test_console_settings"
EXAMPLE = SHIPPED_CONTRACTS_DIR / "examples" / "app.entitlement.revoked.yaml"
PLAIN_KEY = re.compile(r'<code id="new-key">([^<]+)</code>')


def custom_text(version: str = "1.0.0") -> str:
    text = EXAMPLE.read_text("utf-8")
    text = text.replace("id: app.entitlement.revoked", "id: acme.entitlement.revoked", 1)
    text = text.replace("version: 1.0.0", f"version: {version}", 1)
    return text.replace("certification: example", "certification: custom", 1)


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def post(client: Any, path: str, data: dict[str, str]) -> Any:
    """A settings form sent with the session's token."""
    token = csrf_of(client.get("/console/settings/keys").text)
    return client.post(path, data={"csrf": token, **data}, follow_redirects=False)


def count(api: Api, model: Any) -> int:
    with session_scope(api.engine) as session:
        return int(session.execute(select(func.count()).select_from(model)).scalar_one())


@pytest.fixture(scope="module")
def sandbox() -> Iterator[RunningSandbox]:
    with run_sandbox(api_key=SANDBOX_KEY) as running:
        yield running


def test_settings_need_an_admin_session(api: Api) -> None:
    """Only an admin key opens a session; without one every settings page is the sign-in."""
    client = TestClient(api.app)
    assert sign_in(client, api.a.agent_key).status_code == 401
    for path in ("keys", "connections", "contracts", "contracts/x"):
        answer = client.get(f"/console/settings/{path}", follow_redirects=False)
        assert answer.status_code == 303
        assert answer.headers["location"] == "/console/sign-in"


def test_a_key_is_created_with_its_scope_shown_once_and_refused_once_revoked(api: Api) -> None:
    client = signed_in_client(api)
    page = client.get("/console/settings/keys")
    assert page.status_code == 200
    assert api.a.agent_key_id in page.text
    created = post(client, "/console/settings/keys", {"scope": "admin", "name": "ops laptop"})
    assert created.status_code == 201, created.text
    found = PLAIN_KEY.search(created.text)
    assert found is not None
    plain = found.group(1)
    assert api.client.get("/v1/api-keys", headers=bearer(plain)).status_code == 200  # admin
    again = client.get("/console/settings/keys").text
    assert plain not in again
    assert "ops laptop" in again
    with session_scope(api.engine) as session:
        row = session.execute(select(ApiKey).where(ApiKey.name == "ops laptop")).scalar_one()
        key_id = row.id
    revoked = post(client, f"/console/settings/keys/{key_id}/revoke", {})
    assert revoked.status_code == 303
    assert api.client.get("/v1/api-keys", headers=bearer(plain)).status_code == 401
    listed = client.get("/console/settings/keys").text
    row_html = listed[listed.index(f'data-key-id="{key_id}"') :].split("</tr>", 1)[0]
    assert 'data-field="revoked"></td>' not in row_html
    assert "Revoke</button>" not in row_html


@pytest.mark.parametrize(
    ("data", "says"),
    [({"scope": "root"}, "scope"), ({"scope": "agent", "name": "x" * 201}, "name")],
)
def test_bad_key_input_is_a_sentence_on_the_page(api: Api, data: dict[str, str], says: str) -> None:
    client = signed_in_client(api)
    before = count(api, ApiKey)
    answer = post(client, "/console/settings/keys", data)
    assert answer.status_code == 422
    assert re.search(rf'id="error">[^<]*{says}', answer.text), answer.text
    assert count(api, ApiKey) == before


def test_the_last_admin_key_is_kept_with_a_sentence(api: Api) -> None:
    client = signed_in_client(api)
    with session_scope(api.engine) as session:
        admin_id = session.execute(
            select(ApiKey.id).where(
                ApiKey.workspace_id == api.a.workspace_id, ApiKey.scopes.contains("admin")
            )
        ).scalar_one()
    kept = post(client, f"/console/settings/keys/{admin_id}/revoke", {})
    assert kept.status_code == 409
    assert 'id="error"' in kept.text
    assert api.client.get("/v1/api-keys", headers=bearer(api.a.admin_key)).status_code == 200


SETTINGS_FORMS: list[tuple[str, dict[str, str]]] = [
    ("/console/settings/keys", {"scope": "admin"}),
    ("/console/settings/keys/{agent_key_id}/revoke", {}),
    ("/console/settings/connections", {"provider": "stripe", "webhook_secrets": SECRET}),
    ("/console/settings/connections/stripe/webhook-secrets", {"secret": NEW_SECRET}),
    ("/console/settings/connections/stripe/check", {}),
    ("/console/settings/contracts", {"format": "yaml", "document": custom_text()}),
]


@pytest.mark.parametrize(("path", "data"), SETTINGS_FORMS)
def test_every_settings_form_is_refused_without_the_session_token(
    api: Api, path: str, data: dict[str, str]
) -> None:
    client = signed_in_client(api)
    target = path.format(agent_key_id=api.a.agent_key_id)
    before = (count(api, ApiKey), count(api, Connection), count(api, CustomContract))
    for token in ({}, {"csrf": "x" * 43}):
        refused = client.post(target, data={**data, **token}, follow_redirects=False)
        assert refused.status_code == 403, refused.text
        assert "token" in refused.text
    assert (count(api, ApiKey), count(api, Connection), count(api, CustomContract)) == before
    assert api.client.get("/v1/operations", headers=api.a.headers()).status_code == 200


def test_another_workspace_is_out_of_reach_in_the_settings(api: Api) -> None:
    b_connection = {"webhook_secrets": [SECRET]}
    put = api.client.put(
        "/v1/connections/stripe", json=b_connection, headers=bearer(api.b.admin_key)
    )
    assert put.status_code == 200
    uploaded = api.client.post(
        "/v1/contracts",
        content=custom_text(),
        headers={**bearer(api.b.admin_key), "Content-Type": "application/yaml"},
    )
    assert uploaded.status_code == 201
    client = signed_in_client(api)
    revoke = post(client, f"/console/settings/keys/{api.b.agent_key_id}/revoke", {})
    assert revoke.status_code == 404
    assert "No API key" in revoke.text
    assert api.client.get("/v1/contracts", headers=api.b.headers()).status_code == 200
    for action in ("webhook-secrets", "check"):
        answer = post(
            client, f"/console/settings/connections/stripe/{action}", {"secret": NEW_SECRET}
        )
        assert answer.status_code == 404, answer.text
        assert "No stripe connection" in answer.text
    with session_scope(api.engine) as session:
        (row,) = session.execute(select(Connection)).scalars().all()
        assert row.workspace_id == api.b.workspace_id
        assert row.updated_at == row.created_at  # not rotated
    assert api.b.agent_key_id not in client.get("/console/settings/keys").text
    assert "acme.entitlement.revoked" not in client.get("/console/settings/contracts").text
    assert f"/v1/events/stripe/{api.b.workspace_id}" not in (
        client.get("/console/settings/connections").text
    )
    hidden = client.get("/console/settings/contracts/acme.entitlement.revoked")
    assert hidden.status_code == 404


def test_a_connection_is_set_and_rotated_without_echoing_a_secret(api: Api) -> None:
    client = signed_in_client(api)
    saved = post(
        client,
        "/console/settings/connections",
        {"provider": "stripe", "webhook_secrets": f"{SECRET}\n", "api_key": "rk_test_x1"},
    )
    assert saved.status_code == 303, saved.text
    page = client.get("/console/settings/connections").text
    assert f"/v1/events/stripe/{api.a.workspace_id}" in page
    rotated = post(
        client,
        "/console/settings/connections/stripe/webhook-secrets",
        {"secret": NEW_SECRET, "overlap_until": ""},
    )
    assert rotated.status_code == 303, rotated.text
    page = client.get("/console/settings/connections").text
    assert "#0 current; #1 verifies until" in page
    for secret in (SECRET, NEW_SECRET, "rk_test_x1"):
        assert secret not in page
    listed = api.client.get("/v1/connections", headers=bearer(api.a.admin_key)).json()
    assert len(listed["data"][0]["webhook_secrets"]) == 2


@pytest.mark.parametrize(
    ("path", "data", "says"),
    [
        ("/console/settings/connections", {"provider": "Stripe!"}, "is not a provider name"),
        (
            "/console/settings/connections",
            {"provider": "http", "webhook_secrets": SECRET},
            "needs a base URL",
        ),
        ("/console/settings/connections", {"provider": "stripe"}, "webhook_secrets"),
        (
            "/console/settings/connections",
            {"provider": "stripe", "webhook_secrets": SECRET, "base_url": "http://169.254.169.254"},
            "is refused",
        ),
        (
            "/console/settings/connections",
            {"provider": "stripe", "webhook_secrets": SECRET, "signature_tolerance_seconds": "x"},
            "signature_tolerance_seconds",
        ),
        (
            "/console/settings/connections/stripe/webhook-secrets",
            {"secret": NEW_SECRET, "overlap_until": "tomorrow"},
            "is not a time",
        ),
        (
            "/console/settings/connections/stripe/webhook-secrets",
            {"secret": NEW_SECRET, "overlap_until": "2099-01-01T00:00"},
            "at most 30 days",
        ),
        ("/console/settings/connections/stripe/webhook-secrets", {"secret": ""}, "secret"),
    ],
)
def test_bad_connection_input_is_a_sentence_on_the_page(
    api: Api, path: str, data: dict[str, str], says: str
) -> None:
    client = signed_in_client(api)
    assert (
        post(
            client,
            "/console/settings/connections",
            {"provider": "stripe", "webhook_secrets": SECRET},
        ).status_code
        == 303
    )
    answer = post(client, path, data)
    assert answer.status_code == 422, answer.text
    assert says in answer.text
    assert 'id="error"' in answer.text
    listed = api.client.get("/v1/connections", headers=bearer(api.a.admin_key)).json()["data"]
    assert [(c["provider"], len(c["webhook_secrets"])) for c in listed] == [("stripe", 1)]


def test_the_check_reads_the_provider_and_refused_deliveries_say_why(
    pg_api: Api, sandbox: RunningSandbox
) -> None:
    api, ws = pg_api, pg_api.a.workspace_id
    client = signed_in_client(api)
    data = {
        "provider": "stripe",
        "webhook_secrets": SECRET,
        "api_key": SANDBOX_KEY,
        "base_url": sandbox.base_url,
    }
    assert post(client, "/console/settings/connections", data).status_code == 303
    checked = post(client, "/console/settings/connections/stripe/check", {})
    assert checked.status_code == 200, checked.text
    assert f"no stripe endpoint delivers to /v1/events/stripe/{ws}" in checked.text
    assert SANDBOX_KEY not in checked.text

    body = b'{"id": "evt_console_1", "object": "event", "type": "refund.updated"}'
    headers = STRIPE.sign(body=body, secrets=["whsec_nobody"], timestamp=int(time.time()))
    refused = api.client.post(
        f"/v1/events/stripe/{ws}",
        content=body,
        headers={**headers, "Content-Type": "application/json"},
    )
    assert refused.status_code == 400
    page = client.get("/console/settings/connections").text
    assert '<td data-field="reason">no_matching_signature</td>' in page

    data["api_key"] = "rk_live_not_a_test_key"
    assert post(client, "/console/settings/connections", data).status_code == 303
    unreadable = post(client, "/console/settings/connections/stripe/check", {})
    assert unreadable.status_code == 502
    assert 'id="check-error"' in unreadable.text


def _row_of_line(page: str, line: int) -> str:
    start = page.index(f'<tr data-line="{line}"')
    return page[start : page.index("</tr>", start)]


def test_a_contract_with_a_lint_error_shows_it_beside_its_line(api: Api) -> None:
    client = signed_in_client(api)
    text = custom_text().replace("level: E3", "level: E9", 1)
    line = next(n for n, t in enumerate(text.splitlines(), 1) if "level: E9" in t)
    answer = post(client, "/console/settings/contracts", {"format": "yaml", "document": text})
    assert answer.status_code == 422, answer.text
    row = _row_of_line(answer.text, line)
    assert "level: E9" in row
    assert 'class="lint-error"' in row
    assert count(api, CustomContract) == 0
    # The document comes back in the form, to be fixed there.
    assert "level: E9" in answer.text[answer.text.index('id="contract-document"') :]


@pytest.mark.parametrize(
    ("document", "fmt", "status", "says"),
    [
        ("id: [unclosed", "yaml", 400, "not valid YAML"),
        ('{"id": ', "json", 400, "not valid JSON"),
        ("", "yaml", 400, "the body is empty"),
        ("a: &x [1]\nb: *x\n", "yaml", 400, "anchors and aliases"),
        ("x: " + "y" * 70_000, "yaml", 413, "at most"),
    ],
    ids=["unclosed-yaml", "unclosed-json", "empty", "aliases", "too-large"],
)
def test_an_unreadable_contract_is_a_sentence_on_the_page(
    api: Api, document: str, fmt: str, status: int, says: str
) -> None:
    client = signed_in_client(api)
    answer = post(client, "/console/settings/contracts", {"format": fmt, "document": document})
    assert answer.status_code == status, answer.text
    assert says in answer.text
    assert count(api, CustomContract) == 0


def test_a_clean_contract_is_stored_listed_and_has_its_page(api: Api) -> None:
    client = signed_in_client(api)
    stored = post(
        client, "/console/settings/contracts", {"format": "yaml", "document": custom_text()}
    )
    assert stored.status_code == 303, stored.text
    where = stored.headers["location"]
    assert where == "/console/settings/contracts/acme.entitlement.revoked?version=1.0.0"
    listed = client.get("/console/settings/contracts").text
    assert f'href="{where}"' in listed
    page = client.get(where)
    assert page.status_code == 200
    api_hash = api.client.get(
        "/v1/contracts/acme.entitlement.revoked", headers=api.a.headers()
    ).json()["hash"]
    assert api_hash in page.text
    assert "| Certification | Custom |" in page.text
    changed = custom_text().replace("initial_delay_ms: 2000", "initial_delay_ms: 3000")
    conflict = post(client, "/console/settings/contracts", {"format": "yaml", "document": changed})
    assert conflict.status_code == 409
    assert "already stored with other content" in conflict.text
