"""The pages' Accept negotiation, and the HTML of inline text (escaping, safe links only)."""

from __future__ import annotations

import pytest

from services.ingress.pages.html import inline_html, slug
from services.ingress.pages.negotiation import preferred_format

BROWSER = (
    "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,image/webp,"
    "image/apng,*/*;q=0.8,application/signed-exchange;v=b3;q=0.7"
)


@pytest.mark.parametrize(
    ("accept", "expected"),
    [
        (None, "html"),
        ("", "html"),
        (BROWSER, "html"),
        ("*/*", "html"),
        ("text/markdown", "markdown"),
        ("text/*", "html"),
        ("application/json", "json"),
        ("application/json, text/html;q=0.5", "json"),
        ("text/html;q=0.2, text/markdown;q=0.9", "markdown"),
        ("text/markdown;q=0, application/json;q=0.1", "json"),
        ("image/png", "html"),
        ("text/markdown;q=oops", "html"),
        (";;,,", "html"),
    ],
)
def test_the_accept_header_picks_the_format(accept: str | None, expected: str) -> None:
    assert preferred_format(accept) == expected


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("plain <b>&</b>", "plain &lt;b&gt;&amp;&lt;/b&gt;"),
        ("`$observed.x` eq `1`", "<code>$observed.x</code> eq <code>1</code>"),
        ("`` a`b ``", "<code>a`b</code>"),
        ("`<script>`", "<code>&lt;script&gt;</code>"),
        ("[Stripe 0.1.0](/verify/stripe)", '<a href="/verify/stripe">Stripe 0.1.0</a>'),
        ("[x](https://docs.stripe.com/refunds)", '<a href="https://docs.stripe.com/refunds">x</a>'),
        ("[x](#top)", '<a href="#top">x</a>'),
        ("[x](javascript:alert(1))", "[x](javascript:alert(1))"),
        ("[x](//evil.example/)", "[x](//evil.example/)"),
        ('[x](/a"onclick=b)', '<a href="/a&#34;onclick=b">x</a>'),
        ("[`id`](/verify/p/id)", '<a href="/verify/p/id"><code>id</code></a>'),
    ],
)
def test_inline_text_becomes_escaped_html(text: str, html: str) -> None:
    assert str(inline_html(text)) == html


def test_a_heading_id_is_a_slug() -> None:
    assert slug("What follows from the contract") == "what-follows-from-the-contract"
    assert slug("`refund_readback` & more!") == "refund-readback-more"
    assert slug("—") == "section"
