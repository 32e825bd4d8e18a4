"""The HTML writer of a page document: Jinja2 templates, autoescaped, and the inline subset.

Inline text (``shared.core.document``) becomes HTML here: code spans become ``<code>``, links
``<a>`` (only site paths, fragments and http(s) addresses; anything else stays text), every
other character is escaped. Headings get stable ids so a page can link into itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape

from shared.core.document import Block, Document, Heading

__all__ = ["PageSection", "inline_html", "render_document", "render_template", "slug"]

TEMPLATES = Path(__file__).parent / "templates"
_TOKEN = re.compile(
    r"``\s(?P<padded>.+?)\s``|`(?P<code>[^`]+)`|\[(?P<text>[^\]]+)\]\((?P<url>[^)\s]+)\)"
)
_SAFE_URL = re.compile(r"^(?:/(?!/)|#|https?://)")


def inline_html(text: str) -> Markup:
    """Inline text as HTML: code spans, safe links, everything else escaped."""
    out: list[Markup] = []
    pos = 0
    for m in _TOKEN.finditer(text):
        out.append(escape(text[pos : m.start()]))
        literal = m.group("padded") or m.group("code")
        if literal is not None:
            out.append(Markup("<code>{}</code>").format(literal))
        elif _SAFE_URL.match(m.group("url")):
            out.append(
                Markup('<a href="{}">{}</a>').format(m.group("url"), inline_html(m.group("text")))
            )
        else:
            out.append(escape(m.group(0)))
        pos = m.end()
    out.append(escape(text[pos:]))
    return Markup("").join(out)


def slug(text: str) -> str:
    """A heading's id: lower-case words joined by hyphens, code marks dropped."""
    return re.sub(r"[^a-z0-9]+", "-", text.replace("`", "").lower()).strip("-") or "section"


@dataclass(slots=True)
class PageSection:
    """A level-2 heading and the blocks under it (``heading`` is None before the first)."""

    heading: Heading | None
    anchor: str
    blocks: list[Block] = field(default_factory=list)


def _sections(document: Document) -> list[PageSection]:
    sections = [PageSection(heading=None, anchor="top")]
    used: set[str] = {"top"}
    for block in document.blocks:
        if isinstance(block, Heading) and block.level == 2:
            anchor = slug(block.text)
            while anchor in used:
                anchor += "-more"
            used.add(anchor)
            sections.append(PageSection(heading=block, anchor=anchor))
        else:
            sections[-1].blocks.append(block)
    return sections


_ENV = Environment(
    loader=FileSystemLoader(TEMPLATES),
    autoescape=select_autoescape(["html"]),
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.filters["inline"] = inline_html
_ENV.filters["kind"] = lambda block: type(block).__name__


def render_template(name: str, **context: Any) -> str:
    return _ENV.get_template(name).render(**context)


def render_document(document: Document, **context: Any) -> str:
    """The HTML page of ``document`` (``context``: the alternate formats, a table of contents)."""
    return render_template(
        "document.html", title=document.title, sections=_sections(document), **context
    )
