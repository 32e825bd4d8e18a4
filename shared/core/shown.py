"""What of an observed value a caller is shown: the field a condition names, never a body.

A condition's result carries the value its path resolved to (``conditions[].observed``) and the
value it was compared with (``expected``). When that value is a scalar it is the field the
contract's condition names, and it is shown as it is (so is an ``expected`` list of scalars,
the operand of ``in`` that the contract states). When it is an object or an array — a
condition such as ``$observed.x.data exists`` on a list readback resolves to the provider's
whole list — it is shown only by its shape (``{"omitted": "array", "items": 3}``): the
stored observation keeps it, its digest is in the receipt, but a caller never reads a
provider's response bodies through a contract's conditions.

Pure: no I/O here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["shown_expected", "shown_value"]


def shown_value(value: Any) -> Any:
    """``value`` if it is a scalar (string, number, boolean, null), else its shape."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if _is_shape(value):  # shown once already (stored decisions are shown again by the API)
        return dict(value)
    if isinstance(value, Mapping):
        return {"omitted": "object", "keys": len(value)}
    if isinstance(value, Sequence):
        return {"omitted": "array", "items": len(value)}
    return {"omitted": type(value).__name__}


def shown_expected(value: Any) -> Any:
    """An ``expected`` operand: like :func:`shown_value`, but a list of scalars passes (the
    operand of ``in`` / ``not_in``, which the contract states)."""
    if isinstance(value, list | tuple) and all(
        item is None or isinstance(item, str | int | float | bool) for item in value
    ):
        return list(value)
    return shown_value(value)


_SHAPE_KEYS = frozenset({"omitted", "keys", "items"})


def _is_shape(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("omitted"), str)
        and set(value) <= _SHAPE_KEYS
        and all(isinstance(value[k], int) for k in value if k != "omitted")
    )
