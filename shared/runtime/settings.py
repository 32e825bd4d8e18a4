"""Runtime settings: every knob is a ``PROVELY_*`` environment variable (pydantic-settings).

The embedded default needs none of them: a SQLite file and kombu's SQLAlchemy transport under
``PROVELY_DATA_DIR``. Production sets the database, the broker, Redis and the secret key.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field, PrivateAttr, ValidationError, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from shared.runtime.datadir import default_data_dir

__all__ = ["LOG_LEVELS", "Settings", "get_settings", "settings_problems"]

# The levels of the standard library's logging, by name (any case in the variable).
LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="PROVELY_", extra="ignore")

    _data_dir_named: bool = PrivateAttr(default=True)

    data_dir: Path = Field(
        default=Path(".provely"),
        description="Where the embedded default keeps its files; unset: the nearest `.provely/` "
        "from the current directory upwards (as git finds its repository), else `.provely`.",
    )
    database_url: str | None = Field(
        default=None, description="SQLAlchemy URL; default: SQLite in the data dir."
    )
    broker_url: str | None = Field(
        default=None, description="Celery broker; default: kombu's SQLAlchemy transport on SQLite."
    )
    redis_url: str | None = Field(
        default=None, description="Redis for provider rate limits; default: an in-process bucket."
    )
    secret_key: str | None = Field(
        default=None,
        description="Fernet key that encrypts connection secrets; generated when unset.",
    )
    receipt_key_file: Path | None = Field(
        default=None,
        description="Ed25519 private key (PEM) that signs receipts; generated when unset.",
    )
    contract_paths: str = Field(
        default="", description="Colon-separated extra contract directories."
    )
    trusted_publisher_keys: str = Field(
        default="", description="Colon-separated public key files trusted to sign skills."
    )
    allow_unsigned_skills: bool = Field(
        default=False,
        description="Load skills whose signature is missing or fails (certification `unsigned`).",
    )
    webhook_max_body_bytes: int = Field(
        default=1024 * 1024, ge=1, description="Largest webhook body accepted."
    )
    api_max_body_bytes: int = Field(
        default=256 * 1024, ge=1, description="Largest agent API body accepted."
    )
    operation_field_max_bytes: int = Field(
        default=32 * 1024,
        ge=256,
        description="Largest `input` and `metadata` of an operation, each, as compact JSON.",
    )
    contract_max_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description="Largest contract document `POST /v1/contracts` accepts.",
    )
    contract_parse_timeout_seconds: float = Field(
        default=5.0,
        gt=0,
        description="Time an uploaded contract may take to parse and lint before it is refused.",
    )
    ingress_header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="A connection that sends no complete request head in this time is closed.",
    )
    ingress_body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="A request whose body is not complete this long after its head is closed.",
    )
    ingress_keep_alive_seconds: float = Field(
        default=5.0, gt=0, description="An idle keep-alive connection is closed after this."
    )
    ingress_max_concurrency: int = Field(
        default=1000,
        ge=1,
        description="Connections and requests at once per ingress process; more get 503.",
    )
    allow_private_network: bool = Field(
        default=False,
        description="Accept connection base URLs on link-local and cloud metadata addresses.",
    )
    action_window_seconds: int = Field(
        default=3600,
        ge=1,
        description="An operation whose action is not reported within this window is EXPIRED.",
    )
    sweeper_interval_seconds: float = Field(
        default=5.0, gt=0, description="How often the sweeper looks for overdue work."
    )
    sweeper_grace_seconds: float = Field(
        default=10.0,
        ge=0,
        description="How late a scheduled observation may be before the sweeper re-enqueues it.",
    )
    console_behind_tls: bool = Field(
        default=False,
        description="The console is served over TLS by a proxy in front of the ingress: its "
        "session cookie is marked Secure even when the ingress itself sees plain HTTP.",
    )
    refused_deliveries_kept: int = Field(
        default=10_000,
        ge=1,
        description="Refused deliveries kept per workspace (the newest); the sweeper prunes more.",
    )
    http_timeout_seconds: float = Field(default=10.0, gt=0, description="Timeout of one readback.")
    http_max_response_bytes: int = Field(
        default=1024 * 1024, ge=1, description="Largest readback body read."
    )
    jitter_ratio: float = Field(
        default=0.1,
        ge=0.0,
        le=0.1,
        description="Jitter that may only lengthen a wait (0 turns it off).",
    )
    log_level: str = Field(
        default="INFO", description="Log level: CRITICAL, ERROR, WARNING, INFO or DEBUG."
    )
    log_json: bool = Field(
        default=True, description="JSON logs (structlog); false for console logs."
    )
    metrics_port: int | None = Field(
        default=None,
        ge=1,
        le=65535,
        description="Port of a service's Prometheus endpoint (the ingress's too: never its API "
        "port); unset: no endpoint.",
    )
    metrics_host: str = Field(
        default="127.0.0.1",
        description="Address the Prometheus endpoints listen on (0.0.0.0 to be scraped from "
        "another host or container).",
    )

    @field_validator("log_level")
    @classmethod
    def _known_log_level(cls, value: str) -> str:
        level = value.strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"{value!r} is not a log level (one of {', '.join(LOG_LEVELS)})")
        return level

    @model_validator(mode="after")
    def _found_data_dir(self) -> Settings:
        # Unset: the system of the directory tree the command runs in (shared.runtime.datadir).
        if "data_dir" not in self.model_fields_set:
            self.data_dir = default_data_dir()
            self._data_dir_named = False
        return self

    @property
    def data_dir_named(self) -> bool:
        """Whether ``data_dir`` was given (``PROVELY_DATA_DIR``, an argument), not found from
        the current directory."""
        return self._data_dir_named

    def resolved_database_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.data_dir / 'provely.db').resolve()}"

    def resolved_broker_url(self) -> str:
        if self.broker_url:
            return self.broker_url
        return f"sqla+sqlite:///{(self.data_dir / 'broker.db').resolve()}"

    def extra_contract_dirs(self) -> list[Path]:
        return [Path(p) for p in self.contract_paths.split(":") if p]


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()


def settings_problems(exc: ValidationError) -> str | None:
    """What is wrong with the environment's settings, one clause per variable (``PROVELY_X:
    why``), when ``exc`` was raised by :class:`Settings`; ``None`` for any other model's."""
    if exc.title != Settings.__name__:
        return None
    return "; ".join(
        f"PROVELY_{str(error['loc'][0]).upper() if error['loc'] else '?'}: {error['msg']}"
        for error in exc.errors()
    )
