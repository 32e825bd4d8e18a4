"""The full shape of each object the sandbox returns: every field the ``stripe`` library declares.

The model stores what the sandbox acts on (amounts, statuses, links). A client reading any other
field Stripe documents (``charge.billing_details``, ``refund.pending_reason``, …) must find it
rather than an ``AttributeError``: :func:`complete` fills the missing fields of a rendered object
with the value Stripe gives an object that never used the feature (mostly ``null``, empty
lists and objects, ``false``). Fields the model sets win. Pure data; no I/O.

Not filled: ``deleted`` (Stripe sends it only on a deleted object) and a webhook endpoint's
``secret`` (only in the answer to its creation), as Stripe does.
"""

from __future__ import annotations

import copy
from typing import Any

__all__ = ["DEFAULTS", "complete"]

_ADDRESS = {
    "city": None,
    "country": None,
    "line1": None,
    "line2": None,
    "postal_code": None,
    "state": None,
}

_CARD_DETAILS = {
    "type": "card",
    "card": {
        "brand": "visa",
        "country": "US",
        "exp_month": 12,
        "exp_year": 2034,
        "fingerprint": "sandbox4242",
        "funding": "credit",
        "last4": "4242",
        "network": "visa",
    },
}

DEFAULTS: dict[str, dict[str, Any]] = {
    "charge": {
        "application": None,
        "application_fee": None,
        "application_fee_amount": None,
        "authorization_code": None,
        "billing_details": {
            "address": _ADDRESS,
            "email": None,
            "name": None,
            "phone": None,
            "tax_id": None,
        },
        "calculated_statement_descriptor": "PROVELY SANDBOX",
        "failure_balance_transaction": None,
        "fraud_details": {},
        "level3": None,
        "on_behalf_of": None,
        "payment_method": "pm_card_visa",
        "payment_method_details": _CARD_DETAILS,
        "presentment_details": None,
        "radar_options": None,
        "receipt_email": None,
        "receipt_number": None,
        "receipt_url": None,
        "refunds": None,
        "review": None,
        "shipping": None,
        "source": None,
        "source_transfer": None,
        "statement_descriptor": None,
        "statement_descriptor_suffix": None,
        "transfer": None,
        "transfer_data": None,
        "transfer_group": None,
    },
    "refund": {
        "customer": None,
        "customer_account": None,
        "description": None,
        "failure_balance_transaction": None,
        "instructions_email": None,
        "payment_method": "pm_card_visa",
        "pending_reason": None,
        "presentment_details": None,
    },
    "payment_intent": {
        "allowed_payment_method_types": None,
        "amount_capturable": 0,
        "amount_details": {"tip": {}},
        "application": None,
        "application_fee_amount": None,
        "automatic_payment_methods": None,
        "canceled_at": None,
        "cancellation_reason": None,
        "capture_method": "automatic",
        "client_secret": None,
        "confirmation_method": "automatic",
        "customer_account": None,
        "description": None,
        "excluded_payment_method_types": None,
        "hooks": None,
        "last_payment_error": None,
        "managed_payments": None,
        "next_action": None,
        "on_behalf_of": None,
        "payment_details": None,
        "payment_method": None,
        "payment_method_configuration_details": None,
        "payment_method_options": {},
        "payment_method_types": ["card"],
        "payment_record": None,
        "presentment_details": None,
        "processing": None,
        "receipt_email": None,
        "review": None,
        "setup_future_usage": None,
        "shipping": None,
        "source": None,
        "statement_descriptor": None,
        "statement_descriptor_suffix": None,
        "transfer_data": None,
        "transfer_group": None,
    },
    "checkout.session": {
        "adaptive_pricing": None,
        "after_expiration": None,
        "allow_promotion_codes": None,
        "allowed_payment_method_types": None,
        "automatic_tax": {"enabled": False, "liability": None, "provider": None, "status": None},
        "billing_address_collection": None,
        "branding_settings": None,
        "client_secret": None,
        "collected_information": None,
        "consent": None,
        "consent_collection": None,
        "currency_conversion": None,
        "custom_fields": [],
        "custom_text": {
            "after_submit": None,
            "shipping_address": None,
            "submit": None,
            "terms_of_service_acceptance": None,
        },
        "customer_account": None,
        "customer_creation": "if_required",
        "customer_details": None,
        "discounts": [],
        "excluded_payment_method_types": None,
        "expires_at": None,
        "integration_identifier": None,
        "invoice": None,
        "invoice_creation": None,
        "line_items": None,
        "locale": None,
        "managed_payments": None,
        "name_collection": None,
        "optional_items": None,
        "origin_context": None,
        "payment_link": None,
        "payment_method_collection": "if_required",
        "payment_method_configuration_details": None,
        "payment_method_options": {},
        "payment_method_types": ["card"],
        "permissions": None,
        "phone_number_collection": {"enabled": False},
        "presentment_details": None,
        "recovered_from": None,
        "redirect_on_completion": None,
        "return_url": None,
        "saved_payment_method_options": None,
        "setup_intent": None,
        "shipping_address_collection": None,
        "shipping_cost": None,
        "shipping_options": [],
        "submit_type": None,
        "subscription": None,
        "tax_id_collection": {"enabled": False, "required": "never"},
        "total_details": {"amount_discount": 0, "amount_shipping": 0, "amount_tax": 0},
        "ui_mode": "hosted",
        "wallet_options": None,
    },
    "customer": {
        "address": None,
        "balance": 0,
        "business_name": None,
        "cash_balance": None,
        "currency": None,
        "customer_account": None,
        "default_source": None,
        "delinquent": False,
        "description": None,
        "discount": None,
        "email": None,
        "individual_name": None,
        "invoice_credit_balance": {},
        "invoice_prefix": None,
        "invoice_settings": {
            "custom_fields": None,
            "default_payment_method": None,
            "footer": None,
            "rendering_options": None,
        },
        "name": None,
        "next_invoice_sequence": 1,
        "phone": None,
        "preferred_locales": [],
        "shipping": None,
        "sources": None,
        "subscriptions": None,
        "tax": None,
        "tax_exempt": "none",
        "tax_ids": None,
        "test_clock": None,
    },
    "event": {"account": None, "context": None},
    "webhook_endpoint": {"application": None},
}


def complete(body: dict[str, Any]) -> dict[str, Any]:
    """``body`` with every declared field of its ``object`` type present (set fields win)."""
    defaults = DEFAULTS.get(str(body.get("object")))
    if defaults is None:
        return body
    missing = {k: copy.deepcopy(v) for k, v in defaults.items() if k not in body}
    if not missing:
        return body
    return {**body, **missing}
