"""``shared.core.jcs.jcs`` spells what ``rfc8785.dumps`` spells, and refuses what it refuses."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

import pytest
import rfc8785
from hypothesis import given, settings
from hypothesis import strategies as st

from shared.core.jcs import jcs
from tests.unit.receipts.factory import sample_body

_keys = st.text(max_size=6) | st.sampled_from(["a", "b", "\uffff", "\U0001f600", "é", "Z"])
_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**60), 2**60)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_keys, inner, max_size=5),
    max_leaves=20,
)  # fmt: skip


def _rfc8785(value: Any) -> bytes | type[Exception]:
    try:
        return rfc8785.dumps(value)
    except rfc8785.CanonicalizationError:
        return rfc8785.CanonicalizationError


def _ours(value: Any) -> bytes | type[Exception]:
    try:
        return jcs(value)
    except rfc8785.CanonicalizationError:
        return rfc8785.CanonicalizationError


@settings(max_examples=1500, deadline=None)
@given(_json)
def test_jcs_spells_and_refuses_what_rfc8785_does(value: Any) -> None:
    assert _ours(value) == _rfc8785(value)


class _Colour(StrEnum):
    RED = "red"


@pytest.mark.parametrize(
    "value",
    [
        sample_body(),
        {"a": 2000.0, "b": [1, 0.25, "x"]},
        {"\uffff": 1, "\U0001f600": 2, "a": {"b": 1e21}},
        {"k": '\x00\x07\x1f"\\\b\f\n\r\t\u2028é\U0001f600'},
        {"big": 2**53 - 1, "small": -(2**53) + 1},
        {"big": 2**53},
        {"lone": "\ud800"},
        {"nested": [{"lone": "\udfff"}, 0.5]},
        {"enum": _Colour.RED, "tuple": (1, 2)},
        {1: "a"},
        [True, False, None, [], {}],
    ],
)
def test_jcs_at_the_edges(value: Any) -> None:
    assert _ours(value) == _rfc8785(value)
