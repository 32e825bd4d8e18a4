"""What the ingress records of every HTTP request, the webhook intake's included.

:func:`observed` wraps the whole application in one pure ASGI layer (:class:`Observed`) that
gives every request, in one pass over its headers and one wrapper of its ``send``:

1. its request id: the caller's ``X-Request-Id`` when it is a sane token (letters, digits,
   ``._:-``, at most 128), else a new one (written into the request's headers for the app, and
   into ``asgi-correlation-id``'s context variable); it is echoed on every response.
2. its log context and access line: ``request_id`` (and the path's ``operation_id``) is bound to
   every log line written while the request runs — the Celery messages it sends carry the
   request id on (``shared.runtime.celery_hooks.install_celery_hooks``) — and one
   ``http.request`` line is written when it ends, with fields rather than a sentence:
   ``method``, ``path``, ``query`` (secrets redacted: :func:`redact_query`), ``status``,
   ``duration_ms``, ``client``.
3. its HTTP metrics, the ones ``prometheus-fastapi-instrumentator`` defines:
   ``provely_http_requests_total`` and ``provely_http_request_duration_seconds`` by route
   template (``/v1/operations/{operation_id}``, never the raw path; an address no route knows
   counts as ``none``), method and status.

One layer rather than the three libraries' middlewares stacked: each of those wrapped ``send``
again and built its own objects per request (a ``Request``, a ``Response`` and an ``Info`` for
the metrics, a ``gather`` of no coroutines, two header copies), which cost the webhook intake,
a request that does little else, about a sixth of its process's CPU.
"""

from __future__ import annotations

import logging
import os
import re
import time
from typing import Any
from urllib.parse import parse_qsl, quote

import structlog
from asgi_correlation_id.context import correlation_id
from asgi_correlation_id.middleware import FAILED_VALIDATION_MESSAGE
from prometheus_fastapi_instrumentator import metrics
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.runtime.logs import get_logger, operation_id_from_path

__all__ = ["REQUEST_ID_HEADER", "Observed", "new_request_id", "observed", "redact_query"]

REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID_HEADER_RAW = REQUEST_ID_HEADER.lower().encode("latin-1")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_SECRET_NAME = re.compile(
    r"key|token|secret|passw|signature|auth|credential|session|code", re.IGNORECASE
)
_REDACTED = "***"
_PATHS_KEPT = 4096
"""The paths whose route template :class:`Observed` keeps (see ``Observed._handler``)."""

log = get_logger("provely.access")
_correlation_log = logging.getLogger("asgi_correlation_id")  # where the library said it


def _valid_request_id(value: str) -> bool:
    return bool(_REQUEST_ID.match(value))


def redact_query(query: str) -> str:
    """``query`` with the value of every parameter whose name looks like a secret replaced by
    ``***`` (``api_key``, ``key``, ``token``, ``client_secret``, ``password``, ``signature`` …);
    a query that does not parse is replaced whole."""
    if not query:
        return ""
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=True)
    except ValueError:
        return _REDACTED
    return "&".join(
        f"{quote(name, safe='')}="
        + (_REDACTED if _SECRET_NAME.search(name) else quote(value, safe=""))
        for name, value in pairs
    )


class _Measured:
    """What the instrumentator's metric functions read of a request (its ``Info``, without the
    request and response objects it would build for them)."""

    __slots__ = (
        "method",
        "modified_duration",
        "modified_duration_without_streaming",
        "modified_handler",
        "modified_status",
    )

    def __init__(
        self, method: str, handler: str, status: int, started: float, answered: float
    ) -> None:
        now = time.perf_counter()
        self.method = method
        self.modified_handler = handler
        self.modified_status = str(status)
        self.modified_duration = max(now - started, 0.0)
        self.modified_duration_without_streaming = max(answered - started, 0.0) if answered else 0.0


