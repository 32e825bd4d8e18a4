"""The data directory is found as git finds its repository: the nearest ``.provely/`` from the
current directory upwards; ``PROVELY_DATA_DIR`` (or an explicit value) always wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.runtime.datadir import default_data_dir, find_data_dir
from shared.runtime.settings import Settings


def test_the_nearest_data_directory_upwards_is_found(tmp_path: Path) -> None:
    outer, inner = tmp_path / "a" / ".provely", tmp_path / "a" / "b" / ".provely"
    deep = tmp_path / "a" / "b" / "c" / "d"
    deep.mkdir(parents=True)
    before = find_data_dir(deep)  # none in the test's tree (a directory above it may hold one)
    assert before is None or tmp_path not in before.parents
    outer.mkdir()
    assert find_data_dir(deep) == outer
    inner.mkdir()
    assert find_data_dir(deep) == inner
    assert find_data_dir(tmp_path / "a") == outer
    (tmp_path / "f" / ".provely").parent.mkdir()
    (tmp_path / "f" / ".provely").write_text("a file, not a system")
    assert find_data_dir(tmp_path / "f") != tmp_path / "f" / ".provely"


def test_settings_use_the_found_directory_unless_told(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = tmp_path / "project" / ".provely"
    below = tmp_path / "project" / "src"
    system.mkdir(parents=True)
    below.mkdir()
    monkeypatch.delenv("PROVELY_DATA_DIR", raising=False)
    monkeypatch.chdir(below)
    assert default_data_dir() == system
    assert Settings().data_dir == system
    assert Settings().resolved_database_url() == f"sqlite:///{system / 'provely.db'}"
    assert Settings(data_dir=Path("elsewhere")).data_dir == Path("elsewhere")
    monkeypatch.setenv("PROVELY_DATA_DIR", str(tmp_path / "env"))
    assert Settings().data_dir == tmp_path / "env"
