"""A contract upload is parsed, linted and hashed in a worker thread, within its size and time
bounds: a real server keeps answering ``/healthz`` while it reads a large document."""

from __future__ import annotations

import gc
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import Engine

from services.cli.service_process import collect_less
from services.ingress.app import create_app
from shared.runtime.settings import Settings
from shared.trust.registry import SHIPPED_CONTRACTS_DIR
from tests.integration.api.live import LiveServer
from tests.integration.registry.conftest import _tenant

pytestmark = pytest.mark.integration

EXAMPLE = SHIPPED_CONTRACTS_DIR / "examples" / "app.entitlement.revoked.yaml"
YAML = {"Content-Type": "application/yaml"}


def padded(lines: int) -> bytes:
    """The example contract with a long extra section: slow to parse, refused by lint."""
    pad = "".join(f'  - {{a: {i}, b: two, c: [1, 2, 3], d: "text {i}"}}\n' for i in range(lines))
    return (EXAMPLE.read_text("utf-8") + "\nx_padding:\n" + pad).encode()


def settings_for(url: str, tmp_path: Path, **limits: object) -> Settings:
    return Settings(
        database_url=url,
        data_dir=tmp_path / "data",
        broker_url=f"sqla+sqlite:///{tmp_path / 'broker.db'}",
        secret_key=Fernet.generate_key().decode(),
        jitter_ratio=0.0,
        **limits,  # type: ignore[arg-type]
    )


@pytest.fixture
def collected_as_served() -> Iterator[None]:
    """The garbage collector set as ``provely serve ingress`` sets it (``ingress_app``): what
    is loaded frozen out of its reach, young collections every ``YOUNG_GC_THRESHOLD``. In the
    test process a full collection otherwise walks all of pytest and every test module loaded
    so far, and the document's tree triggers several: each held every thread for 0.2-0.6 s,
    as long as the bound below."""
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    collect_less()
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


def test_healthz_answers_while_a_large_contract_is_parsed(
    pg_engine: Engine,
    migrated_postgres_url: str,
    tmp_path: Path,
    fresh_registry: None,
    collected_as_served: None,
) -> None:
    body = padded(6_000)
    settings = settings_for(
        migrated_postgres_url,
        tmp_path,
        api_max_body_bytes=4 << 20,
        contract_max_bytes=4 << 20,
        contract_parse_timeout_seconds=120,
    )
    app = create_app(settings)
    admin = _tenant(pg_engine, "a").admin()
    with LiveServer(app) as server, httpx.Client(base_url=server.url, timeout=120) as client:
        assert client.get("/healthz").status_code == 200
        done = threading.Event()
        outcome: list[httpx.Response] = []

        def upload() -> None:
            with httpx.Client(base_url=server.url, timeout=120) as uploader:
                outcome.append(
                    uploader.post("/v1/contracts", content=body, headers={**admin, **YAML})
                )
            done.set()

        started = time.monotonic()
        threading.Thread(target=upload, daemon=True).start()
        latencies: list[float] = []
        while not done.is_set():
            sent = time.monotonic()
            assert client.get("/healthz").status_code == 200
            if not done.is_set():
                latencies.append(time.monotonic() - sent)
            time.sleep(0.02)
        took = time.monotonic() - started
    assert outcome[0].status_code == 422, outcome[0].text  # x_padding is not a contract field
    assert took > 0.3, "the document parsed too fast to show anything; make it larger"
    # Blocked, one /healthz would wait for the whole parse; in a thread each one is answered
    # in a small part of it.
    assert len(latencies) >= 3, (took, latencies)
    assert max(latencies) < took / 2, (took, latencies)


def test_contract_size_and_time_bounds(
    pg_engine: Engine, migrated_postgres_url: str, tmp_path: Path, fresh_registry: None
) -> None:
    from fastapi.testclient import TestClient

    settings = settings_for(migrated_postgres_url, tmp_path, contract_parse_timeout_seconds=0.001)
    admin = _tenant(pg_engine, "a").admin()
    with TestClient(create_app(settings)) as client:
        too_big = padded(3_000)
        assert len(too_big) > settings.contract_max_bytes
        refused = client.post("/v1/contracts", content=too_big, headers={**admin, **YAML})
        assert refused.status_code == 413, refused.text
        assert "PROVELY_CONTRACT_MAX_BYTES" in refused.json()["detail"]
        slow = client.post("/v1/contracts", content=padded(1_000), headers={**admin, **YAML})
        assert slow.status_code == 422, slow.text
        assert slow.json()["type"].endswith("/contract-too-complex")
        nan = client.post(
            "/v1/contracts",
            content=b'{"id": "acme.x", "version": "1.0.0", "timing": {"timeout": NaN}}',
            headers={**admin, "Content-Type": "application/json"},
        )
        # within the time bound or not, never a 500
        assert nan.status_code == 422, nan.text


def test_a_nan_in_an_uploaded_contract_is_refused_naming_the_place(
    pg_engine: Engine, migrated_postgres_url: str, tmp_path: Path, fresh_registry: None
) -> None:
    from fastapi.testclient import TestClient

    settings = settings_for(migrated_postgres_url, tmp_path)
    admin = _tenant(pg_engine, "a").admin()
    with TestClient(create_app(settings)) as client:
        text = EXAMPLE.read_text("utf-8") + "\nx_nan: .nan\n"
        refused = client.post("/v1/contracts", content=text, headers={**admin, **YAML})
        assert refused.status_code == 422, refused.text
        assert refused.json()["errors"][0]["field"] == "x_nan"
