"""The synchronous client: :class:`Provely`.

Every call goes through :meth:`Provely._send`: a connection error or a 5xx answer is retried
(up to ``retries`` times, same request, same idempotency key); anything else answers at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import httpx

from provely_sdk import _calls
from provely_sdk._calls import RETRYABLE_STATUSES, Call
from provely_sdk._errors import TransportError
from provely_sdk._models import ContractDetail, ContractSummary, OperationOut
from provely_sdk._reports import error_report, result_report, started_report, timeout_report
from provely_sdk.receipts import KeyRing, ReceiptCheck, verify_receipt

__all__ = ["Provely"]

T = TypeVar("T")


class Provely:
    """A client of one workspace (its API key) on one Provely API.

    ``http_client`` may be given (tests pass an ``httpx.Client`` with a ``MockTransport``);
    otherwise one is made and :meth:`close` closes it.
    """

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        http_client: httpx.Client | None = None,
        sleep: Callable[[float], object] = time.sleep,
    ) -> None:
        self._own = http_client is None
        self._http = http_client or httpx.Client(timeout=timeout)
        self._base = httpx.URL(base_url.rstrip("/") + "/")
        self._headers = {"Authorization": f"Bearer {api_key}"}
        self._retries = retries
        self._sleep = sleep
        self._keys: KeyRing | None = None

    def __enter__(self) -> Provely:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if self._own:
            self._http.close()

    def _send(self, call: Call[T]) -> T:
        attempt = 0
        while True:
            request = call.request(self._http, base_url=self._base)
            request.headers.update(self._headers)
            try:
                response = self._http.send(request)
            except httpx.TransportError as exc:
                if attempt >= self._retries:
                    raise TransportError(f"{call.method} {call.path}: {exc!r}") from exc
            else:
                if response.status_code not in RETRYABLE_STATUSES:
                    recover = call.on_conflict_after_retry
                    if attempt and response.status_code == 409 and recover is not None:
                        return self._send(recover)  # the first attempt landed; its answer was lost
                    _calls.raise_for_problem(response)
                    return call.parse(response)
                if attempt >= self._retries:
                    _calls.raise_for_problem(response)
            attempt += 1
            self._sleep(_calls.retry_delay(attempt))

    # The protocol, step by step.

    def create_operation(
        self,
        *,
        contract: str,
        input: dict[str, Any],
        contract_version: str | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
    ) -> OperationOut:
        """Step 1: an operation bound to ``contract``. Its ``id`` is the provider's idempotency
        key. The same ``idempotency_key`` (and body) gives back the same operation."""
        return self._send(
            _calls.create_operation(
                contract=contract,
                input=input,
                contract_version=contract_version,
                metadata=metadata,
                idempotency_key=idempotency_key,
            )
        )

    def report_started(self, operation_id: str) -> OperationOut:
        """Step 3a (optional): the action is about to be sent."""
        return self._send(_calls.action_report(operation_id, started_report()))

    def report_result(
        self, operation_id: str, *, result: dict[str, Any], http_status: int = 200
    ) -> OperationOut:
        """Step 3: the provider's answer body. It never verifies on its own (evidence does)."""
        return self._send(
            _calls.action_report(operation_id, result_report(result, http_status=http_status))
        )

    def report_error(
        self, operation_id: str, *, error: dict[str, Any], http_status: int | None = None
    ) -> OperationOut:
        """Step 3: the provider refused (``http_status``) or the call broke (no status)."""
        return self._send(
            _calls.action_report(operation_id, error_report(error, http_status=http_status))
        )

    def report_timeout(self, operation_id: str, *, message: str) -> OperationOut:
        """Step 3: no answer came. A timeout is not a failure: the effect may have happened,
        and Provely finds out by observing."""
        return self._send(_calls.action_report(operation_id, timeout_report(message)))

    def get_operation(self, operation_id: str) -> OperationOut:
        """Step 4: the verdict as it stands. PENDING is a normal answer."""
        return self._send(_calls.get_operation(operation_id))

    def verify_again(self, operation_id: str) -> OperationOut:
        """Ask for another verification (allowed when ``retry.verification`` is ``yes``)."""
        return self._send(_calls.verify_operation(operation_id))

    def wait(self, operation_id: str, *, timeout: float) -> OperationOut:
        """Poll until the operation is final or ``timeout`` seconds have passed, with backoff;
        then answer it as it stands — PENDING or UNVERIFIABLE included, as normal answers.
        It only reads: it never performs the action, nor suggests it (see ``.guidance``)."""
        deadline = time.monotonic() + timeout
        poll = 0
        while True:
            op = self.get_operation(operation_id)
            remaining = deadline - time.monotonic()
            if op.final or remaining <= 0:
                return op
            poll += 1
            self._sleep(_calls.wait_delay(poll, remaining_s=remaining))

    # Receipts and contracts.

    def get_receipt(self, operation_id: str) -> dict[str, Any]:
        """The signed receipt of a final verdict (``NotFound`` while the operation is open)."""
        return self._send(_calls.get_receipt(operation_id))

    def receipt_keys(self, *, refresh: bool = False) -> KeyRing:
        """The receipt keys of this Provely, fetched once and kept (``refresh`` fetches again)."""
        if self._keys is None or refresh:
            document = self._send(_calls.receipt_keys())
            self._keys = KeyRing.from_document(document)
        return self._keys

    def verify_receipt(self, document: dict[str, Any] | str | bytes) -> ReceiptCheck:
        """Check a receipt offline with the cached keys; an unknown key fetches them once
        more (a key made since), then the check stands."""
        check = verify_receipt(document, self.receipt_keys())
        if check.unknown_key:
            check = verify_receipt(document, self.receipt_keys(refresh=True))
        return check

    def list_contracts(self) -> list[ContractSummary]:
        return self._send(_calls.list_contracts())

    def get_contract(self, contract_id: str, *, version: str | None = None) -> ContractDetail:
        """One contract with its rendered page (``.page``, Markdown)."""
        return self._send(_calls.get_contract(contract_id, version))
