"""An http readback's request filled from expressions: the path template and the query string.

:func:`fill_path_template` fills an http verifier's path such as
``/v1/refunds/{$correlation.refund_id}`` with URL-encoded values, or returns ``None`` when a
placeholder cannot be filled safely; :func:`fill_query` does the same for its query
parameters (``charge=ch_…&created%5Bgte%5D=1764620000``). The expressions are
``shared.core.expressions``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any, Final
from urllib.parse import quote

from shared.core import ExpressionError
from shared.core.expressions import (
    EvaluationContext,
    Expression,
    compile_expression,
    compile_operand,
)
from shared.core.paths import is_dot_segment

__all__ = [
    "PathTemplate",
    "compile_path_template",
    "fill_path_template",
    "fill_query",
]

_PLACEHOLDER_RE: Final = re.compile(r"\{([^{}]*)\}")
_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


class PathTemplate:
    """A compiled http path template: literal pieces and the expressions between them."""

    __slots__ = ("pieces", "text")

    def __init__(self, text: str, pieces: tuple[str | Expression, ...]) -> None:
        self.text = text
        self.pieces = pieces

    @property
    def expressions(self) -> tuple[Expression, ...]:
        return tuple(piece for piece in self.pieces if isinstance(piece, Expression))

    def fill(self, context: EvaluationContext) -> str | None:
        out: list[str] = []
        for piece in self.pieces:
            if isinstance(piece, str):
                out.append(piece)
                continue
            value = piece.resolve(context)
            text = _path_value(value)
            if text is None:
                return None
            out.append(quote(text, safe=""))
        return "".join(out)


def _path_value(value: Any) -> str | None:
    # Only non-empty strings and integers fill a path segment: an empty or structured value
    # would change which resource is read (``/v1/refunds/`` lists every refund), and so would
    # a dot segment (``/v1/refunds/..`` is ``/v1``), encoded or not (``shared.core.paths``).
    if isinstance(value, str):
        return None if not value or is_dot_segment(value) else value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


@lru_cache(maxsize=1024)
def compile_path_template(template: str) -> PathTemplate:
    """Parse ``template`` once; each ``{…}`` must hold an expression."""
    pieces: list[str | Expression] = []
    position = 0
    for match in _PLACEHOLDER_RE.finditer(template):
        if match.start() > position:
            pieces.append(template[position : match.start()])
        pieces.append(compile_expression(match.group(1)))
        position = match.end()
    rest = template[position:]
    if (
        "{" in rest
        or "}" in rest
        or any(isinstance(piece, str) and ("{" in piece or "}" in piece) for piece in pieces)
    ):
        raise ExpressionError(f"unbalanced braces in path template {template!r}")
    if rest:
        pieces.append(rest)
    return PathTemplate(template, tuple(pieces))


def fill_path_template(template: str, context: EvaluationContext) -> str | None:
    """Fill ``{$expr}`` placeholders with URL-encoded values; ``None`` when one is unknown.

    A value fills a placeholder only when it is a non-empty string or an integer, and not a
    dot segment (``.``, ``..``, also percent-encoded).
    """
    return compile_path_template(template).fill(context)


def fill_query(query: Mapping[str, Any], context: EvaluationContext) -> str | None:
    """The query string of a readback: every value (an expression or a literal) filled, names
    and values URL-encoded, sorted by name; ``None`` when a value cannot be filled.

    A value fills a parameter when it is a non-empty string, an integer, or a time. A time is
    written as whole epoch seconds rounded *down*: the providers' list filters take seconds,
    and ``created[gte]`` with the second in which the operation began is an inclusive lower
    bound that leaves out nothing made since the operation (it may take in something made
    earlier in that same second: the conservative side for a search for duplicates).
    """
    parts: list[str] = []
    for name in sorted(query):
        text = _query_value(compile_operand(query[name]).resolve(context))
        if text is None:
            return None
        parts.append(f"{quote(name, safe='')}={quote(text, safe='')}")
    return "&".join(parts)


def _query_value(value: Any) -> str | None:
    if isinstance(value, datetime):
        moment = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return str((moment - _EPOCH) // timedelta(seconds=1))  # floor, exact (no float)
    return _path_value(value)
