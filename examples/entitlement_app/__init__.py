"""A tiny seat-selling app that grants on checkout and (unless told not to) revokes on refunds."""

from examples.entitlement_app.app import AppConfig, create_app

__all__ = ["AppConfig", "create_app"]
