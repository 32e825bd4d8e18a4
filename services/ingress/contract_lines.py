"""Where a lint finding is in an uploaded contract: the line of each field path
(``channels[0].http.path``) in the document as it was sent, so that a form can show the
finding beside the line. JSON is read by the same YAML composer (a JSON document is YAML).

A field that is missing (``required field is missing``) is placed on the nearest field above it
that exists (a missing top-level field: the document's first line); a finding about the whole
document (``(document)``), or a document that does not compose, has no line.

Composing is CPU work on what a tenant sent: the caller runs it where it runs the lint (a
worker thread, under the parse time bound), only when there are findings to place.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import yaml

__all__ = ["field_lines"]

_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _steps(field: str) -> list[str | int]:
    return [int(index) if index else name for name, index in _STEP.findall(field)]


def _child(node: yaml.Node, step: str | int) -> tuple[yaml.Node, int] | None:
    """The node under ``node`` at ``step`` and the 1-based line that names it."""
    if isinstance(node, yaml.MappingNode) and isinstance(step, str):
        for key, value in node.value:
            if isinstance(key, yaml.ScalarNode) and key.value == step:
                return value, key.start_mark.line + 1
    if isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
        item = node.value[step]
        return item, item.start_mark.line + 1
    return None


def _line(root: yaml.Node, field: str) -> int | None:
    if field == "(document)":
        return None
    node, line = root, root.start_mark.line + 1
    for step in _steps(field):
        found = _child(node, step)
        if found is None:
            break
        node, line = found
    return line


def field_lines(text: str, fields: Iterable[str]) -> dict[str, int]:
    """The line of each field that can be placed (see the module docstring)."""
    try:
        root = yaml.compose(text, Loader=_LOADER)
    except (yaml.YAMLError, RecursionError):
        return {}
    if root is None:
        return {}
    lines = {field: _line(root, field) for field in fields}
    return {field: line for field, line in lines.items() if line is not None}