class Observed:
    """Pure ASGI middleware: request id, log context, access line and HTTP metrics in one pass."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._templates: list[tuple[str, re.Pattern[str], str]] | None = None
        self._known: frozenset[str] = frozenset()
        self._by_path: dict[str, str] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        request_id = _request_id(scope)
        correlation_id.set(request_id)
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        answered = 0.0
        status = 500  # what the server answers when the app fails before it responds
        echoed = (_REQUEST_ID_HEADER_RAW, request_id.encode("latin-1"))

        async def answering(message: Message) -> None:
            nonlocal status, answered
            if message["type"] == "http.response.start":
                status = int(message["status"])
                answered = time.perf_counter()
                message["headers"] = [*message.get("headers", ()), echoed]
            await send(message)

        context: dict[str, Any] = {"request_id": request_id}
        operation_id = operation_id_from_path(scope.get("path", ""))
        if operation_id:
            context["operation_id"] = operation_id
        tokens = structlog.contextvars.bind_contextvars(**context)
        try:
            await self.app(scope, receive, answering)
        finally:
            try:
                measured = _Measured(
                    scope["method"], self._handler(scope), status, started, answered
                )
                for instrumentation in _http_metrics():
                    instrumentation(measured)
                _access_line(scope, status, started)
            finally:
                structlog.contextvars.reset_contextvars(**tokens)

    def _handler(self, scope: Scope) -> str:
        """The template of the route that serves the request, ``none`` when none does.

        The instrumentator found the route by walking ``app.routes`` itself, which FastAPI's
        included routers no longer support (they have no ``path``); FastAPI's
        ``iter_route_contexts`` gives every route with its full template, prefixes included, so
        the templates are read from it once per application. Found, cheapest first:

        1. the route the router chose (FastAPI's routes put themselves in the scope), when its
           template is one of the application's;
        2. the template found before for the same path (the intake's deliveries come to a few
           paths, one a workspace), from at most ``_PATHS_KEPT`` paths;
        3. the templates matched in order, as the router does, the literal start of each
           first: walking them cost a webhook delivery ~27 µs, about a tenth of its CPU.
        """
        if self._templates is None:
            self._templates = _route_templates(scope["app"])
            self._known = frozenset(template for _, _, template in self._templates)
        route = scope.get("route")
        template = getattr(route, "path_format", None)
        if template is not None and template in self._known:
            return str(template)
        path: str = scope["path"]
        found = self._by_path.get(path)
        if found is not None:
            return found
        found = "none"
        for start, pattern, candidate in self._templates:
            if path.startswith(start) and pattern.match(path):
                found = candidate
                break
        if len(self._by_path) >= _PATHS_KEPT:
            self._by_path.clear()  # a burst of distinct paths (a scan) starts the cache again
        self._by_path[path] = found
        return found


def _request_id(scope: Scope) -> str:
    """The caller's request id when it is sane, else a new one written into the request's
    headers in its place (as ``asgi-correlation-id`` does)."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    given = next((v.decode("latin-1") for n, v in headers if n == _REQUEST_ID_HEADER_RAW), "")
    if given and _valid_request_id(given):
        return given
    request_id = new_request_id()
    if given:
        _correlation_log.warning(FAILED_VALIDATION_MESSAGE, request_id)
    scope["headers"] = [
        *(h for h in headers if h[0] != _REQUEST_ID_HEADER_RAW),
        (_REQUEST_ID_HEADER_RAW, request_id.encode("latin-1")),
    ]
    return request_id


def new_request_id() -> str:
    """A new request id: 128 random bits as 32 lowercase hex digits, the shape ``uuid4().hex``
    gave (unique across processes and restarts alike), without building a ``UUID`` (2.9 µs a
    request against 0.3 µs: the intake answers every delivery with one)."""
    return os.urandom(16).hex()


def _access_line(scope: Scope, status: int, started: float) -> None:
    """The request's ``http.request`` line: fields a query can filter on, never a sentence,
    and no secret of the query string."""
    client = scope.get("client")
    fields: dict[str, Any] = {
        "method": scope.get("method"),
        "path": scope.get("path"),
        "status": status,
        "duration_ms": round((time.perf_counter() - started) * 1000.0, 3),
        "client": client[0] if client else None,
    }
    query = scope.get("query_string", b"")
    if query:
        fields["query"] = redact_query(query.decode("latin-1"))
    log.info("http.request", **fields)


def _route_templates(app: Any) -> list[tuple[str, re.Pattern[str], str]]:
    from fastapi import routing
    from starlette.routing import compile_path

    iterate = getattr(routing, "iter_route_contexts", None)  # FastAPI >= 0.163
    contexts = list(iterate(app.routes)) if iterate is not None else list(app.routes)
    templates = []
    for context in contexts:
        template = getattr(context, "path_format", None) or getattr(context, "path", None)
        if isinstance(template, str) and template:
            pattern, _, _ = compile_path(template)
            templates.append((template.partition("{")[0], pattern, template))
    return templates


_METRICS: list[Any] = []


def _http_metrics() -> list[Any]:
    if not _METRICS:
        requests = metrics.requests(metric_namespace="provely")
        latency = metrics.latency(
            metric_namespace="provely",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
        )
        _METRICS.extend(m for m in (requests, latency) if m is not None)
    return _METRICS


def observed(app: ASGIApp) -> ASGIApp:
    """``app`` with request ids, access logs and HTTP metrics (see the module docstring)."""
    return Observed(app)
