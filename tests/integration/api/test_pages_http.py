"""The published pages over HTTP: no API key, one address in three formats (HTML, Markdown,
the contract's JSON), ETag and 304, a strict CSP, HTML 404s, and the pages kept out of the
OpenAPI document."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine

from shared.core.document import to_markdown
from shared.core.render import contract_document
from shared.trust.registry import get_registry
from tests.integration.api.conftest import Api, build_api

PAGE = "/verify/stripe/stripe.refund.succeeded"


@pytest.fixture
def site(sqlite_engine: Engine, sqlite_url: str, tmp_path: Path) -> Iterator[Api]:
    built = build_api(sqlite_engine, sqlite_url, "sqlite", tmp_path)
    with built.client:
        yield built
    built.app.state.engine.dispose()


def test_the_pages_need_no_api_key_and_carry_a_strict_csp(site: Api) -> None:
    for path in ("/verify", "/verify/stripe", PAGE, f"{PAGE}/1.0.0", "/verify/terms/retry"):
        answer = site.client.get(path)
        assert answer.status_code == 200, path
        assert answer.headers["content-type"] == "text/html; charset=utf-8"
        csp = answer.headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "default-src 'none'" in csp
        assert "unsafe-inline" not in csp
        assert "<script>" not in answer.text
        assert answer.headers["vary"] == "Accept"


def test_one_address_answers_markdown_and_the_contract_document(site: Api) -> None:
    entry = get_registry().entry("stripe.refund.succeeded")
    markdown = site.client.get(PAGE, headers={"Accept": "text/markdown"})
    assert markdown.headers["content-type"] == "text/markdown; charset=utf-8"
    page = to_markdown(
        contract_document(
            entry.contract,
            digest=entry.hash,
            certification=entry.certification,
            skill_title=entry.skill_title(),
        )
    )
    assert markdown.text.startswith(page)  # the same page, then its versions and links
    assert "## Versions" in markdown.text
    document = site.client.get(PAGE, headers={"Accept": "application/json"})
    assert document.headers["content-type"] == "application/json"
    assert document.json() == entry.contract.document()
    html = site.client.get(PAGE, headers={"Accept": "text/html"})
    assert f"<code>{entry.hash[:16]}</code>" in html.text


def test_the_etag_follows_the_contract_hash_and_answers_304(site: Api) -> None:
    first = site.client.get(PAGE)
    etag = first.headers["etag"]
    assert first.headers["cache-control"].startswith("public, max-age=")
    again = site.client.get(PAGE, headers={"If-None-Match": etag})
    assert again.status_code == 304
    assert again.content == b""
    other_format = site.client.get(PAGE, headers={"Accept": "text/markdown"})
    assert other_format.headers["etag"] != etag
    older = site.client.get(f"{PAGE}/1.0.0")
    assert older.headers["etag"] != etag
    assert site.client.get(PAGE, headers={"If-None-Match": '"stale"'}).status_code == 200


def test_unknown_addresses_are_html_404s(site: Api) -> None:
    for path in ("/verify/nope", f"{PAGE}/0.0.1", "/verify/stripe/nothing", "/verify/x/y/z/w"):
        answer = site.client.get(path, headers={"Accept": "application/json"})
        assert answer.status_code == 404, path
        assert answer.headers["content-type"] == "text/html; charset=utf-8"
        assert '<a href="/verify">' in answer.text


def test_the_pages_are_not_in_the_openapi_document(site: Api) -> None:
    paths = site.client.get("/openapi.json").json()["paths"]
    assert not [path for path in paths if path.startswith("/verify")]


def test_a_page_ignores_a_query_that_a_link_may_carry(site: Api) -> None:
    answer = site.client.get(f"{PAGE}?utm_source=mail")
    assert answer.status_code == 200
    assert answer.headers["content-type"] == "text/html; charset=utf-8"
    refused = site.client.get("/healthz?utm_source=mail")
    assert refused.status_code == 422  # the API still refuses undeclared parameters
