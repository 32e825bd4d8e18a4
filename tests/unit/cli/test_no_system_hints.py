"""A command that finds no system says why (#33, "hints name the real cause"): a data
directory found from here that holds no database, a ``PROVELY_DATA_DIR`` or a
``PROVELY_DATABASE_URL`` that names nothing, or no data directory at all. Before, every case
said that no ``.provely/`` directory was found upwards, even when one was, or when the
directory had been named."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.cli.system import NoSystemError, existing_database_url
from shared.runtime.settings import Settings


def message(settings: Settings, url: str | None = None) -> str:
    with pytest.raises(NoSystemError) as raised:
        existing_database_url(url, settings=settings)
    text = str(raised.value)
    assert text.startswith("no Provely system here: ")
    assert "`provely up`" in text
    assert "db upgrade` first" not in text
    return text


@pytest.fixture
def unset(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PROVELY_DATA_DIR", "PROVELY_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)


def test_a_data_directory_found_upwards_that_holds_no_database(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unset: None
) -> None:
    (tmp_path / ".provely").mkdir()
    below = tmp_path / "src" / "app"
    below.mkdir(parents=True)
    monkeypatch.chdir(below)
    text = message(Settings())
    assert f"{tmp_path / '.provely'}, the nearest .provely/ directory from {below}" in text
    assert "holds no database" in text
    assert "was found" not in text


def test_a_named_data_directory_that_holds_no_database(tmp_path: Path, unset: None) -> None:
    named = tmp_path / "elsewhere"
    named.mkdir()
    text = message(Settings(data_dir=named))
    assert f"the data directory {named} (PROVELY_DATA_DIR) holds no database" in text
    assert "was found" not in text
    missing = message(Settings(data_dir=tmp_path / "nope"))
    assert f"the data directory {tmp_path / 'nope'} (PROVELY_DATA_DIR) does not exist" in missing


def test_a_database_url_that_names_a_missing_file(tmp_path: Path, unset: None) -> None:
    database = tmp_path / "none.db"
    text = message(Settings(database_url=f"sqlite:///{database}"))
    assert f"the database URL (PROVELY_DATABASE_URL) names {database}" in text
    assert "PROVELY_DATA_DIR to its data directory" not in text


def test_no_data_directory_from_here_upwards(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unset: None
) -> None:
    monkeypatch.chdir(tmp_path)
    text = message(Settings())
    assert f"no .provely/ directory was found from {tmp_path} upwards" in text
