"""Workspace contracts through the API on PostgreSQL: upload, isolation, lint parity, conflicts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select
from typer.testing import CliRunner

from services.cli.main import app as cli
from shared.db.models import CustomContract, Operation
from shared.db.session import session_scope
from shared.lifecycle.contracts import contract_for
from shared.trust.registry import SHIPPED_CONTRACTS_DIR
from tests.integration.registry.conftest import Api

pytestmark = pytest.mark.integration

EXAMPLE = SHIPPED_CONTRACTS_DIR / "examples" / "app.entitlement.revoked.yaml"
YAML = {"Content-Type": "application/yaml"}
runner = CliRunner()


def custom_text(contract_id: str = "acme.entitlement.revoked", version: str = "1.0.0") -> str:
    text = EXAMPLE.read_text("utf-8")
    text = text.replace("id: app.entitlement.revoked", f"id: {contract_id}", 1)
    text = text.replace("version: 1.0.0", f"version: {version}", 1)
    return text.replace("certification: example", "certification: custom", 1)


def as_json(text: str, **kwargs: Any) -> str:
    return json.dumps(yaml.safe_load(text), default=str, **kwargs)


def upload(api: Api, body: str | bytes, *, headers: dict[str, str] | None = None) -> Any:
    return api.client.post(
        "/v1/contracts", content=body, headers={**api.a.admin(), **(headers or YAML)}
    )


def inputs() -> dict[str, Any]:
    return {"charge": "ch_test123", "amount_refunded": 5000, "expected_seats": 0}


def test_upload_list_use_and_isolation(pg_api: Api) -> None:
    created = upload(pg_api, custom_text())
    assert created.status_code == 201, created.text
    body = created.json()
    assert body["id"] == "acme.entitlement.revoked"
    assert body["certification"] == "custom"
    assert body["custom"] is True
    assert created.headers["location"] == "/v1/contracts/acme.entitlement.revoked?version=1.0.0"

    # The same document again (even as JSON, differently laid out) is a harmless repeat.
    as_json_text = as_json(custom_text(), indent=1)
    again = upload(pg_api, as_json_text, headers={"Content-Type": "application/json"})
    assert again.status_code == 200, again.text
    assert again.json()["hash"] == body["hash"]

    # Workspace A lists shipped and own contracts; B sees only the shipped ones.
    listed_a = pg_api.client.get("/v1/contracts", headers=pg_api.a.agent()).json()["data"]
    listed_b = pg_api.client.get("/v1/contracts", headers=pg_api.b.agent()).json()["data"]
    ids_a = {(c["id"], c["certification"], c["custom"]) for c in listed_a}
    ids_b = {c["id"] for c in listed_b}
    assert ("acme.entitlement.revoked", "custom", True) in ids_a
    assert ("stripe.refund.succeeded", "community", False) in ids_a
    assert "acme.entitlement.revoked" not in ids_b
    assert "stripe.refund.succeeded" in ids_b

    detail = pg_api.client.get("/v1/contracts/acme.entitlement.revoked", headers=pg_api.a.agent())
    assert detail.status_code == 200
    assert detail.json()["hash"] == body["hash"]
    assert "| Certification | Custom |" in detail.json()["page"]
    hidden = pg_api.client.get("/v1/contracts/acme.entitlement.revoked", headers=pg_api.b.agent())
    assert hidden.status_code == 404
    assert hidden.headers["content-type"].startswith("application/problem+json")

    # B cannot bind an operation to it; A can, and the operation keeps the stored contract.
    request = {"contract": "acme.entitlement.revoked", "input": inputs()}
    refused = pg_api.client.post("/v1/operations", json=request, headers=pg_api.b.agent())
    assert refused.status_code in (404, 422), refused.text
    assert refused.json()["type"].endswith("unknown-contract")
    op = pg_api.client.post("/v1/operations", json=request, headers=pg_api.a.agent())
    assert op.status_code == 201, op.text
    with session_scope(pg_api.engine) as session:
        row = session.get(Operation, op.json()["id"])
        assert row is not None
        assert row.contract_hash == body["hash"]
        assert row.custom_contract_id is not None
        assert contract_for(session, row).id == "acme.entitlement.revoked"
    # B cannot read A's operation either.
    other = pg_api.client.get(f"/v1/operations/{op.json()['id']}", headers=pg_api.b.agent())
    assert other.status_code == 404


def test_other_workspaces_may_use_the_same_id_for_their_own_contract(pg_api: Api) -> None:
    assert upload(pg_api, custom_text()).status_code == 201
    changed = custom_text().replace("initial_delay_ms: 2000", "initial_delay_ms: 1000")
    mine = pg_api.client.post(
        "/v1/contracts", content=changed, headers={**pg_api.b.admin(), **YAML}
    )
    assert mine.status_code == 201, mine.text
    with session_scope(pg_api.engine) as session:
        rows = session.execute(select(CustomContract)).scalars().all()
        assert {(r.workspace_id, r.hash) for r in rows} == {
            (pg_api.a.workspace_id, upload(pg_api, custom_text()).json()["hash"]),
            (pg_api.b.workspace_id, mine.json()["hash"]),
        }


def test_same_id_and_version_with_other_content_is_a_conflict(pg_api: Api) -> None:
    first = upload(pg_api, custom_text())
    assert first.status_code == 201
    changed = custom_text().replace("initial_delay_ms: 2000", "initial_delay_ms: 3000")
    conflict = upload(pg_api, changed)
    assert conflict.status_code == 409, conflict.text
    problem = conflict.json()
    assert problem["type"].endswith("contract-conflict")
    assert "new version" in problem["detail"]
    assert problem["stored_hash"] == first.json()["hash"]
    # A new version of the changed content is fine, and the newest is what new operations get.
    newer = upload(pg_api, changed.replace("version: 1.0.0", "version: 1.1.0", 1))
    assert newer.status_code == 201
    op = pg_api.client.post(
        "/v1/operations",
        json={"contract": "acme.entitlement.revoked", "input": inputs()},
        headers=pg_api.a.agent(),
    )
    assert op.status_code == 201
    assert op.json()["contract"]["version"] == "1.1.0"


def test_a_shipped_contract_id_cannot_be_shadowed(pg_api: Api) -> None:
    text = custom_text("app.entitlement.revoked", "9.0.0")
    refused = upload(pg_api, text)
    assert refused.status_code == 409
    assert refused.json()["type"].endswith("contract-id-taken")
    with session_scope(pg_api.engine) as session:
        assert session.execute(select(CustomContract)).first() is None


def _cli_lines(path: Path) -> list[str]:
    result = runner.invoke(cli, ["contracts", "lint", str(path)])
    assert result.exit_code == 1, result.output
    prefix = f"{path}: "
    return [line[len(prefix) :] for line in result.output.splitlines() if line.startswith(prefix)]


BROKEN = {
    "semantic": lambda t: (
        t.replace("value: $input.expected_seats", "value: $input.seat_count", 1)
        .replace("op: gte\n    value: 1", "op: gte\n    value: many", 1)
        .replace("path: /entitlements/{$correlation.charge_id}", "path: entitlements/{$foo.x}", 1)
        .replace("- id: entitlement_over_revoked", "- id: all_conditions_hold", 1)
    ),
    "schema": lambda t: t.replace("level: E3", "level: E9", 1).replace(
        "intent: ", "intention: ", 1
    ),
    "timing": lambda t: t.replace("max_ms: 30000", "max_ms: 10", 1).replace(
        "verdict: UNVERIFIABLE", "verdict: FAILED", 1
    ),
    "channel provider": lambda t: t.replace("provider: stripe", "provider: Stripe!", 1),
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
@pytest.mark.parametrize("media", ["application/yaml", "application/json"])
def test_lint_errors_are_the_cli_messages(
    pg_api: Api, tmp_path: Path, kind: str, media: str
) -> None:
    text = BROKEN[kind](custom_text())
    path = tmp_path / "broken.yaml"
    path.write_text(text, "utf-8")
    expected = _cli_lines(path)
    assert expected, "the broken document should not lint"

    body = as_json(text) if media == "application/json" else text
    response = upload(pg_api, body, headers={"Content-Type": media})
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["type"].endswith("invalid-contract")
    errors = problem["errors"]
    assert {e["file"] for e in errors} == {"<request>"}
    assert [f"{e['contract']}: {e['field']}: {e['message']}" for e in errors] == expected
    with session_scope(pg_api.engine) as session:
        assert session.execute(select(CustomContract)).first() is None


@pytest.mark.parametrize(
    ("body", "content_type", "status", "kind"),
    [
        ("id: [unclosed", "application/yaml", 400, "malformed-contract"),
        ('{"id": ', "application/json", 400, "malformed-contract"),
        (b"\xff\xfe", "application/yaml", 400, "malformed-contract"),
        ("", "application/yaml", 400, "malformed-contract"),
        ("a: &x [1]\nb: *x\n", "application/yaml", 400, "malformed-contract"),
        ("id: x", "text/plain", 415, "unsupported-media-type"),
        ("- just\n- a list\n", "application/yaml", 422, "invalid-contract"),
    ],
)
def test_unreadable_bodies_are_clear_problems(
    pg_api: Api, body: str | bytes, content_type: str, status: int, kind: str
) -> None:
    response = upload(pg_api, body, headers={"Content-Type": content_type})
    assert response.status_code == status, response.text
    problem = response.json()
    assert problem["type"].endswith(kind)
    assert "Traceback" not in response.text


def test_uploading_needs_an_admin_key_and_a_key(pg_api: Api) -> None:
    as_agent = pg_api.client.post(
        "/v1/contracts", content=custom_text(), headers={**pg_api.a.agent(), **YAML}
    )
    assert as_agent.status_code == 403
    anonymous = pg_api.client.post("/v1/contracts", content=custom_text(), headers=YAML)
    assert anonymous.status_code == 401
    with session_scope(pg_api.engine) as session:
        assert session.execute(select(CustomContract)).first() is None


@pytest.mark.parametrize("kind", ["schema", "semantic"])
def test_lint_errors_name_the_line_of_their_field(pg_api: Api, kind: str) -> None:
    """#36: a form shows each finding beside its line; the line is the field's own (its last
    name is written there), or for a missing field the nearest field above it."""
    text = BROKEN[kind](custom_text())
    response = upload(pg_api, text, headers={"Content-Type": "application/yaml"})
    assert response.status_code == 422, response.text
    lines = text.splitlines()
    errors = response.json()["errors"]
    assert errors
    for error in errors:
        assert isinstance(error["line"], int), error
        names = [n for n in error["field"].replace("]", "").split(".") if n and "[" not in n]
        if error["message"] != "required field is missing" and names:
            assert names[-1] in lines[error["line"] - 1], (error, lines[error["line"] - 1])
