"""Query strings in access lines: credentials redacted by the parameter's name; the request id
the app sees is the one answered; a request whose app fails still counts (as a 500)."""

from __future__ import annotations

import asyncio
from typing import Any

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


def _labels(app: ASGIApp, requests: list[tuple[str, str]]) -> tuple[list[str], set[str]]:
    """The handler label of each ``(method, path)`` sent through ``app`` (observed), in order,
    and the paths whose template the layer kept."""
    from services.ingress import access

    labels: list[str] = []
    layer = observed(app)
    assert isinstance(layer, access.Observed)
    handler = layer._handler

    def recording(scope: Scope) -> str:
        labels.append(handler(scope))
        return labels[-1]

    layer._handler = recording  # type: ignore[method-assign]

    async def requests_() -> None:
        for method, path in requests:
            scope: Scope = {
                "type": "http",
                "method": method,
                "path": path,
                "raw_path": path.encode(),
                "root_path": "",
                "query_string": b"",
                "headers": [],
                "client": ("127.0.0.1", 1),
            }

            async def receive() -> Message:
                return {"type": "http.request", "body": b"", "more_body": False}

            async def send(message: Message) -> None:
                pass

            await layer(scope, receive, send)

    asyncio.run(requests_())
    return labels, set(layer._by_path)


def test_the_handler_label_is_the_route_template_with_or_without_the_router_naming_it() -> None:
    from starlette.responses import PlainTextResponse
    from starlette.routing import Route

    app = FastAPI()
    items = FastAPI().router  # an included router: its templates get the prefix

    @items.get("/{item_id}")
    def item(item_id: str) -> dict[str, str]:
        return {"id": item_id}

    app.include_router(items, prefix="/items")

    @app.get("/ops/{op_id}")
    def op(op_id: str) -> dict[str, str]:
        return {"id": op_id}

    async def hook(request: Any) -> PlainTextResponse:
        return PlainTextResponse("ok")

    app.router.routes.append(Route("/hooks/{name}", hook, methods=["POST"]))  # names no route
    requests = [
        ("GET", "/ops/1"),
        ("GET", "/items/a"),
        ("GET", "/items/b"),
        ("POST", "/items/a"),  # 405: still the template
        ("POST", "/hooks/x"),
        ("POST", "/hooks/x"),  # the second time from the kept paths
        ("GET", "/hooks/x"),
        ("GET", "/nothing/here"),
        ("GET", "/nothing/here"),
    ]
    expected = [
        "/ops/{op_id}",
        "/items/{item_id}",
        "/items/{item_id}",
        "/items/{item_id}",
        "/hooks/{name}",
        "/hooks/{name}",
        "/hooks/{name}",
        "none",
        "none",
    ]
    labels, kept = _labels(app, requests)
    assert labels == expected
    # The router named the route of /ops/1 itself; an included router's route in the scope
    # knows its template without the prefix, so /items/a was matched against the templates.
    assert kept == {"/items/a", "/items/b", "/hooks/x", "/nothing/here"}


def test_the_kept_paths_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.ingress import access

    monkeypatch.setattr(access, "_PATHS_KEPT", 8)
    app = FastAPI()

    @app.get("/p/{n}")
    def page(n: str) -> str:
        return n

    layer = observed(app)
    assert isinstance(layer, access.Observed)
    scopes = [{"app": app, "path": f"/scan/{n}"} for n in range(50)]
    assert {layer._handler(scope) for scope in scopes} == {"none"}
    assert len(layer._by_path) <= 8
    assert layer._handler({"app": app, "path": "/p/7"}) == "/p/{n}"


def _python_calls(function: Any, *args: Any) -> int:
    """The Python-level calls ``function(*args)`` makes (itself included)."""
    import sys

    calls = 0

    def count(frame: Any, event: str, arg: Any) -> None:
        nonlocal calls
        if event == "call":
            calls += 1

    sys.setprofile(count)
    try:
        function(*args)
    finally:
        sys.setprofile(None)
    return calls


def test_a_new_request_id_is_128_random_bits_made_without_a_uuid_object() -> None:
    """The shape ``uuid4().hex`` gave (32 lowercase hex digits, distinct), and cheap: building a
    ``UUID`` for it cost each delivery 2.9 µs (uuid4, ``UUID.__init__`` and ``hex``: 7 Python
    calls where these make 5)."""
    from services.ingress.access import _request_id

    ids = set()
    for _ in range(1000):
        scope: Scope = {"headers": [(b"host", b"x")]}
        request_id = _request_id(scope)
        assert len(request_id) == 32
        assert set(request_id) <= set("0123456789abcdef")
        assert scope["headers"][-1] == (b"x-request-id", request_id.encode())
        ids.add(request_id)
    assert len(ids) == 1000
    # _request_id, the header search, the kept headers' generator (resumed twice), new_request_id
    assert _python_calls(_request_id, {"headers": [(b"host", b"x")]}) <= 5
