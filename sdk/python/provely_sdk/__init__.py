"""provely_sdk — the Python client of Provely's agent API (``/v1``).

The protocol as code, in the order an agent keeps it::

    op = provely.create_operation(contract="stripe.refund.succeeded", input={...})
    # call the provider with op.id as its idempotency key, then ONE of:
    provely.report_result(op.id, result=body)       # the provider's answer
    provely.report_error(op.id, error=body, http_status=402)
    provely.report_timeout(op.id, message="...")    # no answer: not a failure
    op = provely.wait(op.id, timeout=30)            # PENDING is a normal answer
    print(op.verdict, op.guidance)                  # never repeat unless op.may_repeat_action

Modules: ``_client`` (:class:`Provely`), ``_async_client`` (:class:`AsyncProvely`),
``_calls`` (the requests both send, retries, backoff), ``_models`` (the API's answers),
``_guidance`` (the retry guidance in words), ``_reports`` (action report bodies),
``receipts`` (offline checks; ``_canonical`` and ``_ed25519`` beneath it), and
``stripe_refunds`` (needs the ``stripe`` extra; not imported here). It imports nothing of the
Provely server and depends on ``httpx`` and ``pydantic`` only.

Errors (``_errors``)::

    ProvelyError
    ├── ApiError          a problem document; .status, .kind, .detail, .errors (FieldError)
    │   └── NotFound      404 (another workspace's operation looks like none)
    ├── TransportError    no answer after the retries
    └── ReceiptError      a key list that cannot be read
"""

from __future__ import annotations

from provely_sdk._async_client import AsyncProvely
from provely_sdk._client import Provely
from provely_sdk._errors import (
    ApiError,
    FieldError,
    NotFound,
    ProvelyError,
    ReceiptError,
    TransportError,
)
from provely_sdk._models import ContractDetail, ContractSummary, OperationOut, RetryOut
from provely_sdk.receipts import KeyRing, ReceiptCheck, verify_receipt

__all__ = [
    "API_VERSION",
    "ApiError",
    "AsyncProvely",
    "ContractDetail",
    "ContractSummary",
    "FieldError",
    "KeyRing",
    "NotFound",
    "OperationOut",
    "Provely",
    "ProvelyError",
    "ReceiptCheck",
    "ReceiptError",
    "RetryOut",
    "TransportError",
    "__version__",
    "verify_receipt",
]

__version__ = "0.1.0"
API_VERSION = "v1"
