"""Signature schemes: the matrix of valid and refused deliveries, and cross-checks against the
providers' own libraries (``stripe`` and ``standardwebhooks``). Pure: no I/O."""

from __future__ import annotations

import base64
import json
import time
from datetime import UTC, datetime

import pytest
import standardwebhooks
import stripe

from shared.trust.signatures import (
    GITHUB,
    SCHEMES,
    STANDARD_WEBHOOKS,
    STRIPE,
    SignatureError,
    UnknownSchemeError,
    scheme_for,
)

NOW = 1_790_000_000
BODY = json.dumps(
    {"id": "evt_1", "type": "refund.updated", "created": NOW - 5, "data": {"object": {}}}
).encode()
STRIPE_SECRET = "whsec_current_0123456789abcdef"
STRIPE_OLD = "whsec_rotated_out_fedcba9876543210"
SW_SECRET = "whsec_" + base64.b64encode(b"k" * 24).decode()
SW_OLD = "whsec_" + base64.b64encode(b"o" * 24).decode()
GH_SECRET = "It's a Secret to Everybody"


def flipped(body: bytes, index: int = 10) -> bytes:
    return body[:index] + bytes([body[index] ^ 0x01]) + body[index + 1 :]


# ---------------------------------------------------------------- Stripe


def stripe_header(body: bytes, secret: str, t: int, scheme: str = "v1") -> dict[str, str]:
    sig = STRIPE._digest(secret, t, body).decode()
    return {"Stripe-Signature": f"t={t},{scheme}={sig}"}


def test_stripe_valid_delivery_is_accepted() -> None:
    headers = STRIPE.sign(body=BODY, secrets=[STRIPE_SECRET], timestamp=NOW)
    verified = STRIPE.verify(body=BODY, headers=headers, secrets=[STRIPE_SECRET], now=NOW)
    assert verified.scheme == "stripe"
    assert verified.timestamp == NOW
    assert verified.secret_index == 0


@pytest.mark.parametrize(
    ("body", "headers", "secrets", "reason"),
    [
        pytest.param(
            flipped(BODY),
            stripe_header(BODY, STRIPE_SECRET, NOW),
            [STRIPE_SECRET],
            "no_matching_signature",
            id="flipped-body-byte",
        ),
        pytest.param(
            BODY,
            stripe_header(BODY, "whsec_someone_else", NOW),
            [STRIPE_SECRET],
            "no_matching_signature",
            id="wrong-secret",
        ),
        pytest.param(
            BODY,
            stripe_header(BODY, STRIPE_SECRET, NOW - 301),
            [STRIPE_SECRET],
            "timestamp_out_of_tolerance",
            id="t-301s-in-the-past",
        ),
        pytest.param(
            BODY,
            stripe_header(BODY, STRIPE_SECRET, NOW + 301),
            [STRIPE_SECRET],
            "timestamp_out_of_tolerance",
            id="t-301s-in-the-future",
        ),
        pytest.param(BODY, {}, [STRIPE_SECRET], "missing_header", id="missing-header"),
        pytest.param(
            BODY,
            {"Stripe-Signature": ""},
            [STRIPE_SECRET],
            "missing_header",
            id="empty-header",
        ),
        pytest.param(
            BODY,
            stripe_header(BODY, STRIPE_SECRET, NOW, scheme="v0"),
            [STRIPE_SECRET],
            "no_v1_signature",
            id="only-v0",
        ),
        pytest.param(
            BODY,
            stripe_header(BODY, STRIPE_OLD, NOW),
            [STRIPE_SECRET],
            "no_matching_signature",
            id="retired-secret",
        ),
        pytest.param(
            BODY,
            {"Stripe-Signature": "v1=" + "0" * 64},
            [STRIPE_SECRET],
            "malformed_header",
            id="no-timestamp",
        ),
        pytest.param(
            BODY,
            {"Stripe-Signature": f"t=12a,v1={'0' * 64}"},
            [STRIPE_SECRET],
            "malformed_header",
            id="timestamp-not-a-number",
        ),
        pytest.param(
            BODY,
            {"Stripe-Signature": f"t={NOW},t={NOW},v1={'0' * 64}"},
            [STRIPE_SECRET],
            "malformed_header",
            id="two-timestamps",
        ),
        pytest.param(
            BODY,
            stripe_header(BODY, STRIPE_SECRET, NOW),
            [],
            "no_secret",
            id="connection-without-secret",
        ),
        pytest.param(
            BODY,
            {"Stripe-Signature": f"t={NOW}," + ",".join(["v1=00"] * 33)},
            [STRIPE_SECRET],
            "malformed_header",
            id="too-many-signatures",
        ),
    ],
)
def test_stripe_refused(
    body: bytes, headers: dict[str, str], secrets: list[str], reason: str
) -> None:
    with pytest.raises(SignatureError) as refused:
        STRIPE.verify(body=body, headers=headers, secrets=secrets, now=NOW)
    assert refused.value.reason == reason


