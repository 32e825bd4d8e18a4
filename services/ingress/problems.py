"""Errors of the HTTP API as RFC 9457 problem details (``application/problem+json``).

Routes raise :class:`ApiError` (or let FastAPI raise its validation errors); one set of
handlers installed by :func:`install_problem_handlers` turns every error, expected or not, into
a problem document. Nothing else ever reaches a client: no traceback, no HTML error page.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from http import HTTPStatus
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from shared.core import IllegalTransition
from shared.core.storable import Unstorable
from shared.lifecycle.contracts import ContractNotFound
from shared.lifecycle.scheduling import ScheduleConflict
from shared.trust.registry import RegistryError

__all__ = [
    "PROBLEM_JSON",
    "ApiError",
    "FieldProblem",
    "Problem",
    "allowed_methods",
    "error_responses",
    "install_problem_handlers",
    "problem_response",
    "unstorable_problem",
]

log = logging.getLogger(__name__)

PROBLEM_JSON = "application/problem+json"
_TYPE_BASE = "https://provely.dev/problems/"


class FieldProblem(BaseModel):
    """One invalid field of a request."""

    field: str = Field(description="Where the problem is, e.g. `input.amount` or `body`.")
    message: str


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    model_config = ConfigDict(extra="allow")

    type: str = Field(description="A URI naming the kind of problem.")
    title: str
    status: int
    detail: str | None = None
    instance: str | None = None
    errors: list[FieldProblem] | None = Field(
        default=None, description="Invalid fields (422 and 400)."
    )


class ApiError(Exception):
    """An expected error: its status, a short machine name (the problem type) and detail."""

    def __init__(
        self,
        status: int,
        kind: str,
        detail: str,
        *,
        errors: Sequence[FieldProblem] | None = None,
        headers: dict[str, str] | None = None,
        **extra: Any,
    ) -> None:
        super().__init__(detail)
        self.status = status
        self.kind = kind
        self.detail = detail
        self.errors = list(errors) if errors else None
        self.headers = headers
        self.extra = extra


def unstorable_problem(found: Unstorable) -> ApiError:
    """422 for a value that can never be stored, naming the place (``input.a[2]``)."""
    return ApiError(
        422,
        "unstorable-value",
        f"{found.field} {found.message}",
        errors=[FieldProblem(field=found.field, message=found.message)],
    )


def problem_response(
    status: int,
    kind: str,
    detail: str | None,
    *,
    instance: str | None = None,
    errors: Sequence[FieldProblem] | None = None,
    headers: dict[str, str] | None = None,
    **extra: Any,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": _TYPE_BASE + kind,
        "title": HTTPStatus(status).phrase,
        "status": status,
    }
    if detail is not None:
        body["detail"] = detail
    if instance is not None:
        body["instance"] = instance
    if errors:
        body["errors"] = [e.model_dump() for e in errors]
    body.update(extra)
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


KINDS = {
    400: "bad-request",
    401: "unauthenticated",
    403: "forbidden",
    404: "not-found",
    405: "method-not-allowed",
    406: "not-acceptable",
    409: "conflict",
    413: "body-too-large",
    415: "unsupported-media-type",
    422: "invalid-request",
    503: "unavailable",
}


def _location(loc: Sequence[Any]) -> str:
    parts = [str(p) for p in loc]
    if parts and parts[0] in ("body", "query", "path", "header"):
        source, rest = parts[0], parts[1:]
        return ".".join(rest) if rest and source == "body" else ".".join(parts)
    return ".".join(parts) or "body"


def allowed_methods(request: Request) -> str | None:
    """Every method the request's path serves, for the ``Allow`` header of a 405 (the router's
    own names only the first route that matched the path)."""
    methods: set[str] = set()
    routes: list[Any] = list(request.app.router.routes)
    scope = {**request.scope, "method": "__none__"}
    while routes:
        route = routes.pop()
        included = getattr(route, "original_router", None)  # FastAPI's included routers
        if included is not None:
            routes.extend(included.routes)
            continue
        match, _ = route.matches(scope)
        if match != Match.NONE and getattr(route, "methods", None):
            methods.update(route.methods)
    if "GET" in methods:
        methods.add("HEAD")
    return ", ".join(sorted(methods)) or None


# pay down (C901): every handler a closure
def install_problem_handlers(app: FastAPI) -> None:  # noqa: C901
    """Map every exception to a problem document."""

    async def api_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, ApiError)
        return problem_response(
            exc.status,
            exc.kind,
            exc.detail,
            instance=request.url.path,
            errors=exc.errors,
            headers=exc.headers,
            **exc.extra,
        )

    async def validation_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        problems: list[FieldProblem] = []
        malformed = False
        for error in exc.errors():
            if error.get("type") == "json_invalid":
                malformed = True
            problems.append(
                FieldProblem(field=_location(error.get("loc", ())), message=str(error.get("msg")))
            )
        if malformed:
            return problem_response(
                400,
                "malformed-json",
                "the request body is not valid JSON",
                instance=request.url.path,
            )
        detail = "; ".join(f"{p.field}: {p.message}" for p in problems[:5])
        return problem_response(
            422, "invalid-request", detail, instance=request.url.path, errors=problems
        )

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        found = getattr(exc, "found", None)
        if isinstance(found, Unstorable):  # services.ingress.api.bodies.UnstorableBody
            return await api_error(request, unstorable_problem(found))
        kind = KINDS.get(exc.status_code, "error")
        detail = exc.detail if isinstance(exc.detail, str) else None
        headers = dict(exc.headers) if exc.headers else None
        if exc.status_code == 405:
            allow = allowed_methods(request)
            if allow is not None:
                headers = {**(headers or {}), "Allow": allow}
        if exc.status_code == 400 and detail == "There was an error parsing the body":
            detail = "the request body could not be read"
        return problem_response(
            exc.status_code,
            kind,
            detail,
            instance=request.url.path,
            headers=headers,
        )

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.error("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
        return problem_response(
            500, "internal", "an internal error occurred", instance=request.url.path
        )

    async def domain_error(request: Request, exc: Exception) -> JSONResponse:
        """Errors of the layers below that reach a route: never a 500 for a known condition."""
        if isinstance(exc, IllegalTransition | ScheduleConflict):
            return problem_response(
                409,
                "state-conflict",
                f"the operation changed while this request ran ({exc}); read it again",
                instance=request.url.path,
            )
        if isinstance(exc, ContractNotFound):
            return problem_response(
                409,
                "contract-unavailable",
                f"the contract of this operation is not available as it was created: {exc}",
                instance=request.url.path,
            )
        return problem_response(
            503,
            "unavailable",
            "the contract registry cannot be loaded; see the service log",
            instance=request.url.path,
        )

    for error in (IllegalTransition, ScheduleConflict, ContractNotFound, RegistryError):
        app.add_exception_handler(error, domain_error)
    app.add_exception_handler(ApiError, api_error)
    app.add_exception_handler(RequestValidationError, validation_error)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(Exception, unexpected)


def _problem_content(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {PROBLEM_JSON: {"schema": {"$ref": "#/components/schemas/Problem"}}},
    }


_DESCRIPTIONS = {
    400: "Malformed JSON or an unreadable body.",
    401: "Missing, unknown or revoked API key.",
    403: "The key lacks the scope this needs.",
    404: "No such resource in this workspace.",
    409: "Conflicts with the resource's current state.",
    413: "The body is larger than the limit.",
    415: "The body's media type is not accepted.",
    422: "The request is well-formed but invalid.",
    503: "A dependency is unavailable.",
}


def error_responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` entries for the given error statuses (problem+json)."""
    return {
        status: _problem_content(_DESCRIPTIONS.get(status) or HTTPStatus(status).phrase)
        for status in statuses
    }
