"""The http verifier's query string and paged lists, against httpx.MockTransport."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest

from services.observer.http_verifier import HttpTarget, read_http, read_http_list
from shared.core.contract import canonical_json
from shared.core.types import ObservationStatus
from shared.evidence.readings import Reading

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
TARGET = HttpTarget(
    base_url="https://api.example.test",
    headers={"Authorization": "Bearer sk_test_x"},
    timeout_s=2.0,
    max_bytes=4096,
)
QUERY = "charge=ch_1&created%5Bgte%5D=1796151600&limit=2"

Handler = Callable[[httpx.Request], httpx.Response]


def _refund(n: int) -> dict[str, Any]:
    return {"id": f"re_{n}", "object": "refund", "charge": "ch_1", "amount": 100 + n}


class Pages:
    """A list endpoint over ``items`` (newest first) with Stripe's ``limit``/``starting_after``."""

    def __init__(self, items: list[dict[str, Any]], limit: int = 2) -> None:
        self.items = items
        self.limit = limit
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        params = dict(parse_qsl(request.url.query.decode()))
        rows = self.items
        if "starting_after" in params:
            ids = [item["id"] for item in rows]
            rows = rows[ids.index(params["starting_after"]) + 1 :]
        page = rows[: self.limit]
        body = {"object": "list", "data": page, "has_more": len(rows) > self.limit, "url": "/x"}
        return httpx.Response(200, json=body, headers={"Date": "Tue, 01 Dec 2026 11:59:59 GMT"})

    def queries(self) -> list[list[tuple[str, str]]]:
        return [parse_qsl(r.url.query.decode()) for r in self.requests]


def _list(handler: Handler, *, max_pages: int = 10, **kwargs: Any) -> Reading:
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        return read_http_list(
            client,
            channel="charge_refunds",
            target=TARGET,
            path="/v1/refunds",
            query=QUERY,
            max_pages=max_pages,
            clock=lambda: NOW,
            **kwargs,
        )


def test_read_http_sends_the_query_string_as_given() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"object": "list", "data": [], "has_more": False})

    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        reading = read_http(client, channel="c", target=TARGET, path="/v1/refunds", query=QUERY)
    assert reading.status is ObservationStatus.OK
    assert str(seen[0].url) == f"https://api.example.test/v1/refunds?{QUERY}"
    assert urlsplit(str(seen[0].url)).path == "/v1/refunds"
    assert dict(parse_qsl(seen[0].url.query.decode()))["created[gte]"] == "1796151600"


def test_every_page_is_read_in_order_into_one_document() -> None:
    items = [_refund(n) for n in (5, 4, 3, 2, 1)]
    pages = Pages(items, limit=2)
    reading = _list(pages)
    assert reading.status is ObservationStatus.OK, reading
    assert reading.value == {"object": "list", "data": items, "has_more": False, "count": 5}
    assert reading.raw == canonical_json(reading.value)
    assert reading.digest == hashlib.sha256(reading.raw).hexdigest()
    assert reading.http_status == 200
    assert reading.observed_at == NOW
    assert reading.provider_timestamp == datetime(2026, 12, 1, 11, 59, 59, tzinfo=UTC)
    base = [("charge", "ch_1"), ("created[gte]", "1796151600"), ("limit", "2")]
    assert pages.queries() == [
        base,
        [*base, ("starting_after", "re_4")],
        [*base, ("starting_after", "re_2")],
    ]
    assert all(r.headers["authorization"] == "Bearer sk_test_x" for r in pages.requests)


def test_an_empty_list_is_one_page_with_count_zero() -> None:
    reading = _list(Pages([]))
    assert reading.status is ObservationStatus.OK
    assert reading.value == {"object": "list", "data": [], "has_more": False, "count": 0}


