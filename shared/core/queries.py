"""Readback queries: which query parameters a skill lets a readback path take.

A query can do more than narrow a read. Stripe's ``expand[]=charge.customer`` makes
``GET /v1/refunds/{id}`` return the whole Customer — a resource no declared path names. So a
skill declares, per readback path, the query parameters its contracts may send
(``readback.query`` in ``skill.yaml``)::

    query:
      /v1/refunds:
        charge: any               # any value: a filter narrows the read
        created[gte]: any
        limit: any
      /v1/refunds/{id}:
        expand[]: [charge]        # only these literal values: the parameter names a resource

:func:`undeclared_query` lists what a readback's query — its ``query`` field and any query written
into its path template (``/v1/refunds/{$correlation.refund_id}?expand[]=charge``, names and
values percent-decoded) — uses beyond its skill's declaration: a
parameter the declaration of the path does not name, or a value outside the declared values of
a parameter that lists them (an expression there is refused too: its value is not known before
the read). A skill without a declaration for a path lets that path take no query at all. Lint
refuses a workspace contract on this list (a 422 naming the parameter) and the observer refuses
to read such a channel (defence in depth for contracts stored before the declaration existed).

Pure: no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final
from urllib.parse import unquote

from shared.core.paths import matching_template

__all__ = ["ANY_VALUE", "QueryDeclaration", "undeclared_query"]

ANY_VALUE: Final = "any"
"""A declared parameter that may take any value (a filter, a page size)."""

QueryDeclaration = Mapping[str, Mapping[str, str | Iterable[str]]]
"""A skill's ``readback.query``: path template → parameter → ``"any"`` or the allowed values."""


def undeclared_query(
    path: str,
    query: Mapping[str, str | int],
    *,
    paths: Iterable[str],
    declared: QueryDeclaration | None,
) -> list[str]:
    """What the query of a readback of ``path`` (a contract's path template) uses beyond the
    declaration, one sentence per parameter, in parameter order; empty when all is declared.

    ``paths`` are the skill's readback paths (the template that matches ``path`` names the
    declaration to use); ``declared`` its ``readback.query`` (None: the skill declares none).
    """
    sent = [*_inline(path), *((name, query[name]) for name in sorted(query))]
    if not sent:
        return []
    template = matching_template(path, paths)
    allowed = (declared or {}).get(template, {}) if template is not None else {}
    where = template if template is not None else path
    problems: list[str] = []
    for name, value in sent:
        if name not in allowed:
            problems.append(f"query parameter {name!r} is not declared for {where}")
            continue
        values = allowed[name]
        if isinstance(values, str) and values == ANY_VALUE:
            continue
        permitted = [values] if isinstance(values, str) else list(values)
        if not isinstance(value, str) or value.startswith("$") or value not in permitted:
            problems.append(
                f"query parameter {name!r} of {where} may only be "
                f"{', '.join(repr(v) for v in permitted)}, not {value!r}"
            )
    return problems


def _decoded(text: str) -> str:
    for _ in range(8):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def _inline(path: str) -> list[tuple[str, str]]:
    """The parameters written into a path template after ``?``; a ``{$expr}`` value is kept as
    the expression it is (``$…``), never as a literal."""
    if "?" not in path:
        return []
    query = path.split("?", 1)[1].split("#", 1)[0]
    sent: list[tuple[str, str]] = []
    for part in query.split("&"):
        if not part:
            continue
        name, _, value = part.partition("=")
        if value.startswith("{") and value.endswith("}"):
            value = value[1:-1]
        sent.append((_decoded(name), _decoded(value)))
    return sent
