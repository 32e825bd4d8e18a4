"""lint, render and the skill model belong to the pure core: no I/O, no clock, no environment.

Their imports are the import contract's (``core-pure`` and ``core-alone`` in pyproject.toml's
``[tool.importlinter]``: no ``os``, ``pathlib``, ``yaml``, settings, registry or skills…). What
an import contract cannot see is a call: this walk fails when one of them reads the clock, opens
a file or draws an id with a builtin or an already imported name.
"""

from __future__ import annotations

import ast

import pytest

from tests.unit.contracts.helpers import REPO_ROOT

MODULES = [
    "shared/core/lint/contract.py",
    "shared/core/lint/document.py",
    "shared/core/lint/findings.py",
    "shared/core/lint/operands.py",
    "shared/core/lint/skill.py",
    "shared/core/render.py",
    "shared/core/cells.py",
    "shared/core/skill.py",
]
FORBIDDEN_CALLS = {"now", "utcnow", "today", "open", "uuid4"}


@pytest.mark.parametrize("module", MODULES)
def test_module_is_pure(module: str) -> None:
    tree = ast.parse((REPO_ROOT / module).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            assert called not in FORBIDDEN_CALLS, f"{module} calls {called}()"
