"""The lock files of ``requirements/`` agree with ``pyproject.toml``: every dependency of the
package (and of each extra the scripts install) is locked, at a version its range allows, with
hashes. A dependency added or a range moved without ``bash scripts/lock`` fails here."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text("utf-8"))
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==([^\s;\\]+)")


def _locked(name: str) -> dict[str, tuple[str, bool]]:
    """``{package: (version, hashed)}`` of ``requirements/<name>.txt``."""
    lines = (ROOT / "requirements" / f"{name}.txt").read_text("utf-8").splitlines()
    found: dict[str, tuple[str, bool]] = {}
    for i, line in enumerate(lines):
        match = _PIN.match(line)
        if match:
            hashed = line.rstrip().endswith("\\") and "--hash=sha256:" in lines[i + 1]
            found[canonicalize_name(match.group(1))] = (match.group(2), hashed)
    return found


def _required(extra: str | None) -> list[Requirement]:
    wanted = list(PYPROJECT["project"]["dependencies"])
    if extra is not None:
        wanted += PYPROJECT["project"]["optional-dependencies"][extra]
    return [Requirement(spec) for spec in wanted]


@pytest.mark.parametrize(("lock", "extra"), [("base", None), ("demo", "demo"), ("dev", "dev")])
def test_every_dependency_is_locked_within_its_range_with_hashes(
    lock: str, extra: str | None
) -> None:
    locked = _locked(lock)
    assert locked, f"requirements/{lock}.txt locks nothing"
    unhashed = sorted(name for name, (_, hashed) in locked.items() if not hashed)
    assert not unhashed, f"locked without hashes in requirements/{lock}.txt: {unhashed}"
    for requirement in _required(extra):
        name = canonicalize_name(requirement.name)
        assert name in locked, f"{requirement} is not in requirements/{lock}.txt: bash scripts/lock"
        version = locked[name][0]
        assert requirement.specifier.contains(version, prereleases=True), (
            f"requirements/{lock}.txt locks {name}=={version}, outside {requirement}: "
            "bash scripts/lock"
        )


def test_the_extras_the_scripts_install_each_have_a_lock() -> None:
    bootstrap = (ROOT / "scripts" / "bootstrap").read_text("utf-8")
    assert "--require-hashes" in bootstrap
    for extra in PYPROJECT["project"]["optional-dependencies"]:
        assert (ROOT / "requirements" / f"{extra}.txt").is_file(), extra
