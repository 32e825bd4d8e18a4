"""scripts/test runs every test once: the unit tests with the core's coverage check, then the
rest of the suite without them (it used to run the unit tests a second time)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

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
