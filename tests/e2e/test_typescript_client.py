"""A TypeScript client generated from the served OpenAPI document (#34): in a copy of
``clients/typescript``, ``npm ci`` installs the locked openapi-typescript and openapi-fetch,
openapi-typescript turns ``/openapi.json`` into types, ``tsc`` checks ``check.mjs`` against
them, and node runs it against the distributed services and a Stripe sandbox: it creates,
reports and reads an operation to VERIFIED and checks the receipt with docs/receipts.md's Node
script. Without node and npm the test skips on a workstation and fails in CI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.e2e.launcher import DistributedSystem
from tests.e2e.sdk_world import new_world

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "clients" / "typescript"
KEPT = ("package.json", "package-lock.json", "tsconfig.json", "check.mjs")


def _tools() -> tuple[str, str]:
    node, npm = shutil.which("node"), shutil.which("npm")
    if node is None or npm is None:
        message = "node and npm are needed for the TypeScript client test"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return node, npm


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{argv}: {done.stdout[-3000:]}{done.stderr[-3000:]}"
    return done.stdout


def test_a_generated_typescript_client_proves_a_refund(
    distributed: DistributedSystem, tmp_path: Path
) -> None:
    node, npm = _tools()
    work = tmp_path / "typescript"
    work.mkdir()
    for name in KEPT:
        shutil.copy(SOURCE / name, work / name)
    _run([npm, "ci", "--no-audit", "--no-fund"], work)
    spec = httpx.get(f"{distributed.api_url}/openapi.json").json()
    (work / "openapi.json").write_text(json.dumps(spec), "utf-8")
    _run([npm, "run", "--silent", "generate"], work)
    _run([npm, "run", "--silent", "check"], work)  # check.mjs against the generated types

    world = new_world(distributed, "typescript")
    env = {
        **os.environ,
        "PROVELY_URL": world.api_url,
        "PROVELY_API_KEY": world.api_key,
        "SANDBOX_URL": world.sandbox.base_url,
        "SANDBOX_KEY": world.sandbox.api_key,
        "CHARGE": world.charge(),
        "VERIFY_SCRIPT": str(REPO / "docs" / "examples" / "verify-receipt.mjs"),
        "WORK_DIR": str(tmp_path),
    }
    result = json.loads(_run([node, "check.mjs"], work, env).strip().splitlines()[-1])
    assert result["verdict"] == "VERIFIED", result
    assert result["check"].startswith("valid: receipt rcpt_"), result
    assert f"of {result['id']} (VERIFIED)" in result["check"]
