"""The three-valued operators of the contract language.

This module owns what ``eq ne gt gte lt lte in not_in exists time_after time_before`` mean.
Every operator answers ``True``, ``False`` or ``None`` (unknown). Unknown comes from an
``UNKNOWN`` operand and from any type mismatch — comparing a number with a string, a boolean
with a number (``True`` is not ``1`` here), a date with a number — so a mismatch is never
silently false.

Comparison types: numbers (int/float, never bool; NaN is unknown), strings, booleans, null,
lists and objects (``eq``/``ne``, element by element), datetimes (naive ones are read as UTC).
``gt gte lt lte`` order numbers, strings and datetimes only.

``in`` / ``not_in`` take a list on the right: true when some item is equal, false when every
item is different, unknown otherwise.

``exists`` reads its left operand resolved with a missing segment as ``None``: it is true
when a value is present (not null), false when it is absent or null, unknown when the whole
document is unknown. Its right operand (default ``true``) says which of the two is wanted.

``time_after`` / ``time_before`` compare instants. An operand is a datetime, an ISO-8601
string, or provider epoch seconds (an int, or a float with a fraction). Both are truncated to
the coarser precision of the two (epoch int: second; ISO string: as many fraction digits as it
writes, else second, minute or day; datetime: microsecond) before comparing, so a provider's
whole-second ``created`` equals an operation that started later within the same second.
``time_after`` means "not before" (>=), ``time_before`` means "strictly before" (<).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Final, assert_never

from shared.core.contract import Operator
from shared.core.expressions import UNKNOWN

__all__ = ["Truth", "evaluate", "operator_function", "to_instant", "truth_and"]

Truth = bool | None

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_SECOND: Final = 1_000_000
_MINUTE: Final = 60 * _SECOND
_DAY: Final = 86_400 * _SECOND
_FRACTION_RE: Final = re.compile(r"[T ]\d{2}:\d{2}:\d{2}[.,](\d+)")
_SECONDS_RE: Final = re.compile(r"[T ]\d{2}:\d{2}:\d{2}")
_MINUTES_RE: Final = re.compile(r"[T ]\d{2}:?\d{2}")


_EXACT_KINDS: Final[dict[type, str]] = {
    bool: "bool",
    int: "number",
    str: "str",
    type(None): "null",
    list: "list",
    tuple: "list",
    dict: "object",
    datetime: "datetime",
}


def _kind(value: Any) -> str | None:
    """The comparison type of a value; ``None`` when it cannot be compared at all."""
    exact = _EXACT_KINDS.get(type(value))
    if exact is not None:
        return exact
    # Subclasses (an IntEnum, a StrEnum, an OrderedDict …); bool cannot be subclassed.
    if isinstance(value, int):
        return "number"
    if isinstance(value, float):
        return "number" if not math.isnan(value) else None
    if isinstance(value, str):
        return "str"
    if isinstance(value, datetime):
        return "datetime"
    if isinstance(value, list | tuple):
        return "list"
    if isinstance(value, Mapping):
        return "object"
    return None


def _utc(value: datetime) -> datetime:
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def truth_and(values: Any) -> Truth:
    """Three-valued AND over an iterable of truths."""
    result: Truth = True
    for value in values:
        if value is False:
            return False
        if value is None:
            result = None
    return result


_FAST: Final = frozenset({str, int})


def _eq(left: Any, right: Any) -> Truth:
    kind_left = type(left)
    if kind_left is type(right) and kind_left in _FAST:
        return bool(left == right)  # the common case: two strings or two integers
    if left is UNKNOWN or right is UNKNOWN:
        return None
    kind = _kind(left)
    if kind is None or kind != _kind(right):
        return None
    if kind == "list":
        if len(left) != len(right):
            return False
        return truth_and(_eq(a, b) for a, b in zip(left, right, strict=True))
    if kind == "object":
        if set(left) != set(right):
            return False
        return truth_and(_eq(left[key], right[key]) for key in left)
    if kind == "datetime":
        return bool(_utc(left) == _utc(right))
    return bool(left == right)


def _order(left: Any, right: Any) -> int | None:
    """-1, 0 or 1 when both sides are ordered values of one type, else ``None``."""
    kind_left = type(left)
    if kind_left is type(right) and kind_left in _FAST:
        return -1 if left < right else (1 if left > right else 0)
    if left is UNKNOWN or right is UNKNOWN:
        return None
    kind = _kind(left)
    if kind not in ("number", "str", "datetime") or kind != _kind(right):
        return None
    if kind == "datetime":
        left, right = _utc(left), _utc(right)
    if left < right:
        return -1
    return 1 if left > right else 0


def _in(left: Any, right: Any) -> Truth:
    if left is UNKNOWN or right is UNKNOWN or not isinstance(right, list | tuple):
        return None
    result: Truth = False
    for item in right:
        equal = _eq(left, item)
        if equal is True:
            return True
        if equal is None:
            result = None
    return result


def _exists(left: Any, right: Any) -> Truth:
    if left is UNKNOWN:
        return None
    wanted = True if right is None else right
    if not isinstance(wanted, bool):
        return None
    return (left is not None) == wanted


def to_instant(value: Any) -> tuple[int, int] | None:
    """``(microseconds since the epoch, precision in microseconds)``, or ``None``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value * _SECOND, _SECOND
    if isinstance(value, float):
        if not math.isfinite(value):
            return None
        if value.is_integer():
            return int(value) * _SECOND, _SECOND
        return round(value * _SECOND), 1
    if isinstance(value, datetime):
        return (_utc(value) - _EPOCH) // _MICROSECOND, 1
    if isinstance(value, str):
        return _iso_instant(value)
    return None


