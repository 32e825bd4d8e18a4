"""Checks of a contract's expressions, operands and http readback parameters.

Every expression names a known root (``$input.<declared field>``, ``$action.result…``,
``$operation.id`` / ``$operation.created_at``, ``$correlation.<declared key>``,
``$observed.<declared channel>…``; ``$event…`` only inside a webhook channel's match rules);
operands are typed by their operator; a readback's path and query never depend on
observations. :class:`ExpressionLinter` holds these checks and the findings; the contract's
sections are checked by its subclass in ``shared.core.lint.contract``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal

from shared.core.contract import Contract, HttpVerifier, Operator
from shared.core.lint.findings import LintError
from shared.core.paths import dot_segments

__all__ = ["KNOWN_ROOTS", "ExpressionLinter", "StaticType", "is_event_expr"]

KNOWN_ROOTS = ("$input", "$action", "$operation", "$correlation", "$observed", "$event")
_EXPR = re.compile(r"^\$[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_\-]+)*$")
_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")
_ORDERED = {Operator.GT, Operator.GTE, Operator.LT, Operator.LTE}
_TIME = {Operator.TIME_AFTER, Operator.TIME_BEFORE}
_LIST = {Operator.IN, Operator.NOT_IN}
_CURSOR_PARAMS = ("starting_after", "ending_before")

StaticType = Literal["number", "string", "boolean", "time", "id", "any"]


class ExpressionLinter:
    """A contract's expressions and operands checked against what it declares (its inputs,
    correlation keys and channels); the findings gather in ``errors``."""

    def __init__(self, contract: Contract, file: str) -> None:
        self.c = contract
        self.file = file
        self.errors: list[LintError] = []
        self.channels = {ch.name: ch for ch in contract.channels}
        self.keys: dict[str, str] = {}
        for strategy in contract.correlation:
            for key in strategy.keys:
                self.keys.setdefault(key.name, key.expr)
        self.keys.setdefault(contract.subject.identity.key, contract.subject.identity.expr)

    def err(self, field: str, message: str) -> None:
        self.errors.append(LintError(self.file, self.c.id, field, message))

    def _http_path(self, field: str, path: str) -> None:
        if not path.startswith("/"):
            self.err(field, "a readback path starts with /")
        if dot_segments(_PLACEHOLDER.sub("x", path)):
            self.err(
                field,
                "a readback path has no . or .. segment (also percent-encoded): it would read "
                "another resource, or leave the connection's base path",
            )
        rest = _PLACEHOLDER.sub("", path)
        if "{" in rest or "}" in rest:
            self.err(field, "unbalanced { } in the path template")
        for inner in _PLACEHOLDER.findall(path):
            if not inner.startswith("$"):
                self.err(field, f"placeholder {{{inner}}} must hold an expression")
                continue
            self._expr(field, inner)
            if inner.split(".")[0] == "$observed":
                self.err(field, f"a readback path cannot depend on observations ({inner})")

    def _http_query(self, field: str, http: HttpVerifier) -> None:
        """``query`` values are expressions the path could hold, or plain literals; ``paginate``
        reads a list with GET, within 1..100 pages, and owns its cursor parameters."""
        for name, value in http.query.items():
            qfield = f"{field}.query.{name}"
            if not name.strip() or name != name.strip():
                self.err(f"{field}.query", f"query parameter name {name!r} is empty or padded")
            if isinstance(value, str) and value.startswith("$"):
                self._expr(qfield, value)
                if value.split(".")[0] == "$observed":
                    self.err(qfield, f"a readback query cannot depend on observations ({value})")
                elif _EXPR.match(value) and self._type(value) == "boolean":
                    self.err(qfield, f"{value} is a boolean, which does not fill a query value")
            elif value == "":
                self.err(qfield, "an empty literal: leave the parameter out instead")
            if http.paginate is not None and name in _CURSOR_PARAMS:
                self.err(
                    qfield,
                    f"the pager sets the cursor itself ({http.paginate.style} pages with "
                    "starting_after); leave it out of the query",
                )
        if http.paginate is not None:
            pages = http.paginate.max_pages
            if not 1 <= pages <= 100:
                self.err(f"{field}.paginate.max_pages", f"must be from 1 to 100, got {pages}")
            if http.method != "GET":
                self.err(f"{field}.paginate", f"pages are read with GET, not {http.method}")

    def _operands(
        self, where: str, path: str, op: Operator, value: Any, *, in_match: bool = False
    ) -> None:
        if not isinstance(path, str) or not path.startswith("$"):
            self.err(f"{where}.path", "must be an expression ($…)")
        else:
            self._expr(f"{where}.path", path, in_match=in_match)
        if isinstance(value, str) and value.startswith("$"):
            self._expr(f"{where}.value", value, in_match=in_match)
        elif isinstance(value, list):
            for k, item in enumerate(value):
                if isinstance(item, str) and item.startswith("$"):
                    self._expr(f"{where}.value[{k}]", item, in_match=in_match)
        self._operand_types(where, path, op, value)

    def _operand_types(self, where: str, path: str, op: Operator, value: Any) -> None:
        """The operand an operator takes, and the type of path it compares."""
        path_type = self._type(path) if isinstance(path, str) and path.startswith("$") else "any"
        vfield = f"{where}.value"
        if op in _LIST:
            if not isinstance(value, list):
                self.err(vfield, f"{op.value} takes a list of values")
        elif op in _ORDERED:
            if not self._numeric(value):
                self.err(vfield, f"{op.value} takes a number or a number expression, got {value!r}")
            if path_type not in ("number", "any"):
                self.err(f"{where}.path", f"{op.value} compares numbers; {path} is {path_type}")
        elif op in _TIME:
            if not self._timelike(value):
                self.err(vfield, f"{op.value} takes a time expression, got {value!r}")
            if path_type in ("boolean", "id"):
                self.err(f"{where}.path", f"{op.value} compares times; {path} is {path_type}")
        elif op is Operator.EXISTS and value is not None and not isinstance(value, bool):
            self.err(vfield, "exists takes no operand or true/false")

    def _numeric(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if isinstance(value, int | float):
            return True
        if isinstance(value, str) and value.startswith("$"):
            return self._type(value) in ("number", "any")
        return False

    def _timelike(self, value: Any) -> bool:
        if isinstance(value, bool):
            return False
        if isinstance(value, int | float):
            return True
        if isinstance(value, str):
            if value.startswith("$"):
                return self._type(value) in ("time", "number", "string", "any")
            try:
                datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                return False
            return True
        return False

    def _type(self, expr: str, depth: int = 0) -> StaticType:
        parts = expr.split(".")
        root = parts[0]
        if root == "$input" and len(parts) == 2 and parts[1] in self.c.input:
            t = self.c.input[parts[1]].type
            return (
                "number"
                if t in ("integer", "number")
                else ("boolean" if t == "boolean" else "string")
            )
        if root == "$operation" and len(parts) == 2:
            return "time" if parts[1] == "created_at" else "id"
        if root == "$correlation" and len(parts) == 2 and parts[1] in self.keys and depth < 4:
            inner = self.keys[parts[1]]
            if inner.startswith("$"):
                return self._type(inner, depth + 1)
        return "any"

    def _expr(self, field: str, expr: str, *, in_match: bool = False) -> None:
        if not _EXPR.match(expr):
            root = expr.split(".")[0]
            if root in KNOWN_ROOTS:
                self.err(field, f"malformed expression {expr!r}")
            else:
                self.err(field, f"unknown root {root}")
            return
        root, *rest = expr.split(".")
        problem = self._root_problem(expr, root, rest, in_match=in_match)
        if problem is not None:
            self.err(field, problem)

    def _root_problem(
        self, expr: str, root: str, rest: Sequence[str], *, in_match: bool
    ) -> str | None:
        """What is wrong with ``expr`` (``root`` then ``rest``), if anything."""
        if root == "$input":
            if len(rest) != 1:
                return f"{expr}: an input is read as $input.<field>"
            return (
                None
                if rest[0] in self.c.input
                else (f"{expr}: input {rest[0]} is not declared in the input section")
            )
        if root == "$action":
            return (
                None
                if rest and rest[0] == "result"
                else (f"{expr}: the action is read as $action.result.…")
            )
        if root == "$operation":
            return (
                None
                if len(rest) == 1 and rest[0] in ("id", "created_at")
                else (f"{expr}: the operation offers $operation.id and .created_at")
            )
        if root == "$correlation":
            if len(rest) != 1:
                return f"{expr}: a key is read as $correlation.<key>"
            return (
                None
                if rest[0] in self.keys
                else (f"{expr}: correlation key {rest[0]} is not declared")
            )
        if root == "$observed":
            if not rest:
                return f"{expr}: name a channel: $observed.<channel>.…"
            return (
                None if rest[0] in self.channels else (f"{expr}: channel {rest[0]} is not declared")
            )
        if root == "$event":
            return (
                None
                if in_match
                else (f"{expr}: $event is only valid inside a webhook channel's match rules")
            )
        return f"unknown root {root}"


def is_event_expr(expr: str) -> bool:
    return isinstance(expr, str) and expr.startswith("$event.") and bool(_EXPR.match(expr))