@pytest.mark.parametrize("offset", [-300, -1, 0, 1, 300])
def test_stripe_tolerance_is_inclusive_on_both_sides(offset: int) -> None:
    headers = stripe_header(BODY, STRIPE_SECRET, NOW + offset)
    STRIPE.verify(body=BODY, headers=headers, secrets=[STRIPE_SECRET], now=NOW)


def test_stripe_tolerance_is_configurable() -> None:
    headers = stripe_header(BODY, STRIPE_SECRET, NOW - 30)
    with pytest.raises(SignatureError):
        STRIPE.verify(body=BODY, headers=headers, secrets=[STRIPE_SECRET], tolerance_s=10, now=NOW)
    STRIPE.verify(body=BODY, headers=headers, secrets=[STRIPE_SECRET], tolerance_s=60, now=NOW)


def test_stripe_rotated_secret_still_active_is_accepted() -> None:
    headers = stripe_header(BODY, STRIPE_OLD, NOW)
    verified = STRIPE.verify(
        body=BODY, headers=headers, secrets=[STRIPE_SECRET, STRIPE_OLD], now=NOW
    )
    assert verified.secret_index == 1


def test_stripe_several_v1_values_one_matching() -> None:
    good = STRIPE._digest(STRIPE_SECRET, NOW, BODY).decode()
    header = f"t={NOW},v1={'a' * 64},v0={'b' * 64},v1={good}"
    STRIPE.verify(body=BODY, headers={"Stripe-Signature": header}, secrets=[STRIPE_SECRET], now=NOW)


def test_stripe_header_name_is_case_insensitive() -> None:
    headers = {"stripe-signature": stripe_header(BODY, STRIPE_SECRET, NOW)["Stripe-Signature"]}
    STRIPE.verify(body=BODY, headers=headers, secrets=[STRIPE_SECRET], now=NOW)


def test_stripe_accepts_datetime_now() -> None:
    headers = stripe_header(BODY, STRIPE_SECRET, NOW)
    STRIPE.verify(
        body=BODY,
        headers=headers,
        secrets=[STRIPE_SECRET],
        now=datetime.fromtimestamp(NOW, tz=UTC),
    )


def test_stripe_header_made_by_the_stripe_library_is_accepted() -> None:
    t = int(time.time())
    header = stripe.WebhookSignature.generate_signature_header(
        BODY.decode(), STRIPE_SECRET, timestamp=t
    )
    verified = STRIPE.verify(
        body=BODY, headers={"Stripe-Signature": header}, secrets=[STRIPE_SECRET], now=t
    )
    assert verified.timestamp == t


def test_stripe_library_accepts_our_signed_header() -> None:
    headers = STRIPE.sign(body=BODY, secrets=[STRIPE_SECRET], timestamp=int(time.time()))
    event = stripe.Webhook.construct_event(BODY, headers["Stripe-Signature"], STRIPE_SECRET)
    assert event["id"] == "evt_1"


def test_stripe_library_and_we_agree_on_a_tampered_body() -> None:
    headers = STRIPE.sign(body=BODY, secrets=[STRIPE_SECRET], timestamp=int(time.time()))
    with pytest.raises(stripe.SignatureVerificationError):
        stripe.Webhook.construct_event(flipped(BODY), headers["Stripe-Signature"], STRIPE_SECRET)
    with pytest.raises(SignatureError):
        STRIPE.verify(body=flipped(BODY), headers=headers, secrets=[STRIPE_SECRET], now=time.time())


