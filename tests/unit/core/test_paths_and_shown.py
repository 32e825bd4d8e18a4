"""Readback paths (dot segments, paths inside a skill's declared paths) and what of an observed
value a caller is shown."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from shared.core.paths import dot_segments, is_dot_segment, template_within
from shared.core.shown import shown_expected, shown_value
from shared.core.skill import ReadbackSpec, SkillManifest, manifest_signing_payload

STRIPE_PATHS = ("/v1/refunds/{id}", "/v1/refunds", "/v1/charges/{id}")


@pytest.mark.parametrize(
    ("text", "dot"),
    [
        (".", True),
        ("..", True),
        ("%2e", True),
        ("%2E%2e", True),
        ("%252e%252E", True),
        ("...", False),
        ("re_1..", False),
        (".hidden", False),
        ("", False),
    ],
)
def test_is_dot_segment(text: str, dot: bool) -> None:
    assert is_dot_segment(text) is dot


def test_dot_segments_look_at_the_path_not_the_query() -> None:
    assert dot_segments("/v1/../x") == [".."]
    assert dot_segments("/v1/refunds?created[gte]=..&x=.") == []
    assert dot_segments("/a/%2e/b/%2E%2E") == ["%2e", "%2E%2E"]


@pytest.mark.parametrize(
    ("template", "inside"),
    [
        ("/v1/refunds/{$correlation.refund_id}", True),
        ("/v1/refunds?charge={$input.charge}&created[gte]={$operation.created_at}", True),
        ("/v1/refunds", True),
        ("/v1/charges/{$correlation.charge_id}", True),
        ("/v1/charges/ch_fixed", True),  # one value of {id}
        ("/v1/charges", False),  # the account's every charge
        ("/v1/customers/{$input.customer}", False),
        ("/v1/refunds/{$correlation.refund_id}/extra", False),
        ("/v1/balance", False),
        ("/v1", False),
    ],
)
def test_template_within_the_declared_paths(template: str, inside: bool) -> None:
    assert template_within(template, STRIPE_PATHS) is inside


def test_a_skill_declares_clean_paths() -> None:
    assert ReadbackSpec(paths=STRIPE_PATHS).paths == STRIPE_PATHS
    for bad in ("v1/refunds", "/v1/refunds?x=1", "/v1/../x", "/v1/%2e%2e", "/v1/re_{id}", "/{$x}"):
        with pytest.raises(ValidationError):
            ReadbackSpec(paths=(bad,))


def _manifest(readback: dict[str, Any] | None) -> SkillManifest:
    return SkillManifest.model_validate(
        {
            "provider": "acme",
            "version": "1.0.0",
            "certification": "community",
            "title": "Acme",
            "readback": readback,
            "contracts": [{"file": "a.yaml", "sha256": "0" * 64}],
        }
    )


def test_a_manifest_without_paths_signs_the_same_bytes_as_before_they_existed() -> None:
    manifest = _manifest({"auth": "bearer", "rate_limit_per_second": 5.0})
    assert manifest.document()["readback"] == {"auth": "bearer", "rate_limit_per_second": 5.0}
    assert b"paths" not in manifest_signing_payload(manifest)
    with_paths = _manifest({"auth": "bearer", "rate_limit_per_second": 5.0, "paths": ["/a"]})
    assert with_paths.document()["readback"]["paths"] == ["/a"]
    assert _manifest({"paths": ["/a/{id}"]}).document()["readback"] == {"paths": ["/a/{id}"]}


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("succeeded", "succeeded"),
        (2000, 2000),
        (1.5, 1.5),
        (True, True),
        (None, None),
        ({"object": "list", "data": [1, 2]}, {"omitted": "object", "keys": 2}),
        ([{"id": "re_1"}, {"id": "re_2"}, {"id": "re_3"}], {"omitted": "array", "items": 3}),
    ],
)
def test_shown_value(value: Any, shown: Any) -> None:
    assert shown_value(value) == shown


def test_a_shape_is_shown_as_it_is() -> None:
    shape = shown_value([1, 2])
    assert shown_value(shape) == shape
    assert shown_expected(shown_value({"a": 1})) == {"omitted": "object", "keys": 1}


def test_shown_expected_keeps_a_contract_list() -> None:
    assert shown_expected(["succeeded", "pending"]) == ["succeeded", "pending"]
    assert shown_expected([{"a": 1}]) == {"omitted": "array", "items": 1}
    assert shown_expected({"a": 1}) == {"omitted": "object", "keys": 1}
