"""The two bases of every body model the ingress's faces declare (the agent API's schemas, the
settings API's models, the delivery log's answers).

:class:`RequestModel` is a request body: no unknown fields, and nothing that cannot be stored (a
non-finite number, a NUL character, a lone surrogate, nesting deeper than ``MAX_JSON_DEPTH``):
such a body is refused with 422 naming the place (``input.a[2].b``), before any field is read.
:class:`ResponseModel` is an answer, filled by field name or alias.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, model_validator

from services.ingress.problems import unstorable_problem
from shared.core.storable import unstorable

__all__ = ["RequestModel", "ResponseModel"]


class RequestModel(BaseModel):
    """A request body: no unknown fields, nothing a table cannot hold."""

    model_config = ConfigDict(extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _storable(cls, data: Any) -> Any:
        if isinstance(data, dict):
            for name, value in data.items():
                found = unstorable(value, field=str(name))
                if found is not None:
                    raise unstorable_problem(found)
        return data


class ResponseModel(BaseModel):
    """An answer: filled by field name or by alias."""

    model_config = ConfigDict(populate_by_name=True)
