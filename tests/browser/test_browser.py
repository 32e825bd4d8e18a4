"""The browser fixture drives the real Chromium: a page served over loopback runs its script."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest
from selenium import webdriver
from selenium.webdriver.common.by import By

PAGE = b"""<!doctype html><title>probe</title><p id="out">static</p>
<script>document.getElementById("out").textContent = "scripted " + (1 + 1);</script>"""


class _Page(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def page_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Page)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def test_the_browser_runs_a_page_script(browser: webdriver.Chrome, page_url: str) -> None:
    browser.get(page_url)
    assert browser.find_element(By.ID, "out").text == "scripted 2"
