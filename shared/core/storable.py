"""What a JSON value must be for Provely to store it, and the first place where it is not.

Every value an agent or a provider sends is kept as JSON in PostgreSQL (``jsonb``) or SQLite,
signed into receipts and sent back in views. Some values that Python's ``json`` module parses
can never be stored or sent back: a non-finite number (``NaN``, ``Infinity``, ``-Infinity``,
and ``1e999``, which parses as infinity), a NUL character (PostgreSQL's text and ``jsonb``
refuse ``\\u0000``, in keys as in values), a lone surrogate (``\\ud800``: not Unicode, it has no
UTF-8 form), and nesting deeper than :data:`MAX_JSON_DEPTH` (deep enough for any provider
object; much deeper values make recursive code in every library fail).

:func:`unstorable` walks a parsed value with an explicit stack (no recursion, so no depth can
raise ``RecursionError``) and names the first such place, e.g. ``input.items[3].note``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["MAX_JSON_DEPTH", "Unstorable", "too_deep_in_text", "unstorable"]

MAX_JSON_DEPTH: Final = 64
"""The deepest nesting of objects and arrays accepted in a value (the value itself is 1)."""


@dataclass(frozen=True, slots=True)
class Unstorable:
    """Where a value cannot be stored (``field``, a dotted path) and why (``message``)."""

    field: str
    message: str
    reason: str  # a short machine name: non_finite_number, nul_character, lone_surrogate, too_deep


def _string_problem(text: str) -> tuple[str, str] | None:
    if "\x00" in text:
        return "nul_character", "contains a NUL character (\\u0000)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "lone_surrogate", "contains a lone surrogate (not valid Unicode)"
    return None


def _shown(key: str) -> str:
    """A key as a path may show it: NUL and lone surrogates escaped (the path is sent back)."""
    return key.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def unstorable(
    value: Any, *, field: str = "", max_depth: int = MAX_JSON_DEPTH
) -> Unstorable | None:
    """The first place in ``value`` (parsed JSON) that cannot be stored, else ``None``.

    ``field`` names ``value`` itself (``input``); places below it are named from there.
    """
    stack: list[tuple[Any, str, int]] = [(value, field, 1)]
    while stack:
        item, path, depth = stack.pop()
        if isinstance(item, str):
            found = _string_problem(item)
            if found is not None:
                return Unstorable(path or "body", found[1], found[0])
        elif isinstance(item, float):
            if not math.isfinite(item):
                return Unstorable(
                    path or "body",
                    "is not a finite number (NaN, Infinity and 1e999 cannot be stored)",
                    "non_finite_number",
                )
        elif isinstance(item, dict | list):
            if depth > max_depth:
                return Unstorable(
                    path or "body",
                    f"is nested deeper than {max_depth} levels",
                    "too_deep",
                )
            if isinstance(item, dict):
                children: list[tuple[Any, str, int]] = []
                for key, child in item.items():
                    if isinstance(key, str):
                        found = _string_problem(key)
                        if found is not None:
                            shown = (
                                key.replace("\x00", "\\u0000")
                                .encode("utf-8", "backslashreplace")
                                .decode("utf-8")
                            )
                            return Unstorable(
                                _child(path, shown), "has a key that " + found[1], found[0]
                            )
                        children.append((child, _child(path, key), depth + 1))
                    else:
                        children.append((child, _child(path, str(key)), depth + 1))
            else:
                children = [(child, _child(path, i), depth + 1) for i, child in enumerate(item)]
            stack.extend(reversed(children))
    return None


# A JSON string token (linear: the alternatives start with different characters) or a
# structural character.
_TOKEN: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}:,]')


def too_deep_in_text(text: str, *, max_depth: int = MAX_JSON_DEPTH) -> Unstorable | None:
    """Where a JSON document (an object whose members are the fields) nests deeper than
    ``max_depth``, found by scanning its text, without parsing it: for a document too deep
    for the parser itself (``json.loads`` raises ``RecursionError`` near 1,000 levels)."""
    frames: list[list[Any]] = []  # [bracket, key or index]
    last_string = ""
    for match in _TOKEN.finditer(text):
        lexeme = match.group()
        if lexeme[0] == '"':
            last_string = lexeme
        elif lexeme in "[{":
            frames.append([lexeme, 0 if lexeme == "[" else ""])
            if len(frames) - 1 > max_depth:
                path = ""
                for _, key in frames[:-1]:
                    path = _child(path, key if isinstance(key, int) else _shown(key))
                return Unstorable(
                    path or "body", f"is nested deeper than {max_depth} levels", "too_deep"
                )
        elif lexeme in "]}":
            if frames:
                frames.pop()
        elif lexeme == ":" and frames and frames[-1][0] == "{":
            try:
                frames[-1][1] = str(json.loads(last_string))
            except ValueError:
                frames[-1][1] = "?"
        elif lexeme == "," and frames and frames[-1][0] == "[":
            frames[-1][1] += 1
    return None
