"""Run the entitlement example: ``python -m examples.entitlement_app --port 8000``."""

from __future__ import annotations

import argparse

import uvicorn

from examples.entitlement_app.app import create_app


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--ignore-refunds", action="store_true", help="the buggy variant")
    parser.add_argument("--webhook-secret", help="whsec_… (default: $STRIPE_WEBHOOK_SECRET)")
    parser.add_argument("--api-key", help="sk_test_… (default: $STRIPE_API_KEY)")
    parser.add_argument("--api-base", help="the sandbox URL (default: $STRIPE_API_BASE)")
    args = parser.parse_args()
    app = create_app(
        webhook_secret=args.webhook_secret,
        api_key=args.api_key,
        api_base=args.api_base,
        ignore_refunds=True if args.ignore_refunds else None,
    )
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
