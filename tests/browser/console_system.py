"""What the console's browser tests share: signing in from the browser, and a lone ingress
process on a migrated SQLite file with two workspaces (no workers: nothing moves an operation
but the test, through the lifecycle's ``change_state``)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.fernet import Fernet
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as seen
from selenium.webdriver.support.ui import WebDriverWait
from sqlalchemy import Engine

from shared.db.migrate import upgrade
from shared.db.session import make_engine, session_scope
from shared.db.tenants import create_workspace
from shared.runtime.settings import Settings
from tests.servers import _wait_port, free_port

__all__ = ["LoneIngress", "lone_ingress", "sign_in"]


def sign_in(driver: webdriver.Chrome, base_url: str, key: str) -> None:
    """Sign in to the console through its form, as a person would."""
    driver.get(f"{base_url}/console/sign-in")
    driver.find_element(By.ID, "key").send_keys(key)
    driver.find_element(By.ID, "sign-in").click()
    WebDriverWait(driver, 30).until(seen.presence_of_element_located((By.ID, "sign-out")))


@dataclass
class LoneIngress:
    url: str
    engine: Engine
    settings: Settings
    workspace_id: str
    admin_key: str


@contextmanager
def lone_ingress(workdir: Path) -> Iterator[LoneIngress]:
    database = f"sqlite:///{workdir / 'provely.db'}"
    upgrade(database)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env.update(
        {
            "PROVELY_DATABASE_URL": database,
            "PROVELY_SECRET_KEY": Fernet.generate_key().decode(),
            "PROVELY_BROKER_URL": f"sqla+sqlite:///{workdir / 'broker.db'}",
            "PROVELY_DATA_DIR": str(workdir / "data"),
        }
    )
    settings = Settings(
        database_url=database,
        secret_key=env["PROVELY_SECRET_KEY"],
        broker_url=env["PROVELY_BROKER_URL"],
        data_dir=workdir / "data",
    )
    engine = make_engine(database)
    with session_scope(engine) as session:
        ws, admin = create_workspace(session, "console", now=datetime.now(UTC))
        workspace_id = ws.id
    port = free_port()
    log = (workdir / "ingress.log").open("wb")
    process = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "provely"),
            "serve",
            "ingress",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
        ],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _wait_port(port, up=True, timeout_s=60)
        yield LoneIngress(f"http://127.0.0.1:{port}", engine, settings, workspace_id, admin)
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
        engine.dispose()