def test_exactly_max_pages_is_ok_one_more_is_too_many_pages_never_a_partial_list() -> None:
    items = [_refund(n) for n in range(6, 0, -1)]  # 3 pages of 2
    assert _list(Pages(items), max_pages=3).value["count"] == 6
    pages = Pages(items)
    reading = _list(pages, max_pages=2)
    assert reading.status is ObservationStatus.ERROR
    assert reading.error == "too_many_pages"
    assert reading.value is None
    assert len(pages.requests) == 2  # it stops at the limit, it does not read a third page


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        (503, ObservationStatus.UNAVAILABLE, "http_503"),
        (429, ObservationStatus.UNAVAILABLE, "http_429"),
        (404, ObservationStatus.ERROR, "page_not_found"),
        (400, ObservationStatus.ERROR, "http_400"),
    ],
)
def test_a_later_page_that_cannot_be_read_fails_the_whole_reading(
    code: int, status: ObservationStatus, error: str
) -> None:
    pages = Pages([_refund(n) for n in (4, 3, 2, 1)])

    def handler(request: httpx.Request) -> httpx.Response:
        if "starting_after" in request.url.query.decode():
            return httpx.Response(code, json={"error": {"type": "api_error"}})
        return pages(request)

    reading = _list(handler)
    assert (reading.status, reading.error) == (status, error)
    assert reading.value is None


def test_a_first_page_that_is_unavailable_or_missing_is_the_reading() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        return httpx.Response(503, json={"error": {}})

    assert _list(down).status is ObservationStatus.UNAVAILABLE

    def missing(request: httpx.Request) -> httpx.Response:
        return httpx.Response(404, json={"error": {}})

    assert _list(missing).status is ObservationStatus.NOT_FOUND


def test_a_transport_error_on_a_later_page_makes_it_unavailable() -> None:
    pages = Pages([_refund(n) for n in (4, 3, 2, 1)])

    def handler(request: httpx.Request) -> httpx.Response:
        if "starting_after" in request.url.query.decode():
            raise httpx.ConnectError("refused", request=request)
        return pages(request)

    reading = _list(handler)
    assert reading.status is ObservationStatus.UNAVAILABLE
    assert reading.error == "transport: ConnectError"


@pytest.mark.parametrize(
    "body",
    [
        {"id": "re_1", "object": "refund"},
        {"object": "list", "data": {}, "has_more": False},
        {"object": "list", "data": [], "has_more": "no"},
        {"object": "list", "data": [{"object": "refund"}], "has_more": False},
        {"object": "list", "data": [{"id": 7}], "has_more": False},
        {"object": "list", "data": [], "has_more": True},
        {"data": [], "has_more": False},
        [],
    ],
)
def test_a_page_that_is_not_a_list_is_an_error(body: Any) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=body)

    reading = _list(handler)
    assert (reading.status, reading.error, reading.value) == (
        ObservationStatus.ERROR,
        "not_a_list",
        None,
    )


def test_an_item_repeated_across_pages_counts_once() -> None:
    answers = [
        {"object": "list", "data": [_refund(3), _refund(2)], "has_more": True},
        {"object": "list", "data": [_refund(2), _refund(1)], "has_more": False},
    ]

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answers.pop(0))

    reading = _list(handler)
    assert reading.value["count"] == 3
    assert [item["id"] for item in reading.value["data"]] == ["re_3", "re_2", "re_1"]


def test_before_page_paces_every_later_page_and_may_stop_the_reading() -> None:
    calls: list[int] = []
    pages = Pages([_refund(n) for n in (6, 5, 4, 3, 2, 1)])

    def pace() -> str | None:
        calls.append(len(pages.requests))
        return None

    assert _list(pages, before_page=pace).value["count"] == 6
    assert calls == [1, 2]  # before page 2 and page 3, never before the first

    stopped = Pages([_refund(n) for n in (4, 3, 2, 1)])
    reading = _list(stopped, before_page=lambda: "rate_limited")
    assert (reading.status, reading.error) == (ObservationStatus.UNAVAILABLE, "rate_limited")
    assert len(stopped.requests) == 1


def test_the_query_and_cursor_are_url_encoded() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.url.query.decode())
        if len(seen) == 1:
            data = [{"id": "re_a&b=c"}]
            return httpx.Response(200, json={"object": "list", "data": data, "has_more": True})
        return httpx.Response(200, json={"object": "list", "data": [], "has_more": False})

    reading = _list(handler)
    assert reading.status is ObservationStatus.OK
    assert seen[1] == f"{QUERY}&starting_after=re_a%26b%3Dc"
    assert json.loads(reading.raw or b"{}")["count"] == 1
