"""One typed settings object, read from the environment.

Every field is documented in the README's configuration table; the environment variable is
the field's ``validation_alias``. Nothing reads the environment at import time: call
:func:`load_settings` from a bootstrap function.
"""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

TIER_NAMES = ("fast", "slow", "maintenance")


def _env(name: str) -> AliasChoices:
    return AliasChoices(name)


class Settings(BaseSettings):
    """Runtime configuration of every speedtier process."""

    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True, frozen=True)

    environment: Literal["development", "test", "staging", "production"] = Field(
        "development", validation_alias=_env("SPEEDTIER_ENV")
    )
    redis_url: str | None = Field(None, validation_alias=_env("REDIS_URL"))
    database_url: str | None = Field(None, validation_alias=_env("DATABASE_URL"))
    internal_api_token: SecretStr | None = Field(None, validation_alias=_env("INTERNAL_API_TOKEN"))
    sentry_dsn: str | None = Field(None, validation_alias=_env("SENTRY_DSN"))
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", validation_alias=_env("LOG_LEVEL")
    )
    redis_namespace: str = Field(
        "speedtier",
        validation_alias=_env("SPEEDTIER_REDIS_NAMESPACE"),
        pattern=r"^[A-Za-z0-9_.-]+$",
    )
    data_dir: str = Field(".speedtier", validation_alias=_env("SPEEDTIER_DATA_DIR"))
    allow_volatile_redis: bool = Field(
        False, validation_alias=_env("SPEEDTIER_ALLOW_VOLATILE_REDIS")
    )

    fast_processes: int = Field(2, ge=1, validation_alias=_env("SPEEDTIER_FAST_PROCESSES"))
    fast_threads: int = Field(8, ge=1, validation_alias=_env("SPEEDTIER_FAST_THREADS"))
    slow_processes: int = Field(1, ge=1, validation_alias=_env("SPEEDTIER_SLOW_PROCESSES"))
    slow_threads: int = Field(4, ge=1, validation_alias=_env("SPEEDTIER_SLOW_THREADS"))
    maintenance_processes: int = Field(
        1, ge=1, validation_alias=_env("SPEEDTIER_MAINTENANCE_PROCESSES")
    )
    maintenance_threads: int = Field(
        2, ge=1, validation_alias=_env("SPEEDTIER_MAINTENANCE_THREADS")
    )
    queue_prefetch: int = Field(0, ge=0, validation_alias=_env("SPEEDTIER_QUEUE_PREFETCH"))
    worker_drain_seconds: int = Field(
        25, ge=1, validation_alias=_env("SPEEDTIER_WORKER_DRAIN_SECONDS")
    )
    worker_poll_ms: int = Field(
        500, ge=10, le=5000, validation_alias=_env("SPEEDTIER_WORKER_POLL_MS")
    )

    group_lease_seconds: float = Field(
        30.0, gt=0, validation_alias=_env("SPEEDTIER_GROUP_LEASE_SECONDS")
    )
    heartbeat_timeout_seconds: float = Field(
        60.0, gt=0, validation_alias=_env("SPEEDTIER_HEARTBEAT_TIMEOUT_SECONDS")
    )
    windows: dict[str, str] = Field(
        default_factory=dict, validation_alias=_env("SPEEDTIER_WINDOWS")
    )
    flag_overrides: dict[str, bool] = Field(
        default_factory=dict, validation_alias=_env("SPEEDTIER_FLAGS")
    )
    flag_cache_seconds: float = Field(
        2.0, ge=0, validation_alias=_env("SPEEDTIER_FLAG_CACHE_SECONDS")
    )

    provider_urls: dict[str, str] = Field(
        default_factory=dict, validation_alias=_env("SPEEDTIER_PROVIDER_URLS")
    )
    http_timeout_seconds: float = Field(
        30.0, gt=0, validation_alias=_env("SPEEDTIER_HTTP_TIMEOUT_SECONDS")
    )
    crawl_host_rate: str = Field("1/1", validation_alias=_env("SPEEDTIER_CRAWL_HOST_RATE"))
    crawl_allow_private_networks: bool = Field(
        False, validation_alias=_env("SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS")
    )

    embedder: Literal["hashing", "openai", "local"] = Field(
        "hashing", validation_alias=_env("SPEEDTIER_EMBEDDER")
    )
    embedding_api_url: str = Field(
        "https://api.openai.com/v1", validation_alias=_env("SPEEDTIER_EMBEDDING_API_URL")
    )
    embedding_api_key: SecretStr | None = Field(
        None, validation_alias=_env("SPEEDTIER_EMBEDDING_API_KEY")
    )
    embedding_model: str = Field(
        "text-embedding-3-small", validation_alias=_env("SPEEDTIER_EMBEDDING_MODEL")
    )
    embedding_dimensions: int | None = Field(
        None, ge=1, validation_alias=_env("SPEEDTIER_EMBEDDING_DIMENSIONS")
    )
    embedding_batch_size: int = Field(
        64, ge=1, le=2048, validation_alias=_env("SPEEDTIER_EMBEDDING_BATCH_SIZE")
    )
    embedding_rate: str | None = Field(None, validation_alias=_env("SPEEDTIER_EMBEDDING_RATE"))
    embedding_api_project: str | None = Field(
        None, validation_alias=_env("SPEEDTIER_EMBEDDING_API_PROJECT")
    )

    ingestion_tick_limit: int = Field(
        200, ge=1, validation_alias=_env("SPEEDTIER_INGESTION_TICK_LIMIT")
    )
    ingestion_tenant_slice: int = Field(
        20, ge=1, validation_alias=_env("SPEEDTIER_INGESTION_TENANT_SLICE")
    )
    recrawl_interval_seconds: float = Field(
        86_400.0, ge=3600.0, validation_alias=_env("SPEEDTIER_RECRAWL_INTERVAL_SECONDS")
    )

    api_host: str = Field("127.0.0.1", validation_alias=_env("SPEEDTIER_API_HOST"))
    api_port: int = Field(8080, ge=1, le=65535, validation_alias=_env("SPEEDTIER_API_PORT"))
    api_workers: int = Field(2, ge=1, validation_alias=_env("SPEEDTIER_API_WORKERS"))
    api_max_body_bytes: int = Field(
        1_048_576, ge=1024, validation_alias=_env("SPEEDTIER_API_MAX_BODY_BYTES")
    )
    scheduler_misfire_grace_seconds: int = Field(
        300, ge=1, validation_alias=_env("SPEEDTIER_SCHEDULER_MISFIRE_GRACE_SECONDS")
    )
    scheduler_lock_seconds: float = Field(
        30.0, gt=0, validation_alias=_env("SPEEDTIER_SCHEDULER_LOCK_SECONDS")
    )

    @field_validator("crawl_host_rate")
    @classmethod
    def _crawl_host_rate_is_a_rate(cls, value: str) -> str:
        parse_rate(value, field="SPEEDTIER_CRAWL_HOST_RATE")
        return value

    @field_validator("embedding_rate")
    @classmethod
    def _embedding_rate_is_a_rate(cls, value: str | None) -> str | None:
        if value is not None:
            parse_rate(value, field="SPEEDTIER_EMBEDDING_RATE")
        return value

    @field_validator("windows")
    @classmethod
    def _windows_are_rates(cls, value: dict[str, str]) -> dict[str, str]:
        for key, rate in value.items():
            parse_rate(rate, field=f"SPEEDTIER_WINDOWS[{key}]")
        return value

    def tier_processes(self, tier: str) -> int:
        return int(getattr(self, f"{tier}_processes"))

    def tier_threads(self, tier: str) -> int:
        return int(getattr(self, f"{tier}_threads"))

    @property
    def is_development(self) -> bool:
        return self.environment in ("development", "test")


def parse_rate(rate: str, *, field: str = "rate") -> tuple[int, float]:
    """Parse ``"LIMIT/SECONDS"`` (e.g. ``"4/60"``) into ``(limit, period_seconds)``.

    Raises:
      ValueError: when the text is not of that form or either number is not positive.
    """
    try:
        limit_text, period_text = rate.split("/", 1)
        limit, period = int(limit_text), float(period_text)
    except ValueError:
        raise ValueError(f"{field}: expected LIMIT/SECONDS such as 4/60, got {rate!r}") from None
    if limit < 1 or period <= 0:
        raise ValueError(f"{field}: limit and period must be positive, got {rate!r}")
    return limit, period


def load_settings(**overrides: object) -> Settings:
    """Read the environment (plus explicit overrides, used by tests) into a Settings object."""
    return Settings(**overrides)  # type: ignore[arg-type]
