"""``expand[]``: replace an id in an answer with the object it names, as Stripe does.

Paths are dotted (``charge.payment_intent``); on a list or search answer they start with
``data.`` and apply to every item. The expandable fields are the links the sandbox keeps:

| object | fields |
|---|---|
| refund | ``charge``, ``payment_intent`` |
| charge | ``refunds`` (the charge's refunds, a list), ``payment_intent``, ``customer`` |
| payment_intent | ``latest_charge``, ``customer`` |
| checkout.session | ``payment_intent``, ``customer``, ``line_items`` (a list) |

A ``null`` link stays ``null``; any other path is refused with Stripe's 400 ("This property
cannot be expanded"). At most four levels, as Stripe allows. No I/O.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from services.sandbox.errors import StripeError
from services.sandbox.forms import FormError, as_list

if TYPE_CHECKING:
    from services.sandbox.model import Sandbox

__all__ = ["EXPANDABLE", "check_paths", "expand", "expand_paths"]

# object type -> field -> table of the sandbox it names (None: built by _special)
EXPANDABLE: dict[str, dict[str, str | None]] = {
    "refund": {"charge": "charges", "payment_intent": "payment_intents"},
    "charge": {"refunds": None, "payment_intent": "payment_intents", "customer": "customers"},
    "payment_intent": {"latest_charge": "charges", "customer": "customers"},
    "checkout.session": {
        "payment_intent": "payment_intents",
        "customer": "customers",
        "line_items": None,
    },
}
_MAX_DEPTH = 4
# what an expanded field becomes: an object type, or "list:<type>"
_TYPE_OF_TABLE = {"charges": "charge", "payment_intents": "payment_intent", "customers": "customer"}
_SPECIAL_TYPE = {
    ("charge", "refunds"): "list:refund",
    ("checkout.session", "line_items"): "list:item",
}


def expand_paths(raw: Any) -> list[str]:
    """The ``expand`` parameter as a list of paths (``expand[]=a&expand[]=b`` or ``expand=a``)."""
    if raw is None:
        return []
    try:
        paths = as_list(raw, param="expand")
    except FormError as exc:
        raise StripeError(400, str(exc), param="expand") from exc
    for path in paths:
        if not isinstance(path, str) or not path:
            raise StripeError(400, "Invalid array for parameter 'expand'.", param="expand")
    return paths


def _refused(path: str) -> StripeError:
    return StripeError(400, f"This property cannot be expanded ({path}).", param="expand")


def _list(sandbox: Sandbox, data: list[dict[str, Any]], url: str) -> dict[str, Any]:
    return {"object": "list", "data": data, "has_more": False, "url": url}


def _special(sandbox: Sandbox, node: dict[str, Any], field: str) -> Any:
    if node.get("object") == "charge" and field == "refunds":
        refunds = sorted(
            (r for r in sandbox.refunds.values() if r["charge"] == node["id"]),
            key=lambda r: r["_seq"],
            reverse=True,
        )
        return _list(
            sandbox, [sandbox.render(r) for r in refunds], f"/v1/charges/{node['id']}/refunds"
        )
    session = sandbox.checkout_sessions.get(str(node.get("id")), {})
    items = [
        {
            "id": f"li_{node['id'][-16:]}{index}",
            "object": "item",
            "amount_subtotal": item["unit_amount"] * item["quantity"],
            "amount_total": item["unit_amount"] * item["quantity"],
            "currency": node.get("currency"),
            "description": item.get("description"),
            "quantity": item["quantity"],
        }
        for index, item in enumerate(session.get("_items", []))
    ]
    return _list(sandbox, items, f"/v1/checkout/sessions/{node['id']}/line_items")


def _apply(sandbox: Sandbox, node: Any, parts: list[str], path: str) -> None:
    if not parts or not isinstance(node, dict):
        return
    if node.get("object") in ("list", "search_result"):
        if parts[0] != "data":
            raise _refused(path)
        for item in node.get("data", []):
            _apply(sandbox, item, parts[1:], path)
        return
    field = parts[0]
    fields = EXPANDABLE.get(str(node.get("object")), {})
    if field not in fields:
        raise _refused(path)
    value = node.get(field)
    table = fields[field]
    if table is None:
        if not isinstance(value, dict):
            value = _special(sandbox, node, field)
    elif isinstance(value, str):
        stored = getattr(sandbox, table).get(value)
        value = copy.deepcopy(sandbox.render(stored)) if stored is not None else value
    node[field] = value
    _apply(sandbox, value, parts[1:], path)


def _check(kind: str, parts: list[str], path: str, depth: int) -> None:
    if not parts:
        return
    if kind.startswith("list:"):
        if parts[0] != "data":
            raise _refused(path)
        _check(kind.removeprefix("list:"), parts[1:], path, depth)
        return
    if depth >= _MAX_DEPTH:
        raise StripeError(
            400,
            f"You cannot expand more than {_MAX_DEPTH} levels of a property ({path}).",
            param="expand",
        )
    field = parts[0]
    fields = EXPANDABLE.get(kind, {})
    if field not in fields:
        raise _refused(path)
    table = fields[field]
    following = _SPECIAL_TYPE[(kind, field)] if table is None else _TYPE_OF_TABLE[table]
    _check(following, parts[1:], path, depth + 1)


def check_paths(returns: str, paths: list[str]) -> None:
    """Refuse, before anything changes, a path that cannot be expanded on a ``returns`` answer
    (an object type, or ``list:<type>`` for a list or search answer)."""
    for path in paths:
        _check(returns, path.split("."), path, 0)


def expand(sandbox: Sandbox, body: dict[str, Any], paths: list[str]) -> dict[str, Any]:
    """``body`` (a rendered object or list) with each path expanded in place."""
    for path in paths:
        parts = path.split(".")
        _apply(sandbox, body, parts, path)
    return body
