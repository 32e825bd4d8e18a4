"""The http verifier against httpx.MockTransport: status mapping, limits, URL safety."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import httpx
import pytest

from services.observer.http_verifier import HttpTarget, build_url, read_http
from shared.core.types import ObservationStatus

NOW = datetime(2026, 9, 10, 12, 0, tzinfo=UTC)
TARGET = HttpTarget(
    base_url="https://api.example.test",
    headers={"Authorization": "Bearer sk_test_x"},
    timeout_s=2.0,
    max_bytes=1024,
)


def _client(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.Client:
    return httpx.Client(transport=httpx.MockTransport(handler))


def _read(handler: Callable[[httpx.Request], httpx.Response], path: str = "/v1/refunds/re_1"):
    with _client(handler) as client:
        return read_http(client, channel="readback", target=TARGET, path=path, clock=lambda: NOW)


def test_ok_reading_carries_the_parsed_value_raw_bytes_and_digest() -> None:
    body = json.dumps({"id": "re_1", "status": "succeeded"}).encode()
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, content=body, headers={"Date": "Thu, 10 Sep 2026 11:59:58 GMT"})

    reading = _read(handler)
    assert reading.status is ObservationStatus.OK
    assert reading.value == {"id": "re_1", "status": "succeeded"}
    assert reading.raw == body
    assert reading.digest == hashlib.sha256(body).hexdigest()
    assert reading.http_status == 200
    assert reading.provider_timestamp == datetime(2026, 9, 10, 11, 59, 58, tzinfo=UTC)
    assert reading.observed_at == NOW
    assert str(seen[0].url) == "https://api.example.test/v1/refunds/re_1"
    assert seen[0].headers["authorization"] == "Bearer sk_test_x"


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (201, ObservationStatus.OK),
        (404, ObservationStatus.NOT_FOUND),
        (429, ObservationStatus.UNAVAILABLE),
        (500, ObservationStatus.UNAVAILABLE),
        (502, ObservationStatus.UNAVAILABLE),
        (503, ObservationStatus.UNAVAILABLE),
        (400, ObservationStatus.ERROR),
        (401, ObservationStatus.ERROR),
        (403, ObservationStatus.ERROR),
    ],
)
def test_status_codes_map_to_observation_statuses(code: int, status: ObservationStatus) -> None:
    reading = _read(lambda _r: httpx.Response(code, json={"error": {"type": "x"}}))
    assert reading.status is status
    assert reading.http_status == code
    if status is not ObservationStatus.OK:
        assert reading.value is None


@pytest.mark.parametrize("code", [301, 302, 307, 308])
def test_redirects_are_never_followed(code: int) -> None:
    calls: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(str(request.url))
        return httpx.Response(code, headers={"Location": "https://evil.test/steal"})

    reading = _read(handler)
    assert reading.status is ObservationStatus.ERROR
    assert reading.error == f"redirect_refused_{code}"
    assert calls == ["https://api.example.test/v1/refunds/re_1"]


def test_timeout_and_connection_errors_are_unavailable() -> None:
    def timeout(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    def refused(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    assert _read(timeout).status is ObservationStatus.UNAVAILABLE
    assert _read(timeout).error == "timeout"
    reading = _read(refused)
    assert reading.status is ObservationStatus.UNAVAILABLE
    assert reading.error == "transport: ConnectError"


def test_a_declared_body_over_the_cap_is_not_read() -> None:
    reading = _read(lambda _r: httpx.Response(200, content=b"x" * 2048))
    assert reading.status is ObservationStatus.ERROR
    assert reading.error == "too_large"
    assert reading.raw is None


def test_a_streamed_body_stops_being_read_past_the_cap() -> None:
    produced: list[int] = []

    def endless() -> Iterator[bytes]:
        for i in range(10_000):
            produced.append(i)
            yield b"y" * 256

    reading = _read(lambda _r: httpx.Response(200, content=endless()))
    assert reading.status is ObservationStatus.ERROR
    assert reading.error == "too_large"
    assert len(produced) < 10  # stopped a few chunks past 1 KiB, not after 2.5 MB


def test_a_body_that_is_not_json_is_an_error_with_its_digest() -> None:
    reading = _read(lambda _r: httpx.Response(200, content=b"<html>"))
    assert reading.status is ObservationStatus.ERROR
    assert reading.error == "invalid_json"
    assert reading.digest == hashlib.sha256(b"<html>").hexdigest()


@pytest.mark.parametrize(
    "path",
    ["v1/refunds/x", "@evil.test/x"],
)
def test_paths_that_could_leave_the_host_are_refused(path: str) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json={})

    reading = _read(handler, path=path)
    assert reading.status is ObservationStatus.ERROR
    assert reading.error is not None
    assert reading.error.startswith("bad_url")
    assert calls == []


def test_build_url_keeps_the_base_path_and_host() -> None:
    url = build_url("http://127.0.0.1:8123/stripe/", "/v1/refunds/re%2F1")
    assert url.host == "127.0.0.1"
    assert url.port == 8123
    assert url.raw_path == b"/stripe/v1/refunds/re%2F1"
    with pytest.raises(ValueError, match="absolute"):
        build_url("ftp://x", "/a")


@pytest.mark.parametrize(
    "path",
    [
        "/v1/refunds/..",
        "/v1/refunds/.",
        "/v1/refunds/%2e%2e",
        "/v1/refunds/%2E%2e/x",
        "/v1/%2e/refunds",
        "/v1/refunds/%252e%252e",
        "/../v1/charges",
    ],
)
def test_dot_segments_are_never_sent(path: str) -> None:
    calls: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(request)
        return httpx.Response(200, json={"object": "list", "data": []})

    reading = _read(handler, path=path)
    assert reading.status is ObservationStatus.ERROR
    assert reading.error is not None
    assert reading.error.startswith("bad_url"), reading.error
    assert calls == []


def test_a_path_cannot_leave_the_base_path() -> None:
    with pytest.raises(ValueError, match=r"'\.\.' segment"):
        build_url("http://127.0.0.1:8123/stripe/", "/../admin")
    # Dots inside a segment, and in the query, name nothing else.
    url = build_url("http://127.0.0.1:8123/stripe", "/v1/refunds/re_1..2?created[gte]=..")
    assert url.raw_path == b"/stripe/v1/refunds/re_1..2?created[gte]=.."
