"""The pure core stays pure: an AST walk over every module of ``shared/core``.

Fails when a module imports a framework, a driver, YAML or ``os``, or reads the clock or draws
an id itself (``datetime.now``, ``time.time``, ``uuid4``…): time and ids are passed in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[3] / "shared" / "core"
FORBIDDEN_MODULES = frozenset(
    {"sqlalchemy", "celery", "kombu", "fastapi", "starlette", "httpx", "redis", "yaml", "os"}
)
FORBIDDEN_CALLS = frozenset(
    {
        "datetime.now",
        "datetime.utcnow",
        "datetime.today",
        "date.today",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.date.today",
        "time.time",
        "time.time_ns",
        "time.monotonic",
        "time.perf_counter",
        "uuid.uuid1",
        "uuid.uuid4",
        "uuid4",
        "uuid1",
    }
)
FORBIDDEN_NAMES = frozenset({("time", "time"), ("time", "time_ns"), ("uuid", "uuid4")})


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def impurities(source: str) -> list[str]:
    """Every forbidden import or call in ``source``, as readable strings."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in FORBIDDEN_MODULES:
                    found.append(f"import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            root = node.module.split(".")[0]
            if root in FORBIDDEN_MODULES:
                found.append(f"from {node.module} import …")
            for alias in node.names:
                if (node.module, alias.name) in FORBIDDEN_NAMES:
                    found.append(f"from {node.module} import {alias.name}")
        elif isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in FORBIDDEN_CALLS:
                found.append(f"call {name}()")
    return found


def core_modules() -> list[Path]:
    return sorted(CORE.rglob("*.py"))


def test_the_core_has_modules() -> None:
    names = {path.name for path in core_modules()}
    assert {"engine.py", "expressions.py", "operators.py", "events.py"} <= names


@pytest.mark.parametrize("path", core_modules(), ids=lambda p: p.name)
def test_core_module_is_pure(path: Path) -> None:
    assert impurities(path.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    "source",
    [
        "import os",
        "import os.path",
        "from os import environ",
        "import sqlalchemy as sa",
        "from sqlalchemy.orm import Session",
        "import celery",
        "from fastapi import FastAPI",
        "import httpx",
        "import redis",
        "import yaml",
        "from datetime import datetime\nx = datetime.now()",
        "import datetime\nx = datetime.datetime.now()",
        "from datetime import datetime\nx = datetime.utcnow()",
        "import time\nx = time.time()",
        "from time import time",
        "import uuid\nx = uuid.uuid4()",
        "from uuid import uuid4",
        "from uuid import uuid4 as u\nx = uuid4()",
    ],
)
def test_the_walk_catches_impurities(source: str) -> None:
    assert impurities(source) != []


def test_the_walk_allows_what_the_core_needs() -> None:
    source = (
        "from datetime import datetime, timedelta\n"
        "import hashlib, json, re\n"
        "from urllib.parse import quote\n"
        "x = datetime(2026, 1, 1) + timedelta(seconds=1)\n"
        "y = datetime.fromisoformat('2026-01-01')\n"
    )
    assert impurities(source) == []
