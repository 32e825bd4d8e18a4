"""A realistic receipt body for the tests: a VERIFIED Stripe refund with three channels."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from shared.core.receipt import ReceiptContract, ReceiptEvidence, build_receipt_body
from shared.core.types import ConditionResult

T0 = datetime(2026, 11, 30, 7, 0, 0, tzinfo=UTC)
T1 = datetime(2026, 11, 30, 7, 0, 3, 250000, tzinfo=UTC)
T2 = datetime(2026, 11, 30, 7, 0, 5, tzinfo=UTC)

CONTRACT = ReceiptContract(
    id="stripe.refund.succeeded",
    version="1.0.0",
    hash="83491ff981adfd05" + "0" * 48,
    completion_level="succeeded",
)


def sample_body(**overrides: Any) -> dict[str, Any]:
    arguments: dict[str, Any] = {
        "receipt_id": "rcpt_0123456789abcdef0123456789abcdef",
        "operation_id": "op_01HZYX",
        "workspace_id": "ws_acme",
        "contract": CONTRACT,
        "verdict": "VERIFIED",
        "reason": "all_conditions_hold",
        "class_": None,
        "decided_at": T2,
        "valid_as_of": T1,
        "subject": {"type": "stripe.refund", "key": "refund_id", "id": "re_123"},
        "correlation": [("resource_id", "strong"), ("idempotency_key", "strong")],
        "conditions": [
            ConditionResult(
                "refund_status_succeeded", "completion", True, "succeeded", "succeeded"
            ),
            ConditionResult("refund_amount_matches", "completion", True, 1500, 1500),
            ConditionResult("refund_created_in_window", "completion", True, 1796022000, T0),
            ConditionResult("refund_event_succeeded", "completion", True, 1, 1),
            ConditionResult("duplicate_refund_present", "negative", False, 1, 1),
            ConditionResult("terminal_failure", "verdict_map", False, "succeeded", ["failed"]),
            ConditionResult("fraction", "completion", None, 0.25, None),
        ],
        "evidence": [
            ReceiptEvidence("refund_readback", "E2", T1, None, "a" * 64),
            ReceiptEvidence("refund_succeeded_events", "E3", T1, T0, "b" * 64),
        ],
        "supersedes": None,
    }
    arguments.update(overrides)
    return build_receipt_body(**arguments)


def leaves(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every leaf of a JSON value (an empty list or object counts as a leaf)."""
    if isinstance(value, dict) and value:
        return [p for k, v in value.items() for p in leaves(v, (*path, k))]
    if isinstance(value, list) and value:
        return [p for i, v in enumerate(value) for p in leaves(v, (*path, i))]
    return [path]


def get_at(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def flipped(value: Any) -> Any:
    """A different JSON value of the same kind where one exists."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value + 1.5
    if isinstance(value, str):
        return value[:-1] + ("x" if not value.endswith("x") else "y") if value else "x"
    if value is None:
        return "x"
    if isinstance(value, list):
        return ["x"]
    if isinstance(value, dict):
        return {"x": 1}
    raise TypeError(type(value))


def changed(path: tuple[Any, ...], value: Any) -> Any:
    """``flipped``, except that the version becomes the other version a verifier reads (an
    unknown version cannot be checked at all: it names no canonical form)."""
    if path == ("version",):
        return 1 if value == 2 else 2
    return flipped(value)


def set_at(value: Any, path: tuple[Any, ...], new: Any) -> None:
    target = get_at(value, path[:-1])
    target[path[-1]] = new
