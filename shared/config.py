"""One typed settings object, read from the environment.

Every field carries its meaning as its ``description``: ``docs/reference/settings.md`` is
generated from them (``make reference``). A field is read from
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
        "development",
        validation_alias="SPEEDTIER_ENV",
        description="Outside development and test the API refuses to start without "
        "`INTERNAL_API_TOKEN`, and Redis without AOF stops every process (see "
        "`SPEEDTIER_ALLOW_VOLATILE_REDIS`).",
    )
    redis_url: str | None = Field(
        None,
        validation_alias="REDIS_URL",
        description="The control Redis: provider windows, the scheduler's lock, counters; and "
        "the queues, job records and groups of every tier without a Redis of its own. "
        "`make run` finds or starts one.",
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
        description="Bearer token Rails sends to `/internal/*`; also the dashboard's secret.",
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
        description="`json`: one JSON object per line (time, level, logger, message, "
        "process and, while a job runs, its job id, family, organization, tier, attempt); "
        "`text`: readable lines; `auto`: JSON outside development and test.",
    )
    metrics_port: int = Field(
        9191,
        ge=0,
        le=65535,
        description="`GET /metrics` port of a worker pool and of the scheduler (0: not "
        "served; `speedtier up` serves everything on the API's `/metrics`).",
    )
    redis_namespace: str = Field(
        "speedtier",
        pattern=r"^[A-Za-z0-9_.-]+$",
        description="Prefix of every Redis key (queues are `<ns>:<family>.<tier>`); unset, "
        "`speedtier up` on a Redis it did not start uses `speedtier-<8 hex of its data "
        "directory's path>`.",
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
        description="Messages a worker process fetches ahead per queue (0: threads x 2).",
    )
    worker_drain_seconds: int = Field(
        25, ge=1, description="After SIGTERM, how long in-flight jobs get to finish."
    )
    worker_poll_ms: int = Field(
        500,
        ge=10,
        le=5000,
        description="Longest idle sleep between fetches; the queue watch looks at sleeping "
        "queues every half of it.",
    )

    group_lease_seconds: float = Field(
        30.0,
        gt=0,
        description="A running job's group slot survives this long without its worker.",
    )
    heartbeat_timeout_seconds: float = Field(
        60.0,
        gt=0,
        description="A silent worker's unacknowledged messages are redelivered after this.",
    )
    windows: dict[str, str] = Field(
        default_factory=dict,
        description='JSON overrides of provider windows, `{"<family>.<provider>": '
        '"LIMIT/SECONDS"}` (`<family>.*` for all providers).',
    )
    flag_overrides: dict[str, bool] = Field(
        default_factory=dict,
        validation_alias="SPEEDTIER_FLAGS",
        description='JSON kill-switch overrides for local use, `{"pause_api2_knowledge_'
        'base_sync": true}`; they win over Flipper.',
    )
    flag_cache_seconds: float = Field(
        2.0, ge=0, description="How long a flag read from Flipper's tables is reused."
    )
    search_cache_mb: float = Field(
        64.0,
        ge=0,
        description="MiB per process of tenants' vectors kept for retrieval's exact ranking, "
        "about 1.6 kB a chunk (0: off). Each API worker process holds its own.",
    )

    provider_urls: dict[str, str] = Field(
        default_factory=dict,
        description="JSON provider -> API base URL (proxies, tests).",
    )
    http_timeout_seconds: float = Field(
        30.0, gt=0, description="Timeout of each provider HTTP request."
    )
    crawl_host_rate: str = Field(
        "1/1",
        description="Crawler requests per host, `LIMIT/SECONDS`, shared by every worker.",
    )
    crawl_allow_private_networks: bool = Field(
        False,
        description="Let the URL crawler reach private, loopback and link-local addresses "
        "(tests and the demo only).",
    )

    embedder: Literal["hashing", "openai", "local"] = Field(
        "hashing",
        description="`hashing` (deterministic, offline), `openai` (any OpenAI-compatible "
        "API) or `local` (all-MiniLM-L6-v2 on the CPU, 384-d, offline; needs the "
        "`local-embeddings` extra).",
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
        20,
        ge=0,
        le=1000,
        description="Pages without a text layer OCRed per document (0 turns OCR off).",
    )
    ocr_timeout_seconds: float = Field(
        120.0,
        gt=0,
        description="No page of a document is OCRed after this many seconds on it.",
    )
    connector_credentials_key: SecretStr | None = Field(
        None,
        description="Fernet keys (url-safe base64 of 32 bytes), comma-separated, encrypting "
        "knowledge-base connector credentials at rest; the first encrypts, all decrypt. "
        "Unset: connections cannot be stored and connector syncs fail naming it.",
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
        30.0,
        gt=0,
        description="Scheduler leader lock lifetime (renewed every third of it).",
    )

    rails_internal_url: str | None = Field(
        None,
        validation_alias="RAILS_INTERNAL_URL",
        description="Rails' root URL for its `/internal/*` endpoints (seed 001 families); "
        "unset: jobs calling Rails fail unrecoverable naming the variable.",
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
        description="Personal (or feature-flags secure) API key for local evaluation; "
        "unset (either key): every rollout flag is off.",
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
        description="Bot token with `chat:write` for the daily reports; unset: report jobs "
        "fail unrecoverable naming it.",
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
        description="`active_storage_blobs.service_name` of new blobs (Rails' storage.yml "
        "service, e.g. `amazon`).",
    )
    uploads_bucket: str | None = Field(
        None,
        description="The bucket (`s3`; its absence is a retryable error naming it).",
    )
    uploads_endpoint_url: str | None = Field(
        None, description="An S3-compatible endpoint (MinIO, moto); unset: AWS."
    )
    uploads_region: str | None = Field(None, description="The bucket's region.")
    uploads_root: str | None = Field(
        None, description="The `local` store's directory; unset: `<SPEEDTIER_DATA_DIR>/storage`."
    )

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
