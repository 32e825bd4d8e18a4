"""docs/operations.md's configuration table is the one generated from shared/runtime/settings.py."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from services.cli.config import BEGIN_MARKER, END_MARKER, settings_table, update_document
from services.cli.main import app
from shared.runtime.settings import Settings

REPO = Path(__file__).resolve().parents[3]
DOC = REPO / "docs" / "operations.md"


@pytest.mark.parametrize("name", ["docs/operations.md", "README.md"])
def test_docs_embed_the_current_settings_table(name: str) -> None:
    text = (REPO / name).read_text(encoding="utf-8")
    assert text == update_document(text), (
        f"{name} is out of date with shared/runtime/settings.py: "
        f"run `provely config table --update {name}`"
    )


def test_every_setting_is_documented_with_a_description() -> None:
    table = settings_table()
    for name, field in Settings.model_fields.items():
        assert f"`PROVELY_{name.upper()}`" in table
        assert field.description, f"{name} has no description"
    # One row per setting, and no cell split by a stray pipe.
    rows = table.splitlines()[2:]
    assert len(rows) == len(Settings.model_fields)
    assert all(row.count(" | ") == 3 for row in rows), rows


def test_update_document_replaces_only_the_block() -> None:
    text = f"intro\n{BEGIN_MARKER}\nold table\n{END_MARKER}\noutro\n"
    updated = update_document(text)
    assert updated.startswith(f"intro\n{BEGIN_MARKER}\n| variable |")
    assert updated.endswith(f"{END_MARKER}\noutro\n")
    assert "old table" not in updated
    assert update_document(updated) == updated


def test_config_show_redacts_secrets() -> None:
    runner = CliRunner()
    result = runner.invoke(
        app,
        ["config", "show"],
        env={
            "PROVELY_DATABASE_URL": "postgresql+psycopg://provely:hunter2@db/provely",
            "PROVELY_SECRET_KEY": "c2VjcmV0LXNlY3JldC1zZWNyZXQtc2VjcmV0LXNlY3I=",
        },
    )
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output
    assert "c2VjcmV0" not in result.output
    assert "postgresql+psycopg://provely:***@db/provely" in result.output
