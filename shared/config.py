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
from pydantic_settings import SettingsConfigDict, SettingsError

from shared.config_services import ServiceSettings
from shared.config_values import (
    DATABASE_SCHEMES,
    REDIS_SCHEMES,
    invalid_message,
    unparsable_message,
    with_scheme,
)
from shared.config_values import parse_fernet_keys as parse_fernet_keys
from shared.config_values import parse_rate as parse_rate
from shared.errors import NotConfigured
from shared.secret_strength import GENERATE, weakness

TIER_NAMES = ("fast", "slow", "maintenance")
ENV_PREFIX = "SPEEDTIER_"


class InvalidSettings(NotConfigured, ValueError):
    """A setting holds a value the process cannot use; the message names its variable."""


class Settings(ServiceSettings):
    """Runtime configuration of every speedtier process: the platform's settings here, the
    services' in :class:`~shared.config_services.ServiceSettings`."""

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
        0,
        ge=0,
        description="Messages a worker process fetches ahead per queue (0: the tier's, "
        "threads x 2; threads x 1 in the slow tier).",
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
    max_clock_offset_seconds: float = Field(
        2.0,
        gt=0,
        description="How far a process's clock may be from Redis's (TIME); further, it "
        "refuses to start in production and staging, and a worker reports it (ERROR, "
        "speedtier_clock_offset_seconds). Capped at 3/8 of the group lease and 1/4 of the "
        "heartbeat timeout: half of what they leave a host's clock.",
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

    @field_validator("redis_url", "fast_redis_url", "slow_redis_url", "maintenance_redis_url")
    @classmethod
    def _redis_urls_name_redis(cls, value: str | None) -> str | None:
        return with_scheme(value, REDIS_SCHEMES)

    @field_validator("database_url")
    @classmethod
    def _database_url_names_postgresql(cls, value: str | None) -> str | None:
        return with_scheme(value, DATABASE_SCHEMES)

    @field_validator("auth_failure_rate")
    @classmethod
    def _auth_failure_rate_is_a_rate(cls, value: str) -> str:
        parse_rate(value, field="SPEEDTIER_AUTH_FAILURE_RATE")
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
        """Production or staging: weak settings are refused (:func:`refusals`)."""
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


GENERATE_KEY = (
    "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
)


def refusals(settings: Settings) -> list[str]:
    """The weak settings this deployment will not start with, one line each naming its
    variable (the first is what :func:`load_settings` reports; bootstrap asks again for
    settings built by hand).

    ==========================================  ============================================
    refused                                     where
    ==========================================  ============================================
    ``INTERNAL_API_TOKEN`` shorter than 32      production and staging (its absence is the
    characters or under ~96 bits of entropy     API's own refusal: workers do not need it)
    no ``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY``  production and staging
    ``SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS``  every environment, unless
    without its acknowledgement                 ``..._PRIVATE_NETWORKS_ACKNOWLEDGED=true``
    ==========================================  ============================================
    """
    found: list[str] = []
    if settings.is_production_like:
        secret = settings.internal_api_token
        token = secret.get_secret_value().strip() if secret else ""
        weak = weakness(token) if token else None  # unset: the API's own refusal
        if weak is not None:
            found.append(f"INTERNAL_API_TOKEN is too weak ({weak}); generate one with {GENERATE}")
        if settings.connector_credentials_key is None:
            found.append(
                "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY is not set; stored credentials are "
                f"encrypted with it (generate one with {GENERATE_KEY})"
            )
    if settings.crawl_allow_private_networks and not settings.crawl_private_networks_acknowledged:
        found.append(
            "SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true turns the SSRF guard off and needs "
            "SPEEDTIER_CRAWL_PRIVATE_NETWORKS_ACKNOWLEDGED=true as well"
        )
    return found
