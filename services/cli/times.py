"""Times printed by the CLI: one spelling, the API's (UTC, ISO 8601, ``Z``).

The API's JSON renders times with pydantic (``2026-12-01T19:20:17.123456Z``); every time the
CLI prints goes through :func:`utc_text`, so an id and a time copied from either compare equal.
A naive time (SQLite keeps no offset) is taken as UTC, as the API takes it.
"""

from __future__ import annotations

from datetime import UTC, datetime

from pydantic import TypeAdapter

__all__ = ["utc_text"]

_DATETIME = TypeAdapter(datetime)


def utc_text(value: datetime) -> str:
    """``value`` as the API writes it: UTC, ISO 8601, ending in ``Z``."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    text: str = _DATETIME.dump_python(value.astimezone(UTC), mode="json")
    return text
