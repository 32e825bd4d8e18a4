"""A connection's webhook secrets with end times (#36): which verify at a given arrival, what a
rotation keeps, and the stored form read back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from shared.trust.webhook_secrets import WebhookSecret, from_json, rotated, to_json, verifying

T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (T0 - HOUR, ("new", "old")),
        (T0 - timedelta(microseconds=1), ("new", "old")),
        (T0, ("new",)),  # the end is exclusive
        (T0 + HOUR, ("new",)),
    ],
)
def test_a_secret_verifies_until_its_end(when: datetime, expected: tuple[str, ...]) -> None:
    secrets = [WebhookSecret("new"), WebhookSecret("old", T0), WebhookSecret("")]
    assert verifying(secrets, when) == expected


def test_a_rotation_puts_the_new_secret_first_and_ends_the_others_at_the_overlap() -> None:
    current = [WebhookSecret("b"), WebhookSecret("a", T0 + 5 * HOUR), WebhookSecret("z", T0)]
    after = rotated(current, new="c", overlap_until=T0 + 24 * HOUR, now=T0 + HOUR)
    # "a" keeps its earlier end; "z" had ended already and is dropped.
    assert after == [
        WebhookSecret("c"),
        WebhookSecret("b", T0 + 24 * HOUR),
        WebhookSecret("a", T0 + 5 * HOUR),
    ]


def test_adding_a_secret_already_there_keeps_one_copy_without_an_end() -> None:
    current = [WebhookSecret("b"), WebhookSecret("a", T0 + HOUR)]
    assert rotated(current, new="a", overlap_until=T0 + 2 * HOUR, now=T0) == [
        WebhookSecret("a"),
        WebhookSecret("b", T0 + 2 * HOUR),
    ]


def test_the_stored_form_reads_back_and_plain_strings_never_end() -> None:
    secrets = [WebhookSecret("n"), WebhookSecret("o", T0)]
    assert to_json(secrets) == ["n", {"secret": "o", "until": "2026-12-01T09:00:00+00:00"}]
    assert from_json(to_json(secrets)) == secrets
    assert from_json(["x", "y"]) == [WebhookSecret("x"), WebhookSecret("y")]


@pytest.mark.parametrize(
    "stored",
    [{"a": 1}, [1], [{"secret": "s"}], [{"secret": "s", "until": "2026-12-01T09:00:00"}]],
)
def test_a_stored_form_this_module_did_not_write_is_refused(stored: object) -> None:
    with pytest.raises(ValueError):
        from_json(stored)
