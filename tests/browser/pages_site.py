"""A real ingress serving the published pages for the browser tests, and receipts to check.

The ASGI app (``create_app``) runs under uvicorn on a free loopback port, on a migrated SQLite
database whose receipt keys went through a real rotation: key ``old`` signed first and was
retired when key ``new`` was configured, so ``GET /v1/receipts/keys`` lists an active and a
retired key. Receipts are signed with the project's own signing code (``signing_payload``,
``sign_payload``) by those two keys.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from cryptography.fernet import Fernet
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from services.ingress.app import create_app
from shared.core.receipt import receipt_document, signing_payload
from shared.db.migrate import upgrade
from shared.db.session import make_engine, session_scope
from shared.lifecycle.receipt_keyring import key_id_for, sign_payload, write_private_key_file
from shared.lifecycle.receipt_keys import ensure_active_key
from shared.runtime.settings import Settings
from tests.servers import free_port
from tests.unit.receipts.factory import sample_body

__all__ = [
    "Site",
    "fragment",
    "receipt_pair",
    "retired_key_receipt",
    "running_site",
    "signed",
    "v1_receipt",
]

OLD_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(40, 72)))
NEW_KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(80, 112)))


def signed(body: dict[str, Any], private: Ed25519PrivateKey) -> dict[str, Any]:
    """A receipt document of ``body`` signed by ``private`` (the body's version decides the
    canonical form)."""
    return receipt_document(
        body,
        signature=sign_payload(private, signing_payload(body)),
        key_id=key_id_for(private.public_key()),
    )


def fragment(value: Any) -> str:
    """``#receipt=<base64url of the JSON>``: how a link hands the page a receipt."""
    raw = json.dumps(value).encode()
    return "#receipt=" + base64.urlsafe_b64encode(raw).decode().rstrip("=")


@dataclass
class Site:
    url: str
    keys: dict[str, Any]  # the JSON of GET /v1/receipts/keys

    def get(self, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.get(self.url + path, timeout=30, **kwargs)


def _settings(directory: Path, url: str, key_file: Path) -> Settings:
    return Settings(
        database_url=url,
        data_dir=directory / "data",
        broker_url=f"sqla+sqlite:///{directory / 'broker.db'}",
        secret_key=Fernet.generate_key().decode(),
        receipt_key_file=key_file,
    )


def _rotate_keys(directory: Path, url: str) -> Settings:
    """Key ``old`` is published first, then ``new`` replaces it: ``old`` is retired."""
    engine = make_engine(url)
    settings = None
    try:
        for name, key in (("old", OLD_KEY), ("new", NEW_KEY)):
            path = directory / f"{name}.pem"
            write_private_key_file(path, key)
            settings = _settings(directory, url, path)
            with session_scope(engine) as session:
                ensure_active_key(session, now=datetime.now(UTC), settings=settings)
    finally:
        engine.dispose()
    assert settings is not None
    return settings


@contextmanager
def running_site(directory: Path) -> Iterator[Site]:
    """The ingress under uvicorn on a free port until the block ends."""
    url = f"sqlite:///{directory / 'provely.db'}"
    upgrade(url)
    settings = _rotate_keys(directory, url)
    port = free_port()
    config = uvicorn.Config(
        create_app(settings), host="127.0.0.1", port=port, log_level="warning", access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the ingress did not start")
        time.sleep(0.05)
    try:
        base = f"http://127.0.0.1:{port}"
        keys = httpx.get(base + "/v1/receipts/keys", timeout=30).json()
        yield Site(url=base, keys=keys)
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def receipt_pair() -> tuple[dict[str, Any], dict[str, Any]]:
    """A VERIFIED receipt and the CONTRADICTED one that supersedes it (both by key ``new``)."""
    first = sample_body(receipt_id="rcpt_" + "a" * 32)
    later = sample_body(
        receipt_id="rcpt_" + "b" * 32,
        verdict="CONTRADICTED",
        reason="duplicate_refund_present",
        class_="duplicate side effect",
        supersedes=first["id"],
    )
    return signed(first, NEW_KEY), signed(later, NEW_KEY)


def v1_receipt() -> dict[str, Any]:
    """A version 1 receipt (sorted-keys canonical form) by key ``new``."""
    body = sample_body(receipt_id="rcpt_" + "1" * 32)
    body["version"] = 1
    return signed(body, NEW_KEY)


def retired_key_receipt() -> dict[str, Any]:
    """A version 2 receipt signed by key ``old``, retired since."""
    return signed(sample_body(receipt_id="rcpt_" + "0" * 32), OLD_KEY)
