"""A published page as data: headings, paragraphs, tables and lists, written once, read twice.

``shared.core.render`` builds a :class:`Document` from a contract's (or a skill's) facts; two
writers turn it into text: :func:`to_markdown` here (the page ``provely contracts render`` and
the API's ``page`` field print) and the HTML writer of the published pages
(``services.ingress.pages``). Neither writer adds a fact of its own.

Inline text is a small Markdown subset that both writers understand: plain words, code spans
(```x``` or ````` `` x `` `````) and links (``[text](url)``); nothing else is markup. A table
cell is inline text too. Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.core.cells import table

__all__ = [
    "Block",
    "Bullets",
    "Document",
    "Heading",
    "Paragraph",
    "Quote",
    "Strong",
    "Table",
    "to_markdown",
]


@dataclass(frozen=True, slots=True)
class Heading:
    """A section heading: level 1 is the page title, 2 a section, 3 a question."""

    level: int
    text: str


@dataclass(frozen=True, slots=True)
class Paragraph:
    """Inline text. ``gap_before`` keeps the blank line the Markdown page has always had
    between a table and the paragraph that comments it (no meaning in HTML)."""

    text: str
    gap_before: bool = False


@dataclass(frozen=True, slots=True)
class Quote:
    """The one-line statement under a title."""

    text: str


@dataclass(frozen=True, slots=True)
class Strong:
    """A paragraph in bold: the summary of a contract."""

    text: str


@dataclass(frozen=True, slots=True)
class Table:
    header: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True, slots=True)
class Bullets:
    items: tuple[str, ...]


Block = Heading | Paragraph | Quote | Strong | Table | Bullets


@dataclass(frozen=True, slots=True)
class Document:
    """A page: its title (the ``<title>`` of HTML) and its blocks, the first being its heading."""

    title: str
    blocks: tuple[Block, ...]

    def extended(self, *blocks: Block) -> Document:
        """This page with ``blocks`` appended."""
        return Document(title=self.title, blocks=(*self.blocks, *blocks))


def _markdown_lines(block: Block) -> list[str]:
    if isinstance(block, Heading):
        return ["#" * block.level + " " + block.text, ""]
    if isinstance(block, Paragraph):
        return (["", block.text, ""]) if block.gap_before else [block.text, ""]
    if isinstance(block, Quote):
        return [f"> {block.text}", ""]
    if isinstance(block, Strong):
        return [f"**{block.text}**", ""]
    if isinstance(block, Table):
        return table(block.header, block.rows)
    return [f"- {item}" for item in block.items] + [""]


def to_markdown(document: Document) -> str:
    """The Markdown text of ``document``: each block followed by a blank line."""
    lines: list[str] = []
    for block in document.blocks:
        lines += _markdown_lines(block)
    return "\n".join(lines)
