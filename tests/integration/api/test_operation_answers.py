"""The hot routes (create, report, read) serialize the operation resource themselves, in the
route's thread: the bytes are the ones FastAPI's own ``serialize_response`` gives for the
route's ``response_model``, the status and ``Location`` headers are kept, and the OpenAPI
document still names ``OperationOut`` (``test_openapi_docs``)."""

from __future__ import annotations

import asyncio

import pytest
from fastapi.routing import APIRoute, serialize_response

from services.ingress.api.operations import router
from services.ingress.api.schemas import OperationOut
from tests.integration.api.conftest import Api

pytestmark = pytest.mark.integration

CREATE = {
    "contract": "stripe.refund.succeeded",
    "input": {"charge": "ch_1", "amount": 500, "currency": "usd"},
}


def _framework_bytes(name: str, body: bytes) -> bytes:
    """What FastAPI answers for ``body`` when route ``name`` returns the model itself."""
    route = next(r for r in router.routes if isinstance(r, APIRoute) and r.name == name)
    assert route.response_model is OperationOut
    view = OperationOut.model_validate_json(body)
    dumped = asyncio.run(
        serialize_response(field=route.response_field, response_content=view, dump_json=True)
    )
    assert isinstance(dumped, bytes)
    return dumped


def test_create_report_read_answer_what_the_response_model_answers(api: Api) -> None:
    headers = api.a.headers() | {"Idempotency-Key": "answers-1"}
    created = api.client.post("/v1/operations", json=CREATE, headers=headers)
    assert created.status_code == 201, created.text
    op_id = created.json()["id"]
    assert created.headers["Location"] == f"/v1/operations/{op_id}"
    assert created.headers["content-type"] == "application/json"
    assert created.content == _framework_bytes("create", created.content)

    replayed = api.client.post("/v1/operations", json=CREATE, headers=headers)
    assert replayed.status_code == 200
    assert replayed.headers["Location"] == f"/v1/operations/{op_id}"
    assert replayed.json()["id"] == op_id

    result = {"id": f"re_{op_id[3:]}", "object": "refund", "status": "pending"}
    reported = api.client.post(
        f"/v1/operations/{op_id}/action",
        json={"phase": "result", "http_status": 200, "result": result},
        headers=api.a.headers(),
    )
    assert reported.status_code == 200, reported.text
    assert reported.json()["state"] == "OBSERVING"
    assert reported.content == _framework_bytes("report_action", reported.content)

    read = api.client.get(f"/v1/operations/{op_id}", headers=api.a.headers())
    assert read.status_code == 200
    assert read.headers["content-type"] == "application/json"
    assert read.content == _framework_bytes("get_operation", read.content)
