"""Stripe's search query language, as the sandbox answers ``GET /v1/<resource>/search``.

A query is one or more clauses joined by ``AND`` or by ``OR`` (not both, at most ten):
``field:value`` (equals; ``null`` for a missing value), ``field~"text"`` (contains, three
characters or more), ``field>n`` / ``>=`` / ``<`` / ``<=`` (numbers and ``created``), a leading
``-`` negates, ``metadata["key"]:"value"`` reads metadata. Strings are quoted with ``"`` or
``'``. The answer is Stripe's ``search_result``: ``{object, data, has_more, next_page, url}``,
newest first, paged with ``limit`` and ``page`` (the ``next_page`` token).

Unlike Stripe (whose search index lags writes by up to a minute) the sandbox finds an object as
soon as it exists. Pure data, no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from services.sandbox.errors import StripeError

__all__ = ["SEARCH_FIELDS", "parse_query", "search"]

#: The fields each searchable resource answers for (Stripe's lists, the sandbox's subset).
SEARCH_FIELDS: dict[str, frozenset[str]] = {
    "charges": frozenset(
        {
            "amount",
            "created",
            "currency",
            "customer",
            "disputed",
            "metadata",
            "payment_intent",
            "refunded",
            "status",
            "payment_method_details.card.last4",
            "payment_method_details.card.brand",
        }
    ),
    "customers": frozenset({"created", "email", "metadata", "name", "phone"}),
    "payment_intents": frozenset(
        {"amount", "created", "currency", "customer", "metadata", "status"}
    ),
}

_CLAUSE = re.compile(
    r"""\s*(?P<neg>-)?
    (?P<field>metadata\[(?:"[^"]*"|'[^']*')\]|[A-Za-z_][A-Za-z0-9_.]*)
    (?P<op>:|~|>=|<=|>|<)
    (?P<value>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|[^\s"']+)\s*""",
    re.VERBOSE,
)
_JOIN = re.compile(r"(AND|OR)\s+")
_MAX_CLAUSES = 10


@dataclass(frozen=True)
class Clause:
    negated: bool
    path: tuple[str, ...]
    op: str
    value: str
    quoted: bool


def _bad(message: str) -> StripeError:
    return StripeError(400, message, code="parameter_invalid_string", param="query")


def parse_query(query: str, allowed: frozenset[str]) -> tuple[list[Clause], str]:
    """The clauses of ``query`` and how they combine (``AND`` or ``OR``)."""
    if not query.strip():
        raise StripeError(
            400, "Missing required param: query.", code="parameter_missing", param="query"
        )
    clauses: list[Clause] = []
    joins: set[str] = set()
    pos = 0
    while True:
        match = _CLAUSE.match(query, pos)
        if match is None:
            raise _bad(f"We could not parse your search query at position {pos}: {query!r}.")
        field, raw = match.group("field"), match.group("value")
        quoted = raw[:1] in ("'", '"')
        value = re.sub(r"\\(.)", r"\1", raw[1:-1]) if quoted else raw
        if field.startswith("metadata["):
            path: tuple[str, ...] = ("metadata", field[len("metadata[") + 1 : -2])
        else:
            if field not in allowed or field == "metadata":
                raise _bad(
                    f"Field '{field}' is an unsupported search field for this resource. "
                    f"Supported: {', '.join(sorted(allowed))}."
                )
            path = tuple(field.split("."))
        op = match.group("op")
        if op == "~" and len(value) < 3:
            raise _bad("A substring (~) query needs at least 3 characters.")
        clauses.append(Clause(bool(match.group("neg")), path, op, value, quoted))
        pos = match.end()
        if pos == len(query):
            break
        join = _JOIN.match(query, pos) if query[pos - 1].isspace() else None
        if join is None:
            raise _bad(f"We could not parse your search query at position {pos}: {query!r}.")
        joins.add(join.group(1))
        pos = join.end()
    if len(joins) > 1:
        raise _bad("A search query cannot combine AND and OR.")
    if len(clauses) > _MAX_CLAUSES:
        raise _bad(f"A search query takes at most {_MAX_CLAUSES} clauses.")
    return clauses, (joins.pop() if joins else "AND")


def _read(obj: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = obj
    for part in path:
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _spelled(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _holds(clause: Clause, obj: dict[str, Any]) -> bool:
    value = _read(obj, clause.path)
    if clause.op == ":":
        if clause.value == "null" and not clause.quoted:
            result = value is None
        else:
            result = value is not None and _spelled(value) == clause.value
    elif clause.op == "~":
        result = isinstance(value, str) and clause.value.lower() in value.lower()
    else:
        try:
            wanted = float(clause.value)
        except ValueError as exc:
            raise _bad(f"{clause.op} compares numbers; {clause.value!r} is not one.") from exc
        if isinstance(value, bool) or not isinstance(value, int | float):
            result = False
        else:
            result = {
                ">": value > wanted,
                ">=": value >= wanted,
                "<": value < wanted,
                "<=": value <= wanted,
            }[clause.op]
    return result != clause.negated


def search(
    rows: Iterable[dict[str, Any]],
    *,
    resource: str,
    params: dict[str, Any],
    url: str,
    render: Callable[[dict[str, Any]], dict[str, Any]],
) -> dict[str, Any]:
    """Stripe's ``search_result`` over ``rows`` (stored objects) for ``params`` (query, …)."""
    for key in params:
        if key not in ("query", "limit", "page", "expand"):
            raise StripeError(
                400, f"Received unknown parameter: {key}", code="parameter_unknown", param=key
            )
    query = params.get("query")
    if not isinstance(query, str):
        raise StripeError(
            400, "Missing required param: query.", code="parameter_missing", param="query"
        )
    clauses, join = parse_query(query, SEARCH_FIELDS[resource])
    combine = all if join == "AND" else any
    found = [
        o
        for o in sorted(rows, key=lambda o: o["_seq"], reverse=True)
        if combine(_holds(c, render(o)) for c in clauses)
    ]
    limit = 10
    if "limit" in params:
        raw = params["limit"]
        if not isinstance(raw, str) or not raw.isdigit() or not 1 <= int(raw) <= 100:
            raise StripeError(
                400,
                "Invalid limit: must be an integer between 1 and 100.",
                code="parameter_invalid_integer",
                param="limit",
            )
        limit = int(raw)
    start = 0
    page = params.get("page")
    if page:
        if not isinstance(page, str) or not re.fullmatch(r"page_\d+", page):
            raise StripeError(400, f"Invalid page: {page!r}.", param="page")
        start = int(page.removeprefix("page_"))
    chunk = found[start : start + limit]
    has_more = len(found) > start + limit
    return {
        "object": "search_result",
        "data": [render(o) for o in chunk],
        "has_more": has_more,
        "next_page": f"page_{start + limit}" if has_more else None,
        "url": url,
    }
