"""One typed settings object, read from the environment.

Every field is documented in the README's configuration table. A field is read from
``SPEEDTIER_<FIELD>`` (``env_prefix``); only the names that do not follow that rule carry an
explicit alias: the conventional unprefixed ones (``REDIS_URL``, ``DATABASE_URL``,
``INTERNAL_API_TOKEN``, ``SENTRY_DSN``, ``LOG_LEVEL``, Rails' ``RAILS_INTERNAL_URL`` and
``RAILS_INTERNAL_TOKEN``, PostHog's ``POSTHOG_HOST``, ``POSTHOG_PROJECT_API_KEY`` and
``POSTHOG_PERSONAL_API_KEY``, Slack's ``SLACK_BOT_TOKEN``) and two shorter ones
(``SPEEDTIER_ENV``, ``SPEEDTIER_FLAGS``). :func:`environment_variables` lists the name of
every field. Nothing reads the environment at import time: call :func:`load_settings` from a
bootstrap function.
"""

from __future__ import annotations

import base64
import binascii
import re
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from shared.errors import NotConfigured

TIER_NAMES = ("fast", "slow", "maintenance")
ENV_PREFIX = "SPEEDTIER_"
#: What a Redis URL starts with (redis-py's schemes).
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
#: What a database URL starts with (PostgreSQL through psycopg 3: ``shared.db.engine``).
DATABASE_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")


class InvalidSettings(NotConfigured, ValueError):
    """A setting holds a value the process cannot use; the message names its variable."""


