"""docs/architecture.md names modules, functions and import contracts that exist.

Every backticked ``path.py`` (and ``path.py::name``) must be a file of the repository and
``name`` defined in it at module level; a bare file name means the directory of the last full
path before it, as the document reads. The table of import contracts lists exactly the
contracts of ``pyproject.toml``, and the layers drawn are the layers contract's, in order.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "architecture.md"
TOKEN = re.compile(r"`([A-Za-z0-9_./]+\.py)(?:::([A-Za-z_]\w*))?`")


def _defined(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _references() -> list[tuple[Path, str | None, str]]:
    found: list[tuple[Path, str | None, str]] = []
    directory: Path | None = None
    for match in TOKEN.finditer(DOC.read_text(encoding="utf-8")):
        text, name = match.group(1), match.group(2)
        if "/" in text:
            path = REPO / text
            directory = path.parent
        else:
            assert directory is not None, f"{text} is named before any full path"
            path = directory / text
        found.append((path, name, match.group(0)))
    return found


def test_every_module_and_function_named_exists() -> None:
    references = _references()
    assert len(references) > 30
    for path, name, token in references:
        assert path.is_file(), f"{token}: no such file {path.relative_to(REPO)}"
        if name is not None:
            assert name in _defined(path), f"{token}: {name} is not defined in {path.name}"


def _importlinter() -> list[dict[str, object]]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    contracts: list[dict[str, object]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def test_the_contract_table_is_the_import_contract() -> None:
    text = DOC.read_text(encoding="utf-8")
    listed = set(re.findall(r"^\| `([a-z-]+)` \|", text, re.MULTILINE))
    assert listed == {str(c["id"]) for c in _importlinter()}


def test_the_layers_drawn_are_the_layers_checked() -> None:
    (layers,) = [c for c in _importlinter() if c["type"] == "layers"]
    drawn = re.findall(r"^shared/(\w+)\s", DOC.read_text(encoding="utf-8"), re.MULTILINE)
    assert drawn == layers["layers"]
    on_disk = sorted(p.parent.name for p in (REPO / "shared").glob("*/__init__.py"))
    assert sorted(drawn) == on_disk
