"""The SDK is versioned with the API it speaks: its distribution, its ``__version__`` and the
server's package carry one version, and it imports nothing of the server."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import provely_sdk

REPO = Path(__file__).resolve().parents[3]
SDK = REPO / "sdk" / "python"


def test_one_version_for_the_api_and_the_sdk() -> None:
    server = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]
    sdk = tomllib.loads((SDK / "pyproject.toml").read_text("utf-8"))["project"]
    assert sdk["version"] == server["version"] == provely_sdk.__version__
    assert provely_sdk.API_VERSION == "v1"
    assert sorted(d.split(">")[0] for d in sdk["dependencies"]) == ["httpx", "pydantic"]


def test_the_sdk_imports_nothing_of_the_server() -> None:
    for path in (SDK / "provely_sdk").glob("*.py"):
        tree = ast.parse(path.read_text("utf-8"))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                assert name.split(".")[0] not in {"shared", "services"}, (path.name, name)