class Settings(BaseSettings):
    """Runtime configuration of every speedtier process."""

    # populate_by_name: load_settings(redis_url=...) names fields, not variables.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", populate_by_name=True, frozen=True
    )

    environment: Literal["development", "test", "staging", "production"] = Field(
        "development", validation_alias="SPEEDTIER_ENV"
    )
    redis_url: str | None = Field(None, validation_alias="REDIS_URL")
    # A tier's own Redis (its queues, job records, groups, dead letters); unset: REDIS_URL,
    # which keeps what every tier shares (tiers.tier_brokers says what lives where).
    fast_redis_url: str | None = None
    slow_redis_url: str | None = None
    maintenance_redis_url: str | None = None
    database_url: str | None = Field(None, validation_alias="DATABASE_URL")
    internal_api_token: SecretStr | None = Field(None, validation_alias="INTERNAL_API_TOKEN")
    sentry_dsn: str | None = Field(None, validation_alias="SENTRY_DSN")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", validation_alias="LOG_LEVEL"
    )
    # auto: one JSON object per line outside development and test, readable lines inside.
    log_format: Literal["auto", "json", "text"] = "auto"
    # The worker pool's and the scheduler's GET /metrics port; 0: not served.
    metrics_port: int = Field(9191, ge=0, le=65535)
    redis_namespace: str = Field("speedtier", pattern=r"^[A-Za-z0-9_.-]+$")
    data_dir: str = ".speedtier"
    allow_volatile_redis: bool = False

    fast_processes: int = Field(2, ge=1)
    fast_threads: int = Field(8, ge=1)
    slow_processes: int = Field(1, ge=1)
    slow_threads: int = Field(4, ge=1)
    maintenance_processes: int = Field(1, ge=1)
    maintenance_threads: int = Field(2, ge=1)
    queue_prefetch: int = Field(0, ge=0)
    worker_drain_seconds: int = Field(25, ge=1)
    worker_poll_ms: int = Field(500, ge=10, le=5000)

    group_lease_seconds: float = Field(30.0, gt=0)
    heartbeat_timeout_seconds: float = Field(60.0, gt=0)
    windows: dict[str, str] = Field(default_factory=dict)
    flag_overrides: dict[str, bool] = Field(
        default_factory=dict, validation_alias="SPEEDTIER_FLAGS"
    )
    flag_cache_seconds: float = Field(2.0, ge=0)
    # retrieval's in-process vector cache, MiB per process (services.ingestion.vector_cache)
    search_cache_mb: float = Field(64.0, ge=0)

    provider_urls: dict[str, str] = Field(default_factory=dict)
    http_timeout_seconds: float = Field(30.0, gt=0)
    crawl_host_rate: str = "1/1"
    crawl_allow_private_networks: bool = False

    embedder: Literal["hashing", "openai", "local"] = "hashing"
    embedding_api_url: str = "https://api.openai.com/v1"
    embedding_api_key: SecretStr | None = None
    embedding_model: str = "text-embedding-3-small"
    embedding_dimensions: int | None = Field(None, ge=1)
    embedding_batch_size: int = Field(64, ge=1, le=2048)
    embedding_rate: str | None = None
    embedding_api_project: str | None = None

    ingestion_tick_limit: int = Field(200, ge=1)
    ingestion_tenant_slice: int = Field(20, ge=1)
    recrawl_interval_seconds: float = Field(86_400.0, ge=3600.0)
    # OCR of scanned PDF pages (services.indexing.ocr): pages per document (0 = off), and
    # no page is started after this many seconds on one document.
    ocr_max_pages: int = Field(20, ge=0, le=1000)
    ocr_timeout_seconds: float = Field(120.0, gt=0)
    # Knowledge-base connector credentials at rest (services.ingestion.credentials): Fernet
    # keys, comma-separated; the first encrypts, all decrypt (rotation). Unset: connections
    # cannot be stored and connector syncs fail naming the variable.
    connector_credentials_key: SecretStr | None = None

    api_host: str = "127.0.0.1"
    api_port: int = Field(8080, ge=1, le=65535)
    api_workers: int = Field(2, ge=1)
    api_max_body_bytes: int = Field(1_048_576, ge=1024)
    scheduler_misfire_grace_seconds: int = Field(300, ge=1)
    scheduler_lock_seconds: float = Field(30.0, gt=0)
    otlp_endpoint: str | None = Field(
        None,
        validation_alias="OTEL_EXPORTER_OTLP_ENDPOINT",
        description="OpenTelemetry collector base URL (OTLP over HTTP, spans posted to "
        "<endpoint>/v1/traces); unset: no tracing at all.",
    )
    sentry_checkin_margin_minutes: int = Field(
        5,
        ge=1,
        description="Sentry cron monitors: minutes after a tick's fire time before Sentry "
        "reports a missed check-in (the monitor's checkin_margin).",
    )
    sentry_max_runtime_minutes: int = Field(
        30,
        ge=1,
        description="Sentry cron monitors: minutes from the scheduler's in_progress check-in "
        "to the tick job's ok before Sentry reports a timeout (the monitor's max_runtime).",
    )

    # Rails' /internal/* endpoints (seed 001): unset URL -> the families that call Rails fail
    # their jobs as unrecoverable with a message naming the variable.
    rails_internal_url: str | None = Field(None, validation_alias="RAILS_INTERNAL_URL")
    rails_internal_token: SecretStr | None = Field(None, validation_alias="RAILS_INTERNAL_TOKEN")
    rails_timeout_seconds: float = Field(30.0, gt=0)
    # PostHog rollout flags, evaluated locally per organization (shared.rollouts): without a
    # personal API key every rollout flag is off.
    posthog_host: str = Field("https://us.i.posthog.com", validation_alias="POSTHOG_HOST")
    posthog_project_api_key: SecretStr | None = Field(
        None, validation_alias="POSTHOG_PROJECT_API_KEY"
    )
    posthog_personal_api_key: SecretStr | None = Field(
        None, validation_alias="POSTHOG_PERSONAL_API_KEY"
    )
    posthog_poll_seconds: float = Field(30.0, ge=1)
    #: The deployment region rollout flags are evaluated with (``region`` property).
    region: str | None = None

    # The daily agent evaluation reports' Slack posts (seed 001): a bot token with
    # chat:write and the channel the reports go to.
    slack_bot_token: SecretStr | None = Field(None, validation_alias="SLACK_BOT_TOKEN")
    slack_api_url: str = "https://slack.com/api/"
    reports_slack_channel: str | None = None

    # Conversation uploads' object storage (services.uploads, seed 001): Active Storage's
    # objects through an S3-compatible client (credentials from boto3's chain), or a local
    # directory in Active Storage's Disk layout for `make run`.
    uploads_storage: Literal["s3", "local"] = "local"
    #: ``active_storage_blobs.service_name`` of the blobs native processing writes (Rails'
    #: storage.yml service, e.g. ``amazon``).
    uploads_service_name: str = Field("local", min_length=1)
    uploads_bucket: str | None = None
    #: An S3-compatible endpoint (MinIO, moto); unset: AWS.
    uploads_endpoint_url: str | None = None
    uploads_region: str | None = None
    #: ``local``'s directory; unset: ``<SPEEDTIER_DATA_DIR>/storage``.
    uploads_root: str | None = None

    @field_validator("redis_url", "fast_redis_url", "slow_redis_url", "maintenance_redis_url")
    @classmethod
    def _redis_urls_name_redis(cls, value: str | None) -> str | None:
        return _with_scheme(value, REDIS_SCHEMES)

    @field_validator("database_url")
    @classmethod
    def _database_url_names_postgresql(cls, value: str | None) -> str | None:
        return _with_scheme(value, DATABASE_SCHEMES)

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

    @field_validator("connector_credentials_key")
    @classmethod
    def _credentials_keys_are_fernet_keys(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            parse_fernet_keys(value.get_secret_value())
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

    def tier_redis_url(self, tier: str) -> str | None:
        """The Redis of ``tier``'s queues and job records: its own, else ``REDIS_URL``."""
        own: str | None = getattr(self, f"{tier}_redis_url", None)
        return own or self.redis_url

    def redis_urls(self) -> list[str]:
        """Every Redis this deployment uses, once each: ``REDIS_URL`` (the control Redis)
        first, then each tier's own in ``TIER_NAMES`` order."""
        urls = [self.redis_url, *(self.tier_redis_url(tier) for tier in TIER_NAMES)]
        return list(dict.fromkeys(url for url in urls if url))

    @property
    def is_development(self) -> bool:
        return self.environment in ("development", "test")

    @property
    def json_logs(self) -> bool:
        """Log JSON lines: ``SPEEDTIER_LOG_FORMAT=json``, or ``auto`` outside development."""
        return self.log_format == "json" or (self.log_format == "auto" and not self.is_development)


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


def parse_fernet_keys(value: str) -> list[bytes]:
    """The comma-separated Fernet keys of ``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY``.

    Raises:
      ValueError: no key, or a part that is not url-safe base64 of 32 bytes.
    """
    keys: list[bytes] = []
    for index, part in enumerate(p.strip() for p in value.split(",")):
        if not part:
            continue
        try:
            raw = base64.urlsafe_b64decode(part.encode())
        except (ValueError, binascii.Error):
            raw = b""
        if len(raw) != 32:
            raise ValueError(
                f"SPEEDTIER_CONNECTOR_CREDENTIALS_KEY: key {index + 1} is not a Fernet key "
                "(url-safe base64 of 32 bytes)"
            )
        keys.append(part.encode())
    if not keys:
        raise ValueError("SPEEDTIER_CONNECTOR_CREDENTIALS_KEY: no key")
    return keys


def _with_scheme(url: str | None, schemes: tuple[str, ...]) -> str | None:
    """``url`` (or None) when it starts with one of ``schemes``; a ValueError otherwise."""
    if url is not None and not url.startswith(schemes):
        raise ValueError(f"expected a URL starting with {' or '.join(schemes)}")
    return url


def environment_variables() -> dict[str, str]:
    """Field name -> the environment variable it is read from (the README's names)."""
    return {
        name: field.validation_alias
        if isinstance(field.validation_alias, str)
        else ENV_PREFIX + name.upper()
        for name, field in Settings.model_fields.items()
    }


def load_settings(**overrides: object) -> Settings:
    """Read the environment (plus explicit overrides, used by tests) into a Settings object.

    Raises:
      InvalidSettings: a value cannot be used; the message names each such variable.
    """
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise InvalidSettings(_invalid(exc)) from None
    except SettingsError as exc:  # a variable holding JSON (a dict or list field) that is not
        raise InvalidSettings(_unparsable(str(exc))) from None


def _invalid(error: ValidationError) -> str:
    variables = environment_variables()
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        field = str(item["loc"][0]) if item["loc"] else ""
        name = variables.get(field, field)
        where = "".join(f"[{part}]" for part in item["loc"][1:])
        problems.append(f"{name}{where}: {item['msg']}")
    return "invalid settings: " + "; ".join(problems)


def _unparsable(message: str) -> str:
    """pydantic-settings' message for a JSON variable it could not parse, naming the
    variable rather than the field."""
    match = re.search(r'field "([^"]+)"', message)
    if match is None:
        return f"invalid settings: {message}"
    field = match.group(1)
    return f"invalid settings: {environment_variables().get(field, field)}: not valid JSON"
