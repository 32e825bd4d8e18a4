"""What an observation of a workspace contract keeps: only what its conditions read.

A provider's answer holds more than a contract asks about — a refund read back with an expanded
charge carries the customer's email, name and phone. A workspace contract is written by a
tenant, not reviewed by a publisher, so its ``http`` readings are stored trimmed to the paths
its conditions address (:func:`read_paths`): every ``$observed.<channel>.…`` expression in the
completion, negative, verdict map and rejection sections — paths, operands, ``when`` rules.
:func:`keep_read` keeps those paths of a reading and drops the rest; a path that ends at an
object or a list keeps all of it (a condition on ``data`` reads the whole list), a list keeps
its length (items no path reads become ``null``), and an expression that reads the whole
channel keeps the whole reading.

Pure: no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from shared.core import ExpressionError
from shared.core.contract import Contract
from shared.core.expressions import compile_expression

__all__ = ["keep_read", "read_paths"]

_SECTIONS: Final = ("completion", "negative", "verdict_map", "rejection")

Path = tuple[str, ...]


def read_paths(contract: Contract) -> dict[str, frozenset[Path]]:
    """Per channel, the paths below ``$observed.<channel>`` that the contract's conditions
    read (an empty path: the whole reading)."""
    document = contract.document()
    found: dict[str, set[Path]] = {}
    for section in _SECTIONS:
        for text in _strings(document.get(section)):
            if not text.startswith("$observed."):
                continue
            try:
                expression = compile_expression(text)
            except ExpressionError:
                continue  # lint refuses it; nothing to keep for it
            if expression.channel is not None:
                found.setdefault(expression.channel, set()).add(tuple(expression.parts))
    return {channel: frozenset(paths) for channel, paths in found.items()}


def _strings(value: Any) -> Iterable[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


def keep_read(value: Any, paths: Iterable[Path]) -> Any:
    """``value`` with only ``paths`` kept (see the module docstring)."""
    wanted = list(paths)
    if any(not path for path in wanted):
        return value
    return _keep(value, wanted)


def _keep(value: Any, paths: list[Path]) -> Any:
    groups: dict[str, list[Path]] = {}
    for path in paths:
        groups.setdefault(path[0], []).append(path[1:])
    if isinstance(value, Mapping):
        return {
            key: _child(value[key], rests) for key, rests in sorted(groups.items()) if key in value
        }
    if isinstance(value, list):
        return [
            _child(item, groups[str(index)]) if str(index) in groups else None
            for index, item in enumerate(value)
        ]
    return value


def _child(value: Any, rests: list[Path]) -> Any:
    if any(not rest for rest in rests) or not isinstance(value, Mapping | list):
        return value
    return _keep(value, rests)
