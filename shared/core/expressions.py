"""Expressions of the contract language: parsing, the ``UNKNOWN`` sentinel and resolution.

This module owns the grammar ``$root.segment.segment…`` and what each root means:

- ``$input.*``            what the agent declared when it created the operation
- ``$action.result.*``    the action response the agent reported (E1; never evidence)
- ``$operation.id``, ``$operation.created_at``
- ``$correlation.<key>``  a correlation key (named by a strategy or the subject identity)
- ``$observed.<channel>.*`` the usable reading of a channel (absent when stale or missing)
- ``$event.*``            one provider event's body, inside a webhook channel's match rules

An expression is compiled once (cached) into an :class:`Expression`. A path that is missing,
walks through a non-container or names a root the context does not know resolves to
``UNKNOWN`` — never an error, never a pass. A malformed expression raises ``ExpressionError``.
Operands that are not expressions (strings not starting with ``$``, numbers, lists…) are
literals and pass through unchanged; a list may mix literals and expressions.

Inside an observation a JSON object whose one key is ``"$unknown"`` (:data:`UNKNOWN_MARK`) stands
for a value the reading does not know — the webhook reduction writes it where events stamped in
the same second disagree (``shared.core.events``). ``$observed`` paths that reach it, or go
through it, resolve to ``UNKNOWN``. Only observations carry it: the other roots hold what the
agent declared or reported, which must not be able to make a provider's value unknown.

``shared.core.templates`` fills an http readback's path and query from these expressions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from functools import lru_cache
from typing import Any, Final

from shared.core import ExpressionError

__all__ = [
    "ROOTS",
    "UNKNOWN",
    "UNKNOWN_MARK",
    "EvaluationContext",
    "Expression",
    "ListOperand",
    "LiteralOperand",
    "Operand",
    "Unknown",
    "compile_expression",
    "compile_operand",
    "is_expression",
    "resolve",
]


class Unknown(Enum):
    """The third truth value's source: a value the engine does not know."""

    UNKNOWN = "UNKNOWN"

    def __repr__(self) -> str:
        return "UNKNOWN"


UNKNOWN: Final = Unknown.UNKNOWN

UNKNOWN_MARK: Final = "$unknown"
"""The key of the JSON object that stands for an unknown value inside an observation; its value
says why (``"tied"``: events of the same second disagree)."""

ROOTS: Final = ("input", "action", "operation", "correlation", "observed", "event")
_OPERATION_FIELDS: Final = ("id", "created_at")
_EXPR_RE: Final = re.compile(r"^\$([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_\-]+)*)$")
_MISSING: Final = object()
_NO_DOC: Final = object()


class EvaluationContext:
    """Everything an expression can read for one operation at one moment.

    ``observed`` holds, per channel, the value of the reading that may decide (latest, ok,
    fresh); a channel without such a reading is absent and resolves to ``UNKNOWN``.
    ``action_result`` is ``None`` when the agent reported no parsed response.
    """

    __slots__ = (
        "action_result",
        "correlation",
        "event",
        "input",
        "observed",
        "operation_created_at",
        "operation_id",
    )

    def __init__(
        self,
        *,
        input: Mapping[str, Any] | None = None,
        action_result: Any = None,
        operation_id: Any = UNKNOWN,
        operation_created_at: datetime | Unknown = UNKNOWN,
        correlation: Mapping[str, Any] | None = None,
        observed: Mapping[str, Any] | None = None,
        event: Any = UNKNOWN,
    ) -> None:
        self.input: Mapping[str, Any] = input if input is not None else {}
        self.action_result: Any = action_result
        self.operation_id: Any = operation_id
        self.operation_created_at: datetime | Unknown = operation_created_at
        self.correlation: Mapping[str, Any] = correlation if correlation is not None else {}
        self.observed: Mapping[str, Any] = observed if observed is not None else {}
        self.event: Any = event

    def with_event(self, event: Any) -> EvaluationContext:
        """The same context with ``$event`` bound to one event body."""
        return EvaluationContext(
            input=self.input,
            action_result=self.action_result,
            operation_id=self.operation_id,
            operation_created_at=self.operation_created_at,
            correlation=self.correlation,
            observed=self.observed,
            event=event,
        )


def _walk(doc: Any, parts: tuple[str, ...], missing: Any) -> Any:
    if doc is _NO_DOC:
        return UNKNOWN
    for part in parts:
        if type(doc) is dict or isinstance(doc, Mapping):
            doc = doc.get(part, _MISSING)
            if doc is _MISSING:
                return missing
        elif isinstance(doc, list | tuple) and part.isdigit():
            index = int(part)
            if index >= len(doc):
                return missing
            doc = doc[index]
        else:
            return missing
    return doc


def _is_mark(doc: Any) -> bool:
    return type(doc) is dict and len(doc) == 1 and UNKNOWN_MARK in doc


def _walk_observed(doc: Any, parts: tuple[str, ...], missing: Any) -> Any:
    """:func:`_walk` over an observation: a marked value (:data:`UNKNOWN_MARK`) on the way or
    at the end is ``UNKNOWN``."""
    for part in parts:
        if type(doc) is dict or isinstance(doc, Mapping):
            if _is_mark(doc):
                return UNKNOWN
            doc = doc.get(part, _MISSING)
            if doc is _MISSING:
                return missing
        elif isinstance(doc, list | tuple) and part.isdigit():
            index = int(part)
            if index >= len(doc):
                return missing
            doc = doc[index]
        else:
            return missing
    return UNKNOWN if _is_mark(doc) else doc


