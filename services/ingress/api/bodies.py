"""JSON request bodies of the agent API, parsed so that no depth can break a request.

Python's ``json`` parser recurses once per nesting level and raises ``RecursionError`` near
1,000 levels (fewer under a deep call stack). :class:`StorableJsonRoute` routes parse the body
themselves: a body too deep for the parser is refused like any value nested deeper than
``MAX_JSON_DEPTH`` — 422 naming the place (``shared.core.storable.too_deep_in_text``) — and
everything shallower is checked by the request models (``services.ingress.models.RequestModel``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException

from shared.core.storable import MAX_JSON_DEPTH, Unstorable, too_deep_in_text

__all__ = ["StorableJsonRoute", "UnstorableBody"]


class UnstorableBody(StarletteHTTPException):
    """A body nested too deeply to parse; answered as 422 ``unstorable-value``
    (``services.ingress.problems``). An HTTP exception, so the framework passes it on as is."""

    def __init__(self, found: Unstorable) -> None:
        super().__init__(422, f"{found.field} {found.message}")
        self.found = found


class _JsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            body = await self.body()
            try:
                self._json = json.loads(body)
            except RecursionError:
                text = body.decode("utf-8", "replace")
                found = too_deep_in_text(text) or Unstorable(
                    "body", f"is nested deeper than {MAX_JSON_DEPTH} levels", "too_deep"
                )
                raise UnstorableBody(found) from None
        return self._json


class StorableJsonRoute(APIRoute):
    """A route whose JSON body parses at any depth into a 422 instead of an error."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def parse_storably(request: Request) -> Response:
            return await handler(_JsonRequest(request.scope, request.receive))

        return parse_storably
