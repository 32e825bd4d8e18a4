"""The uvicorn factory of the ingress (``provely serve ingress``) leaves what it loaded out of
the garbage collector's full collections."""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from services.cli.serve import ingress_app
from shared.runtime.settings import get_settings

pytestmark = pytest.mark.integration


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("PROVELY_DATABASE_URL", f"sqlite:///{tmp_path / 'provely.db'}")
    monkeypatch.setenv("PROVELY_SECRET_KEY", Fernet.generate_key().decode())
    monkeypatch.setenv("PROVELY_BROKER_URL", f"sqla+sqlite:///{tmp_path / 'broker.db'}")
    get_settings.cache_clear()
    handlers = list(logging.getLogger().handlers)
    yield
    gc.unfreeze()
    get_settings.cache_clear()
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    for handler in handlers:
        root.addHandler(handler)


def test_the_factory_freezes_what_it_loaded(env: None) -> None:
    gc.unfreeze()
    assert gc.get_freeze_count() == 0
    app = ingress_app()
    assert gc.get_freeze_count() > 10_000  # the libraries, the app and the registry
    assert app.state.settings.secret_key == get_settings().secret_key
