"""Examples of the OpenAPI document: one realistic body for every documented answer and for
every request body.

:func:`add_examples` writes them into the generated document: a success body per operation id
and status from :data:`SUCCESS`, for every problem+json answer a problem document of its
status, and a request body per operation id and media type from :data:`REQUESTS`. A test
validates each example against the schema it illustrates, so an example cannot drift from the
model it stands for.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from services.ingress.problems import KINDS
from services.ingress.settings import examples as settings_examples

__all__ = ["REQUESTS", "SUCCESS", "add_examples", "problem_example"]

_OP = "op_01JDX4V7Q9K2M3N4P5R6S7T8V9"
_WS = "ws_01JDX4S0A1B2C3D4E5F6G7H8J9"
_T0 = "2026-12-01T09:00:00.000000Z"
_T1 = "2026-12-01T09:00:01.250000Z"
_T2 = "2026-12-01T09:00:06.400000Z"
_HASH = "83491ff981adfd05" + "3f9c0d2a71b4e8c5" * 3

_CONTRACT_REF = {
    "id": "stripe.refund.succeeded",
    "version": "1.1.0",
    "hash": _HASH,
    "completion_level": "succeeded",
}

OPERATION: dict[str, Any] = {
    "id": _OP,
    "workspace_id": _WS,
    "contract": _CONTRACT_REF,
    "state": "PENDING",
    "verdict": "PENDING",
    "reason": "awaiting_evidence",
    "class": None,
    "final": False,
    "completion_level": "succeeded",
    "claim": "Nothing may be claimed yet: the verdict is PENDING (state PENDING).",
    "safe_to_claim_complete": False,
    "watch_until": None,
    "retry": {"action": "never", "verification": "no", "decided_by": "runtime"},
    "explanation": "The refund exists and is pending; no refund.updated event has arrived yet.",
    "created_at": _T0,
    "updated_at": _T1,
    "attempts": 1,
    "next_observation_at": _T2,
    "deadline": "2026-12-04T09:00:00.000000Z",
    "action": {
        "phase": "result",
        "http_status": 200,
        "reported_at": _T1,
        "report_deadline": "2026-12-01T09:15:00.000000Z",
    },
    "subject": {"type": "stripe.refund", "key": "refund_id", "id": "re_3QxYz1AbCdEfGhIj"},
    "correlation": [
        {"strategy": "resource_id", "assurance": "strong", "value": "re_3QxYz1AbCdEfGhIj"}
    ],
    "conditions": [
        {
            "id": "refund_status_succeeded",
            "kind": "completion",
            "holds": False,
            "observed": "pending",
            "expected": "succeeded",
        }
    ],
    "evidence": [
        {
            "channel": "refund_readback",
            "level": "E2",
            "status": "ok",
            "observed_at": _T1,
            "provider_timestamp": None,
            "fresh": True,
            "used": True,
        }
    ],
    "receipt_url": None,
    "input": {"charge": "ch_3QxYz0AbCdEfGhIj", "amount": 2000, "currency": "usd"},
    "metadata": {"ticket": "SUP-1042"},
}

VERIFIED: dict[str, Any] = {
    **OPERATION,
    "state": "VERIFIED",
    "verdict": "VERIFIED",
    "reason": "all_conditions_hold",
    "final": True,
    "claim": "Stripe finished the refund and reports it as succeeded.",
    "safe_to_claim_complete": True,
    "watch_until": "2026-12-04T09:00:02.000000Z",
    "explanation": None,
    "next_observation_at": None,
    "receipt_url": f"/v1/operations/{_OP}/receipt",
    "conditions": [
        {
            "id": "refund_status_succeeded",
            "kind": "completion",
            "holds": True,
            "observed": "succeeded",
            "expected": "succeeded",
        }
    ],
}

CONTRACT_SUMMARY: dict[str, Any] = {
    "id": "stripe.refund.succeeded",
    "version": "1.0.0",
    "title": "A Stripe refund succeeded",
    "completion_level": "succeeded",
    "certification": "community",
    "provider": "stripe",
    "hash": _HASH,
    "custom": False,
}

RECEIPT: dict[str, Any] = {
    "receipt": {
        "version": 2,
        "id": "rcpt_5b1f0e7c9d2a4b6e8f0a1c3e5d7b9f1a",
        "operation_id": _OP,
        "workspace_id": _WS,
        "contract": _CONTRACT_REF,
        "verdict": "VERIFIED",
        "reason": "all_conditions_hold",
        "class": None,
        "safe_to_claim_complete": True,
        "decided_at": _T2,
        "valid_as_of": _T2,
        "subject": {"type": "stripe.refund", "key": "refund_id", "id": "re_3QxYz1AbCdEfGhIj"},
        "correlation": [{"strategy": "resource_id", "assurance": "strong"}],
        "conditions": [
            {
                "id": "refund_status_succeeded",
                "kind": "completion",
                "holds": True,
                "observed": "succeeded",
                "expected": "succeeded",
            }
        ],
        "evidence": [
            {
                "channel": "refund_readback",
                "level": "E2",
                "observed_at": _T2,
                "provider_timestamp": None,
                "digest": "9f2c" * 16,
            }
        ],
        "supersedes": None,
        "watch_until": "2026-12-04T09:00:02.000000Z",
    },
    "signature": "BwgJCgsMDQ4PEBESExQVFhcYGRobHB0eHyAhIiMkJSYnKCkqKywtLi8wMTIz"
    "NDU2Nzg5Ojs8PT4_QEFCQ0RFRg",
    "key_id": "3f9c0d2a71b4e8c5",
    "alg": "Ed25519",
}

RECEIPT_KEYS: dict[str, Any] = {
    "keys": [
        {
            "key_id": "3f9c0d2a71b4e8c5",
            "alg": "Ed25519",
            "public_key": "A3Jc0kq2mZr4b3l8yN1xQ5wVf7uT9sR2pO6nM4lK0jI=",
            "status": "active",
            "created_at": _T0,
            "retired_at": None,
        }
    ]
}

#: operation id -> HTTP status -> example body of a success answer
_REFUND = {
    "id": "re_3QxYz1AbCdEfGhIj",
    "object": "refund",
    "amount": 2000,
    "charge": "ch_3QxYz0AbCdEfGhIj",
    "currency": "usd",
    "status": "pending",
    "created": 1796115601,
}

_CONTRACT_YAML = """id: acme.refund.recorded
version: 1.0.0
completion_level: created
# … the rest of the contract (docs/contracts.md)
"""

REQUESTS: dict[str, dict[str, Any]] = {
    "create_operation": {
        "application/json": {
            "contract": "stripe.refund.succeeded",
            "input": {"charge": "ch_3QxYz0AbCdEfGhIj", "amount": 2000, "currency": "usd"},
            "metadata": {"ticket": "SUP-1042"},
        }
    },
    "report_action": {
        "application/json": {"phase": "result", "http_status": 200, "result": _REFUND}
    },
    "review_operation": {
        "application/json": {
            "verdict": "VERIFIED",
            "note": "Refund re_3QxYz1AbCdEfGhIj seen succeeded in the Stripe dashboard.",
        }
    },
    "upload_contract": {
        "application/yaml": _CONTRACT_YAML,
        "application/json": {
            "id": "acme.refund.recorded",
            "version": "1.0.0",
            "completion_level": "created",
        },
    },
    "receive_event": {
        "application/json": {
            "id": "evt_3QxYz2AbCdEfGhIj",
            "object": "event",
            "type": "refund.updated",
            "api_version": "2026-08-26",
            "created": 1796115606,
            "data": {"object": {**_REFUND, "status": "succeeded"}},
        }
    },
}
"""A request body per operation id and media type (a test requires one for every body)."""
REQUESTS |= settings_examples.REQUESTS  # the settings API keeps its own (#36)

SUCCESS: dict[str, dict[str, Any]] = {
    "list_deliveries": {
        "200": {
            "data": [
                {
                    "outcome": "stored",
                    "received_at": _T2,
                    "provider": "stripe",
                    "event_id": "evt_3QxYz2AbCdEfGhIj",
                    "type": "refund.updated",
                    "api_version": "2025-03-31.basil",
                    "repeats": 0,
                    "escaped": None,
                    "ignored": "api_version 2025-03-31.basil is not among 2026-08-26",
                    "ignored_reason": "api_version",
                    "reason": None,
                    "http_status": None,
                    "size": None,
                },
                {
                    "outcome": "refused",
                    "received_at": _T1,
                    "provider": "stripe",
                    "event_id": None,
                    "type": None,
                    "api_version": None,
                    "repeats": None,
                    "escaped": None,
                    "ignored": None,
                    "ignored_reason": None,
                    "reason": "no_matching_signature",
                    "http_status": 400,
                    "size": 1873,
                },
            ],
            "next_cursor": None,
        }
    },
    "create_operation": {
        "201": {
            **OPERATION,
            "state": "CREATED",
            "action": {
                "phase": None,
                "http_status": None,
                "reported_at": None,
                "report_deadline": "2026-12-01T09:15:00.000000Z",
            },
            "evidence": [],
            "conditions": [],
            "attempts": 0,
            "next_observation_at": None,
        },
        "200": OPERATION,
    },
    "report_action": {"200": OPERATION},
    "get_operation": {"200": VERIFIED},
    "list_operations": {
        "200": {"data": [VERIFIED], "next_cursor": "WyIyMDI2LTEyLTAxVDA5OjAwOjAwIiwib3BfMDEiXQ"}
    },
    "get_operation_timeline": {
        "200": {
            "operation_id": _OP,
            "entries": [
                {
                    "kind": "transition",
                    "at": _T0,
                    "from_state": None,
                    "to_state": "CREATED",
                    "cause": "created",
                    "seq": 1,
                },
                {
                    "kind": "observation",
                    "at": _T1,
                    "channel": "refund_readback",
                    "status": "ok",
                    "fence": 1,
                    "http_status": 200,
                    "digest": "9f2c" * 16,
                },
                {
                    "kind": "event",
                    "at": _T2,
                    "event_id": "evt_3QxYz2AbCdEfGhIj",
                    "type": "refund.updated",
                    "provider_timestamp": "2026-12-01T09:00:06Z",
                    "strategy": "resource_id",
                    "assurance": "strong",
                },
            ],
        }
    },
    "verify_operation": {
        "202": {
            **OPERATION,
            "state": "OBSERVING",
            "verdict": "UNVERIFIABLE",
            "reason": "evidence_unavailable",
            "retry": {"action": "never", "verification": "yes", "decided_by": "runtime"},
        }
    },
    "review_operation": {
        "200": {
            **VERIFIED,
            "state": "VERIFIED",
            "reason": "human_review",
            "review": {
                "verdict": "VERIFIED",
                "note": "Checked in the Stripe dashboard: the refund reached the card.",
                "reviewed_at": _T2,
                "reviewed_by": "key_01JDX4T1",
            },
        }
    },
    "list_contracts": {"200": {"data": [CONTRACT_SUMMARY]}},
    "get_contract": {
        "200": {
            **CONTRACT_SUMMARY,
            "page": "# stripe.refund.succeeded 1.0.0\n\nA Stripe refund succeeded …\n",
            "document": {"id": "stripe.refund.succeeded", "version": "1.0.0"},
        }
    },
    "upload_contract": {
        "201": {
            **CONTRACT_SUMMARY,
            "id": "acme.refund.settled",
            "certification": "custom",
            "custom": True,
        },
        "200": {
            **CONTRACT_SUMMARY,
            "id": "acme.refund.settled",
            "certification": "custom",
            "custom": True,
        },
    },
    "get_operation_receipt": {"200": RECEIPT},
    "get_receipt": {"200": RECEIPT},
    "list_receipt_keys": {"200": RECEIPT_KEYS},
    "get_health": {"200": {"status": "ok", "checks": {}}},
    "get_readiness": {
        "200": {"status": "ok", "checks": {"database": "ok", "broker": "ok"}},
        "503": {
            "status": "unavailable",
            "checks": {"database": "ok", "broker": "unreachable: OperationalError"},
        },
    },
    "receive_event": {
        "200": {"received": True, "event_id": "evt_3QxYz2AbCdEfGhIj", "duplicate": False}
    },
}
SUCCESS |= settings_examples.SUCCESS

_DETAILS = {
    400: "the body is not valid JSON",
    401: "missing or unknown API key",
    403: "this call needs an admin key",
    404: f"no operation {_OP}",
    405: "only POST is allowed here",
    409: "the operation is already final (VERIFIED)",
    413: "the body is larger than 1048576 bytes",
    415: "send application/json or application/yaml",
    422: "the request is well-formed but invalid",
    503: "the database is unavailable; retry later",
}


def problem_example(status: int) -> dict[str, Any]:
    """A problem document of ``status`` as :mod:`services.ingress.problems` writes one."""
    body: dict[str, Any] = {
        "type": "https://provely.dev/problems/" + KINDS.get(status, "error"),
        "title": HTTPStatus(status).phrase,
        "status": status,
        "detail": _DETAILS.get(status, HTTPStatus(status).phrase.lower()),
        "instance": f"/v1/operations/{_OP}",
    }
    if status == 422:
        body["errors"] = [{"field": "input.amount", "message": "must be a positive integer"}]
    return body


def add_examples(schema: dict[str, Any]) -> None:
    """Write an example into every response content and request body of every operation that
    has none."""
    for item in schema.get("paths", {}).values():
        for operation in item.values():
            if not isinstance(operation, dict) or "responses" not in operation:
                continue
            requests = REQUESTS.get(str(operation.get("operationId")), {})
            body = operation.get("requestBody") or {}
            for media, content in (body.get("content") or {}).items():
                if "example" not in content and "examples" not in content and media in requests:
                    content["example"] = requests[media]
            known = SUCCESS.get(str(operation.get("operationId")), {})
            for status, response in operation["responses"].items():
                for media, content in (response.get("content") or {}).items():
                    if "example" in content or "examples" in content:
                        continue
                    if media == "application/problem+json":
                        content["example"] = problem_example(int(status))
                    elif str(status) in known:
                        content["example"] = known[str(status)]
