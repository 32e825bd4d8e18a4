"""Parsing a verified delivery into an event.

:func:`parse_event` reads the event by the provider skill's ``event_shape`` (id, type, the
event's own creation time, api version, object id, the correlation keys it carries). Malformed
JSON (``NaN`` and ``Infinity`` are not JSON) or a missing id / type / time raises
:class:`MalformedEvent`. A body that is JSON is always read: what no table can hold (a NUL
character, a lone surrogate, ``1e999``, nesting past the limit) is escaped in the copy that is
stored and matched (``shared.core.storable_copy``), and :attr:`ParsedEvent.escaped` names the
places; the raw bytes are kept verbatim beside it. The expression reader here (``$event.*``,
``$delivery.*``) is the one the correlation rules read operations with (``shared.intake.rules``).

Errors::

    MalformedEvent       the verified body is not an event of the expected shape (400)
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from shared.core.skill import EventShape
from shared.core.storable import MAX_JSON_DEPTH
from shared.core.storable_copy import StorableCopy, storable_copy
from shared.trust.signatures import VerifiedDelivery

__all__ = ["MalformedEvent", "ParsedEvent", "parse_event"]

_MAX_ID = 255
_MAX_TYPE = 200
_MAX_VERSION = 64
MAX_KEY_VALUE = 255
# Epoch seconds a provider timestamp may take: 2000-01-01 .. 2100-01-01.
_MIN_EPOCH, _MAX_EPOCH = 946_684_800, 4_102_444_800


class MalformedEvent(ValueError):
    """A verified body that is not an event of the expected shape; refused, stored nowhere."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ParsedEvent:
    event_id: str
    type: str
    provider_timestamp: datetime
    body: dict[str, Any]
    api_version: str | None = None
    object_id: str | None = None
    idempotency_key: str | None = None
    keys: Mapping[str, str] = field(default_factory=dict)
    escaped: tuple[str, ...] = ()
    """Places of ``body`` escaped to be storable (empty: ``body`` is the provider's own)."""


# ------------------------------------------------------------------------------------ parsing


_ABSENT = object()


def walk_path(doc: Any, parts: Sequence[str]) -> Any:
    for part in parts:
        # ``type(doc) is dict`` first: what JSON decodes to, without the ABC check
        if type(doc) is dict or isinstance(doc, Mapping):
            doc = doc.get(part, _ABSENT)
            if doc is _ABSENT:
                return None
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return None
    return doc


@lru_cache(maxsize=1024)
def split_expression(expr: str) -> tuple[str, tuple[str, ...]]:
    """An expression's root and path (``$event.data.object.id`` → ``$event``, its parts),
    split once: skills and contracts hold a few hundred at most."""
    root, _, rest = expr.partition(".")
    return root, tuple(rest.split(".")) if rest else ()


def _resolve(expr: str | None, body: Any, delivery: Mapping[str, Any]) -> Any:
    """``$event.a.b`` reads the body, ``$delivery.x`` what the signature check learned."""
    if not expr:
        return None
    root, parts = split_expression(expr)
    if root == "$event":
        return walk_path(body, parts)
    if root == "$delivery":
        return walk_path(delivery, parts)
    return None


def bounded_text(value: Any, limit: int) -> str | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        value = str(value)
    if isinstance(value, str) and 0 < len(value) <= limit:
        return value
    return None


def _timestamp(value: Any) -> datetime | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, int | float):
        if not _MIN_EPOCH <= value <= _MAX_EPOCH:
            return None
        return datetime.fromtimestamp(value, tz=UTC)
    if isinstance(value, str):
        if value.isdigit():
            return _timestamp(int(value))
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return None


class _NonFinite(Exception):
    """A number of the body parses as an infinity (``1e999``): the body takes the walk."""


def _finite_float(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _NonFinite
    return value


def _not_json(constant: str) -> Any:
    """``NaN``, ``Infinity`` and ``-Infinity``: Python's parser reads them, JSON has none."""
    raise ValueError(f"{constant} is not JSON")


# Built once: ``json.loads`` with a hook builds a decoder on every call.
_DECODER = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite_float)
_WALKED_DECODER = json.JSONDecoder(parse_constant=_not_json)

