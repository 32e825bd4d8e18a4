"""Three-valued operators: a table of (operator, left, right, expected truth)."""

from __future__ import annotations

from collections import OrderedDict
from datetime import UTC, datetime, timedelta, timezone
from http import HTTPStatus
from types import MappingProxyType
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from shared.core.contract import Operator
from shared.core.expressions import UNKNOWN
from shared.core.operators import evaluate, to_instant, truth_and
from shared.core.types import Verdict

Op = Operator
T = datetime(2026, 9, 10, 12, 0, 0, 400_000, tzinfo=UTC)
SECOND = int(datetime(2026, 9, 10, 12, 0, 0, tzinfo=UTC).timestamp())
NAN = float("nan")

TABLE: list[tuple[Operator, Any, Any, bool | None]] = [
    # eq / ne on every comparison type
    (Op.EQ, 1, 1, True),
    (Op.EQ, 1, 1.0, True),
    (Op.EQ, 1, 2, False),
    (Op.EQ, "a", "a", True),
    (Op.EQ, "a", "b", False),
    (Op.EQ, True, True, True),
    (Op.EQ, None, None, True),
    (Op.EQ, [1, "a"], [1, "a"], True),
    (Op.EQ, [1, "a"], [1, "b"], False),
    (Op.EQ, [1], [1, 2], False),
    (Op.EQ, [1, True], [1, 1], None),
    (Op.EQ, {"a": 1}, {"a": 1}, True),
    (Op.EQ, {"a": 1}, {"b": 1}, False),
    (Op.EQ, {"a": 1}, {"a": "1"}, None),
    (Op.EQ, T, T.replace(tzinfo=None), True),
    (Op.EQ, T, T + timedelta(seconds=1), False),
    # type mismatches are unknown, never false
    (Op.EQ, 500, "500", None),
    (Op.EQ, True, 1, None),
    (Op.EQ, 1, True, None),
    (Op.EQ, None, "x", None),
    (Op.EQ, T, SECOND, None),
    (Op.EQ, NAN, NAN, None),
    (Op.EQ, object(), object(), None),
    (Op.EQ, UNKNOWN, 1, None),
    (Op.EQ, 1, UNKNOWN, None),
    (Op.NE, 1, 2, True),
    (Op.NE, 1, 1, False),
    (Op.NE, "ch_1", "ch_2", True),
    (Op.NE, 500, "500", None),
    (Op.NE, UNKNOWN, "x", None),
    # ordering
    (Op.GT, 2, 1, True),
    (Op.GT, 1, 1, False),
    (Op.GT, 1.5, 1, True),
    (Op.GT, "b", "a", True),
    (Op.GT, True, 0, None),
    (Op.GT, "2", 1, None),
    (Op.GT, [2], [1], None),
    (Op.GT, UNKNOWN, 1, None),
    (Op.GTE, 1, 1, True),
    (Op.GTE, 0, 1, False),
    (Op.GTE, None, 1, None),
    (Op.LT, 1, 2, True),
    (Op.LT, 2, 2, False),
    (Op.LT, T, T + timedelta(seconds=1), True),
    (Op.LT, T, T.replace(tzinfo=None) + timedelta(seconds=1), True),
    (Op.LTE, 2, 2, True),
    (Op.LTE, 3, 2, False),
    (Op.LTE, 2, "2", None),
    # membership
    (Op.IN, "failed", ["failed"], True),
    (Op.IN, "pending", ["failed", "canceled"], False),
    (Op.IN, "x", [], False),
    (Op.IN, 1, [True, 1], True),
    (Op.IN, 1, [True, 2], None),
    (Op.IN, "x", "xyz", None),
    (Op.IN, UNKNOWN, ["x"], None),
    (Op.IN, "x", UNKNOWN, None),
    (Op.NOT_IN, "x", ["a", "b"], True),
    (Op.NOT_IN, "a", ["a", "b"], False),
    (Op.NOT_IN, 1, ["1"], None),
    (Op.NOT_IN, "a", None, None),
    # exists: the left side is resolved with a missing segment as None
    (Op.EXISTS, "x", None, True),
    (Op.EXISTS, "x", True, True),
    (Op.EXISTS, None, True, False),
    (Op.EXISTS, None, False, True),
    (Op.EXISTS, 0, False, False),
    (Op.EXISTS, UNKNOWN, True, None),
    (Op.EXISTS, "x", "yes", None),
    # time: epoch int seconds against a microsecond datetime compares at whole seconds
    (Op.TIME_AFTER, SECOND, T, True),
    (Op.TIME_BEFORE, SECOND, T, False),
    (Op.TIME_AFTER, SECOND - 1, T, False),
    (Op.TIME_BEFORE, SECOND - 1, T, True),
    (Op.TIME_AFTER, SECOND + 1, T, True),
    (Op.TIME_AFTER, float(SECOND), T, True),
    (Op.TIME_AFTER, SECOND + 0.3, T, False),
    (Op.TIME_AFTER, SECOND + 0.4, T, True),
    (Op.TIME_BEFORE, SECOND + 0.399999, T, True),
    # two microsecond datetimes compare exactly
    (Op.TIME_AFTER, T - timedelta(microseconds=1), T, False),
    (Op.TIME_AFTER, T, T, True),
    (Op.TIME_BEFORE, T, T, False),
    (Op.TIME_BEFORE, T.replace(tzinfo=None), T + timedelta(microseconds=1), True),
    # ISO-8601 strings at their own precision
    (Op.TIME_AFTER, "2026-09-10T12:00:00Z", T, True),
    (Op.TIME_AFTER, "2026-09-10T12:00:00.399Z", T, False),
    (Op.TIME_AFTER, "2026-09-10T12:00:00.400Z", T, True),
    (Op.TIME_AFTER, "2026-09-10T14:00:00+02:00", T, True),
    (Op.TIME_BEFORE, "2026-09-10T11:59:59Z", T, True),
    (Op.TIME_AFTER, "2026-09-10T12:00", T, True),
    (Op.TIME_BEFORE, "2026-09-10T11:59", T, True),
    (Op.TIME_AFTER, "2026-09-10", T, True),
    (Op.TIME_BEFORE, "2026-09-09", T, True),
    (Op.TIME_AFTER, "2026-09-10T12:00:00.4000001Z", T.isoformat(), True),
    (Op.TIME_AFTER, SECOND, "2026-09-10T12:00:00.5Z", True),
    # not a time: unknown
    (Op.TIME_AFTER, "yesterday", T, None),
    (Op.TIME_AFTER, True, T, None),
    (Op.TIME_AFTER, float("inf"), T, None),
    (Op.TIME_AFTER, NAN, T, None),
    (Op.TIME_AFTER, None, T, None),
    (Op.TIME_AFTER, [SECOND], T, None),
    (Op.TIME_AFTER, UNKNOWN, T, None),
    (Op.TIME_BEFORE, SECOND, UNKNOWN, None),
]


