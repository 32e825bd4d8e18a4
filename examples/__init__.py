"""Example apps that run against the Provely sandboxes."""
