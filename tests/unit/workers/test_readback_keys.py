"""The API keys a readback presents: decrypted once per ciphertext and key material, never
served for a replaced API key or a changed secret key, and bounded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet

from services.observer import connections
from services.observer.connections import _DecryptedKeys, readback_of
from shared.db.models import Connection
from shared.runtime.settings import Settings
from shared.trust import secrets
from shared.trust.secrets import UndecryptableSecret, encrypt


@pytest.fixture
def decrypts(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    seen: list[bytes] = []
    decrypt = secrets.decrypt

    def counting(token: bytes, **kwargs: Any) -> bytes:
        seen.append(token)
        return decrypt(token, **kwargs)

    monkeypatch.setattr(secrets, "decrypt", counting)
    monkeypatch.setattr(connections, "_decrypted", _DecryptedKeys(connections.KEPT_KEYS))
    return seen


def _settings(tmp_path: Path, key: str) -> Settings:
    return Settings(secret_key=key, data_dir=tmp_path)


def _connection(api_key_enc: bytes) -> Connection:
    return Connection(
        id="conn_k",
        provider="stripe",
        base_url="http://provider.test",
        api_key_enc=api_key_enc,
        auth_scheme="bearer",
        auth_header=None,
        rate_limit_per_second=10.0,
    )


def _authorization(connection: Connection, settings: Settings) -> str:
    readback = readback_of(connection, provider="stripe", settings=settings)
    return readback.target.headers["Authorization"]


def test_a_key_is_decrypted_once_for_its_ciphertext(tmp_path: Path, decrypts: list[bytes]) -> None:
    settings = _settings(tmp_path, Fernet.generate_key().decode())
    connection = _connection(encrypt(b"sk_one", settings=settings))
    for _ in range(3):
        assert _authorization(connection, settings) == "Bearer sk_one"
    assert len(decrypts) == 1


def test_a_replaced_api_key_is_never_served_from_the_old_one(
    tmp_path: Path, decrypts: list[bytes]
) -> None:
    settings = _settings(tmp_path, Fernet.generate_key().decode())
    assert _authorization(_connection(encrypt(b"sk_old", settings=settings)), settings) == (
        "Bearer sk_old"
    )
    replaced = _connection(encrypt(b"sk_new", settings=settings))  # same connection id
    assert _authorization(replaced, settings) == "Bearer sk_new"
    assert len(decrypts) == 2


def test_a_changed_secret_key_decrypts_again_and_a_retired_one_fails(
    tmp_path: Path, decrypts: list[bytes]
) -> None:
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    ciphertext = encrypt(b"sk_rot", settings=_settings(tmp_path, old))
    assert _authorization(_connection(ciphertext), _settings(tmp_path, old)) == "Bearer sk_rot"
    rotating = _settings(tmp_path, f"{new},{old}")  # the new key first, the old still opens
    assert _authorization(_connection(ciphertext), rotating) == "Bearer sk_rot"
    assert len(decrypts) == 2
    retired = _settings(tmp_path, new)
    for _ in range(2):  # a failure is not kept: each readback tries again
        with pytest.raises(UndecryptableSecret):
            _authorization(_connection(ciphertext), retired)
    assert len(decrypts) == 4


def test_the_kept_keys_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    settings = _settings(tmp_path, Fernet.generate_key().decode())
    kept = _DecryptedKeys(2)
    tokens = [encrypt(f"sk_{n}".encode(), settings=settings) for n in range(3)]
    for token in tokens:
        kept.get(token, settings)
    assert len(kept._keys) == 2
    decrypted: list[bytes] = []
    decrypt = secrets.decrypt
    monkeypatch.setattr(
        secrets, "decrypt", lambda token, **kw: decrypted.append(token) or decrypt(token, **kw)
    )
    assert kept.get(tokens[0], settings) == "sk_0"  # the oldest went first
    assert decrypted == [tokens[0]]
