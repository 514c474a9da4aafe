"""The settings of the services on the platform: providers and their fetchers, embedding and
indexing, Rails, PostHog, Slack, uploads' storage and stored credentials.

A half of :class:`shared.config.Settings` (which inherits it), apart so that each module holds
one concern: the platform's own settings (Redis, PostgreSQL, workers, the API, the scheduler)
there, what the products and kernels call out to here. Read it as ``Settings``; nothing
builds this class alone.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings

from shared.config_values import effect_names, network_list, parse_fernet_keys, parse_rate


class ServiceSettings(BaseSettings):
    """The services' half of :class:`shared.config.Settings`."""

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