@pytest.mark.parametrize(("op", "left", "right", "expected"), TABLE)
def test_operator_table(op: Operator, left: Any, right: Any, expected: bool | None) -> None:
    assert evaluate(op, left, right) is expected


def test_every_operator_is_in_the_table() -> None:
    assert {row[0] for row in TABLE} == set(Operator)


@pytest.mark.parametrize(
    ("values", "expected"),
    [([], True), ([True, True], True), ([True, None], None), ([None, False], False)],
)
def test_truth_and(values: list[bool | None], expected: bool | None) -> None:
    assert truth_and(values) is expected


def test_to_instant_precisions() -> None:
    assert to_instant(SECOND) == (SECOND * 1_000_000, 1_000_000)
    assert to_instant(T) == (SECOND * 1_000_000 + 400_000, 1)
    offset = datetime(2026, 9, 10, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert to_instant(offset) == (SECOND * 1_000_000, 1)
    assert to_instant("2026-09-10T12:00:00.40Z") == (SECOND * 1_000_000 + 400_000, 10_000)
    assert to_instant(b"2026") is None


class _Float(float):
    pass


class _Stamp(datetime):
    pass


class _List(list[int]):
    pass


@pytest.mark.parametrize(
    ("op", "left", "right", "expected"),
    [
        (Op.EQ, Verdict.PENDING, "PENDING", True),
        (Op.EQ, HTTPStatus.OK, 200, True),
        (Op.GT, _Float(2.5), 2, True),
        (Op.EQ, _Float("nan"), 1.0, None),
        (Op.EQ, OrderedDict(a=1), {"a": 1}, True),
        (Op.EQ, MappingProxyType({"a": 1}), {"a": 2}, False),
        (Op.LT, _Stamp(2026, 1, 1, tzinfo=UTC), T, True),
        (Op.TIME_AFTER, _Stamp(2026, 9, 10, 12, 0, 0, 400_000, tzinfo=UTC), T, True),
        (Op.EQ, (1, 2), [1, 2], True),
        (Op.EQ, _List([1, 2]), [1, 2], True),
    ],
)
def test_subclasses_compare_as_their_base_types(
    op: Operator, left: Any, right: Any, expected: bool | None
) -> None:
    assert evaluate(op, left, right) is expected


_instants = st.one_of(
    st.integers(min_value=0, max_value=4_000_000_000),
    st.datetimes(
        min_value=datetime(1970, 1, 2), max_value=datetime(2096, 1, 1), timezones=st.just(UTC)
    ),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2096, 1, 1)).map(
        lambda d: d.isoformat()
    ),
)
_values = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=3), _instants
)


@given(_instants, _instants)
def test_time_after_is_exactly_not_time_before(left: Any, right: Any) -> None:
    after = evaluate(Op.TIME_AFTER, left, right)
    before = evaluate(Op.TIME_BEFORE, left, right)
    assert after is not None
    assert after is (not before)


@given(_values, _values)
def test_eq_and_ne_are_symmetric_complements(left: Any, right: Any) -> None:
    equal = evaluate(Op.EQ, left, right)
    assert equal is evaluate(Op.EQ, right, left)
    assert evaluate(Op.NE, left, right) is (None if equal is None else not equal)
    if isinstance(left, bool) != isinstance(right, bool):
        assert equal is None


@given(_values, _values)
def test_orderings_agree(left: Any, right: Any) -> None:
    lt, gte = evaluate(Op.LT, left, right), evaluate(Op.GTE, left, right)
    assert lt is (None if gte is None else not gte)
    assert evaluate(Op.GT, left, right) is evaluate(Op.LT, right, left)
