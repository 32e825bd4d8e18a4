"""scripts/test runs every test once: the unit tests with the core's coverage check, then the
rest of the suite without them (it used to run the unit tests a second time)."""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

from packaging.specifiers import SpecifierSet  # pytest's own dependency

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "test"


def _pytest_runs() -> list[list[str]]:
    text = re.sub(r"\\\n\s*", " ", SCRIPT.read_text(encoding="utf-8"))
    runs = []
    for line in text.splitlines():
        words = shlex.split(line, comments=True)
        if "pytest" in words and '"$@"' not in line:
            runs.append(words[words.index("pytest") + 1 :])
    return runs


def test_the_full_run_takes_every_test_once() -> None:
    unit, rest = _pytest_runs()
    assert "tests/unit" in unit
    assert any(a.startswith("--cov-fail-under=") for a in unit)
    assert "--cov=shared/core" in unit
    assert "--ignore=tests/unit" in rest
    assert not [a for a in rest if a.startswith("tests/unit")]


def test_every_supported_python_runs_the_unit_suite_in_ci() -> None:
    """pyproject admits 3.11 to 3.13; .ci/run runs the whole suite on 3.11 (scripts/test) and the
    unit suite on each other one, in a venv of its own."""
    root = SCRIPT.parents[1]
    requires = SpecifierSet(
        tomllib.loads((root / "pyproject.toml").read_text())["project"]["requires-python"]
    )
    assert [v for v in ("3.10", "3.11", "3.12", "3.13", "3.14") if v in requires] == [
        "3.11",
        "3.12",
        "3.13",
    ]
    ci = (root / ".ci" / "run").read_text(encoding="utf-8")
    assert "bash scripts/test" in ci
    assert "for minor in 3.12 3.13; do" in ci
    assert 'VENV=".venv-$minor" PYTHON="$py" bash scripts/bootstrap dev' in ci
    assert '".venv-$minor/bin/python" -m pytest -q tests/unit' in ci
