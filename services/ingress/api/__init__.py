"""The agent API of the ingress: ``/v1/operations``, ``/v1/contracts``, receipts, deliveries."""
