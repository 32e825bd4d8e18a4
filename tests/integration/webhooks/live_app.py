"""The ingress app as a live uvicorn process runs it in the tests (settings from PROVELY_*)."""

from __future__ import annotations

from shared.runtime.settings import Settings
from tests.integration.webhooks.conftest import build_app

app = build_app(Settings())