class Expression:
    """A compiled ``$root.a.b`` expression (this base class resolves ``$event``; each other
    root has its own subclass).

    ``channel`` is the channel an ``$observed`` expression reads (``None`` otherwise).
    """

    __slots__ = ("channel", "head", "parts", "root", "text")

    def __init__(self, text: str, root: str, head: str | None, parts: tuple[str, ...]) -> None:
        self.text = text
        self.root = root
        self.head = head
        self.parts = parts
        self.channel = head if root == "observed" else None

    def __repr__(self) -> str:
        return f"Expression({self.text!r})"

    def resolve(self, context: EvaluationContext, missing: Any = UNKNOWN) -> Any:
        """The value at this path, ``UNKNOWN`` when the root document is unknown.

        ``missing`` is what a missing segment inside a known document gives: ``UNKNOWN`` for
        comparisons, ``None`` for the ``exists`` operator (absent is then a known fact).
        """
        return _walk(
            context.event if context.event is not UNKNOWN else _NO_DOC, self.parts, missing
        )


# One subclass per root, so resolution does not test the root name on every call.


class _Observed(Expression):
    __slots__ = ()

    def resolve(self, context: EvaluationContext, missing: Any = UNKNOWN) -> Any:
        doc = context.observed.get(self.head, _MISSING)  # type: ignore[arg-type]
        if doc is _MISSING:
            return UNKNOWN
        return _walk_observed(doc, self.parts, missing)


class _Input(Expression):
    __slots__ = ()

    def resolve(self, context: EvaluationContext, missing: Any = UNKNOWN) -> Any:
        return _walk(context.input, self.parts, missing)


class _Correlation(Expression):
    __slots__ = ()

    def resolve(self, context: EvaluationContext, missing: Any = UNKNOWN) -> Any:
        value = context.correlation.get(self.head, _MISSING)  # type: ignore[arg-type]
        if value is _MISSING or value is UNKNOWN:
            return UNKNOWN
        return _walk(value, self.parts, missing)


class _Action(Expression):
    __slots__ = ()

    def resolve(self, context: EvaluationContext, missing: Any = UNKNOWN) -> Any:
        result = context.action_result
        if result is None or result is UNKNOWN:
            return UNKNOWN
        return _walk(result, self.parts, missing)


class _OperationId(Expression):
    __slots__ = ()

    def resolve(self, context: EvaluationContext, missing: Any = UNKNOWN) -> Any:
        return context.operation_id


class _OperationCreatedAt(Expression):
    __slots__ = ()

    def resolve(self, context: EvaluationContext, missing: Any = UNKNOWN) -> Any:
        return context.operation_created_at


class LiteralOperand:
    """An operand that is a plain value."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def resolve(self, context: EvaluationContext, missing: Any = UNKNOWN) -> Any:
        return self.value


class ListOperand:
    """A list operand with at least one expression among its items."""

    __slots__ = ("items",)

    def __init__(self, items: tuple[Operand, ...]) -> None:
        self.items = items

    def resolve(self, context: EvaluationContext, missing: Any = UNKNOWN) -> Any:
        return [item.resolve(context) for item in self.items]


Operand = Expression | LiteralOperand | ListOperand


def is_expression(value: Any) -> bool:
    """True when ``value`` is an expression (a string starting with ``$``)."""
    return isinstance(value, str) and value.startswith("$")


@lru_cache(maxsize=4096)
def compile_expression(text: str) -> Expression:
    """Parse ``text`` once; raises ``ExpressionError`` when it is not a valid expression."""
    match = _EXPR_RE.match(text)
    if match is None:
        raise ExpressionError(f"malformed expression {text!r}")
    root = match.group(1)
    segments = tuple(match.group(2).split(".")[1:])
    if root not in ROOTS:
        raise ExpressionError(f"unknown root ${root} in {text!r} (known: {', '.join(ROOTS)})")
    head: str | None = None
    parts = segments
    if root == "action":
        if not segments or segments[0] != "result":
            raise ExpressionError(f"{text!r}: the action root is read as $action.result.*")
        parts = segments[1:]
    elif root == "operation":
        if len(segments) != 1 or segments[0] not in _OPERATION_FIELDS:
            raise ExpressionError(f"{text!r}: $operation has only .id and .created_at")
        head = segments[0]
        parts = ()
    elif root in ("correlation", "observed"):
        if not segments:
            raise ExpressionError(f"{text!r}: ${root} needs a name after it")
        head = segments[0]
        parts = segments[1:]
    if root == "operation":
        kind: type[Expression] = _OperationId if head == "id" else _OperationCreatedAt
    else:
        kind = _KINDS[root]
    return kind(text, root, head, parts)


_KINDS: Final[dict[str, type[Expression]]] = {
    "input": _Input,
    "action": _Action,
    "correlation": _Correlation,
    "observed": _Observed,
    "event": Expression,
}


def compile_operand(value: Any) -> Operand:
    """An operand as written in a contract: an expression, a literal, or a list of either."""
    if isinstance(value, str) and value.startswith("$"):
        return compile_expression(value)
    if isinstance(value, list | tuple) and any(is_expression(item) for item in value):
        return ListOperand(tuple(compile_operand(item) for item in value))
    return LiteralOperand(value)


def resolve(expr: Any, context: EvaluationContext) -> Any:
    """Resolve an expression (text or compiled) or pass a literal operand through."""
    if isinstance(expr, Expression | LiteralOperand | ListOperand):
        return expr.resolve(context)
    return compile_operand(expr).resolve(context)
