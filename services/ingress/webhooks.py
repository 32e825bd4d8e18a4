"""Webhook intake: ``POST /v1/events/{provider}/{workspace}`` (owned by issue 6)."""

from __future__ import annotations

from fastapi import APIRouter

__all__ = ["router"]

router = APIRouter()
