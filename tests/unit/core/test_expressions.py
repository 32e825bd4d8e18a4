"""Expressions: parsing, roots, missing paths, literals, path templates."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from shared.core import ExpressionError
from shared.core.expressions import (
    UNKNOWN,
    EvaluationContext,
    Expression,
    ListOperand,
    LiteralOperand,
    compile_expression,
    compile_operand,
    is_expression,
    resolve,
)
from shared.core.templates import compile_path_template, fill_path_template

CREATED = datetime(2026, 9, 10, 12, 0, tzinfo=UTC)
EVENT = {"id": "evt_1", "data": {"object": {"id": "re_1", "status": "succeeded"}}}
CONTEXT = EvaluationContext(
    input={"charge": "ch_1", "amount": 500, "meta": {"order": "o_9"}, "tags": ["a", "b"]},
    action_result={"id": "re_1", "status": "pending"},
    operation_id="op_1",
    operation_created_at=CREATED,
    correlation={"refund_id": "re_1", "nested": {"k": "v"}, "gone": UNKNOWN},
    observed={"refund_readback": {"status": "succeeded", "amount": 500, "failure": None}},
    event=EVENT,
)


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ("$input.charge", "ch_1"),
        ("$input.amount", 500),
        ("$input.meta.order", "o_9"),
        ("$input.tags.1", "b"),
        ("$input.tags.2", UNKNOWN),
        ("$input.tags.x", UNKNOWN),
        ("$input.charge.x", UNKNOWN),
        ("$input.missing", UNKNOWN),
        ("$input", CONTEXT.input),
        ("$action.result.id", "re_1"),
        ("$action.result.missing", UNKNOWN),
        ("$operation.id", "op_1"),
        ("$operation.created_at", CREATED),
        ("$correlation.refund_id", "re_1"),
        ("$correlation.nested.k", "v"),
        ("$correlation.gone", UNKNOWN),
        ("$correlation.unknown_key", UNKNOWN),
        ("$observed.refund_readback.status", "succeeded"),
        ("$observed.refund_readback.failure", None),
        ("$observed.refund_readback.failure.code", UNKNOWN),
        ("$observed.other_channel.status", UNKNOWN),
        ("$event.data.object.id", "re_1"),
        ("$event.data.object", EVENT["data"]["object"]),  # type: ignore[index]
        # literals pass through, lists of literals too
        ("succeeded", "succeeded"),
        (500, 500),
        (None, None),
        (["failed", "canceled"], ["failed", "canceled"]),
        (["$input.charge", "ch_2"], ["ch_1", "ch_2"]),
        ({"a": "$input.charge"}, {"a": "$input.charge"}),
    ],
)
def test_resolve(expr: Any, expected: Any) -> None:
    assert resolve(expr, CONTEXT) == expected


def test_unknown_roots_of_an_empty_context() -> None:
    empty = EvaluationContext()
    for expr in (
        "$action.result.id",
        "$event.id",
        "$operation.id",
        "$operation.created_at",
        "$observed.refund_readback.status",
        "$correlation.refund_id",
        "$input.charge",
    ):
        assert resolve(expr, empty) is UNKNOWN, expr
    assert resolve("$action.result.id", EvaluationContext(action_result=UNKNOWN)) is UNKNOWN


def test_missing_can_be_read_as_absent_for_exists() -> None:
    expr = compile_expression("$observed.refund_readback.failure_reason")
    assert expr.resolve(CONTEXT, None) is None
    assert expr.resolve(CONTEXT) is UNKNOWN
    nested = compile_expression("$observed.refund_readback.failure.reason")
    assert nested.resolve(CONTEXT, None) is None
    # an unknown document stays unknown whatever ``missing`` says
    assert compile_expression("$observed.x.y").resolve(CONTEXT, None) is UNKNOWN


def test_walks_into_tuples_and_mappings() -> None:
    from types import MappingProxyType

    context = EvaluationContext(input=MappingProxyType({"a": ({"b": 1},)}))
    assert resolve("$input.a.0.b", context) == 1


def test_compiled_forms_are_cached_and_know_their_channel() -> None:
    first = compile_expression("$observed.refund_readback.status")
    assert first is compile_expression("$observed.refund_readback.status")
    assert first.channel == "refund_readback"
    assert compile_expression("$input.amount").channel is None
    assert "refund_readback" in repr(first)
    assert resolve(first, CONTEXT) == "succeeded"


@pytest.mark.parametrize(
    "text",
    [
        "input.charge",
        "$",
        "$input.",
        "$input..a",
        "$in put",
        "$1abc",
        "$unknown.x",
        "$action.id",
        "$action",
        "$operation",
        "$operation.attempts",
        "$operation.id.x",
        "$observed",
        "$correlation",
    ],
)
def test_malformed_expressions_raise(text: str) -> None:
    with pytest.raises(ExpressionError):
        compile_expression(text)


def test_compile_operand_kinds() -> None:
    assert isinstance(compile_operand("$input.a"), Expression)
    assert isinstance(compile_operand("plain"), LiteralOperand)
    assert isinstance(compile_operand([1, 2]), LiteralOperand)
    assert isinstance(compile_operand(("$input.a",)), ListOperand)
    assert is_expression("$x")
    assert not is_expression("x")
    assert not is_expression(1)


def test_with_event_binds_only_the_event() -> None:
    bound = CONTEXT.with_event({"id": "evt_2"})
    assert resolve("$event.id", bound) == "evt_2"
    assert resolve("$input.charge", bound) == "ch_1"
    assert resolve("$event.id", CONTEXT) == "evt_1"


@pytest.mark.parametrize(
    ("correlation", "expected"),
    [
        ({"refund_id": "re_1"}, "/v1/refunds/re_1"),
        ({"refund_id": "re/../1 x"}, "/v1/refunds/re%2F..%2F1%20x"),
        ({"refund_id": 42}, "/v1/refunds/42"),
        ({"refund_id": ""}, None),
        ({"refund_id": None}, None),
        ({"refund_id": True}, None),
        ({"refund_id": {"a": 1}}, None),
        ({}, None),
        # A dot segment would read another resource: /v1/refunds/. is the list, .. is /v1.
        ({"refund_id": "."}, None),
        ({"refund_id": ".."}, None),
        ({"refund_id": "%2e%2e"}, None),
        ({"refund_id": "%2E"}, None),
        ({"refund_id": "%252e%252e"}, None),
        ({"refund_id": "..."}, "/v1/refunds/..."),
        ({"refund_id": "re_1.."}, "/v1/refunds/re_1.."),
    ],
)
def test_fill_path_template(correlation: dict[str, Any], expected: str | None) -> None:
    context = EvaluationContext(correlation=correlation)
    assert fill_path_template("/v1/refunds/{$correlation.refund_id}", context) == expected


def test_path_template_with_several_placeholders_and_a_tail() -> None:
    context = EvaluationContext(input={"a": "x y"}, correlation={"k": "z"})
    template = compile_path_template("/v1/{$input.a}/items/{$correlation.k}?expand=1")
    assert [e.text for e in template.expressions] == ["$input.a", "$correlation.k"]
    assert template.fill(context) == "/v1/x%20y/items/z?expand=1"
    assert fill_path_template("/v1/static", context) == "/v1/static"


@pytest.mark.parametrize(
    "template", ["/v1/{refund}", "/v1/{$input.a", "/v1/$input.a}", "/v1/{}", "/v1/{{$input.a}}"]
)
def test_malformed_path_templates_raise(template: str) -> None:
    with pytest.raises(ExpressionError):
        compile_path_template(template)


def test_unknown_reads_as_unknown() -> None:
    assert repr(UNKNOWN) == "UNKNOWN"


def test_a_template_may_start_with_a_placeholder() -> None:
    context = EvaluationContext(input={"host": "a"})
    assert fill_path_template("{$input.host}/x", context) == "a/x"
