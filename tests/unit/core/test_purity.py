"""The pure core reads no clock: an AST walk over every module of ``shared/core``.

What the core may import is the import contract's (``[tool.importlinter]`` in pyproject.toml,
run by ``lint-imports``): no framework, driver, YAML, ``os``, ``time``, ``uuid``… An import
contract cannot see a call, and the core imports ``datetime`` for its types, so this walk
fails when a module reads the clock itself (``datetime.now``, ``date.today``…): time is
passed in.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CORE = Path(__file__).resolve().parents[3] / "shared" / "core"
FORBIDDEN_CALLS = frozenset(
    {
        "datetime.now",
        "datetime.utcnow",
        "datetime.today",
        "date.today",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
    }
)


def _dotted(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def impurities(source: str) -> list[str]:
    """Every read of the clock in ``source``, as readable strings."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
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
        "from datetime import datetime\nx = datetime.now()",
        "import datetime\nx = datetime.datetime.now()",
        "from datetime import datetime\nx = datetime.utcnow()",
        "from datetime import date\nx = date.today()",
        "import datetime\nx = datetime.date.today()",
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
