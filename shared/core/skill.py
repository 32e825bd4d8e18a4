"""The skill manifest as data: what Provely knows about one provider, and which contracts it ships.

A skill is a signed provider package. Its manifest (``skill.yaml``) names the provider, the
skill version and certification, the webhook signature scheme, how readbacks authenticate,
where an event keeps its id, type, timestamp, api version and object, which action errors are
definite rejections, which provider paths its contracts may read (``readback.paths``) and which
query parameters each of them may take (``readback.query``, ``shared.core.queries``), and the
contract files it ships with the sha256 of each file's bytes.

The signature (see ``shared.trust.skills``) covers :func:`manifest_signing_payload`, so changing a
listed contract by one byte, or the manifest itself, breaks it. Pure: no I/O here.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictInt,
    StrictStr,
    field_validator,
    model_serializer,
    model_validator,
)

from shared.core.contract import canonical_json
from shared.core.paths import dot_segments, path_segments

__all__ = [
    "SIGNING_DOMAIN",
    "ActionRejection",
    "EventShape",
    "ReadbackSpec",
    "SignatureSpec",
    "SkillContractFile",
    "SkillManifest",
    "manifest_signing_payload",
]

SIGNING_DOMAIN = b"provely-skill-manifest-v1\n"
"""Prefix of every signed payload, so a skill signature can never be replayed as another thing."""

_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_NAMED_SEGMENT = re.compile(r"^\{[a-z_][a-z0-9_]*\}$")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class SignatureSpec(_Model):
    """How the provider signs webhook deliveries (the scheme name is the webhook intake's)."""

    scheme: StrictStr
    tolerance_seconds: StrictInt = Field(ge=1)


class ReadbackSpec(_Model):
    """How readbacks authenticate against the provider API, how fast they may go, and which
    paths the skill's contracts — and workspace contracts on its provider — may read.

    ``paths`` are templates whose ``{name}`` segments stand for one segment each
    (``/v1/refunds/{id}``), without a query; see ``shared.core.paths.template_within``.
    ``query`` maps some of those paths to the query parameters they may take, each ``any`` or
    a list of the literal values it may take (``shared.core.queries``); a path it does not
    name takes no query. Fields left unset are left out of the manifest's signed document, so
    a manifest signed before they existed keeps its signature.
    """

    auth: Literal["bearer", "basic", "header", "none"] | None = None
    rate_limit_per_second: float | None = Field(default=None, gt=0)
    paths: tuple[StrictStr, ...] | None = None
    query: dict[StrictStr, dict[StrictStr, Literal["any"] | tuple[StrictStr, ...]]] | None = None

    @model_validator(mode="after")
    def _query_paths(self) -> ReadbackSpec:
        for path, parameters in (self.query or {}).items():
            if path not in (self.paths or ()):
                raise ValueError(f"query: {path!r} is not one of the readback paths")
            for name, values in parameters.items():
                if not isinstance(values, str) and not values:
                    raise ValueError(f"query: {path} {name!r} lists no value (use any)")
        return self

    @field_validator("paths")
    @classmethod
    def _paths(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        for path in value or ():
            if not path.startswith("/") or "?" in path or "#" in path:
                raise ValueError(f"{path!r}: a readback path starts with / and has no query")
            if dot_segments(path):
                raise ValueError(f"{path!r}: a readback path has no . or .. segment")
            for segment in path_segments(path):
                if ("{" in segment or "}" in segment) and not _NAMED_SEGMENT.match(segment):
                    raise ValueError(f"{path!r}: a placeholder is a whole segment, {{name}}")
        return value

    @model_serializer(mode="wrap")
    def _omit_unset(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        return {key: value for key, value in data.items() if value is not None}


class EventShape(_Model):
    """Where a provider event keeps its parts, as ``$event.*`` expressions."""

    id: StrictStr
    type: StrictStr
    created: StrictStr
    api_version: StrictStr | None = None
    object: StrictStr
    object_id: StrictStr | None = None
    idempotency_key: StrictStr | None = None
    correlation_keys: dict[str, StrictStr] = Field(default_factory=dict)


class ActionRejection(_Model):
    """An action error the provider gives only when it did nothing (a definite rejection)."""

    http_status: tuple[StrictInt, ...] = Field(min_length=1)
    error_type: tuple[StrictStr, ...] = ()


class SkillContractFile(_Model):
    """One contract file of the skill, relative to the manifest, with its sha256 (hex)."""

    file: StrictStr
    sha256: StrictStr | None = None

    @field_validator("file")
    @classmethod
    def _relative(cls, value: str) -> str:
        if not value or value.startswith("/") or ".." in value.split("/") or "\\" in value:
            raise ValueError("must be a relative path inside the skill directory")
        return value

    @field_validator("sha256")
    @classmethod
    def _hex(cls, value: str | None) -> str | None:
        if value is not None and not _SHA256.match(value):
            raise ValueError("must be 64 lower-case hex digits")
        return value


class SkillManifest(_Model):
    provider: StrictStr = Field(pattern=r"^[a-z][a-z0-9_]*$")
    version: StrictStr
    certification: StrictStr
    title: StrictStr
    description: StrictStr = ""
    default_base_url: StrictStr | None = None
    signature: SignatureSpec | None = None
    readback: ReadbackSpec | None = None
    event_shape: EventShape | None = None
    action_rejections: tuple[ActionRejection, ...] = ()
    contracts: tuple[SkillContractFile, ...] = Field(min_length=1)

    @field_validator("version")
    @classmethod
    def _semver(cls, value: str) -> str:
        parts = value.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ValueError("version must be MAJOR.MINOR.PATCH")
        return value

    def document(self) -> dict[str, Any]:
        """The manifest as plain JSON data, the basis of its signature."""
        return self.model_dump(mode="json", by_alias=True)


def manifest_signing_payload(manifest: SkillManifest) -> bytes:
    """The exact bytes a publisher signs: a domain prefix and the manifest's canonical JSON."""
    return SIGNING_DOMAIN + canonical_json(manifest.document())
