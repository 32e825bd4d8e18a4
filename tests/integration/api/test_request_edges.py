"""API edges (#33): an unknown query parameter was ignored (``?verdict=PENDING`` listed VERIFIED
operations), ``DELETE /v1/operations`` was a 405 advertising only POST, a form body got 422
where 415 is meant, and ``GET /`` was a bare 404."""

from __future__ import annotations

import pytest

from .conftest import Api

pytestmark = pytest.mark.integration

CREATE = {
    "contract": "stripe.refund.succeeded",
    "input": {"charge": "ch_1", "amount": 100, "currency": "usd"},
}


@pytest.mark.parametrize(
    ("path", "unknown"),
    [
        ("/v1/operations?verdict=PENDING", ["verdict"]),
        ("/v1/operations?state=PENDING&verdict=PENDING&x=1", ["verdict", "x"]),
        ("/v1/contracts?page=2", ["page"]),
        ("/v1/deliveries?status=refused", ["status"]),
        ("/healthz?verbose=1", ["verbose"]),
    ],
)
def test_an_unknown_query_parameter_is_refused_by_name(
    pg_api: Api, path: str, unknown: list[str]
) -> None:
    answer = pg_api.client.get(path, headers=pg_api.a.headers())
    assert answer.status_code == 422, answer.text
    problem = answer.json()
    assert answer.headers["content-type"].startswith("application/problem+json")
    assert [e["field"] for e in problem["errors"]] == [f"query.{n}" for n in unknown]
    for name in unknown:
        assert name in problem["detail"]


def test_declared_query_parameters_still_work(pg_api: Api) -> None:
    answer = pg_api.client.get("/v1/operations?state=PENDING&limit=5", headers=pg_api.a.headers())
    assert answer.status_code == 200, answer.text


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("DELETE", "/v1/operations", {"GET", "HEAD", "POST"}),
        ("PUT", "/v1/operations/op_x", {"GET", "HEAD"}),
        ("DELETE", "/v1/contracts", {"GET", "HEAD", "POST"}),
    ],
)
def test_a_405_names_every_method_of_the_path(
    pg_api: Api, method: str, path: str, allow: set[str]
) -> None:
    answer = pg_api.client.request(method, path, headers=pg_api.a.headers())
    assert answer.status_code == 405
    assert {m.strip() for m in answer.headers["allow"].split(",")} == allow
    assert answer.headers["content-type"].startswith("application/problem+json")


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/x-www-form-urlencoded", "contract=stripe.refund.succeeded"),
        ("text/plain", '{"contract": "stripe.refund.succeeded"}'),
        ("multipart/form-data; boundary=x", "--x--"),
    ],
)
def test_a_body_in_another_media_type_is_a_415(pg_api: Api, content_type: str, body: str) -> None:
    headers = {**pg_api.a.headers(), "Content-Type": content_type}
    answer = pg_api.client.post("/v1/operations", content=body, headers=headers)
    assert answer.status_code == 415, answer.text
    assert answer.json()["type"].endswith("/unsupported-media-type")


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8"])
def test_a_json_body_is_accepted(pg_api: Api, content_type: str) -> None:
    headers = {**pg_api.a.headers(), "Content-Type": content_type}
    import json

    answer = pg_api.client.post("/v1/operations", content=json.dumps(CREATE), headers=headers)
    assert answer.status_code == 201, answer.text


def test_the_root_points_to_the_docs_and_the_pages(pg_api: Api) -> None:
    answer = pg_api.client.get("/")
    assert answer.status_code == 200
    links = answer.json()
    for name in ("docs", "openapi", "contracts"):
        assert pg_api.client.get(links[name], headers=pg_api.a.headers()).status_code == 200
    for name in ("pages", "receipt_check"):  # public: no API key
        page = pg_api.client.get(links[name])
        assert page.status_code == 200
        assert page.headers["content-type"].startswith("text/html")
