"""What a JSON value must be to be stored, and where it is not (shared.core.storable)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shared.core.storable import MAX_JSON_DEPTH, too_deep_in_text, unstorable
from shared.core.storable_copy import TOO_DEEP, escaped_text, storable_copy


def nested(depth: int) -> Any:
    value: Any = {}
    for _ in range(depth - 1):
        value = [value]
    return value


@pytest.mark.parametrize(
    ("value", "field", "reason"),
    [
        ({"a": float("nan")}, "input.a", "non_finite_number"),
        ({"a": [1, float("inf")]}, "input.a[1]", "non_finite_number"),
        ({"a": {"b": -float("inf")}}, "input.a.b", "non_finite_number"),
        (json.loads('{"a": 1e999}'), "input.a", "non_finite_number"),
        ({"a": "x\x00y"}, "input.a", "nul_character"),
        ({"a\x00": 1}, "input.a\\u0000", "nul_character"),
        ({"ok": {"\ud800": 1}}, "input.ok.\\ud800", "lone_surrogate"),
        ({"a": ["\udfff"]}, "input.a[0]", "lone_surrogate"),
        ({"a": nested(MAX_JSON_DEPTH)}, "input.a" + "[0]" * (MAX_JSON_DEPTH - 1), "too_deep"),
        ({"a": nested(900)}, "input.a" + "[0]" * (MAX_JSON_DEPTH - 1), "too_deep"),
    ],
)
def test_the_first_unstorable_place_is_named(value: Any, field: str, reason: str) -> None:
    found = unstorable(value, field="input")
    assert found is not None
    assert (found.field, found.reason) == (field, reason)
    assert found.message


@pytest.mark.parametrize(
    "value",
    [
        {},
        {"a": [1, 2.5, -0.0, "é", "日本", True, None, {"b": []}]},
        {"a": nested(MAX_JSON_DEPTH - 1)},
        "plain",
        10**30,
    ],
)
def test_storable_values_pass(value: Any) -> None:
    assert unstorable(value, field="input") is None


def test_a_value_without_a_field_name_is_the_body() -> None:
    found = unstorable(float("nan"))
    assert found is not None
    assert found.field == "body"
    deep = unstorable(nested(3), max_depth=2)  # [[{}]]: the {} is the third level
    assert deep is not None
    assert deep.field == "[0][0]"


def test_non_string_keys_are_named_as_text() -> None:
    found = unstorable({1: float("nan")}, field="m")
    assert found is not None
    assert found.field == "m.1"


def text_nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ('{"input": ' + text_nested(70) + "}", "input" + "[0]" * MAX_JSON_DEPTH),
        (
            '{"input": {"a": [1, "x,]", {"b\\"": ' + text_nested(5000) + "}]}}",
            'input.a[2].b"' + "[0]" * (MAX_JSON_DEPTH - 3),
        ),
        ('{"in\\u0000": ' + text_nested(70) + "}", "in\\u0000" + "[0]" * MAX_JSON_DEPTH),
        ('{"bad\\x": ' + text_nested(70) + "}", "?" + "[0]" * MAX_JSON_DEPTH),
        (text_nested(70), "[0]" * (MAX_JSON_DEPTH + 1)),  # the body itself is no field
    ],
)
def test_depth_is_found_in_text_the_parser_cannot_read(text: str, field: str) -> None:
    found = too_deep_in_text(text)
    assert found is not None
    assert found.reason == "too_deep"
    assert found.field == field


def test_shallow_text_is_not_too_deep() -> None:
    assert too_deep_in_text('{"a": [[{"b": [1, 2]}]], "c": "[[[[["}') is None
    assert too_deep_in_text("]]]}") is None
    assert too_deep_in_text('{"a": {}}', max_depth=0) is not None


# ------------------------------------------------------------------ the storable copy (#33)


@pytest.mark.parametrize(
    ("value", "copied", "places"),
    [
        ({"note": "a\x00b"}, {"note": "a\\u0000b"}, ("note",)),
        ({"a\x00": 1}, {"a\\u0000": 1}, ("a\\u0000",)),
        ({"a": ["\ud800", "ok"]}, {"a": ["\\ud800", "ok"]}, ("a[0]",)),
        ({"n": float("inf"), "m": -float("inf")}, {"n": "inf", "m": "-inf"}, ("n", "m")),
        ({"d": nested(3)}, {"d": [TOO_DEEP]}, ("d[0]",)),
        ("x\x00", "x\\u0000", ("body",)),
    ],
)
def test_the_storable_copy_escapes_and_names_each_place(
    value: Any, copied: Any, places: tuple[str, ...]
) -> None:
    copy = storable_copy(value, max_depth=2)
    assert copy.value == copied
    assert copy.places == places
    assert unstorable(copy.value, max_depth=2) is None


def test_a_storable_value_is_its_own_copy() -> None:
    value = {"a": [1, "é", {"b": None}]}
    copy = storable_copy(value)
    assert copy.value is value
    assert copy.places == ()


def test_the_copy_of_a_very_deep_value_needs_no_deep_recursion() -> None:
    copy = storable_copy({"a": nested(50_000)})
    assert unstorable(copy.value) is None
    assert len(copy.places) == 1


def test_an_escaped_key_equal_to_another_keeps_the_first() -> None:
    copy = storable_copy({"a\\u0000": 1, "a\x00": 2})
    assert copy.value == {"a\\u0000": 1}
    assert copy.places == ("a\\u0000",)


def test_escaped_text_leaves_ordinary_text_alone() -> None:
    assert escaped_text("日本 é") == "日本 é"
    assert escaped_text("a\x00\udc00") == "a\\u0000\\udc00"
