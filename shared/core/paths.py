"""Readback paths: dot segments, and whether a contract's path stays inside a skill's paths.

A readback path is joined to the connection's base URL, and URL parsers (httpx's among them)
resolve ``.`` and ``..`` segments, as servers do with ``%2e%2e``. A segment that is ``.`` or
``..`` once percent-decoded (``%2e``, ``%2E%2e``, and so on, decoded until nothing changes)
would make a contract read another resource than the one it names — ``/v1/refunds/..`` is
``/v1`` — or leave the base URL's path, so such segments are refused everywhere: in a path
template (lint), in a value that fills a placeholder (the path is then unknown), and in the
filled path before it is sent (the observer records an error reading).

A skill declares the paths its contracts may read (``readback.paths`` in ``skill.yaml``), as
templates whose ``{name}`` segments stand for one segment each: ``/v1/refunds/{id}``. A
contract's path template is inside them when, without its query, it has as many segments as
one of them and each segment is equal, or is a placeholder where the skill's has one. The query
(after ``?``) is not compared here: a skill declares which parameters each path may take
(``shared.core.queries``), since a parameter such as Stripe's ``expand[]`` can name another
resource.

Pure: no I/O here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

__all__ = [
    "DOT_SEGMENTS",
    "dot_segments",
    "is_dot_segment",
    "matching_template",
    "path_segments",
    "template_within",
]

DOT_SEGMENTS = frozenset({".", ".."})
_TEMPLATE_PLACEHOLDER = re.compile(r"^\{[^{}]+\}$")
_MAX_DECODING_ROUNDS = 8


def _decoded(text: str) -> str:
    for _ in range(_MAX_DECODING_ROUNDS):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def is_dot_segment(text: str) -> bool:
    """True when ``text`` is ``.`` or ``..``, percent-encoded any number of times or not."""
    return _decoded(text) in DOT_SEGMENTS


def path_segments(path: str) -> list[str]:
    """The segments of ``path`` before its query: ``/v1/refunds/x?a=b`` → v1, refunds, x."""
    return path.split("?", 1)[0].split("#", 1)[0].split("/")[1:]


def dot_segments(path: str) -> list[str]:
    """The segments of ``path`` (before its query) that are dot segments."""
    return [segment for segment in path_segments(path) if is_dot_segment(segment)]


def _placeholder(segment: str) -> bool:
    return bool(_TEMPLATE_PLACEHOLDER.match(segment))


def template_within(template: str, allowed: Iterable[str]) -> bool:
    """True when the contract path ``template`` is one of the ``allowed`` skill paths.

    A skill segment that is a ``{name}`` placeholder matches any one contract segment (a
    ``{$expr}`` placeholder, or a literal, which is one value of it); any other skill segment
    must be equal to the contract's.
    """
    return matching_template(template, allowed) is not None


def matching_template(template: str, allowed: Iterable[str]) -> str | None:
    """The first of the ``allowed`` skill paths that the contract path ``template`` is inside
    (see :func:`template_within`), None when there is none."""
    mine = path_segments(template)
    for candidate in allowed:
        theirs = path_segments(candidate)
        if len(theirs) != len(mine):
            continue
        if all(a == b or _placeholder(b) for a, b in zip(mine, theirs, strict=True)):
            return candidate
    return None
