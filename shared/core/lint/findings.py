"""A lint finding (:class:`LintError`), and pydantic's validation errors in the same format::

    contracts/x.yaml: stripe.refund.succeeded: channels[0].http.path: unknown root $foo

A field is a path into the document (``channels[0].http.path``), ``(document)`` for the whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from shared.core.contract import Operator

__all__ = ["LintError", "validation_errors"]

_LEVELS = ("E1", "E2", "E3", "E4")


@dataclass(frozen=True, slots=True)
class LintError:
    """One finding: the file, the contract (or skill) it concerns, the field, what is wrong."""

    file: str
    subject: str
    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}: {self.subject}: {self.field}: {self.message}"

    def as_dict(self) -> dict[str, str]:
        return {
            "file": self.file,
            "contract": self.subject,
            "field": self.field,
            "message": self.message,
        }


def validation_errors(exc: ValidationError, *, file: str, subject: str) -> list[LintError]:
    """Pydantic's errors in the lint format, one per field, in document order."""
    seen: dict[str, LintError] = {}
    for err in exc.errors():
        field = _loc_to_field(err["loc"])
        if field in seen:
            continue
        seen[field] = LintError(file, subject, field, _pydantic_message(field, err))
    return list(seen.values())


_UNION_TAGS = {"str", "int", "float", "bool", "list", "dict", "none"}


def _loc_to_field(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        if part in _UNION_TAGS or not re.match(r"^[A-Za-z0-9_]+$", part):
            break  # a union member or validator tag, not a field name
        out += f".{part}" if out else part
    return out or "(document)"


def _pydantic_message(field: str, err: Mapping[str, Any]) -> str:
    kind = err.get("type", "")
    value = err.get("input")
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field"
    if field.endswith(".op") and kind in ("enum", "literal_error"):
        known = ", ".join(op.value for op in Operator)
        return f"unknown operator {value!r} (known: {known})"
    if field.endswith("level") and kind == "literal_error":
        return f"unknown level {value!r} (known: {', '.join(_LEVELS)})"
    msg = str(err.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    return msg[:1].lower() + msg[1:]
