"""The stored objects: fresh ids, and the object as the API shows it.

Objects are plain data (JSON-able dicts). Keys of stored objects that start with ``_`` are
internal and never rendered.
"""

from __future__ import annotations

import secrets
import string
from typing import Any

__all__ = ["new_id", "public"]


def public(obj: dict[str, Any]) -> dict[str, Any]:
    """The object as the API shows it (internal ``_`` keys removed)."""
    return {k: v for k, v in obj.items() if not k.startswith("_")}


def new_id(prefix: str, length: int = 24) -> str:
    alphabet = string.ascii_letters + string.digits
    return prefix + "".join(secrets.choice(alphabet) for _ in range(length))
