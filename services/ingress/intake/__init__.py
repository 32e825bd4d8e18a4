"""The webhook intake of the ingress: ``POST /v1/events/{provider}/{workspace}``."""
