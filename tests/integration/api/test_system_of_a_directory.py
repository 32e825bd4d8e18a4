"""One system per data directory: commands run anywhere below it act on it (as git finds its
repository), never on a second, empty database of their own; ``provely operations
list|show|timeline`` show what the API shows."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from cryptography.fernet import Fernet
from fastapi.testclient import TestClient

from services.ingress.app import create_app
from shared.runtime.settings import Settings

pytestmark = pytest.mark.integration

PROVELY = str(Path(sys.executable).parent / "provely")


def _run(
    *args: str, cwd: Path, env: dict[str, str], expect: int = 0
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [PROVELY, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == expect, (args, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr
    return done


def _json(*args: str, cwd: Path, env: dict[str, str]) -> Any:
    return json.loads(_run(*args, cwd=cwd, env=env).stdout)


def test_commands_below_the_data_directory_use_its_system(tmp_path: Path) -> None:
    project = tmp_path / "project"
    deep = project / "src" / "app"
    deep.mkdir(parents=True)
    key = Fernet.generate_key().decode()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env |= {"PROVELY_SECRET_KEY": key, "PROVELY_LOG_JSON": "false"}

    # The project's own data directory (as `git init` makes .git/), so that no `.provely/` of a
    # directory above the test's is found instead.
    (project / ".provely").mkdir()
    _run("db", "upgrade", cwd=project, env=env)
    database = project / ".provely" / "provely.db"
    assert database.is_file()

    # Below the project: the same system, and nothing new where the command ran.
    ws = _json("workspace", "create", "acme", cwd=deep, env=env)["workspace_id"]
    agent = _json("apikey", "create", "--workspace", ws, cwd=deep, env=env)["api_key"]
    assert [p.name for p in deep.iterdir()] == []
    assert "current:" in _run("db", "current", cwd=deep, env=env).stdout
    assert _json("apikey", "list", "--workspace", ws, cwd=project, env=env)

    settings = Settings(
        data_dir=project / ".provely",
        broker_url=f"sqla+sqlite:///{tmp_path / 'broker.db'}",
        secret_key=key,
    )
    app = create_app(settings)
    with TestClient(app) as client:
        headers = {"Authorization": f"Bearer {agent}"}
        created = client.post(
            "/v1/operations",
            headers=headers,
            json={
                "contract": "stripe.refund.succeeded",
                "input": {"charge": "ch_1", "amount": 2000, "currency": "usd"},
            },
        )
        assert created.status_code == 201, created.text
        op = created.json()["id"]
        api_view = client.get(f"/v1/operations/{op}", headers=headers).json()
        api_timeline = client.get(f"/v1/operations/{op}/timeline", headers=headers).json()
    app.state.engine.dispose()

    # The terminal's views are the API's.
    assert _json("operations", "show", op, "--json", cwd=deep, env=env) == api_view
    assert _json("operations", "timeline", op, "--json", cwd=deep, env=env) == api_timeline
    listed = _json("operations", "list", "--json", "--workspace", ws, cwd=deep, env=env)
    assert [item["id"] for item in listed["data"]] == [op]
    table = _run("operations", "list", cwd=deep, env=env).stdout.splitlines()
    assert table[0].split("\t")[:4] == ["id", "workspace", "contract", "state"]
    newest = api_view["contract"]["version"]  # the newest version the registry serves
    assert table[1].split("\t")[:4] == [op, ws, f"stripe.refund.succeeded@{newest}", "CREATED"]
    shown = _run("operations", "show", op, cwd=deep, env=env).stdout
    assert f"operation  {op} (workspace {ws})" in shown
    assert "retry      action: never" in shown
    timeline = _run("operations", "timeline", op, cwd=deep, env=env).stdout.splitlines()
    assert len(timeline) == len(api_timeline["entries"]) > 0
    assert all("transition" in line for line in timeline)

    unknown = _run("operations", "show", "op_nothing", cwd=deep, env=env, expect=1)
    assert unknown.stderr.strip() == "error: no operation op_nothing"
    other = _run("operations", "show", op, "--workspace", "ws_other", cwd=deep, env=env, expect=1)
    assert "no operation" in other.stderr
    bad_state = _run("operations", "list", "--state", "DONE", cwd=deep, env=env, expect=2)
    assert "is not a state" in bad_state.stderr
    assert [p.name for p in deep.iterdir()] == []


def test_outside_any_system_read_only_commands_create_nothing(tmp_path: Path) -> None:
    lone = tmp_path / "lone"
    lone.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PROVELY_")}
    env["PROVELY_DATA_DIR"] = str(lone / ".provely")  # no system there (and none above)
    for args in (
        ("db", "current"),
        ("receipts", "keys"),
        ("apikey", "list", "--workspace", "ws_x"),
        ("operations", "list"),
        ("audit", "verify", "--all"),
    ):
        done = _run(*args, cwd=lone, env=env, expect=2)
        assert done.stderr.startswith("error: no Provely system here: "), done.stderr
        assert "provely up" in done.stderr
    assert [p.name for p in lone.iterdir()] == []
