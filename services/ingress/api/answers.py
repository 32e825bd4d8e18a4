"""The operation resource as the agent's hot routes answer it: serialized once, in the route.

A plain-function route that returns a model has FastAPI validate it again
(``serialize_response``) through a second threadpool hop before serializing it, though the
model was validated when the route built it. :func:`operation_answer` serializes it with the
adapter and the options FastAPI would use (by alias, nothing excluded), in the route's own
thread; the route returns that ``Response`` and keeps ``response_model=OperationOut`` for the
OpenAPI document.
"""

from __future__ import annotations

from fastapi import Response
from pydantic import TypeAdapter

from services.ingress.api.schemas import OperationOut

__all__ = ["operation_answer"]

_OPERATION = TypeAdapter(OperationOut)


def operation_answer(
    view: OperationOut, *, status_code: int = 200, location: bool = False
) -> Response:
    """``view`` as JSON bytes, as ``response_model=OperationOut`` would answer it; with
    ``location``, the ``Location`` header of a created (or replayed) operation."""
    headers = {"Location": f"/v1/operations/{view.id}"} if location else None
    return Response(
        _OPERATION.dump_json(view, by_alias=True),
        status_code=status_code,
        headers=headers,
        media_type="application/json",
    )
