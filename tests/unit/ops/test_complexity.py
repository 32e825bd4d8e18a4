"""The complexity limit: ruff's ``C901`` at 12 (``pyproject.toml``), which ``scripts/test``
runs with ``ruff check .``. ``shared/core`` takes no exception; every exception elsewhere is
marked where it is and says what to pay down, so ``grep -rn "noqa: C901"`` is the list.
"""

from __future__ import annotations

import fnmatch
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[3]
RUFF = Path(sys.executable).with_name("ruff")
LIMIT = 12
SCANNED = ("shared", "services", "bench", "examples", "scripts", "sdk")


def _lint_settings() -> dict[str, Any]:
    data = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    lint: dict[str, Any] = data["tool"]["ruff"]["lint"]
    return lint


def _exceptions(root: Path) -> list[tuple[Path, int, list[str]]]:
    """(file, line number, the line and the one above) of every ``noqa: C901`` under root."""
    found = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")) if (root / top).is_dir() else ():
            lines = path.read_text(encoding="utf-8").splitlines()
            for i, line in enumerate(lines):
                if "noqa: C901" in line:
                    found.append((path.relative_to(root), i + 1, lines[max(i - 1, 0) : i + 1]))
    return found


def test_the_limit_is_on_at_12() -> None:
    lint = _lint_settings()
    assert "C901" in lint["select"]
    assert lint["mccabe"]["max-complexity"] == LIMIT


def test_shared_core_takes_no_exception() -> None:
    marked = [f"{path}:{line}" for path, line, _ in _exceptions(REPO_ROOT)]
    assert not [m for m in marked if m.startswith("shared/core/")]
    core_files = [
        p.relative_to(REPO_ROOT).as_posix() for p in (REPO_ROOT / "shared/core").rglob("*.py")
    ]
    for pattern, codes in _lint_settings().get("per-file-ignores", {}).items():
        if "C901" in codes or "C" in codes or "C90" in codes:
            assert not fnmatch.filter(core_files, pattern), pattern


def test_every_exception_says_what_to_pay_down() -> None:
    found = _exceptions(REPO_ROOT)
    assert found, "the list of exceptions is empty: drop this test's premise, not the limit"
    for path, line, context in found:
        assert any("pay down" in text for text in context), f"{path}:{line}"
    ignores = (REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8")
    for pattern, codes in _lint_settings().get("per-file-ignores", {}).items():
        if "C901" in codes:
            above = ignores[: ignores.index(f'"{pattern}"')].splitlines()[-6:]
            assert any("pay down" in text for text in above), pattern


def test_a_function_over_the_limit_in_the_core_is_refused(tmp_path: Path) -> None:
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    module = tmp_path / "shared" / "core" / "branches.py"
    module.parent.mkdir(parents=True)
    body = "".join(f"    if x == {i}:\n        return {i}\n" for i in range(LIMIT))
    module.write_text(f'"""Branches."""\n\n\ndef many(x: int) -> int:\n{body}    return -1\n')
    run = subprocess.run(
        [str(RUFF), "check", "--no-cache", "shared/core/branches.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"C901 `many` is too complex ({LIMIT + 1} > {LIMIT})" in run.stdout
