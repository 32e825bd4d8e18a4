"""Secrets at rest: Fernet encryption of connection secrets, and API keys stored as hashes.

The Fernet key comes from ``PROVELY_SECRET_KEY``. Several keys may be given, comma-separated,
during a rotation: the first encrypts, all decrypt. With the embedded default (SQLite) and no
key set, one is generated into ``<data dir>/secret.key`` (mode 0600) on first use. With
PostgreSQL, production must set the key: nothing starts without it.

API keys are ``pv_`` + 32 random bytes (URL-safe base64). Only their sha256 is stored; the
plain key is shown once, when it is created.

Errors::

    SecretError
    ├── SecretKeyMissing    no key configured where one is required, or an invalid key
    └── UndecryptableSecret a ciphertext that no configured key opens
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import threading
from pathlib import Path

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from shared.runtime.datafiles import private_dir
from shared.runtime.settings import Settings, get_settings
from shared.trust.webhook_secrets import WebhookSecret, from_json, to_json

__all__ = [
    "API_KEY_PREFIX",
    "SecretError",
    "SecretKeyMissing",
    "UndecryptableSecret",
    "api_key_display_prefix",
    "check_secret_key",
    "decrypt",
    "decrypt_webhook_secret_list",
    "decrypt_webhook_secrets",
    "encrypt",
    "encrypt_webhook_secret_list",
    "encrypt_webhook_secrets",
    "hash_api_key",
    "new_api_key",
]

API_KEY_PREFIX = "pv_"
KEY_FILE_NAME = "secret.key"

_lock = threading.Lock()
_cache: dict[tuple[str | None, str, str], MultiFernet] = {}


class SecretError(Exception):
    """Base of the errors of this module."""


class SecretKeyMissing(SecretError):
    """No usable Fernet key: set PROVELY_SECRET_KEY."""


class UndecryptableSecret(SecretError):
    """The ciphertext does not open with any configured key (wrong or rotated-out key)."""


def _uses_postgres(settings: Settings) -> bool:
    return settings.resolved_database_url().startswith(("postgresql", "postgres"))


def _key_file(settings: Settings) -> Path:
    return settings.data_dir.resolve() / KEY_FILE_NAME


def _read_or_create_key_file(path: Path) -> str:
    if path.exists():
        return path.read_text("ascii").strip()
    private_dir(path.parent)
    key = Fernet.generate_key()
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process made it first
        return path.read_text("ascii").strip()
    with os.fdopen(fd, "wb") as handle:
        handle.write(key + b"\n")
    return key.decode("ascii")


def _configured_keys(settings: Settings) -> list[str]:
    if settings.secret_key:
        return [k.strip() for k in settings.secret_key.split(",") if k.strip()]
    if _uses_postgres(settings):
        raise SecretKeyMissing(
            "PROVELY_SECRET_KEY is not set: with PostgreSQL the key that encrypts connection "
            "secrets must be configured (generate one with "
            '`python -c "from cryptography.fernet import Fernet; '
            'print(Fernet.generate_key().decode())"`)'
        )
    return [_read_or_create_key_file(_key_file(settings))]


def _fernet(settings: Settings | None) -> MultiFernet:
    settings = settings or get_settings()
    cache_key = (
        settings.secret_key,
        str(settings.data_dir.resolve()),
        settings.resolved_database_url(),
    )
    with _lock:
        found = _cache.get(cache_key)
        if found is not None:
            return found
        keys = _configured_keys(settings)
        try:
            fernet = MultiFernet([Fernet(k.encode("ascii")) for k in keys])
        except (ValueError, UnicodeEncodeError):
            raise SecretKeyMissing(
                "PROVELY_SECRET_KEY is not a valid Fernet key (32 url-safe base64-encoded bytes)"
            ) from None
        _cache[cache_key] = fernet
        return fernet


def check_secret_key(settings: Settings | None = None) -> None:
    """Fail fast (SecretKeyMissing) when no usable key is configured; call at start-up."""
    _fernet(settings)


def encrypt(data: bytes, *, settings: Settings | None = None) -> bytes:
    return _fernet(settings).encrypt(data)


def decrypt(token: bytes, *, settings: Settings | None = None) -> bytes:
    try:
        return _fernet(settings).decrypt(bytes(token))
    except InvalidToken:
        raise UndecryptableSecret(
            "a stored secret does not decrypt with PROVELY_SECRET_KEY (wrong or retired key)"
        ) from None


def encrypt_webhook_secrets(values: list[str], *, settings: Settings | None = None) -> bytes:
    return encrypt(json.dumps(list(values)).encode("utf-8"), settings=settings)


def decrypt_webhook_secrets(token: bytes, *, settings: Settings | None = None) -> list[str]:
    """Every stored secret's value, ended or not (see :func:`decrypt_webhook_secret_list`)."""
    return [s.value for s in decrypt_webhook_secret_list(token, settings=settings)]


def encrypt_webhook_secret_list(
    values: list[WebhookSecret], *, settings: Settings | None = None
) -> bytes:
    """The secrets with their end times (``shared.trust.webhook_secrets``), encrypted."""
    return encrypt(json.dumps(to_json(values)).encode("utf-8"), settings=settings)


def decrypt_webhook_secret_list(
    token: bytes, *, settings: Settings | None = None
) -> list[WebhookSecret]:
    try:
        return from_json(json.loads(decrypt(token, settings=settings)))
    except ValueError as exc:  # json.JSONDecodeError is one
        raise UndecryptableSecret(f"stored webhook secrets cannot be read: {exc}") from None


def new_api_key() -> str:
    """A new plain API key: ``pv_`` + 32 random bytes, URL-safe base64 (no padding)."""
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def hash_api_key(key: str) -> str:
    """sha256 hex of the plain key: what is stored and looked up."""
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def api_key_display_prefix(key: str) -> str:
    """The first characters of a key, stored for display ("pv_AbCd…")."""
    return key[: len(API_KEY_PREFIX) + 6]