_MAYBE_UNSTORABLE = re.compile(rb"\\u(?:0000|[dD][89a-fA-F])|\xed[\xa0-\xbf]")
"""What in UTF-8 text may decode to a NUL character or a lone surrogate: their escapes
(``\\u0000``, ``\\ud800`` to ``\\udfff``, a pair's halves and an escaped backslash included) and
a surrogate's own bytes (``ED A0`` to ``ED BF``, which ``json`` decodes with ``surrogatepass``)."""


def _surely_storable(body: bytes) -> bool:
    """Whether the bytes alone show that the document parsed from them holds nothing
    ``shared.core.storable.unstorable`` names but an infinity (which the decoder's float hook
    catches): read as UTF-8 (no NUL byte, so neither UTF-16 nor UTF-32, and no UTF-16 byte order
    mark), no escape or bytes that may make a NUL or a surrogate, and no more opening brackets
    than the depth limit. When not, the parsed document takes the walk."""
    return (
        b"\x00" not in body
        and body[:2] not in (b"\xff\xfe", b"\xfe\xff")
        and body.count(b"{") + body.count(b"[") <= MAX_JSON_DEPTH
        and _MAYBE_UNSTORABLE.search(body) is None
    )


def _decoded(body: bytes) -> tuple[Any, StorableCopy | None]:
    """The parsed body, and its storable copy (None: the body is storable as parsed); raises
    ValueError or RecursionError for a body that is not JSON (as ``json.loads``)."""
    text = body.decode(json.detect_encoding(body), "surrogatepass")
    if _surely_storable(body):
        try:
            return _DECODER.decode(text), None
        except _NonFinite:
            pass
    parsed = _WALKED_DECODER.decode(text)
    return parsed, storable_copy(parsed) if isinstance(parsed, dict) else None


def parse_event(  # noqa: C901  # pay down: each field's checks inline; a reader per field
    body: bytes,
    *,
    shape: EventShape,
    delivery: VerifiedDelivery,
    received_at: datetime,
    extra_keys: Iterable[str] = (),
) -> ParsedEvent:
    """Read a verified body by ``shape``. ``extra_keys`` are object fields kept as keys too.

    The provider timestamp is the event's own creation time (``shape.created``), never the
    signature's timestamp.
    """
    try:
        parsed, copy = _decoded(body)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise MalformedEvent("malformed_json", "the body is not valid JSON") from exc
    if not isinstance(parsed, dict):
        raise MalformedEvent("malformed_event", "the body is not a JSON object")
    doc = parsed if copy is None else copy.value
    escaped = () if copy is None else copy.places
    meta = {
        "id": delivery.delivery_id,
        "timestamp": delivery.timestamp,
        "event_type": delivery.event_type,
        "received_at": received_at,
    }
    event_id = bounded_text(_resolve(shape.id, doc, meta), _MAX_ID)
    if event_id is None:
        raise MalformedEvent("missing_event_id", "the event carries no usable id")
    event_type = bounded_text(_resolve(shape.type, doc, meta), _MAX_TYPE)
    if event_type is None:
        raise MalformedEvent("missing_event_type", "the event carries no usable type")
    created = _timestamp(_resolve(shape.created, doc, meta))
    if created is None:
        raise MalformedEvent("missing_event_time", "the event carries no usable creation time")
    api_version = bounded_text(_resolve(shape.api_version, doc, meta), _MAX_VERSION)
    object_id = bounded_text(_resolve(shape.object_id, doc, meta), MAX_KEY_VALUE)
    idempotency_key = bounded_text(_resolve(shape.idempotency_key, doc, meta), MAX_KEY_VALUE)
    keys: dict[str, str] = {}
    for name, expr in shape.correlation_keys.items():
        value = bounded_text(_resolve(expr, doc, meta), MAX_KEY_VALUE)
        if value is not None:
            keys[name] = value
    obj = _resolve(shape.object, doc, meta)
    for name in extra_keys:
        if name not in keys and isinstance(obj, Mapping):
            value = bounded_text(obj.get(name), MAX_KEY_VALUE)
            if value is not None:
                keys[name] = value
    if object_id is not None:
        keys.setdefault("object_id", object_id)
    if idempotency_key is not None:
        keys.setdefault("idempotency_key", idempotency_key)
    return ParsedEvent(
        event_id=event_id,
        type=event_type,
        provider_timestamp=created,
        body=doc,
        api_version=api_version,
        object_id=object_id,
        idempotency_key=idempotency_key,
        keys=keys,
        escaped=escaped,
    )
