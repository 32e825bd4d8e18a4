"""Validation of Stripe-style request parameters, raising :class:`StripeError` as Stripe would.

Each helper reads one parameter from decoded form parameters (strings and nested dicts) and
returns it typed, or raises the 400/404 error Stripe answers for it (``parameter_missing``,
``parameter_invalid_integer``, ``parameter_unknown``, ``resource_missing``, ...).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

from services.sandbox.errors import StripeError
from services.sandbox.forms import FormError, as_list

__all__ = [
    "check_known",
    "created_matches",
    "currency",
    "event_types",
    "metadata",
    "missing",
    "positive_int",
    "string",
    "url",
]

EVENT_TYPE = re.compile(r"^[a-z_]+(\.[a-z_]+)+$")


def missing(kind: str, ident: str, param: str | None = None) -> StripeError:
    return StripeError(
        404, f"No such {kind}: '{ident}'", code="resource_missing", param=param or "id"
    )


def check_known(params: dict[str, Any], allowed: Iterable[str]) -> None:
    allowed_set = set(allowed) | {"expand"}
    for key in params:
        if key not in allowed_set:
            raise StripeError(
                400, f"Received unknown parameter: {key}", code="parameter_unknown", param=key
            )


def positive_int(params: dict[str, Any], name: str, *, required: bool) -> int | None:
    raw = params.get(name)
    if raw is None or raw == "":
        if required:
            raise StripeError(
                400, f"Missing required param: {name}.", code="parameter_missing", param=name
            )
        return None
    if not isinstance(raw, str) or not re.fullmatch(r"\d+", raw):
        raise StripeError(
            400, f"Invalid integer: {raw}", code="parameter_invalid_integer", param=name
        )
    value = int(raw)
    if value < 1:
        raise StripeError(
            400,
            "This value must be greater than or equal to 1.",
            code="amount_too_small",
            param=name,
        )
    return value


def currency(params: dict[str, Any], *, required: bool) -> str | None:
    raw = params.get("currency")
    if raw is None or raw == "":
        if required:
            raise StripeError(
                400, "Missing required param: currency.", code="parameter_missing", param="currency"
            )
        return None
    if not isinstance(raw, str) or not re.fullmatch(r"[A-Za-z]{3}", raw):
        raise StripeError(
            400, f"Invalid currency: {raw}.", code="parameter_invalid_string", param="currency"
        )
    return raw.lower()


def string(params: dict[str, Any], name: str, *, max_len: int = 5000) -> str | None:
    raw = params.get(name)
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str) or len(raw) > max_len:
        raise StripeError(
            400, f"Invalid string: {name}.", code="parameter_invalid_string", param=name
        )
    return raw


def metadata(raw: Any, current: dict[str, str] | None = None) -> dict[str, str]:
    """Stripe's metadata rules: strings, ≤50 keys of ≤40 chars, values ≤500; ``""`` unsets."""
    result = dict(current or {})
    if raw is None:
        return result
    if raw == "":
        return {}
    if not isinstance(raw, dict):
        raise StripeError(
            400,
            "Invalid object: metadata must be a hash.",
            code="parameter_invalid_object",
            param="metadata",
        )
    for key, value in raw.items():
        if not isinstance(value, str):
            raise StripeError(
                400,
                f"Invalid metadata value for {key!r}: nested objects are not allowed.",
                code="parameter_invalid_string",
                param=f"metadata[{key}]",
            )
        if len(key) > 40 or len(value) > 500:
            raise StripeError(
                400,
                "Metadata keys are at most 40 characters and values at most 500.",
                code="parameter_invalid_string",
                param=f"metadata[{key}]",
            )
        if value == "":
            result.pop(key, None)
        else:
            result[key] = value
    if len(result) > 50:
        raise StripeError(
            400,
            "Metadata can hold at most 50 keys.",
            code="parameter_invalid_object",
            param="metadata",
        )
    return result


def event_types(raw: Any) -> list[str]:
    try:
        types = [str(t) for t in as_list(raw, param="enabled_events")]
    except FormError as exc:
        raise StripeError(
            400, str(exc), code="parameter_invalid_array", param="enabled_events"
        ) from exc
    if not types:
        raise StripeError(
            400,
            "Missing required param: enabled_events.",
            code="parameter_missing",
            param="enabled_events",
        )
    for t in types:
        if t != "*" and not EVENT_TYPE.match(t):
            raise StripeError(
                400,
                f"Invalid event type: {t}",
                code="parameter_invalid_string",
                param="enabled_events",
            )
    return types


def url(raw: Any) -> str:
    if not isinstance(raw, str) or raw == "":
        raise StripeError(
            400, "Missing required param: url.", code="parameter_missing", param="url"
        )
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise StripeError(400, f"Invalid URL: {raw}", code="url_invalid", param="url")
    return raw


def created_matches(created: int, spec: Any) -> bool:
    if isinstance(spec, str):
        if not spec.lstrip("-").isdigit():
            raise StripeError(
                400, "Invalid integer: created.", code="parameter_invalid_integer", param="created"
            )
        return created == int(spec)
    if not isinstance(spec, dict):
        raise StripeError(400, "Invalid created filter.", param="created")
    ops: dict[str, Callable[[int, int], bool]] = {
        "gt": lambda a, b: a > b,
        "gte": lambda a, b: a >= b,
        "lt": lambda a, b: a < b,
        "lte": lambda a, b: a <= b,
    }
    for op, raw in spec.items():
        if op not in ops:
            raise StripeError(
                400,
                f"Received unknown parameter: created[{op}]",
                code="parameter_unknown",
                param=f"created[{op}]",
            )
        if not isinstance(raw, str) or not raw.lstrip("-").isdigit():
            raise StripeError(
                400,
                f"Invalid integer: {raw}",
                code="parameter_invalid_integer",
                param=f"created[{op}]",
            )
        if not ops[op](created, int(raw)):
            return False
    return True
