"""Query strings in access lines: credentials redacted by the parameter's name."""

from __future__ import annotations

import pytest

from services.ingress.access import redact_query


@pytest.mark.parametrize(
    ("query", "logged"),
    [
        ("", ""),
        ("limit=5&cursor=abc", "limit=5&cursor=abc"),
        ("api_key=pv_1&limit=5", "api_key=***&limit=5"),
        ("key=whsec_x", "key=***"),
        ("token=t&access_token=u&client_secret=s", "token=***&access_token=***&client_secret=***"),
        ("Password=hunter2", "Password=***"),
        ("signature=abc&x-amz-credential=c", "signature=***&x-amz-credential=***"),
        ("code=oauth-code&state=s", "code=***&state=s"),
        ("api%5Fkey=pv_2", "api_key=***"),  # decoded before the name is read
        ("api_key", "***"),  # a bare name does not parse strictly: nothing of it is written
        ("a=1&&b", "***"),  # does not parse: nothing of it is written
    ],
)
def test_redact_query(query: str, logged: str) -> None:
    assert redact_query(query) == logged
