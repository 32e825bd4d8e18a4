"""What the sync and async clients share: each API call as a request to send and a way to read
its answer, the retry rule for Provely calls and the backoff of ``wait()``.

Nothing here does I/O; ``_client`` and ``_async_client`` send the requests.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar
from urllib.parse import quote

import httpx

from provely_sdk._errors import ApiError, FieldError, NotFound
from provely_sdk._models import ContractDetail, ContractSummary, OperationOut

__all__ = [
    "RETRYABLE_STATUSES",
    "Call",
    "action_report",
    "create_operation",
    "get_contract",
    "get_operation",
    "get_receipt",
    "list_contracts",
    "raise_for_problem",
    "receipt_keys",
    "retry_delay",
    "verify_operation",
    "wait_delay",
]

T = TypeVar("T")

RETRYABLE_STATUSES = frozenset({500, 502, 503, 504})
"""Answers after which the same request is sent again (with the same idempotency key)."""


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API request and how to read a successful answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json_body: Any = None
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    on_conflict_after_retry: Call[T] | None = None
    """A POST whose first attempt may have landed before its answer was lost: a 409 on a
    retry means it did, and this call (a read) answers instead."""

    def request(
        self, client: httpx.Client | httpx.AsyncClient, *, base_url: httpx.URL
    ) -> httpx.Request:
        return client.build_request(
            self.method,
            base_url.join(self.path.lstrip("/")),
            json=self.json_body,
            params=self.params or None,
            headers=self.headers or None,
        )


def raise_for_problem(response: httpx.Response) -> None:
    """Raise :class:`ApiError` (or :class:`NotFound`) for a 4xx/5xx answer."""
    if response.status_code < 400:
        return
    try:
        body = response.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        body = {"title": response.reason_phrase, "detail": response.text[:500]}
    raw_errors = body.get("errors") or []
    errors = [
        FieldError(field=str(e.get("field", "body")), message=str(e.get("message", "")))
        for e in raw_errors
        if isinstance(e, dict)
    ]
    kind = str(body.get("type", "")).rsplit("/", 1)[-1] or "error"
    error_class = NotFound if response.status_code == 404 else ApiError
    raise error_class(
        status=response.status_code,
        kind=kind,
        title=str(body.get("title", response.reason_phrase)),
        detail=body.get("detail") if isinstance(body.get("detail"), str) else None,
        errors=errors,
        body=body,
    )


def _operation(response: httpx.Response) -> OperationOut:
    return OperationOut.model_validate(response.json())


def _document(response: httpx.Response) -> dict[str, Any]:
    data = response.json()
    if not isinstance(data, dict):
        raise ValueError("expected a JSON object")
    return data


def _contracts(response: httpx.Response) -> list[ContractSummary]:
    return [ContractSummary.model_validate(item) for item in response.json()["data"]]


def _contract(response: httpx.Response) -> ContractDetail:
    return ContractDetail.model_validate(response.json())


def _path_part(value: str) -> str:
    """One path segment: every reserved character escaped (``/``, ``?``, ``#`` …)."""
    return quote(value, safe="")


def create_operation(
    *,
    contract: str,
    input: dict[str, Any],
    contract_version: str | None,
    metadata: dict[str, Any] | None,
    idempotency_key: str | None,
) -> Call[OperationOut]:
    body: dict[str, Any] = {"contract": contract, "input": input}
    if contract_version is not None:
        body["contract_version"] = contract_version
    if metadata is not None:
        body["metadata"] = metadata
    # Always a key: a retry after a lost answer replays the same operation, never a second one.
    key = idempotency_key or f"sdk-{uuid.uuid4()}"
    return Call("POST", "/v1/operations", _operation, body, headers={"Idempotency-Key": key})


def action_report(operation_id: str, report: dict[str, Any]) -> Call[OperationOut]:
    return Call(
        "POST",
        f"/v1/operations/{_path_part(operation_id)}/action",
        _operation,
        report,
        on_conflict_after_retry=get_operation(operation_id),
    )


def get_operation(operation_id: str) -> Call[OperationOut]:
    return Call("GET", f"/v1/operations/{_path_part(operation_id)}", _operation)


def verify_operation(operation_id: str) -> Call[OperationOut]:
    return Call("POST", f"/v1/operations/{_path_part(operation_id)}/verify", _operation)


def get_receipt(operation_id: str) -> Call[dict[str, Any]]:
    return Call("GET", f"/v1/operations/{_path_part(operation_id)}/receipt", _document)


def receipt_keys() -> Call[dict[str, Any]]:
    return Call("GET", "/v1/receipts/keys", _document)


def list_contracts() -> Call[list[ContractSummary]]:
    return Call("GET", "/v1/contracts", _contracts)


def get_contract(contract_id: str, version: str | None) -> Call[ContractDetail]:
    params = {"version": version} if version is not None else {}
    return Call("GET", f"/v1/contracts/{_path_part(contract_id)}", _contract, params=params)


def retry_delay(attempt: int) -> float:
    """Seconds before retry ``attempt`` (1, 2, …) of a Provely call: 0.25, 0.5, 1, 2 … ≤ 5."""
    return float(min(5.0, 0.25 * 2 ** (attempt - 1)))


def wait_delay(poll: int, *, remaining_s: float) -> float:
    """Seconds before poll ``poll`` (1, 2, …) of ``wait()``: 0.5, 1, 2, 4, 8, 10, 10 … and
    never past the caller's timeout."""
    return float(max(0.0, min(10.0, 0.5 * 2.0 ** (poll - 1), remaining_s)))