# ---------------------------------------------------------------- Standard Webhooks


def sw_headers(body: bytes, secret: str, t: int, msg_id: str = "msg_1") -> dict[str, str]:
    return STANDARD_WEBHOOKS.sign(body=body, secrets=[secret], timestamp=t, delivery_id=msg_id)


def test_standard_webhooks_valid_delivery_is_accepted() -> None:
    verified = STANDARD_WEBHOOKS.verify(
        body=BODY, headers=sw_headers(BODY, SW_SECRET, NOW), secrets=[SW_SECRET], now=NOW
    )
    assert verified.delivery_id == "msg_1"
    assert verified.timestamp == NOW


def _sw_v0(body: bytes) -> dict[str, str]:
    headers = sw_headers(body, SW_SECRET, NOW)
    headers["webhook-signature"] = headers["webhook-signature"].replace("v1,", "v0,")
    return headers


def _sw_without(name: str) -> dict[str, str]:
    headers = sw_headers(BODY, SW_SECRET, NOW)
    del headers[name]
    return headers


def _sw_other_id() -> dict[str, str]:
    headers = sw_headers(BODY, SW_SECRET, NOW)
    headers["webhook-id"] = "msg_2"
    return headers


@pytest.mark.parametrize(
    ("body", "headers", "secrets", "reason"),
    [
        pytest.param(
            flipped(BODY),
            sw_headers(BODY, SW_SECRET, NOW),
            [SW_SECRET],
            "no_matching_signature",
            id="flipped-body-byte",
        ),
        pytest.param(
            BODY, sw_headers(BODY, SW_OLD, NOW), [SW_SECRET], "no_matching_signature", id="wrong"
        ),
        pytest.param(
            BODY,
            sw_headers(BODY, SW_SECRET, NOW - 301),
            [SW_SECRET],
            "timestamp_out_of_tolerance",
            id="t-301s-in-the-past",
        ),
        pytest.param(
            BODY,
            sw_headers(BODY, SW_SECRET, NOW + 301),
            [SW_SECRET],
            "timestamp_out_of_tolerance",
            id="t-301s-in-the-future",
        ),
        pytest.param(BODY, _sw_without("webhook-signature"), [SW_SECRET], "missing_header"),
        pytest.param(BODY, _sw_without("webhook-id"), [SW_SECRET], "missing_header"),
        pytest.param(BODY, _sw_without("webhook-timestamp"), [SW_SECRET], "missing_header"),
        pytest.param(BODY, _sw_v0(BODY), [SW_SECRET], "no_v1_signature", id="only-v0"),
        pytest.param(BODY, _sw_other_id(), [SW_SECRET], "no_matching_signature", id="id-swap"),
        pytest.param(
            BODY,
            sw_headers(BODY, SW_SECRET, NOW),
            ["whsec_!!!not-base64"],
            "no_secret",
            id="invalid-secret",
        ),
    ],
)
def test_standard_webhooks_refused(
    body: bytes, headers: dict[str, str], secrets: list[str], reason: str
) -> None:
    with pytest.raises(SignatureError) as refused:
        STANDARD_WEBHOOKS.verify(body=body, headers=headers, secrets=secrets, now=NOW)
    assert refused.value.reason == reason


def test_standard_webhooks_rotation_and_several_signatures() -> None:
    headers = STANDARD_WEBHOOKS.sign(
        body=BODY, secrets=[SW_OLD, SW_SECRET], timestamp=NOW, delivery_id="msg_9"
    )
    assert len(headers["webhook-signature"].split()) == 2
    assert (
        STANDARD_WEBHOOKS.verify(
            body=BODY, headers=headers, secrets=[SW_SECRET], now=NOW
        ).secret_index
        == 0
    )
    old_only = sw_headers(BODY, SW_OLD, NOW)
    assert (
        STANDARD_WEBHOOKS.verify(
            body=BODY, headers=old_only, secrets=[SW_SECRET, SW_OLD], now=NOW
        ).secret_index
        == 1
    )


