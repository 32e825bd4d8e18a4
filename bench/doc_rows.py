"""Rows of record in ``docs/benchmarks.md``: what a benchmark's ``--write`` does.

The page is a summary, one section per benchmark (what it measures, how to run it, the target,
the latest figures, the findings). ``--write`` adds the run's row to the table of its section's
latest figures and changes nothing else of the page.
"""

from __future__ import annotations

from pathlib import Path

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def add_row(section: str, header: str, row: str, *, path: Path = DOC) -> None:
    """Add ``row`` under the last table row of ``section`` (a ``## `` heading line). A section
    without a table gets one (``header``: its heading and separator lines) at its end; a page
    without the section gets the section at its end."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    lines = text.rstrip("\n").split("\n")
    if section not in lines:
        lines += ["", section, "", *header.split("\n"), row]
    else:
        start = lines.index(section)
        end = next(
            (i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines)
        )
        rows = [i for i in range(start + 1, end) if lines[i].startswith("|")]
        if rows:
            lines.insert(rows[-1] + 1, row)
        else:
            while end > start + 1 and not lines[end - 1].strip():
                end -= 1
            lines[end:end] = ["", *header.split("\n"), row]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
