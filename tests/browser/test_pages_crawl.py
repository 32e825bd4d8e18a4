"""A crawler over every ``/verify`` page of a real ingress finds no broken link.

Starting at ``/verify`` it follows every same-site ``href`` and ``src`` (pages, assets,
fragments): each page must answer 200 and each fragment must name an element id of its page.
Links off the site (a contract's sources) are listed, not fetched: they must be https. Every
version of every published contract must be reached.
"""

from __future__ import annotations

from collections.abc import Iterator
from html.parser import HTMLParser
from urllib.parse import urldefrag, urljoin, urlparse

import pytest

from shared.trust.registry import get_registry
from tests.browser.pages_site import Site, running_site


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value is None:
                continue
            if name in ("href", "src"):
                self.links.append(value)
            if name == "id":
                self.ids.add(value)


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with running_site(tmp_path_factory.mktemp("pages")) as running:
        yield running


def _crawl(site: Site) -> tuple[dict[str, _Links], list[str], set[str]]:
    """(every page fetched and its links, the broken links, the off-site links)."""
    pages: dict[str, _Links] = {}
    broken: list[str] = []
    external: set[str] = set()
    queue = ["/verify"]
    fragments: list[tuple[str, str, str]] = []  # (from, page, fragment)
    while queue:
        path = queue.pop()
        if path in pages:
            continue
        answer = site.get(path)
        parsed = _Links()
        pages[path] = parsed
        if answer.status_code != 200:
            broken.append(f"{path}: {answer.status_code}")
            continue
        if not answer.headers["content-type"].startswith("text/html"):
            continue
        parsed.feed(answer.text)
        for link in parsed.links:
            target = urljoin(site.url + path, link)
            if not target.startswith(site.url + "/"):
                external.add(target)
                continue
            url, fragment = urldefrag(target)
            page = urlparse(url).path
            if fragment:
                fragments.append((path, page, fragment))
            queue.append(page)
    for origin, page, fragment in fragments:
        if page in pages and fragment not in pages[page].ids:
            broken.append(f"{origin}: #{fragment} is not on {page}")
    return pages, broken, external


def test_every_link_of_every_verify_page_resolves(site: Site) -> None:
    pages, broken, external = _crawl(site)
    assert broken == []
    registry = get_registry()
    for entry in registry.entries():
        c = entry.contract
        assert f"/verify/{c.skill.provider}/{c.id}/{c.version}" in pages
    for name in ("verdicts", "correlation", "retry", "receipts", "contracts"):
        assert f"/verify/terms/{name}" in pages
    assert "/verify/receipt" in pages
    assert "/verify/static/receipt.js" in pages
    assert external, "a contract page links its sources"
    assert all(url.startswith("https://") for url in external), sorted(external)


def test_an_unknown_address_is_an_html_404_that_links_back(site: Site) -> None:
    for path in (
        "/verify/nowhere",
        "/verify/stripe/stripe.refund.nothing",
        "/verify/stripe/stripe.refund.succeeded/9.9.9",
        "/verify/terms/nothing",
        "/verify/a/b/c/d",
    ):
        answer = site.get(path)
        assert answer.status_code == 404, path
        assert answer.headers["content-type"].startswith("text/html")
        assert 'href="/verify"' in answer.text
