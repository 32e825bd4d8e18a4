"""What the ingress records of every HTTP request, the webhook intake's included.

:func:`observed` wraps the whole application, outermost first:

1. ``asgi-correlation-id``: the request id is the caller's ``X-Request-Id`` when it is a sane
   token (letters, digits, ``._:-``, at most 128), else a new one; it is echoed on every
   response.
2. :class:`AccessLog`: binds ``request_id`` (and the path's ``operation_id``) to every log
   line written while the request runs — the Celery messages it sends carry the request id on
   (``shared.runtime.celery_hooks.install_celery_hooks``) — and writes one ``http.request`` line
   when it ends, with fields rather than a sentence: ``method``, ``path``, ``query`` (secrets
   redacted: :func:`redact_query`), ``status``, ``duration_ms``, ``client``.
3. ``prometheus-fastapi-instrumentator``: ``provely_http_requests_total`` and
   ``provely_http_request_duration_seconds`` by route template (``/v1/operations/{operation_id}``,
   never the raw path; an address no route knows counts as ``none``), method and status.
"""

from __future__ import annotations

import re
import time
from typing import Any
from urllib.parse import parse_qsl, quote

import structlog
from asgi_correlation_id import CorrelationIdMiddleware
from prometheus_fastapi_instrumentator import metrics
from prometheus_fastapi_instrumentator.middleware import PrometheusInstrumentatorMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from shared.runtime.logs import get_logger, operation_id_from_path

__all__ = ["REQUEST_ID_HEADER", "AccessLog", "observed", "redact_query"]

REQUEST_ID_HEADER = "X-Request-Id"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:\-]{1,128}$")
_SECRET_NAME = re.compile(
    r"key|token|secret|passw|signature|auth|credential|session|code", re.IGNORECASE
)
_REDACTED = "***"

log = get_logger("provely.access")


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


class AccessLog:
    """Pure ASGI middleware: the request's log context, and one structured line per request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the server answers when the app fails before it responds
        context: dict[str, Any] = {}
        for name, value in scope.get("headers") or ():
            if name == b"x-request-id":  # set (or replaced) by the correlation-id middleware
                context["request_id"] = value.decode("latin-1")
                break
        operation_id = operation_id_from_path(scope.get("path", ""))
        if operation_id:
            context["operation_id"] = operation_id

        async def recording(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        with structlog.contextvars.bound_contextvars(**context):
            try:
                await self.app(scope, receive, recording)
            finally:
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


class _ByRouteTemplate(PrometheusInstrumentatorMiddleware):
    """The instrumentator, naming each request by the template of the route that serves it.

    The library finds the route by walking ``app.routes`` itself, which FastAPI's included
    routers no longer support (they have no ``path``); FastAPI's ``iter_route_contexts`` gives
    every route with its full template, prefixes included, so the templates are read from it
    once per application and matched in order, as the router does."""

    _templates: list[tuple[str, re.Pattern[str], str]] | None = None

    def _get_handler(self, request: Any) -> tuple[str, bool]:
        if self._templates is None:
            self._templates = _route_templates(request.app)
        path = request.scope["path"]
        # The literal start of a template first: a plain string comparison rules out most
        # routes (every webhook delivery went through each route's pattern to match none).
        for start, pattern, template in self._templates:
            if path.startswith(start) and pattern.match(path):
                return template, True
        return path, False


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
    instrumented = _ByRouteTemplate(
        app,  # type: ignore[arg-type]
        should_group_status_codes=False,
        should_group_untemplated=True,
        instrumentations=_http_metrics(),
    )
    return CorrelationIdMiddleware(
        AccessLog(instrumented),
        header_name=REQUEST_ID_HEADER,
        validator=_valid_request_id,
    )
