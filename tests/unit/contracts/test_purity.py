"""lint, render and the skill model belong to the pure core: no I/O, no clock, no environment."""

from __future__ import annotations

import ast

import pytest

from tests.unit.contracts.helpers import REPO_ROOT

MODULES = ["shared/core/lint.py", "shared/core/render.py", "shared/core/skill.py"]
FORBIDDEN = {
    "os", "sys", "io", "pathlib", "time", "uuid", "random", "logging", "yaml", "httpx",
    "sqlalchemy", "celery", "fastapi", "redis", "subprocess", "socket", "shared.settings",
    "shared.registry", "shared.skills",
}  # fmt: skip
FORBIDDEN_CALLS = {"now", "utcnow", "today", "open", "uuid4"}


@pytest.mark.parametrize("module", MODULES)
def test_module_is_pure(module: str) -> None:
    tree = ast.parse((REPO_ROOT / module).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        else:
            names = []
        for name in names:
            root = name.split(".")[0]
            assert name not in FORBIDDEN, f"{module} imports {name}"
            assert root not in FORBIDDEN, f"{module} imports {name}"
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            assert called not in FORBIDDEN_CALLS, f"{module} calls {called}()"
