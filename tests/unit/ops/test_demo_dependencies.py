"""``bash scripts/demo --all`` on a fresh clone has everything its scenarios import.

The ``entitlement`` scenario runs ``examples/entitlement_app``, a Stripe integration written with
the official ``stripe`` library: what the examples import must be installed by what
``scripts/demo`` installs (the package's dependencies and its ``demo`` extra), and when it is
not, the scenario names the import that failed.
"""

from __future__ import annotations

import ast
import asyncio
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
FIRST_PARTY = {"shared", "services", "examples", "tests", "bench"}


def _requirement_names(requirements: list[str]) -> set[str]:
    return {
        re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements
    }


def _demo_extra() -> str:
    script = (REPO / "scripts" / "demo").read_text(encoding="utf-8")
    found = re.search(r"^bash scripts/bootstrap(?: (\S+))?$", script, re.MULTILINE)
    assert found, "scripts/demo must install the package with scripts/bootstrap"
    return found.group(1) or ""


def _imported_modules(root: Path) -> set[str]:
    modules: set[str] = set()
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                modules |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                modules.add(node.module.split(".")[0])
    return modules - set(sys.stdlib_module_names) - FIRST_PARTY - {"__future__"}


def test_scripts_demo_installs_every_library_the_examples_import() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extra = _demo_extra()
    installed = _requirement_names(project["dependencies"])
    if extra:
        installed |= _requirement_names(project["optional-dependencies"][extra])
    installed |= {"starlette", "anyio"}  # come with fastapi, which the package depends on
    distributions = packages_distributions()
    imported = _imported_modules(REPO / "examples")
    assert "stripe" in imported  # the example is written with the official library
    missing = {
        module: distributions.get(module, [module])
        for module in imported
        if not {d.lower().replace("_", "-") for d in distributions.get(module, [module])}
        & installed
    }
    assert not missing, f"scripts/demo does not install what examples/ imports: {missing}"


def test_the_entitlement_scenario_names_the_import_that_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from services.cli.demo.scenarios import entitlement

    for name in list(sys.modules):
        if name == "stripe" or name.startswith(("stripe.", "examples.entitlement_app")):
            monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "stripe", None)  # import stripe -> ImportError
    seen: list[object] = []
    outcome = asyncio.run(
        entitlement._run_entitlement(None, lambda name, update: seen.append(update))  # type: ignore[arg-type]
    )
    assert not outcome.ok
    assert outcome.error is not None
    assert "import of stripe halted" in outcome.error or "No module named 'stripe'" in outcome.error
    assert "demo" in outcome.error  # and says how to install it
