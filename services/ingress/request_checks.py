"""What every agent API request is checked for before its route runs, and the answers the
framework gets wrong by default.

- :func:`check_request` (an app-wide dependency, so it runs after routing and before the body
  is validated; a request without the API key its route needs is left to answer 401 first): a
  query parameter the route does not declare is refused with 422 naming it
  (``?verdict=PENDING`` used to be ignored and list VERIFIED operations); a body sent to a JSON
  route in another media type is refused with 415 (a form body used to get 422 "field
  required").

The ``Allow`` header of a 405 is ``services.ingress.problems``'s (``allowed_methods``).
"""

from __future__ import annotations

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from services.ingress.deps import bearer_key
from services.ingress.problems import ApiError, FieldProblem

__all__ = ["check_request"]

_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
PAGES_PREFIX = "/verify"
"""The published pages (``services.ingress.pages``): public HTML, not the API."""

_declared: dict[int, tuple[APIRoute, frozenset[str], bool]] = {}


def _declared_by(route: APIRoute) -> tuple[frozenset[str], bool]:
    """The query parameters ``route`` declares (its dependencies' too), and whether it needs an
    API key; computed once per route."""
    found = _declared.get(id(route))
    if found is not None and found[0] is route:
        return found[1], found[2]
    names: set[str] = set()
    keyed = False
    pending: list[Dependant] = [route.dependant]
    while pending:
        dependant = pending.pop()
        names.update(param.alias for param in dependant.query_params)
        keyed = keyed or dependant.call is bearer_key
        pending.extend(dependant.dependencies)
    _declared[id(route)] = (route, frozenset(names), keyed)
    return frozenset(names), keyed


def _is_json(content_type: str) -> bool:
    media = content_type.split(";", 1)[0].strip().lower()
    return media == "application/json" or (
        media.startswith("application/") and media.endswith("+json")
    )


def _has_body(request: Request) -> bool:
    length = request.headers.get("content-length")
    return bool(length and length != "0") or "transfer-encoding" in request.headers


async def check_request(request: Request) -> None:
    """Refuse undeclared query parameters (422) and a JSON route's body in another media type
    (415). A coroutine because it does no I/O: it runs on the event loop, not through a
    threadpool hop on every request."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute) or route.path.startswith(PAGES_PREFIX):
        return  # a published page ignores a query (a link may carry one), it takes no body
    declared, keyed = _declared_by(route)
    if keyed and "authorization" not in request.headers:
        return  # the route's own check answers 401 first
    unknown = sorted(set(request.query_params.keys()) - declared)
    if unknown:
        raise ApiError(
            422,
            "invalid-request",
            f"unknown query parameter{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}",
            errors=[
                FieldProblem(field=f"query.{name}", message="is not a parameter of this endpoint")
                for name in unknown
            ],
        )
    if (
        route.body_field is not None
        and request.method in _BODY_METHODS
        and _has_body(request)
        and not _is_json(request.headers.get("content-type", "application/json"))
    ):
        raise ApiError(
            415,
            "unsupported-media-type",
            "the body must be application/json, not "
            f"{request.headers.get('content-type', '').split(';', 1)[0] or 'unnamed'}",
        )
