"""Query strings in access lines: credentials redacted by the parameter's name; the request id
the app sees is the one answered; a request whose app fails still counts (as a 500)."""

from __future__ import annotations

import asyncio

import pytest
import structlog
from fastapi import FastAPI
from prometheus_client import REGISTRY
from starlette.datastructures import Headers
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.ingress.access import observed, redact_query


@pytest.mark.parametrize(
    ("query", "logged"),
    [
        ("", ""),
        ("limit=5&cursor=abc", "limit=5&cursor=abc"),
        ("api_key=pv_1&limit=5", "api_key=***&limit=5"),
        ("key=whsec_x", "key=***"),
        ("token=t&access_token=u&client_secret=s", "token=***&access_token=***&client_secret=***"),
        ("Password=hunter2", "Password=***"),
        ("signature=abc&x-amz-credential=c", "signature=***&x-amz-credential=***"),
        ("code=oauth-code&state=s", "code=***&state=s"),
        ("api%5Fkey=pv_2", "api_key=***"),  # decoded before the name is read
        ("api_key", "***"),  # a bare name does not parse strictly: nothing of it is written
        ("a=1&&b", "***"),  # does not parse: nothing of it is written
    ],
)
def test_redact_query(query: str, logged: str) -> None:
    assert redact_query(query) == logged


def _run(app: ASGIApp, headers: list[tuple[bytes, bytes]]) -> list[Message]:
    """One GET of ``/no/route`` through :func:`observed`, the messages sent back."""
    scope: Scope = {
        "type": "http",
        "method": "GET",
        "path": "/no/route",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "app": FastAPI(),
    }
    sent: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    async def request() -> None:
        await observed(app)(scope, receive, send)

    asyncio.run(request())
    return sent


def _count(metric: str, status: str) -> float:
    labels = {"handler": "none", "method": "GET", "status": status}
    return REGISTRY.get_sample_value(metric, labels) or 0.0


def test_the_app_sees_the_request_id_it_answers_with() -> None:
    seen: list[str] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(Headers(scope=scope)["x-request-id"])
        assert structlog.contextvars.get_contextvars()["request_id"] == seen[-1]
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    for given in ([], [(b"x-request-id", b'a b"c')]):  # none, and one that is not sane
        seen.clear()
        start = _run(app, given)[0]
        assert Headers(raw=start["headers"])["x-request-id"] == seen[0] != 'a b"c'
    start = _run(app, [(b"x-request-id", b"checkout-7")])[0]
    assert seen[-1] == Headers(raw=start["headers"])["x-request-id"] == "checkout-7"
    assert "request_id" not in structlog.contextvars.get_contextvars()  # unbound after


def test_a_request_whose_app_fails_counts_as_a_500() -> None:
    async def failing(scope: Scope, receive: Receive, send: Send) -> None:
        raise RuntimeError("boom")

    before = (
        _count("provely_http_requests_total", "500"),
        _count("provely_http_request_duration_seconds_count", "500"),
    )
    with pytest.raises(RuntimeError):
        _run(failing, [])
    assert _count("provely_http_requests_total", "500") == before[0] + 1
    assert _count("provely_http_request_duration_seconds_count", "500") == before[1] + 1
    assert "request_id" not in structlog.contextvars.get_contextvars()
