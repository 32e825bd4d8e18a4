"""Stripe's list envelope: pagination (``limit``, ``starting_after``, ``ending_before``),
``created`` ranges and per-resource filters over a table of the sandbox."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from services.sandbox import params as rules
from services.sandbox.errors import StripeError
from services.sandbox.state import SandboxState

__all__ = ["Listings"]


class Listings(SandboxState):
    """Lists of stored objects (a part of :class:`services.sandbox.model.Sandbox`)."""

    def list_objects(
        self,
        items: Iterable[dict[str, Any]],
        *,
        url: str,
        params: dict[str, Any],
        filters: dict[str, Callable[[dict[str, Any], Any], bool]],
    ) -> dict[str, Any]:
        rules.check_known(params, {"limit", "starting_after", "ending_before", "created", *filters})
        rows = sorted(items, key=lambda o: o["_seq"], reverse=True)
        for name, predicate in filters.items():
            if name in params and params[name] != "":
                rows = [o for o in rows if predicate(o, params[name])]
        if "created" in params:
            rows = [o for o in rows if rules.created_matches(o["created"], params["created"])]
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
        ids = [o["id"] for o in rows]
        after, before = params.get("starting_after"), params.get("ending_before")
        if after and before:
            raise StripeError(
                400,
                "You may only specify one of these parameters: ending_before, starting_after.",
                param="starting_after",
            )
        if after:
            if after not in ids:
                raise rules.missing("object", str(after), "starting_after")
            rows = rows[ids.index(after) + 1 :]
            page, has_more = rows[:limit], len(rows) > limit
        elif before:
            if before not in ids:
                raise rules.missing("object", str(before), "ending_before")
            rows = rows[: ids.index(before)]
            page, has_more = rows[-limit:], len(rows) > limit
        else:
            page, has_more = rows[:limit], len(rows) > limit
        return {
            "object": "list",
            "data": [self.render(o) for o in page],
            "has_more": has_more,
            "url": url,
        }
