"""Balance transactions and the balance, read from the charges and refunds that made them.

Every captured charge and every refund names a ``balance_transaction`` (``txn_…``); Stripe
serves each at ``GET /v1/balance_transactions/{id}`` and the account's funds at
``GET /v1/balance``. The sandbox keeps no table of its own for them: a transaction is derived
from the charge or refund that carries its id, so the state file format does not change.
The sandbox charges no fees (``fee`` 0, ``net`` = ``amount``). A refund's transaction is
``pending`` while the refund is, ``available`` once it succeeded; a failed or canceled refund
moves no money (its transaction nets 0, as Stripe's failure transaction offsets it).
"""

from __future__ import annotations

from typing import Any

from services.sandbox import params as rules
from services.sandbox.state import SandboxState

__all__ = ["Balances"]

_NO_MONEY = frozenset({"failed", "canceled"})


class Balances(SandboxState):
    """Balance transactions and the balance (a part of :class:`services.sandbox.model.Sandbox`)."""

    def _transactions(self) -> list[dict[str, Any]]:
        found = []
        for charge in self.charges.values():
            if charge.get("balance_transaction") and charge.get("captured"):
                found.append(self._charge_transaction(charge))
        for refund in self.refunds.values():
            if refund.get("balance_transaction"):
                found.append(self._refund_transaction(refund))
        return found

    @staticmethod
    def _transaction(
        source: dict[str, Any], *, kind: str, amount: int, status: str
    ) -> dict[str, Any]:
        return {
            "id": source["balance_transaction"],
            "object": "balance_transaction",
            "amount": amount,
            "available_on": source["created"],
            "created": source["created"],
            "currency": source["currency"],
            "description": source.get("description"),
            "exchange_rate": None,
            "fee": 0,
            "fee_details": [],
            "net": amount,
            "reporting_category": kind,
            "source": source["id"],
            "status": status,
            "type": kind,
        }

    def _charge_transaction(self, charge: dict[str, Any]) -> dict[str, Any]:
        amount = int(charge.get("amount_captured") or charge["amount"])
        return self._transaction(charge, kind="charge", amount=amount, status="available")

    def _refund_transaction(self, refund: dict[str, Any]) -> dict[str, Any]:
        status = str(refund.get("status"))
        amount = 0 if status in _NO_MONEY else -int(refund["amount"])
        shown = "available" if status in _NO_MONEY or status == "succeeded" else "pending"
        return self._transaction(refund, kind="refund", amount=amount, status=shown)

    def get_balance_transaction(self, ident: str) -> dict[str, Any]:
        for transaction in self._transactions():
            if transaction["id"] == ident:
                return transaction
        raise rules.missing("balance_transaction", ident)

    def balance(self) -> dict[str, Any]:
        """The account's funds by currency: ``available`` and ``pending``."""
        available: dict[str, int] = {}
        pending: dict[str, int] = {}
        for transaction in self._transactions():
            into = available if transaction["status"] == "available" else pending
            currency = transaction["currency"]
            into[currency] = into.get(currency, 0) + transaction["net"]
            (pending if into is available else available).setdefault(currency, 0)

        def funds(amounts: dict[str, int]) -> list[dict[str, Any]]:
            return [
                {"amount": amount, "currency": currency, "source_types": {"card": amount}}
                for currency, amount in sorted(amounts.items())
            ]

        return {
            "object": "balance",
            "available": funds(available),
            "pending": funds(pending),
            "livemode": False,
        }
