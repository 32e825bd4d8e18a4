"""The OpenAPI document and its pages: Swagger UI and ReDoc work offline (every asset is served
by the ingress itself), every operation has an explicit id, a description and an example per
answer (each valid against its schema), and a client generated from the document by
``openapi-python-client`` creates and reads an operation against a real ingress on PostgreSQL."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from services.ingress.docs_ui import ASSETS
from tests.integration.api.conftest import Api
from tests.integration.api.live import LiveServer

pytestmark = pytest.mark.integration

EXPECTED_IDS = {
    "create_operation",
    "list_operations",
    "get_operation",
    "report_action",
    "get_operation_timeline",
    "verify_operation",
    "review_operation",
    "list_contracts",
    "get_contract",
    "upload_contract",
    "get_operation_receipt",
    "get_receipt",
    "list_receipt_keys",
    "get_health",
    "get_readiness",
    "receive_event",
    "list_deliveries",
    "list_api_keys",
    "create_api_key",
    "revoke_api_key",
    "list_connections",
    "set_connection",
    "rotate_webhook_secret",
    "check_connection",
    "list_console_users",
    "create_console_user",
    "disable_console_user",
}


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [v for k, v in attrs if k in ("src", "href") and v]


def _page_links(html: str) -> list[str]:
    parser = _Links()
    parser.feed(html)
    # URLs inside the inline script (the SwaggerUIBundle / Redoc.init configuration) too.
    return parser.links + re.findall(r"""['"]((?:https?:)?//[^'"]+)['"]""", html)


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_docs_pages_load_everything_from_the_ingress(pg_api: Api, page: str) -> None:
    answer = pg_api.client.get(page)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/html")
    links = _page_links(answer.text)
    assert links, "the page references its assets"
    external = [link for link in links if not link.startswith("/")]
    assert external == []
    assert "/openapi.json" in answer.text
    for link in links:
        asset = pg_api.client.get(link)
        assert asset.status_code == 200, link
        if link.startswith("/static/"):
            name = link.rsplit("/", 1)[-1]
            assert asset.content == (ASSETS / name).read_bytes(), link
    scripts = [link for link in links if link.endswith(".js")]
    assert scripts
    body = pg_api.client.get(scripts[0]).text
    assert ("SwaggerUIBundle" if page == "/docs" else "Redoc") in body
    assert len(body) > 100_000  # the real bundle, not a stub


def test_swagger_ui_does_not_call_the_online_validator(pg_api: Api) -> None:
    assert '"validatorUrl": null' in pg_api.client.get("/docs").text


def _operations(spec: dict[str, Any]) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, item in spec["paths"].items():
        for method, operation in item.items():
            if isinstance(operation, dict) and "responses" in operation:
                yield method.upper(), path, operation


def test_every_operation_has_an_id_a_description_and_valid_examples(pg_api: Api) -> None:
    spec = pg_api.client.get("/openapi.json").json()
    ids = [op["operationId"] for _, _, op in _operations(spec)]
    assert sorted(ids) == sorted(EXPECTED_IDS)
    root = {"components": spec["components"]}
    problems: list[str] = []
    for method, path, operation in _operations(spec):
        where = f"{method} {path}"
        if len(operation.get("description", "")) < 40:
            problems.append(f"{where}: no description")
        for status, response in operation["responses"].items():
            contents = response.get("content") or {}
            if not contents:
                problems.append(f"{where} {status}: no content")
            for media, content in contents.items():
                if "example" not in content:
                    problems.append(f"{where} {status} {media}: no example")
                    continue
                validator = Draft202012Validator({**root, **content["schema"]})
                for error in validator.iter_errors(content["example"]):
                    problems.append(f"{where} {status} {media}: {error.message}")
    assert problems == []


def test_every_request_body_has_a_valid_example(pg_api: Api) -> None:
    """#33: request bodies had no examples in the OpenAPI document."""
    spec = pg_api.client.get("/openapi.json").json()
    root = {"components": spec["components"]}
    problems: list[str] = []
    bodies = 0
    for method, path, operation in _operations(spec):
        for media, content in (operation.get("requestBody") or {}).get("content", {}).items():
            bodies += 1
            where = f"{method} {path} {media}"
            if "example" not in content:
                problems.append(f"{where}: no example")
                continue
            validator = Draft202012Validator({**root, **content["schema"]})
            problems += [f"{where}: {e.message}" for e in validator.iter_errors(content["example"])]
    assert bodies >= 6
    assert problems == []


def test_servers_and_the_webhook_signature_headers_are_declared(pg_api: Api) -> None:
    spec = pg_api.client.get("/openapi.json").json()
    assert [server["url"] for server in spec["servers"]] == ["/", "http://127.0.0.1:8080"]
    intake = spec["paths"]["/v1/events/{provider}/{workspace}"]["post"]
    headers = {p["name"] for p in intake["parameters"] if p["in"] == "header"}
    assert headers == {
        "Stripe-Signature",
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "X-Hub-Signature-256",
    }


def test_a_generated_client_creates_and_reads_an_operation(pg_api: Api, tmp_path: Path) -> None:
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(pg_api.client.get("/openapi.json").json()))
    config = tmp_path / "config.yaml"
    config.write_text("package_name_override: provely_api_client\npost_hooks: []\n")
    out = tmp_path / "generated"
    # A tools environment of its own (scripts/bootstrap): it pins an older typer than ours.
    generator = (
        Path(__file__).resolve().parents[3] / ".venv/tools/openapi/bin/openapi-python-client"
    )
    done = subprocess.run(
        [
            str(generator),
            "generate",
            "--path",
            str(spec),
            "--meta",
            "none",
            "--config",
            str(config),
            "--output-path",
            str(out / "provely_api_client"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    sys.path.insert(0, str(out))
    try:
        package = importlib.import_module("provely_api_client")
        models = importlib.import_module("provely_api_client.models")
        # The operation ids name the generated modules (one per operation).
        api = {
            name: importlib.import_module(f"provely_api_client.api.{tag}.{name}")
            for tag, name in (
                ("operations", "create_operation"),
                ("operations", "get_operation"),
                ("operations", "list_operations"),
                ("receipts", "list_receipt_keys"),
            )
        }
        with LiveServer(pg_api.app) as server:
            client = package.AuthenticatedClient(base_url=server.url, token=pg_api.a.agent_key)
            with client:
                body = models.CreateOperationIn(
                    contract="stripe.refund.succeeded",
                    input_=models.CreateOperationInInput.from_dict(
                        {"charge": "ch_123", "amount": 500, "currency": "usd"}
                    ),
                )
                created = api["create_operation"].sync_detailed(client=client, body=body)
                assert created.status_code == 201, created.content
                op = created.parsed
                assert isinstance(op, models.OperationOut)
                assert op.id.startswith("op_")
                assert (op.state, op.contract.id) == ("CREATED", "stripe.refund.succeeded")

                read = api["get_operation"].sync(op.id, client=client)
                assert isinstance(read, models.OperationOut)
                assert (read.id, read.workspace_id) == (op.id, pg_api.a.workspace_id)
                assert read.retry.action == "never"

                listed = api["list_operations"].sync(client=client)
                assert [o.id for o in listed.data] == [op.id]

                missing = api["get_operation"].sync_detailed("op_nope", client=client)
                assert missing.status_code == 404

                keys = api["list_receipt_keys"].sync_detailed(client=client)
                assert keys.status_code == 200
    finally:
        sys.path.remove(str(out))
        for name in [m for m in sys.modules if m.startswith("provely_api_client")]:
            del sys.modules[name]