def _iso_instant(text: str) -> tuple[int, int] | None:
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        return None
    micros = (_utc(parsed) - _EPOCH) // _MICROSECOND
    fraction = _FRACTION_RE.search(text)
    if fraction is not None:
        digits = min(len(fraction.group(1)), 6)
        return micros, 10 ** (6 - digits)
    if _SECONDS_RE.search(text):
        return micros, _SECOND
    if _MINUTES_RE.search(text):
        return micros, _MINUTE
    return micros, _DAY


def _time_order(left: Any, right: Any) -> int | None:
    if left is UNKNOWN or right is UNKNOWN:
        return None
    a = to_instant(left)
    b = to_instant(right)
    if a is None or b is None:
        return None
    precision = max(a[1], b[1])
    x, y = a[0] // precision, b[0] // precision
    if x < y:
        return -1
    return 1 if x > y else 0


def _ne(left: Any, right: Any) -> Truth:
    equal = _eq(left, right)
    return None if equal is None else not equal


def _gt(left: Any, right: Any) -> Truth:
    order = _order(left, right)
    return None if order is None else order > 0


def _gte(left: Any, right: Any) -> Truth:
    order = _order(left, right)
    return None if order is None else order >= 0


def _lt(left: Any, right: Any) -> Truth:
    order = _order(left, right)
    return None if order is None else order < 0


def _lte(left: Any, right: Any) -> Truth:
    order = _order(left, right)
    return None if order is None else order <= 0


def _not_in(left: Any, right: Any) -> Truth:
    found = _in(left, right)
    return None if found is None else not found


def _time_after(left: Any, right: Any) -> Truth:
    order = _time_order(left, right)
    return None if order is None else order >= 0


def _time_before(left: Any, right: Any) -> Truth:
    order = _time_order(left, right)
    return None if order is None else order < 0


def operator_function(op: Operator) -> Callable[[Any, Any], Truth]:
    """The implementation of ``op``; compiled contracts keep it to skip the dispatch."""
    match op:
        case Operator.EQ:
            return _eq
        case Operator.NE:
            return _ne
        case Operator.GT:
            return _gt
        case Operator.GTE:
            return _gte
        case Operator.LT:
            return _lt
        case Operator.LTE:
            return _lte
        case Operator.IN:
            return _in
        case Operator.NOT_IN:
            return _not_in
        case Operator.EXISTS:
            return _exists
        case Operator.TIME_AFTER:
            return _time_after
        case Operator.TIME_BEFORE:
            return _time_before
        case _:  # pragma: no cover - the match above is exhaustive
            assert_never(op)


def evaluate(op: Operator, left: Any, right: Any) -> Truth:
    """Apply ``op`` to the resolved operands: ``True``, ``False`` or ``None`` (unknown)."""
    return operator_function(op)(left, right)
