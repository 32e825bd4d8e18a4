"""A copy of a provider's JSON value that every table can hold, with the places it changed.

A delivery whose signature holds and whose body is JSON is the provider's own word: it is
stored, always (its raw bytes verbatim beside it). What no table can hold
(``shared.core.storable``) is escaped in the copy the database keeps and matching reads, and
each place is named, so the copy is marked as one and never mistaken for the provider's text:

- a NUL character (in a value or a key) becomes the six characters ``\\u0000``;
- a lone surrogate becomes its escape (``\\ud800``);
- a number too large for a double (``1e999`` parses as infinity) becomes the string ``inf``
  or ``-inf`` (a condition that compares it as a number reads *unknown*, never a pass);
- a container nested deeper than :data:`~shared.core.storable.MAX_JSON_DEPTH` becomes the
  string :data:`TOO_DEEP`.

:func:`storable_copy` returns the value itself, untouched, when nothing needs escaping (the
common case costs one walk of :func:`~shared.core.storable.unstorable`). A key whose escape
equals another key of the same object keeps the first one in the document's order; the place
is named all the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from shared.core.storable import MAX_JSON_DEPTH, unstorable

__all__ = ["TOO_DEEP", "StorableCopy", "escaped_text", "storable_copy"]

TOO_DEEP: Final = "[nested too deep to store]"
"""What a container nested past the limit is replaced by in the copy."""


@dataclass(frozen=True, slots=True)
class StorableCopy:
    """The copy (``value``) and the places escaped in it (dotted paths, in document order);
    ``places`` is empty when ``value`` is the original itself."""

    value: Any
    places: tuple[str, ...]


def escaped_text(text: str) -> str:
    """``text`` with NUL characters and lone surrogates written as their JSON escapes."""
    return text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def _needs_escape(text: str) -> bool:
    return escaped_text(text) != text


def _place(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


class _Copier:
    def __init__(self, max_depth: int) -> None:
        self.max_depth = max_depth
        self.places: list[str] = []

    def copy(self, item: Any, path: str, depth: int) -> Any:
        if isinstance(item, str):
            if _needs_escape(item):
                self.places.append(path or "body")
                return escaped_text(item)
            return item
        if isinstance(item, float) and not math.isfinite(item):
            self.places.append(path or "body")
            return str(item)
        if isinstance(item, dict | list) and depth > self.max_depth:
            self.places.append(path or "body")
            return TOO_DEEP
        if isinstance(item, list):
            return [self.copy(child, _place(path, i), depth + 1) for i, child in enumerate(item)]
        if isinstance(item, dict):
            return self._copy_object(item, path, depth)
        return item

    def _copy_object(self, item: dict[Any, Any], path: str, depth: int) -> dict[Any, Any]:
        copied: dict[Any, Any] = {}
        for key, child in item.items():
            name = key
            if isinstance(key, str) and _needs_escape(key):
                name = escaped_text(key)
                self.places.append(_place(path, name))
            shown = name if isinstance(name, str) else str(name)
            value = self.copy(child, _place(path, shown), depth + 1)
            copied.setdefault(name, value)
        return copied


def storable_copy(value: Any, *, max_depth: int = MAX_JSON_DEPTH) -> StorableCopy:
    """``value`` (parsed JSON) as every table can hold it, and the places that were escaped.

    The recursion is bounded: below ``max_depth`` levels a container is replaced, not entered.
    """
    if unstorable(value, max_depth=max_depth) is None:
        return StorableCopy(value, ())
    copier = _Copier(max_depth)
    copied = copier.copy(value, "", 1)
    return StorableCopy(copied, tuple(copier.places))
