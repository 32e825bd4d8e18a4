"""Stripe's bracketed form encoding, decoded without any server."""

from __future__ import annotations

from typing import Any

import pytest

from services.sandbox.forms import FormError, as_list, decode_form, parse_body


@pytest.mark.parametrize(
    ("pairs", "expected"),
    [
        ([("amount", "100")], {"amount": "100"}),
        ([("metadata[a]", "1"), ("metadata[b]", "")], {"metadata": {"a": "1", "b": ""}}),
        ([("e[]", "x"), ("e[]", "y")], {"e": {"0": "x", "1": "y"}}),
        ([("e[0]", "x"), ("e[1]", "y")], {"e": {"0": "x", "1": "y"}}),
        (
            [("line_items[0][price_data][unit_amount]", "5"), ("line_items[0][quantity]", "2")],
            {"line_items": {"0": {"price_data": {"unit_amount": "5"}, "quantity": "2"}}},
        ),
        ([("created[gte]", "10"), ("created[lt]", "20")], {"created": {"gte": "10", "lt": "20"}}),
    ],
)
def test_decode_form(pairs: list[tuple[str, str]], expected: dict[str, Any]) -> None:
    assert decode_form(pairs) == expected


@pytest.mark.parametrize(
    "pairs",
    [
        [("a]", "1")],
        [("a[b", "1")],
        [("a", "1"), ("a[b]", "2")],
        [("a[b]", "2"), ("a", "1")],
    ],
)
def test_malformed_keys_are_refused(pairs: list[tuple[str, str]]) -> None:
    with pytest.raises(FormError):
        decode_form(pairs)


def test_as_list_orders_by_index_and_refuses_objects() -> None:
    assert as_list({"1": "b", "0": "a", "10": "c"}, param="e") == ["a", "b", "c"]
    assert as_list("one", param="e") == ["one"]
    with pytest.raises(FormError):
        as_list({"x": "1"}, param="e")


def test_parse_body_decodes_percent_escapes_and_refuses_bad_utf8() -> None:
    assert parse_body(b"metadata%5Bk%5D=a+b%26c") == {"metadata": {"k": "a b&c"}}
    with pytest.raises(FormError):
        parse_body(b"a=\xff")
