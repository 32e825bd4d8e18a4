"""Decoding of Stripe's form-encoded parameters (``a[b][c]=v``, ``list[]=v``, ``list[0]=v``).

Stripe's API takes ``application/x-www-form-urlencoded`` bodies and query strings whose keys
describe nested objects with brackets. :func:`decode_form` turns such pairs into nested dicts;
the ``[]`` suffix appends (an automatic index). Whether a dict of digit keys is a list is a
property of the parameter, so callers convert with :func:`as_list`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl

__all__ = ["FormError", "as_list", "decode_form", "parse_body"]

_KEY = re.compile(r"^([^\[\]]+)((?:\[[^\[\]]*\])*)$")
_PART = re.compile(r"\[([^\[\]]*)\]")


class FormError(ValueError):
    """A key that does not follow Stripe's bracket syntax, or one used as two kinds of value."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def parse_body(raw: bytes) -> dict[str, Any]:
    """Decode a form-encoded request body (UTF-8) into nested parameters."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FormError("The request body is not valid UTF-8.") from exc
    return decode_form(parse_qsl(text, keep_blank_values=True))


def decode_form(pairs: Iterable[tuple[str, str]]) -> dict[str, Any]:
    """Build nested dicts from bracketed keys; an empty bracket appends a fresh index."""
    root: dict[str, Any] = {}
    for key, value in pairs:
        match = _KEY.match(key)
        if match is None:
            raise FormError(f"Invalid parameter name: {key!r}.", param=key)
        path = [match.group(1), *_PART.findall(match.group(2))]
        node = root
        for depth, part in enumerate(path):
            last = depth == len(path) - 1
            if part == "":
                part = str(len(node))
            if last:
                if isinstance(node.get(part), dict):
                    raise FormError(f"Parameter {key!r} is both a value and an object.", param=key)
                node[part] = value
            else:
                child = node.setdefault(part, {})
                if not isinstance(child, dict):
                    raise FormError(f"Parameter {key!r} is both a value and an object.", param=key)
                node = child
    return root


def as_list(value: Any, *, param: str) -> list[Any]:
    """A list parameter: ``x[]=a&x[]=b`` or ``x[0]=a&x[1]=b`` (a single ``x=a`` is one item)."""
    if isinstance(value, str):
        return [value] if value != "" else []
    if isinstance(value, dict):
        if not all(k.isdigit() for k in value):
            raise FormError(f"Invalid array for parameter {param!r}.", param=param)
        return [value[k] for k in sorted(value, key=int)]
    raise FormError(f"Invalid array for parameter {param!r}.", param=param)
