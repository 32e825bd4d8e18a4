"""The import contract of ``pyproject.toml`` (``[tool.importlinter]``) holds, and breaks on a
wrong import.

``lint-imports`` runs on a copy of ``shared/`` and ``services/`` in a temporary directory with
the project's own ``pyproject.toml``: as it is, every contract is kept; with one deliberately
wrong import added to the copy, the contract that forbids it is broken and the tool exits
non-zero. The real tree is never written.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[3]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

# (contract id, file of the copy, the wrong import appended to it)
WRONG_IMPORTS = [
    ("core-pure", "shared/core/engine.py", "import sqlalchemy"),
    ("core-pure", "shared/core/expressions.py", "from celery import Celery"),
    ("core-pure", "shared/core/lint/contract.py", "import yaml"),
    ("core-pure", "shared/core/render.py", "import os"),
    ("core-pure", "shared/core/types.py", "from time import time"),
    ("core-pure", "shared/core/skill.py", "from uuid import uuid4"),
    ("core-alone", "shared/core/engine.py", "from shared.runtime.settings import get_settings"),
    ("core-alone", "shared/core/lint/contract.py", "import shared.trust.registry"),
    ("shared-layers", "shared/db/models.py", "import shared.lifecycle.operations"),
    ("shared-layers", "shared/runtime/settings.py", "from shared.db.session import get_engine"),
    ("shared-layers", "shared/trust/registry.py", "from shared.db.models import Operation"),
    ("shared-layers", "shared/evidence/view.py", "import shared.lifecycle.watch"),
    ("shared-layers", "shared/lifecycle/operations.py", "import shared.intake.correlator"),
    ("no-cycles", "shared/core/types.py", "import shared.core.engine"),
    ("no-cycles", "shared/db/models.py", "from shared.db.session import get_engine"),
    ("no-cycles", "services/ingress/api/schemas.py", "import services.ingress.app"),
    ("shared-no-services", "shared/lifecycle/scheduling.py", "import services.observer.tasks"),
    ("services-independent", "services/verdict/sweeper.py", "import services.observer.tasks"),
    ("services-independent", "services/ingress/app.py", "from services.sandbox import stripe"),
    ("cli-on-top", "services/observer/observe.py", "import services.cli.serve"),
    (
        "ingress-faces-independent",
        "services/ingress/intake/webhooks.py",
        "import services.ingress.api.views",
    ),
]


def _contract_ids() -> set[str]:
    config = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return {contract["id"] for contract in config["tool"]["importlinter"]["contracts"]}


def _copy_tree(target: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in ("shared", "services"):
        shutil.copytree(REPO_ROOT / package, target / package, ignore=ignore)
    shutil.copy2(REPO_ROOT / "pyproject.toml", target / "pyproject.toml")
    return target


def _lint_imports(tree: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` on ``tree`` with its own ``pyproject.toml``; the copy comes first on
    the path, ahead of the installed (editable) project."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    selected = [arg for contract in contracts for arg in ("--contract", contract)]
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", *selected],
        cwd=tree,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_every_contract_is_kept_on_the_tree_as_it_is(tmp_path: Path) -> None:
    done = _lint_imports(_copy_tree(tmp_path))
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"Contracts: {len(_contract_ids())} kept, 0 broken." in done.stdout


def test_every_contract_has_a_wrong_import_below() -> None:
    assert {contract for contract, _, _ in WRONG_IMPORTS} == _contract_ids()


@pytest.mark.parametrize(
    ("contract", "module", "wrong"), WRONG_IMPORTS, ids=[f"{c}:{w}" for c, _, w in WRONG_IMPORTS]
)
def test_a_wrong_import_breaks_its_contract(
    tmp_path: Path, contract: str, module: str, wrong: str
) -> None:
    tree = _copy_tree(tmp_path)
    path = tree / module
    path.write_text(path.read_text(encoding="utf-8") + f"\n{wrong}  # deliberately wrong\n")
    done = _lint_imports(tree, contract)
    assert done.returncode != 0, done.stdout
    assert "BROKEN" in done.stdout
    assert "deliberately wrong" not in (REPO_ROOT / module).read_text(encoding="utf-8")
