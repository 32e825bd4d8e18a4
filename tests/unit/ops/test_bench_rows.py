"""A benchmark's ``--write`` adds its row to its section's table of ``docs/benchmarks.md`` and
changes nothing else of the page (``bench/doc_rows.py``), on a copy of the real page."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.doc_rows import add_row

DOC = Path(__file__).resolve().parents[3] / "docs" / "benchmarks.md"
HEADER = "| measured (UTC) | figure |\n|---|---|"


def _sections(text: str) -> list[str]:
    return [line for line in text.split("\n") if line.startswith("## ")]


@pytest.mark.parametrize("section", ["## Engine", "## API", "## Receipts", "## Demo"])
def test_the_row_lands_under_the_last_row_of_its_section(tmp_path: Path, section: str) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(DOC.read_text(encoding="utf-8"), encoding="utf-8")
    before = page.read_text(encoding="utf-8").split("\n")
    start = before.index(section)
    end = next(i for i in range(start + 1, len(before)) if before[i].startswith("## "))
    last_row = max(i for i in range(start, end) if before[i].startswith("|"))

    add_row(section, HEADER, "| new | row |", path=page)

    after = page.read_text(encoding="utf-8").split("\n")
    assert after == [*before[: last_row + 1], "| new | row |", *before[last_row + 1 :]]


def test_a_section_without_a_table_gets_one_at_its_end(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("# B\n\n## One\n\nText.\n\n## Two\n\n| a |\n|---|\n| 1 |\n", encoding="utf-8")

    add_row("## One", HEADER, "| new | row |", path=page)

    assert page.read_text(encoding="utf-8") == (
        "# B\n\n## One\n\nText.\n\n| measured (UTC) | figure |\n|---|---|\n| new | row |\n\n"
        "## Two\n\n| a |\n|---|\n| 1 |\n"
    )


def test_a_missing_section_is_added_at_the_end(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("# B\n\n## One\n\n| a |\n|---|\n| 1 |\n", encoding="utf-8")

    add_row("## Two", HEADER, "| new | row |", path=page)

    text = page.read_text(encoding="utf-8")
    assert _sections(text) == ["## One", "## Two"]
    assert text.endswith("## Two\n\n| measured (UTC) | figure |\n|---|---|\n| new | row |\n")
    assert text.startswith("# B\n\n## One\n\n| a |\n|---|\n| 1 |\n")
