"""The asynchronous client: :class:`AsyncProvely`, the same calls as :class:`Provely` over an
``httpx.AsyncClient``, with the same retries and the same ``wait()``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import httpx

from provely_sdk import _calls
from provely_sdk._calls import RETRYABLE_STATUSES, Call
from provely_sdk._errors import TransportError
from provely_sdk._models import ContractDetail, ContractSummary, OperationOut
from provely_sdk._reports import error_report, result_report, started_report, timeout_report
from provely_sdk.receipts import KeyRing, ReceiptCheck, verify_receipt

__all__ = ["AsyncProvely"]

T = TypeVar("T")


class AsyncProvely:
    """The async client of one workspace on one Provely API (see :class:`Provely`)."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        http_client: httpx.AsyncClient | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self._own = http_client is None
        self._http = http_client or httpx.AsyncClient(timeout=timeout)
        self._base = httpx.URL(base_url.rstrip("/") + "/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._retries = retries
        self._sleep = sleep
        self._keys: KeyRing | None = None

    async def __aenter__(self) -> AsyncProvely:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._own:
            await self._http.aclose()

    async def _send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            request = call.request(self._http, base_url=self._base)
            request.headers.update(self._headers)
            try:
                response = await self._http.send(request)
            except httpx.TransportError as exc:
                if attempt >= self._retries:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
            else:
                if response.status_code not in RETRYABLE_STATUSES:
                    recover = call.on_conflict_after_retry
                    if attempt and response.status_code == 409 and recover is not None:
                        return await self._send(recover)  # the first attempt landed
                    _calls.raise_for_problem(response)
                    return call.parse(response)
                if attempt >= self._retries:
                    _calls.raise_for_problem(response)
            attempt += 1
            await self._sleep(_calls.retry_delay(attempt))

    async def create_operation(
        self,
        *,
        contract: str,
        input: dict[str, Any],
        contract_version: str | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> OperationOut:
        return await self._send(
            _calls.create_operation(
                contract=contract,
                input=input,
                contract_version=contract_version,
                metadata=metadata,
                idempotency_key=idempotency_key,
            )
        )

    async def report_started(self, operation_id: str) -> OperationOut:
        return await self._send(_calls.action_report(operation_id, started_report()))

    async def report_result(
        self, operation_id: str, *, result: dict[str, Any], http_status: int = 200
    ) -> OperationOut:
        return await self._send(
            _calls.action_report(operation_id, result_report(result, http_status=http_status))
        )

    async def report_error(
        self, operation_id: str, *, error: dict[str, Any], http_status: int | None = None
    ) -> OperationOut:
        return await self._send(
            _calls.action_report(operation_id, error_report(error, http_status=http_status))
        )

    async def report_timeout(self, operation_id: str, *, message: str) -> OperationOut:
        return await self._send(_calls.action_report(operation_id, timeout_report(message)))

    async def get_operation(self, operation_id: str) -> OperationOut:
        return await self._send(_calls.get_operation(operation_id))

    async def verify_again(self, operation_id: str) -> OperationOut:
        return await self._send(_calls.verify_operation(operation_id))

    async def wait(self, operation_id: str, *, timeout: float) -> OperationOut:
        """As :meth:`Provely.wait`: reads until final or ``timeout``; PENDING is an answer."""
        deadline = time.monotonic() + timeout
        poll = 0
        while True:
            op = await self.get_operation(operation_id)
            remaining = deadline - time.monotonic()
            if op.final or remaining <= 0:
                return op
            poll += 1
            await self._sleep(_calls.wait_delay(poll, remaining_s=remaining))

    async def get_receipt(self, operation_id: str) -> dict[str, Any]:
        return await self._send(_calls.get_receipt(operation_id))

    async def receipt_keys(self, *, refresh: bool = False) -> KeyRing:
        if self._keys is None or refresh:
            document = await self._send(_calls.receipt_keys())
            self._keys = KeyRing.from_document(document)
        return self._keys

    async def verify_receipt(self, document: dict[str, Any] | str | bytes) -> ReceiptCheck:
        check = verify_receipt(document, await self.receipt_keys())
        if check.unknown_key:
            check = verify_receipt(document, await self.receipt_keys(refresh=True))
        return check

    async def list_contracts(self) -> list[ContractSummary]:
        return await self._send(_calls.list_contracts())

    async def get_contract(self, contract_id: str, *, version: str | None = None) -> ContractDetail:
        return await self._send(_calls.get_contract(contract_id, version))
