"""What a person sees of ``provely``: the version, help pages in plain words, exit codes."""

from __future__ import annotations

import re
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from services.cli.config import BEGIN_MARKER, END_MARKER
from services.cli.help import plain_text
from services.cli.main import app

runner = CliRunner()
WIDE = {"COLUMNS": "200", "TERM": "dumb"}

# What typer shows when left alone: Python types after options and arguments, the required
# argument's braces, and the docstrings' reStructuredText.
NOT_FOR_PEOPLE = re.compile(
    r"<(?:bool|str|int|float|path|Path|list\[[^>]*\]|int range|float range)>"
    r"|``|:class:|:func:|\{[A-Za-z_]+\}"
)


def _commands() -> list[list[str]]:
    root: Any = typer.main.get_command(app)
    found: list[list[str]] = []

    def walk(command: Any, path: list[str]) -> None:
        found.append(path)
        for name, sub in getattr(command, "commands", {}).items():
            walk(sub, [*path, name])

    walk(root, [])
    return found


def test_version_flag_prints_the_installed_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"provely {version('provely')}"


@pytest.mark.parametrize("path", _commands(), ids=lambda p: " ".join(p) or "provely")
def test_help_pages_are_in_plain_words(path: list[str]) -> None:
    result = runner.invoke(app, [*path, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    found = NOT_FOR_PEOPLE.findall(result.output)
    assert not found, f"provely {' '.join(path)} --help shows {found}:\n{result.output}"


def test_help_names_values_not_types() -> None:
    lint = runner.invoke(app, ["contracts", "lint", "--help"], env=WIDE).output
    assert "[PATHS...]" in lint
    assert re.search(r"--json\s+Print the findings", lint), lint  # a flag: nothing after it
    serve = runner.invoke(app, ["serve", "ingress", "--help"], env=WIDE).output
    assert re.search(r"--port\s+INTEGER", serve), serve
    verify = runner.invoke(app, ["receipts", "verify", "--help"], env=WIDE).output
    assert "Usage: provely receipts verify [OPTIONS] FILE" in verify


def test_plain_text_drops_markup_and_joins_lines() -> None:
    assert plain_text("the ``observe``\nqueue, see :class:`x.Y`") == "the observe queue, see x.Y"
    assert plain_text("one\n\n- a\n- b") == "one\n\n- a\n- b"


def test_exit_codes_are_documented_in_the_readme_and_the_root_help() -> None:
    readme = (Path(__file__).resolve().parents[3] / "README.md").read_text(encoding="utf-8")
    assert "Exit codes" in readme
    for code in ("`0`", "`1`", "`2`"):
        assert code in readme.split("Exit codes", 1)[1][:800]
    assert "Exit codes: 0 ok, 1 a finding" in runner.invoke(app, ["--help"], env=WIDE).output


def test_a_usage_error_exits_2() -> None:
    assert runner.invoke(app, ["contracts", "lint", "--no-such-flag"]).exit_code == 2


def test_config_table_update_says_unchanged_when_nothing_changed(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(f"intro\n{BEGIN_MARKER}\nold\n{END_MARKER}\n", encoding="utf-8")
    first = runner.invoke(app, ["config", "table", "--update", str(doc)])
    assert first.exit_code == 0, first.output
    assert first.output.strip() == f"updated {doc}"
    before = doc.stat().st_mtime_ns
    second = runner.invoke(app, ["config", "table", "--update", str(doc)])
    assert second.exit_code == 0, second.output
    assert second.output.strip() == f"unchanged {doc}"
    assert doc.stat().st_mtime_ns == before  # not even rewritten


def test_config_table_update_cannot_check_exits_2(tmp_path: Path) -> None:
    missing = runner.invoke(app, ["config", "table", "--update", str(tmp_path / "absent.md")])
    assert missing.exit_code == 2
    plain = tmp_path / "plain.md"
    plain.write_text("no block here\n", encoding="utf-8")
    no_block = runner.invoke(app, ["config", "table", "--update", str(plain)])
    assert no_block.exit_code == 2
    assert "settings-table:begin" in no_block.output
