"""Hostile request bodies on every agent-API path that takes JSON: whatever cannot be stored is
refused with 422 problem+json naming the place (never a 500), the connection stays usable, and
operations' ``input``/``metadata`` are bounded at creation and left out of list pages."""

from __future__ import annotations

import http.client
import json
from typing import Any

import pytest

from shared.core.storable import MAX_JSON_DEPTH
from tests.integration.api.conftest import Api
from tests.integration.api.live import LiveServer

pytestmark = pytest.mark.integration

REFUND = "stripe.refund.succeeded"
INPUT = {"charge": "ch_123", "amount": 500, "currency": "usd"}

# Raw JSON fragments Python's json module parses into values no column can hold.
NON_FINITE = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999"]
BAD_STRINGS = ['"a\\u0000b"', '"\\ud800"', '"x\\udfffy"']
BAD_KEYS = ['{"a\\u0000": 1}', '{"\\ud800": 1}']


def nested(depth: int) -> str:
    return "[" * (depth - 1) + "{}" + "]" * (depth - 1)


HOSTILE = [
    *((v, "non-finite") for v in NON_FINITE),
    *((v, "string") for v in BAD_STRINGS),
    *((v, "key") for v in BAD_KEYS),
    *((nested(d), f"depth {d}") for d in (MAX_JSON_DEPTH + 1, 300, 500, 999)),
]


def post_raw(api: Api, path: str, raw: str) -> Any:
    return api.client.post(
        path,
        content=raw.encode("utf-8", "surrogatepass"),
        headers={**api.a.headers(), "Content-Type": "application/json"},
    )


def assert_refused(response: Any, field: str) -> None:
    assert response.status_code == 422, response.text
    assert response.headers["content-type"].startswith("application/problem+json")
    problem = response.json()
    assert problem["type"].endswith("/unstorable-value"), problem
    fields = [e["field"] for e in problem["errors"]]
    assert fields, problem
    assert fields[0].startswith(field), fields


@pytest.mark.parametrize(("fragment", "kind"), HOSTILE, ids=[k for _, k in HOSTILE])
def test_create_refuses_what_it_cannot_store_in_input_and_metadata(
    api: Api, fragment: str, kind: str
) -> None:
    input_raw = json.dumps(INPUT)[:-1] + f', "extra": {{"deep": {fragment}}}}}'
    refused = post_raw(api, "/v1/operations", f'{{"contract": "{REFUND}", "input": {input_raw}}}')
    assert_refused(refused, "input.extra.deep")
    meta = (
        f'{{"contract": "{REFUND}", "input": {json.dumps(INPUT)}, '
        f'"metadata": {{"m": [{fragment}]}}}}'
    )
    assert_refused(post_raw(api, "/v1/operations", meta), "metadata.m[0]")


@pytest.mark.parametrize(("fragment", "kind"), HOSTILE, ids=[k for _, k in HOSTILE])
def test_action_report_refuses_what_it_cannot_store_in_result_and_error(
    api: Api, fragment: str, kind: str
) -> None:
    created = api.client.post(
        "/v1/operations", json={"contract": REFUND, "input": INPUT}, headers=api.a.headers()
    )
    assert created.status_code == 201, created.text
    path = f"/v1/operations/{created.json()['id']}/action"
    result = (
        f'{{"phase": "result", "http_status": 200, "result": {{"id": "re_1", "x": {fragment}}}}}'
    )
    assert_refused(post_raw(api, path, result), "result.x")
    error = f'{{"phase": "error", "error": {{"e": [1, {fragment}]}}}}'
    assert_refused(post_raw(api, path, error), "error.e[1]")
    review = '{"verdict": "FAILED", "note": "a\\u0000"}'
    refused = api.client.post(
        f"/v1/operations/{created.json()['id']}/review",
        content=review,
        headers={**api.a.headers(admin=True), "Content-Type": "application/json"},
    )
    assert_refused(refused, "note")
    # Nothing was written: the operation is as created.
    after = api.client.get(f"/v1/operations/{created.json()['id']}", headers=api.a.headers())
    assert after.json()["action"]["phase"] is None


@pytest.mark.parametrize("depth", [1000, 5000, 50_000])
def test_nesting_past_the_parser_is_refused_naming_the_place(api: Api, depth: int) -> None:
    """Deeper than Python's parser can go: found by scanning the text, still a 422."""
    raw = f'{{"contract": "x", "input": {{"a": [1, {nested(depth)}]}}}}'
    assert_refused(post_raw(api, "/v1/operations", raw), "input.a[1]")


def test_a_refusal_keeps_the_keep_alive_connection(api: Api) -> None:
    """Each hostile body gets its 422 on one connection, which then serves a normal request."""
    with LiveServer(api.app) as server:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        conn.connect()
        sock = conn.sock
        headers = {**api.a.headers(), "Content-Type": "application/json"}
        for fragment, _ in HOSTILE:
            body = f'{{"contract": "{REFUND}", "input": {{"x": {fragment}}}}}'
            conn.request("POST", "/v1/operations", body.encode("utf-8", "surrogatepass"), headers)
            response = conn.getresponse()
            response.read()
            assert response.status == 422
            assert response.getheader("connection") != "close"
        conn.request("GET", "/v1/operations?limit=1", headers=headers)
        last = conn.getresponse()
        last.read()
        assert last.status == 200
        assert conn.sock is sock  # the same connection all along
        conn.close()


def test_input_and_metadata_are_bounded_at_creation(api: Api) -> None:
    limit = api.settings.operation_field_max_bytes
    big = {"blob": "x" * limit}
    refused = api.client.post(
        "/v1/operations",
        json={"contract": REFUND, "input": {**INPUT, **big}},
        headers=api.a.headers(),
    )
    assert refused.status_code == 422, refused.text
    assert [e["field"] for e in refused.json()["errors"]] == ["input"]
    assert "PROVELY_OPERATION_FIELD_MAX_BYTES" in refused.json()["detail"]
    refused = api.client.post(
        "/v1/operations",
        json={"contract": REFUND, "input": INPUT, "metadata": big},
        headers=api.a.headers(),
    )
    assert [e["field"] for e in refused.json()["errors"]] == ["metadata"]
    fits = {"blob": "x" * (limit - 100)}
    accepted = api.client.post(
        "/v1/operations",
        json={"contract": REFUND, "input": INPUT, "metadata": fits},
        headers=api.a.headers(),
    )
    assert accepted.status_code == 201, accepted.text


def test_list_pages_leave_input_and_metadata_out(api: Api) -> None:
    """The single-operation read keeps them; a page of 200 carries neither."""
    meta = {"note": "y" * 1000}
    created = api.client.post(
        "/v1/operations",
        json={"contract": REFUND, "input": INPUT, "metadata": meta},
        headers=api.a.headers(),
    ).json()
    page = api.client.get("/v1/operations?limit=200", headers=api.a.headers()).json()
    item = next(i for i in page["data"] if i["id"] == created["id"])
    assert "input" not in item
    assert "metadata" not in item
    assert item["verdict"] == created["verdict"]
    one = api.client.get(f"/v1/operations/{created['id']}", headers=api.a.headers()).json()
    assert one["input"] == INPUT
    assert one["metadata"] == meta