def test_standard_webhooks_headers_made_by_the_library_are_accepted() -> None:
    signer = standardwebhooks.Webhook(SW_SECRET)
    now = datetime.now(tz=UTC)
    signature = signer.sign("msg_lib", now, BODY.decode())
    headers = {
        "webhook-id": "msg_lib",
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": signature,
    }
    verified = STANDARD_WEBHOOKS.verify(body=BODY, headers=headers, secrets=[SW_SECRET], now=now)
    assert verified.delivery_id == "msg_lib"
    # and the library accepts what we sign
    ours = STANDARD_WEBHOOKS.sign(
        body=BODY, secrets=[SW_SECRET], timestamp=int(now.timestamp()), delivery_id="msg_ours"
    )
    assert signer.verify(BODY, ours)["id"] == "evt_1"


# ---------------------------------------------------------------- GitHub


def test_github_example_from_the_documentation() -> None:
    # GitHub's documented test vector: secret "It's a Secret to Everybody", body "Hello, World!"
    expected = "757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    headers = GITHUB.sign(body=b"Hello, World!", secrets=[GH_SECRET], delivery_id="d-1")
    assert headers["X-Hub-Signature-256"] == f"sha256={expected}"
    verified = GITHUB.verify(body=b"Hello, World!", headers=headers, secrets=[GH_SECRET], now=0)
    assert verified.delivery_id == "d-1"


@pytest.mark.parametrize(
    ("body", "headers", "reason"),
    [
        (flipped(BODY), GITHUB.sign(body=BODY, secrets=[GH_SECRET]), "no_matching_signature"),
        (BODY, GITHUB.sign(body=BODY, secrets=["other"]), "no_matching_signature"),
        (BODY, {}, "missing_header"),
        (BODY, {"X-Hub-Signature": "sha1=abc"}, "missing_header"),
        (BODY, {"X-Hub-Signature-256": "sha1=abc"}, "no_v1_signature"),
    ],
)
def test_github_refused(body: bytes, headers: dict[str, str], reason: str) -> None:
    with pytest.raises(SignatureError) as refused:
        GITHUB.verify(body=body, headers=headers, secrets=[GH_SECRET], now=NOW)
    assert refused.value.reason == reason


def test_github_rotation() -> None:
    headers = GITHUB.sign(body=BODY, secrets=["old"], event_type="push")
    verified = GITHUB.verify(body=BODY, headers=headers, secrets=[GH_SECRET, "old"], now=NOW)
    assert (verified.secret_index, verified.event_type) == (1, "push")


# ---------------------------------------------------------------- registry of schemes


def test_scheme_for() -> None:
    assert set(SCHEMES) == {"stripe", "standard_webhooks", "github"}
    assert scheme_for("stripe") is STRIPE
    with pytest.raises(UnknownSchemeError):
        scheme_for("md5")


def test_verification_is_fast() -> None:
    headers = STRIPE.sign(body=BODY, secrets=[STRIPE_SECRET], timestamp=NOW)
    start = time.perf_counter()
    for _ in range(2000):
        STRIPE.verify(body=BODY, headers=headers, secrets=[STRIPE_OLD, STRIPE_SECRET], now=NOW)
    assert (time.perf_counter() - start) / 2000 < 0.0005


@pytest.mark.parametrize(
    ("offset", "accepted"), [(301, False), (-301, False), (300, True), (-300, True)]
)
def test_tolerance_compares_whole_seconds(offset: int, accepted: bool) -> None:
    # a receiver clock at NOW + 0.9 s is still second NOW
    headers = stripe_header(BODY, STRIPE_SECRET, NOW + offset)
    if accepted:
        STRIPE.verify(body=BODY, headers=headers, secrets=[STRIPE_SECRET], now=NOW + 0.9)
    else:
        with pytest.raises(SignatureError):
            STRIPE.verify(body=BODY, headers=headers, secrets=[STRIPE_SECRET], now=NOW + 0.9)
