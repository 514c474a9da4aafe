"""One typed settings object, read from the environment.

Each field's ``description`` says what it means (``docs/reference/settings.md`` is generated
from them: ``make reference``). A field is read from ``SPEEDTIER_<FIELD>`` unless it carries an
alias: the conventional unprefixed names (``REDIS_URL``, ``DATABASE_URL``, Rails', PostHog's,
Slack's...) and ``SPEEDTIER_ENV``, ``SPEEDTIER_FLAGS``; :func:`environment_variables` names
each. Nothing reads the environment at import time: :func:`load_settings` does, from a
bootstrap function. Value parsing lives in :mod:`shared.config_values`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from shared.config_refusals import refusals as refusals
from shared.config_values import (
    DATABASE_SCHEMES,
    REDIS_SCHEMES,
    effect_names,
    invalid_message,
    network_list,
    unparsable_message,
    with_scheme,
)
from shared.config_values import parse_fernet_keys as parse_fernet_keys
from shared.config_values import parse_rate as parse_rate
from shared.errors import NotConfigured

TIER_NAMES = ("fast", "slow", "maintenance")
ENV_PREFIX = "SPEEDTIER_"


class InvalidSettings(NotConfigured, ValueError):
    """A setting holds a value the process cannot use; the message names its variable."""


class Settings(BaseSettings):
    """Runtime configuration of every speedtier process."""

    # populate_by_name: load_settings(redis_url=...) names fields, not variables.
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, extra="ignore", populate_by_name=True, frozen=True
    )

    environment: Literal["development", "test", "staging", "production"] = Field(
        "production",
        validation_alias="SPEEDTIER_ENV",
        description="development | test | staging | production (unset: production). Outside "
        "development and test the internal API needs a strong INTERNAL_API_TOKEN, the "
        "credentials key is required and Redis must keep its data (AOF, noeviction).",
    )
    redis_url: str | None = Field(
        None,
        validation_alias="REDIS_URL",
        description="The control Redis (windows, scheduler lock, counters), and every tier's "
        "without a Redis of its own.",
    )
    fast_redis_url: str | None = Field(
        None,
        description="The fast tier's own Redis (its queues, job records, groups and dead "
        "letters); unset: `REDIS_URL`. Every process needs every tier's URL.",
    )
    slow_redis_url: str | None = Field(
        None, description="The slow tier's own Redis; unset: `REDIS_URL`."
    )
    maintenance_redis_url: str | None = Field(
        None, description="The maintenance tier's own Redis; unset: `REDIS_URL`."
    )
    database_url: str | None = Field(
        None,
        validation_alias="DATABASE_URL",
        description="PostgreSQL (`postgresql://...`; psycopg 3 is used).",
    )
    internal_api_token: SecretStr | None = Field(
        None,
        validation_alias="INTERNAL_API_TOKEN",
        description="Bearer token Rails sends to `/internal/*`; also the dashboard's secret. "
        "In production and staging at least 32 characters and about 96 bits of entropy.",
    )
    auth_failure_rate: str = Field(
        "20/60",
        description="Failed authentications allowed per source address, LIMIT/SECONDS; "
        "past it, 429 with Retry-After until the window ends.",
    )
    trusted_proxy_hops: int = Field(
        0,
        ge=0,
        le=10,
        description="Reverse proxies in front of the API (an ingress: 1) whose "
        "X-Forwarded-For names the source address; 0: the TCP peer is the source.",
    )
    sentry_dsn: str | None = Field(
        None,
        validation_alias="SENTRY_DSN",
        description="Enables Sentry (Dramatiq and Flask integrations); nothing changes without it.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", validation_alias="LOG_LEVEL", description="Level of every logger."
    )
    log_format: Literal["auto", "json", "text"] = Field(
        "auto",
        description="`json`: a JSON object per line, with the running job's fields; `text`: "
        "readable lines; `auto`: JSON outside development and test.",
    )
    metrics_port: int = Field(
        9191,
        ge=0,
        le=65535,
        description="`GET /metrics` port of a worker pool and of the scheduler (0: none).",
    )
    redis_namespace: str = Field(
        "speedtier",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Prefix of every Redis key; unset, `speedtier up` on a Redis it did not "
        "start uses one of its data directory's own.",
    )
    data_dir: str = Field(
        ".speedtier", description="Embedded Redis/PostgreSQL data and `runtime.json`."
    )
    allow_volatile_redis: bool = Field(
        False,
        description="Let `production`/`staging` processes start on a Redis with AOF off; "
        "accepted jobs are then lost when Redis restarts.",
    )

    fast_processes: int = Field(2, ge=1, description="Fast tier worker processes.")
    fast_threads: int = Field(8, ge=1, description="Threads per fast tier worker process.")
    slow_processes: int = Field(1, ge=1, description="Slow tier worker processes.")
    slow_threads: int = Field(4, ge=1, description="Threads per slow tier worker process.")
    maintenance_processes: int = Field(1, ge=1, description="Maintenance tier worker processes.")
    maintenance_threads: int = Field(
        2, ge=1, description="Threads per maintenance tier worker process."
    )
    queue_prefetch: int = Field(
        0, ge=0, description="Messages a worker process fetches ahead per queue (0: threads x 2)."
    )
    worker_drain_seconds: int = Field(
        25, ge=1, description="After SIGTERM, how long in-flight jobs get to finish."
    )
    worker_poll_ms: int = Field(
        500,
        ge=10,
        le=5000,
        description="Longest idle sleep between fetches; idle queues are watched every half.",
    )

    group_lease_seconds: float = Field(
        30.0, gt=0, description="A running job's group slot survives this long without its worker."
    )
    heartbeat_timeout_seconds: float = Field(
        60.0,
        gt=0,
        description="A silent worker's unacknowledged messages are redelivered after this.",
    )
    max_unsettled_runs: int = Field(
        3,
        ge=1,
        description="Runs of one job that may end without a settle (the worker died or "
        "stalled past the heartbeat timeout) before the job fails as worker_died and is "
        "dead-lettered.",
    )
    cancel_grace_seconds: float = Field(
        30.0,
        gt=0,
        description="How long a cancelled running job has to stop at its next cancel point "
        "(a step, a provider call) before Cancelled is raised into its thread (hard stop).",
    )
    windows: dict[str, str] = Field(
        default_factory=dict,
        description='JSON overrides of provider windows, `{"<family>.<provider>": '
        '"LIMIT/SECONDS"}` (`<family>.*` for all providers).',
    )
    flag_overrides: dict[str, bool] = Field(
        default_factory=dict,
        validation_alias="SPEEDTIER_FLAGS",
        description='JSON kill-switch overrides, `{"<flag>": true}`; they win over Flipper.',
    )
    flag_cache_seconds: float = Field(
        2.0, ge=0, description="How long a flag read from Flipper's tables is reused."
    )
    search_cache_mb: float = Field(
        64.0, ge=0, description="MiB of tenants' vectors each searching process keeps (0: off)."
    )

    provider_urls: dict[str, str] = Field(
        default_factory=dict, description="JSON provider -> API base URL (proxies, tests)."
    )
    http_timeout_seconds: float = Field(
        30.0, gt=0, description="Timeout of each provider HTTP request."
    )
    crawl_host_rate: str = Field(
        "1/1", description="Crawler requests per host, `LIMIT/SECONDS`, shared by every worker."
    )
    crawl_allow_private_networks: bool = Field(
        False,
        description="Let the crawler and connectors reach loopback, private and link-local "
        "addresses (the SSRF guard off); needs SPEEDTIER_CRAWL_PRIVATE_NETWORKS_ACKNOWLEDGED.",
    )
    crawl_private_networks_acknowledged: bool = Field(
        False,
        description="The second, explicit consent CRAWL_ALLOW_PRIVATE_NETWORKS needs; every "
        "process then logs a WARNING at start.",
    )

    embedder: Literal["hashing", "openai", "local"] = Field(
        "hashing",
        description="`hashing` (offline), `openai` (an OpenAI-compatible API) or `local` "
        "(all-MiniLM-L6-v2, the `local-embeddings` extra).",
    )
    embedding_api_url: str = Field(
        "https://api.openai.com/v1", description="Embeddings API root, version included."
    )
    embedding_api_key: SecretStr | None = Field(
        None, description="The embeddings API's bearer key."
    )
    embedding_model: str = Field("text-embedding-3-small", description="Embedding model name.")
    embedding_dimensions: int | None = Field(
        None, ge=1, description="Vector length (unset: 384 hashing, 1536 openai)."
    )
    embedding_batch_size: int = Field(
        64, ge=1, le=2048, description="Texts per embeddings request."
    )
    embedding_rate: str | None = Field(
        None,
        description="`LIMIT/SECONDS` window per API project (a full window delays, never fails).",
    )
    embedding_api_project: str | None = Field(
        None, description="The embedding window's key; unset: a hash of the API key."
    )

    ingestion_tick_limit: int = Field(
        200, ge=1, description="Documents one ingestion sweep tick enqueues in all."
    )
    ingestion_tenant_slice: int = Field(
        20, ge=1, description="Of those, at most this many per tenant."
    )
    recrawl_interval_seconds: float = Field(
        86_400.0,
        ge=3600.0,
        description="URL documents without a base schedule are re-fetched this often.",
    )
    ocr_max_pages: int = Field(
        20, ge=0, le=1000, description="Pages without text OCRed per document (0: OCR off)."
    )
    ocr_timeout_seconds: float = Field(
        120.0, gt=0, description="No page of a document is OCRed after this many seconds on it."
    )
    connector_credentials_key: SecretStr | None = Field(
        None,
        description="Fernet keys, comma-separated, for connector credentials at rest: the "
        "first encrypts, all decrypt; unset: connections cannot be stored.",
    )

    api_host: str = Field("127.0.0.1", description="Where `speedtier api` listens.")
    api_port: int = Field(8080, ge=1, le=65535, description="The API's port.")
    api_workers: int = Field(2, ge=1, description="gunicorn worker processes of the API.")
    api_max_body_bytes: int = Field(
        1_048_576, ge=1024, description="Larger request bodies get 413."
    )
    scheduler_misfire_grace_seconds: int = Field(
        300, ge=1, description="A tick noticed late still fires within this."
    )
    scheduler_lock_seconds: float = Field(
        30.0, gt=0, description="Scheduler leader lock lifetime (renewed every third of it)."
    )
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

    rails_internal_url: str | None = Field(
        None,
        validation_alias="RAILS_INTERNAL_URL",
        description="Rails' root URL for its `/internal/*` endpoints (seed 001); unset: "
        "jobs calling Rails fail.",
    )
    rails_internal_token: SecretStr | None = Field(
        None,
        validation_alias="RAILS_INTERNAL_TOKEN",
        description="Bearer token Rails' internal controllers require.",
    )
    rails_timeout_seconds: float = Field(
        30.0, gt=0, description="Connect and read timeout of each Rails call."
    )
    posthog_host: str = Field(
        "https://us.i.posthog.com",
        validation_alias="POSTHOG_HOST",
        description="PostHog's URL for the rollout flags' definitions.",
    )
    posthog_project_api_key: SecretStr | None = Field(
        None,
        validation_alias="POSTHOG_PROJECT_API_KEY",
        description="The PostHog project's API key (`phc_...`).",
    )
    posthog_personal_api_key: SecretStr | None = Field(
        None,
        validation_alias="POSTHOG_PERSONAL_API_KEY",
        description="Key for local evaluation; unset (either key): rollout flags are off.",
    )
    posthog_poll_seconds: float = Field(
        30.0, ge=1, description="How often flag definitions are polled."
    )
    region: str | None = Field(
        None,
        description="This deployment's region (`eu-central-1`, `us-east-1`), the `region` "
        "property rollout flags are evaluated with.",
    )

    slack_bot_token: SecretStr | None = Field(
        None,
        validation_alias="SLACK_BOT_TOKEN",
        description="Bot token (`chat:write`) for the daily reports; unset: they fail.",
    )
    slack_api_url: str = Field(
        "https://slack.com/api/", description="Slack Web API root (tests: the local fake)."
    )
    reports_slack_channel: str | None = Field(
        None, description="Channel id the daily reports are posted to."
    )

    uploads_storage: Literal["s3", "local"] = Field(
        "local",
        description="Conversation uploads' object storage: `s3` (boto3, any S3-compatible "
        "endpoint, credentials from boto3's chain) or `local` (Active Storage's Disk layout).",
    )
    uploads_service_name: str = Field(
        "local",
        min_length=1,
        description="`active_storage_blobs.service_name` of new blobs (e.g. `amazon`).",
    )
    uploads_bucket: str | None = Field(
        None, description="The bucket (`s3`; its absence is a retryable error naming it)."
    )
    uploads_endpoint_url: str | None = Field(
        None, description="An S3-compatible endpoint (MinIO, moto); unset: AWS."
    )
    uploads_region: str | None = Field(None, description="The bucket's region.")
    uploads_root: str | None = Field(
        None, description="The `local` store's directory; unset: `<SPEEDTIER_DATA_DIR>/storage`."
    )
    egress_allowed_networks: str = Field(
        "",
        description="Comma-separated networks (CIDR, e.g. 10.20.0.0/16,127.0.0.1/32) that every "
        "outbound call (connectors, provider clients, URL and feed fetchers) may connect "
        "to although they are private; empty: none.",
    )
    rate_limit_backoff_max_seconds: float = Field(
        900.0,
        ge=1.0,
        description="The longest wait, in seconds, of the exponential backoff (with jitter) "
        "after a provider's repeated rate-limit answers that name no Retry-After.",
    )
    provider_sync_native_effects: str = Field(
        "",
        validation_alias="PROVIDER_SYNC_NATIVE_EFFECTS",
        description="Comma-separated completion effects of a provider sync that this side"
        " performs itself instead of Rails' complete_conversation_sync (mark_synced,"
        " summarize); empty: Rails performs every effect. With every effect listed, Rails'"
        " complete call is skipped. Shortening the list is the rollback: the removed"
        " effects go back to Rails on the next completion.",
    )

    @field_validator("egress_allowed_networks")
    @classmethod
    def _egress_networks_are_networks(cls, value: str) -> str:
        network_list(value, field="SPEEDTIER_EGRESS_ALLOWED_NETWORKS")
        return value

    @property
    def egress_networks(self) -> list[str]:
        """``egress_allowed_networks`` as a list of CIDR strings."""
        return network_list(self.egress_allowed_networks)

    @field_validator("provider_sync_native_effects")
    @classmethod
    def _effects_are_names(cls, value: str) -> str:
        effect_names(value)
        return value

    @property
    def native_effects(self) -> tuple[str, ...]:
        """``PROVIDER_SYNC_NATIVE_EFFECTS`` as names, in the order given, without blanks."""
        return effect_names(self.provider_sync_native_effects)

    @field_validator("redis_url", "fast_redis_url", "slow_redis_url", "maintenance_redis_url")
    @classmethod
    def _redis_urls_name_redis(cls, value: str | None) -> str | None:
        return with_scheme(value, REDIS_SCHEMES)

    @field_validator("database_url")
    @classmethod
    def _database_url_names_postgresql(cls, value: str | None) -> str | None:
        return with_scheme(value, DATABASE_SCHEMES)

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

    @field_validator("auth_failure_rate")
    @classmethod
    def _auth_failure_rate_is_a_rate(cls, value: str) -> str:
        parse_rate(value, field="SPEEDTIER_AUTH_FAILURE_RATE")
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
    def is_production_like(self) -> bool:
        """Production or staging: weak settings are refused (``shared.config_refusals``)."""
        return self.environment in ("production", "staging")

    @property
    def is_development(self) -> bool:
        return self.environment in ("development", "test")

    @property
    def json_logs(self) -> bool:
        """Log JSON lines: ``SPEEDTIER_LOG_FORMAT=json``, or ``auto`` outside development."""
        return self.log_format == "json" or (self.log_format == "auto" and not self.is_development)


def environment_variables() -> dict[str, str]:
    """Field name -> the environment variable it is read from."""
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
        settings = Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise InvalidSettings(invalid_message(exc, environment_variables())) from None
    except SettingsError as exc:  # a variable holding JSON (a dict or list field) that is not
        raise InvalidSettings(unparsable_message(str(exc), environment_variables())) from None
    refused = refusals(settings)
    if refused:
        raise InvalidSettings(
            f"refusing to start in SPEEDTIER_ENV={settings.environment}: " + refused[0]
        )
    return settings
