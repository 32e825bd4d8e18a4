"""The check of an operation's ``input`` against what its contract declares and reads.

A declared field (``input:`` in the contract) is checked for presence (when required), type,
minimum and pattern (RE2: linear in the value, ``shared.core.patterns``). A field the contract
reads through ``$input.<path>`` without declaring it must be present too: a contract that
cannot resolve its own inputs would leave its conditions unknown forever. Extra fields are
allowed (they are kept and never evaluated).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

from services.ingress.problems import FieldProblem
from shared.core.contract import Contract, InputField
from shared.core.patterns import PatternError, pattern_matches

__all__ = ["check_input", "input_paths"]

_INPUT_REF = re.compile(r"\$input((?:\.[A-Za-z0-9_\-]+)+)")
_MISSING = object()


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _strings(item)


_path_cache: dict[int, tuple[Contract, tuple[tuple[str, ...], ...]]] = {}


def _paths(contract: Contract) -> tuple[tuple[str, ...], ...]:
    cached = _path_cache.get(id(contract))
    if cached is not None and cached[0] is contract:
        return cached[1]
    found: set[tuple[str, ...]] = set()
    for text in _strings(contract.document()):
        for match in _INPUT_REF.finditer(text):
            found.add(tuple(match.group(1).split(".")[1:]))
    paths = tuple(sorted(found))
    if len(_path_cache) > 512:
        _path_cache.clear()
    _path_cache[id(contract)] = (contract, paths)
    return paths


def input_paths(contract: Contract) -> list[str]:
    """Every ``$input`` path the contract reads, as dotted paths (``charge``, ``a.b``)."""
    return [".".join(p) for p in _paths(contract)]


def _type_ok(kind: str, value: Any) -> bool:
    match kind:
        case "string":
            return isinstance(value, str)
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
    return False


def _check_declared(name: str, spec: InputField, value: Any) -> str | None:
    if not _type_ok(spec.type, value):
        return f"must be of type {spec.type}, got {_json_type(value)}"
    if spec.minimum is not None and spec.type in ("integer", "number") and value < spec.minimum:
        return f"must be at least {spec.minimum}"
    if spec.pattern is not None and spec.type == "string":
        try:
            matches = pattern_matches(spec.pattern, value)
        except PatternError as exc:  # stored before lint refused what RE2 cannot compile
            return f"cannot be checked: the contract's pattern does not compile with RE2 ({exc})"
        if not matches:
            return f"must match {spec.pattern}"
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _lookup(data: Mapping[str, Any], path: tuple[str, ...]) -> Any:
    current: Any = data
    for part in path:
        if not isinstance(current, Mapping) or part not in current:
            return _MISSING
        current = current[part]
    return current


def check_input(contract: Contract, data: Mapping[str, Any]) -> list[FieldProblem]:
    """The problems of ``data`` as the input of an operation on ``contract`` (empty: valid)."""
    problems: list[FieldProblem] = []
    for name, spec in contract.input.items():
        if name not in data:
            if spec.required:
                problems.append(FieldProblem(field=f"input.{name}", message="is required"))
            continue
        message = _check_declared(name, spec, data[name])
        if message is not None:
            problems.append(FieldProblem(field=f"input.{name}", message=message))
    declared = set(contract.input)
    for path in _paths(contract):
        if path[0] in declared:
            continue
        if _lookup(data, path) is _MISSING:
            problems.append(
                FieldProblem(
                    field="input." + ".".join(path), message="is required (the contract reads it)"
                )
            )
    return problems
