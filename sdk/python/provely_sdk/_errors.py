"""The SDK's errors, one tree:

```
ProvelyError
├── ApiError            the API answered a problem document (RFC 9457); `.errors` names fields
│   └── NotFound        404: no such operation in this workspace (another's looks like none)
├── TransportError      no answer after the retries (connection refused, reset, timed out, 5xx)
└── ReceiptError        a receipt document or key list that cannot be checked at all
```

A refused input is an :class:`ApiError` carrying the API's field errors (``FieldError``), the
same ones the HTTP API answers: the SDK validates nothing on its own that the server would
judge differently.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["ApiError", "FieldError", "NotFound", "ProvelyError", "ReceiptError", "TransportError"]


class FieldError(BaseModel):
    """One invalid field of a request, as the API names it (``input.amount``, ``body``)."""

    field: str
    message: str


class ProvelyError(Exception):
    """Every error the SDK raises."""


class ApiError(ProvelyError):
    """The API refused the request with a problem document."""

    def __init__(
        self,
        *,
        status: int,
        kind: str,
        title: str,
        detail: str | None,
        errors: list[FieldError],
        body: dict[str, Any],
    ) -> None:
        super().__init__(f"{status} {kind}: {detail or title}")
        self.status = status
        self.kind = kind
        self.title = title
        self.detail = detail
        self.errors = errors
        self.body = body


class NotFound(ApiError):
    """404: the operation (or receipt) does not exist in this workspace."""


class TransportError(ProvelyError):
    """Provely could not be reached (or kept answering 5xx) after every retry."""


class ReceiptError(ProvelyError):
    """A receipt document or key list that cannot be checked (malformed, unknown key…)."""
