"""A workspace contract reads only the provider paths its skills declare, and a caller sees
only the fields its conditions name (API on PostgreSQL)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from sqlalchemy import func, select

from services.ingress.api.views import operation_view
from shared.core.types import ConditionResult, Decision, Verdict
from shared.db.models import CustomContract, Operation
from shared.db.session import session_scope
from shared.lifecycle.operations import decision_document
from tests.integration.registry.conftest import Api
from tests.integration.registry.test_custom_contracts import custom_text

pytestmark = pytest.mark.integration


def _with_channel(path: str, provider: str | None = "stripe") -> str:
    doc = yaml.safe_load(custom_text("acme.charges.peek"))
    channel: dict[str, Any] = {
        "name": "peek",
        "level": "E2",
        "independence": "provider readback",
        "verifier": "http",
        "description": "Reads whatever the path names with the stored credential.",
        "http": {"method": "GET", "path": path},
    }
    if provider is not None:
        channel["provider"] = provider
    doc["channels"].append(channel)
    return json.dumps(doc, default=str)


def _upload(api: Api, body: str) -> Any:
    return api.client.post(
        "/v1/contracts",
        content=body,
        headers={**api.a.admin(), "Content-Type": "application/json"},
    )


@pytest.mark.parametrize(
    ("path", "provider", "words"),
    [
        ("/v1/charges", "stripe", "not among the paths the stripe skill declares"),
        ("/v1/customers/{$input.charge}", "stripe", "/v1/refunds/{id}, /v1/refunds"),
        ("/v1/balance", "stripe", "readback.paths"),
        ("/admin/{$input.charge}", None, "not among the paths the http skill declares"),
        ("/ledger/{$input.charge}", "ledger", "no ledger skill declares readback paths"),
    ],
)
def test_a_contract_reading_outside_the_declared_paths_is_refused(
    pg_api: Api, path: str, provider: str | None, words: str
) -> None:
    response = _upload(pg_api, _with_channel(path, provider))
    assert response.status_code == 422, response.text
    problem = response.json()
    assert response.headers["content-type"].startswith("application/problem+json")
    fields = [(e["field"], e["message"]) for e in problem["errors"]]
    assert any(f.endswith(".http.path") and words in m for f, m in fields), fields
    with session_scope(pg_api.engine) as session:
        stored = session.execute(select(func.count()).select_from(CustomContract)).scalar_one()
    assert stored == 0


def test_a_contract_inside_the_declared_paths_is_stored(pg_api: Api) -> None:
    body = _with_channel("/v1/refunds?charge={$input.charge}&limit=100")
    response = _upload(pg_api, body)
    assert response.status_code == 201, response.text


def test_the_operation_shows_the_named_fields_never_a_body(pg_api: Api) -> None:
    created = pg_api.client.post(
        "/v1/operations",
        json={
            "contract": "app.entitlement.revoked",
            "input": {"charge": "ch_1", "amount_refunded": 5000, "expected_seats": 0},
        },
        headers=pg_api.a.agent(),
    )
    assert created.status_code == 201, created.text
    body = {"object": "list", "data": [{"id": "ch_secret", "amount": 99}] * 3}
    decision = Decision(
        verdict=Verdict.PENDING,
        reason="awaiting_evidence",
        class_=None,
        final=False,
        conditions=(
            ConditionResult("whole_body", "completion", True, body["data"], None),
            ConditionResult("one_field", "completion", True, 5000, 5000),
            ConditionResult("in_list", "completion", True, "succeeded", ["succeeded", "x"]),
            ConditionResult("vs_body", "completion", None, 1, body),
        ),
        evidence=(),
    )
    document = decision_document(decision)
    assert "ch_secret" not in json.dumps(document)
    op_id = created.json()["id"]
    shown = _view_with(pg_api, op_id, document)
    assert "ch_secret" not in json.dumps(shown)
    observed = {c["id"]: (c["observed"], c["expected"]) for c in shown["conditions"]}
    assert observed["whole_body"][0] == {"omitted": "array", "items": 3}
    assert observed["one_field"] == (5000, 5000)
    assert observed["in_list"] == ("succeeded", ["succeeded", "x"])
    assert observed["vs_body"][1] == {"omitted": "object", "keys": 2}
    # A decision stored before values were limited: the view limits it all the same.
    old = {**document, "conditions": [{"id": "old", "kind": "completion", "observed": body}]}
    shown = _view_with(pg_api, op_id, old)
    assert "ch_secret" not in json.dumps(shown)
    assert [c["observed"] for c in shown["conditions"]] == [{"omitted": "object", "keys": 2}]


def _view_with(api: Api, op_id: str, decision: dict[str, Any]) -> dict[str, Any]:
    with session_scope(api.engine) as session:
        op = session.get(Operation, op_id)
        assert op is not None
        op.decision = decision
        session.flush()
        return operation_view(session, op).model_dump(mode="json")


@pytest.mark.parametrize(
    ("path", "query", "name"),
    [
        ("/v1/refunds/{$input.charge}", {"expand[]": "charge.customer"}, "expand[]"),
        ("/v1/refunds/{$input.charge}?expand[]=charge.customer", None, "expand[]"),
        ("/v1/refunds", {"charge": "$input.charge", "expand[]": "data.charge"}, "expand[]"),
        ("/v1/charges/{$input.charge}", {"expand[]": "customer"}, "expand[]"),
    ],
)
def test_a_contract_with_a_query_its_skill_does_not_declare_is_refused(
    pg_api: Api, path: str, query: dict[str, Any] | None, name: str
) -> None:
    """A declared path with ``expand[]`` would read the Customer (email, name, phone) that no
    declared path names: 422, the parameter named, nothing stored."""
    doc = json.loads(_with_channel(path))
    if query is not None:
        doc["channels"][-1]["http"]["query"] = query
    response = _upload(pg_api, json.dumps(doc))
    assert response.status_code == 422, response.text
    fields = [(e["field"], e["message"]) for e in response.json()["errors"]]
    assert any(
        f.endswith(".http.query") and f"query parameter {name!r} is not declared" in m
        for f, m in fields
    ), fields
    with session_scope(pg_api.engine) as session:
        stored = session.execute(select(func.count()).select_from(CustomContract)).scalar_one()
    assert stored == 0
