"""The bytes a receipt's signature covers, by the body's ``version``:

- 2: RFC 8785, the JSON Canonicalization Scheme — no whitespace, UTF-8, numbers as ECMAScript
  writes them, object keys sorted by UTF-16 code units;
- 1: ``json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
  allow_nan=False)`` encoded as UTF-8 (receipts issued before version 2).
"""

from __future__ import annotations

import json
import math
from decimal import Decimal
from typing import Any

__all__ = ["NotCanonical", "jcs", "signed_bytes"]

_SAFE_INTEGER = 2**53 - 1


class NotCanonical(ValueError):
    """A value JCS cannot spell (a non-finite number, an integer past 2**53 - 1, a lone
    surrogate, a type JSON does not have)."""


def _number(value: float) -> str:
    if not math.isfinite(value):
        raise NotCanonical(f"{value!r} is not a finite number")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    digits_tuple, exponent = Decimal(repr(abs(value))).normalize().as_tuple()[1:]
    digits = "".join(str(d) for d in digits_tuple)
    assert isinstance(exponent, int)
    k, n = len(digits), exponent + len(digits)  # n: where the decimal point goes
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        e = n - 1
        mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
        text = f"{mantissa}e{'+' if e > 0 else '-'}{abs(e)}"
    return sign + text


def _string(value: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise NotCanonical("a string holds a lone surrogate") from exc
    return json.dumps(value, ensure_ascii=False)


def _jcs(value: Any) -> str:
    if value is None or value is True or value is False:
        return json.dumps(value)
    if isinstance(value, int):
        if abs(value) > _SAFE_INTEGER:
            raise NotCanonical(f"integer {value} is beyond 2**53 - 1")
        return str(value)
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, list | tuple):
        return "[" + ",".join(_jcs(v) for v in value) + "]"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise NotCanonical("an object key is not a string")
        keys = sorted(value, key=lambda k: k.encode("utf-16-be", "surrogatepass"))
        return "{" + ",".join(_string(k) + ":" + _jcs(value[k]) for k in keys) + "}"
    raise NotCanonical(f"{type(value).__name__} is not JSON data")


def jcs(value: Any) -> bytes:
    """RFC 8785 bytes of ``value``."""
    return _jcs(value).encode("utf-8")


def signed_bytes(body: dict[str, Any]) -> bytes:
    """The signed bytes of a receipt body; :class:`NotCanonical` for an unknown version."""
    version = body.get("version")
    if version is True or version is False or version not in (1, 2):
        raise NotCanonical(f"receipt version {version!r} is not one this SDK reads")
    if version == 2:
        return jcs(body)
    try:
        return json.dumps(
            body, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
    except (TypeError, ValueError, UnicodeEncodeError) as exc:
        raise NotCanonical(str(exc)) from exc
