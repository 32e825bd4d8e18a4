"""Each console settings action names the API endpoint that does the same (#36): the named
``operation_id`` is in the app's OpenAPI document, and docs/console.md's table says the same."""

from __future__ import annotations

import re
from pathlib import Path

from cryptography.fernet import Fernet

from services.ingress.app import create_app
from services.ingress.console import settings, users
from shared.runtime.settings import Settings

API_OPERATIONS = settings.API_OPERATIONS | users.API_OPERATIONS
DOC = Path(__file__).resolve().parents[3] / "docs" / "console.md"


def _operation_ids(tmp_path: Path) -> set[str]:
    app = create_app(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'provely.db'}",
            data_dir=tmp_path / "data",
            broker_url="memory://",
            secret_key=Fernet.generate_key().decode(),
        )
    )
    return {
        operation["operationId"]
        for path in app.openapi()["paths"].values()
        for operation in path.values()
        if isinstance(operation, dict) and "operationId" in operation
    }


def test_every_console_action_names_an_operation_of_the_openapi_document(tmp_path: Path) -> None:
    documented = _operation_ids(tmp_path)
    missing = {a: op for a, op in API_OPERATIONS.items() if op not in documented}
    assert not missing
    # Every settings operation of the API has its console action.
    settings_ops = {"list_api_keys", "create_api_key", "revoke_api_key", "list_connections"}
    settings_ops |= {"set_connection", "rotate_webhook_secret", "check_connection"}
    settings_ops |= {"list_console_users", "create_console_user", "disable_console_user"}
    assert settings_ops <= set(API_OPERATIONS.values())


def test_the_console_doc_has_the_same_table() -> None:
    text = DOC.read_text("utf-8")
    table = text[text.index("| Console action | API endpoint |") :].split("\n\n", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \| `[A-Z]+ [^`]+` \(`([a-z_]+)`\) \|$", table, re.M)
    assert dict(rows) == API_OPERATIONS
