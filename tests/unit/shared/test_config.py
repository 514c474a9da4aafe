"""Settings: every environment variable the README documents lands in its field (no I/O but
reading the README)."""

from __future__ import annotations

import os
import re
from typing import Any

import pytest
from pydantic import SecretStr

from shared.config import ENV_PREFIX, Settings, environment_variables, load_settings
from tests import REPO

README = REPO / "README.md"
#: A Fernet key (url-safe base64 of 32 bytes), for the connector credentials' sample.
KEY = "gX3J0PZkFvAQ6oKkzSTPmOKx5Nft6xqCUVFL5nEXDVI="

#: variable -> (field, value as set in the environment, value the field then holds); each
#: value differs from the field's default.
SAMPLES: dict[str, tuple[str, str, Any]] = {
    "SPEEDTIER_ENV": ("environment", "staging", "staging"),
    "REDIS_URL": ("redis_url", "redis://cache:6380/3", "redis://cache:6380/3"),
    "SPEEDTIER_FAST_REDIS_URL": ("fast_redis_url", "redis://fast:6379/0", "redis://fast:6379/0"),
    "SPEEDTIER_SLOW_REDIS_URL": ("slow_redis_url", "redis://slow:6379/1", "redis://slow:6379/1"),
    "SPEEDTIER_MAINTENANCE_REDIS_URL": (
        "maintenance_redis_url",
        "redis://maint:6379/2",
        "redis://maint:6379/2",
    ),
    "DATABASE_URL": ("database_url", "postgresql://db/app", "postgresql://db/app"),
    "INTERNAL_API_TOKEN": ("internal_api_token", "t0ken", "t0ken"),
    "SENTRY_DSN": ("sentry_dsn", "https://k@sentry.example/1", "https://k@sentry.example/1"),
    "LOG_LEVEL": ("log_level", "DEBUG", "DEBUG"),
    "SPEEDTIER_LOG_FORMAT": ("log_format", "json", "json"),
    "SPEEDTIER_METRICS_PORT": ("metrics_port", "9292", 9292),
    "SPEEDTIER_REDIS_NAMESPACE": ("redis_namespace", "ns-7", "ns-7"),
    "SPEEDTIER_ALLOW_VOLATILE_REDIS": ("allow_volatile_redis", "true", True),
    "SPEEDTIER_DATA_DIR": ("data_dir", "/var/lib/st", "/var/lib/st"),
    "SPEEDTIER_FAST_PROCESSES": ("fast_processes", "5", 5),
    "SPEEDTIER_FAST_THREADS": ("fast_threads", "9", 9),
    "SPEEDTIER_SLOW_PROCESSES": ("slow_processes", "3", 3),
    "SPEEDTIER_SLOW_THREADS": ("slow_threads", "6", 6),
    "SPEEDTIER_MAINTENANCE_PROCESSES": ("maintenance_processes", "4", 4),
    "SPEEDTIER_MAINTENANCE_THREADS": ("maintenance_threads", "7", 7),
    "SPEEDTIER_QUEUE_PREFETCH": ("queue_prefetch", "11", 11),
    "SPEEDTIER_WORKER_DRAIN_SECONDS": ("worker_drain_seconds", "40", 40),
    "SPEEDTIER_WORKER_POLL_MS": ("worker_poll_ms", "250", 250),
    "SPEEDTIER_GROUP_LEASE_SECONDS": ("group_lease_seconds", "12.5", 12.5),
    "SPEEDTIER_HEARTBEAT_TIMEOUT_SECONDS": ("heartbeat_timeout_seconds", "90", 90.0),
    "SPEEDTIER_WINDOWS": (
        "windows",
        '{"kb_source_sync.notion": "2/60"}',
        {"kb_source_sync.notion": "2/60"},
    ),
    "SPEEDTIER_FLAGS": ("flag_overrides", '{"pause_api2_x": true}', {"pause_api2_x": True}),
    "SPEEDTIER_FLAG_CACHE_SECONDS": ("flag_cache_seconds", "0.5", 0.5),
    "SPEEDTIER_SEARCH_CACHE_MB": ("search_cache_mb", "32", 32.0),
    "SPEEDTIER_PROVIDER_URLS": ("provider_urls", '{"notion": "http://n"}', {"notion": "http://n"}),
    "SPEEDTIER_HTTP_TIMEOUT_SECONDS": ("http_timeout_seconds", "7", 7.0),
    "SPEEDTIER_CRAWL_HOST_RATE": ("crawl_host_rate", "3/7", "3/7"),
    "SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS": ("crawl_allow_private_networks", "true", True),
    "SPEEDTIER_EMBEDDER": ("embedder", "openai", "openai"),
    "SPEEDTIER_EMBEDDING_API_URL": ("embedding_api_url", "http://emb/v1", "http://emb/v1"),
    "SPEEDTIER_EMBEDDING_API_KEY": ("embedding_api_key", "sk-1", "sk-1"),
    "SPEEDTIER_EMBEDDING_MODEL": ("embedding_model", "m-2", "m-2"),
    "SPEEDTIER_EMBEDDING_DIMENSIONS": ("embedding_dimensions", "256", 256),
    "SPEEDTIER_EMBEDDING_BATCH_SIZE": ("embedding_batch_size", "32", 32),
    "SPEEDTIER_EMBEDDING_RATE": ("embedding_rate", "100/60", "100/60"),
    "SPEEDTIER_EMBEDDING_API_PROJECT": ("embedding_api_project", "proj-a", "proj-a"),
    "SPEEDTIER_INGESTION_TICK_LIMIT": ("ingestion_tick_limit", "50", 50),
    "SPEEDTIER_INGESTION_TENANT_SLICE": ("ingestion_tenant_slice", "5", 5),
    "SPEEDTIER_RECRAWL_INTERVAL_SECONDS": ("recrawl_interval_seconds", "7200", 7200.0),
    "SPEEDTIER_OCR_MAX_PAGES": ("ocr_max_pages", "5", 5),
    "SPEEDTIER_OCR_TIMEOUT_SECONDS": ("ocr_timeout_seconds", "30", 30.0),
    "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": ("connector_credentials_key", KEY, KEY),
    "SPEEDTIER_API_HOST": ("api_host", "0.0.0.0", "0.0.0.0"),
    "SPEEDTIER_API_PORT": ("api_port", "9090", 9090),
    "SPEEDTIER_API_WORKERS": ("api_workers", "4", 4),
    "SPEEDTIER_API_MAX_BODY_BYTES": ("api_max_body_bytes", "2048", 2048),
    "SPEEDTIER_SCHEDULER_MISFIRE_GRACE_SECONDS": ("scheduler_misfire_grace_seconds", "60", 60),
    "SPEEDTIER_SCHEDULER_LOCK_SECONDS": ("scheduler_lock_seconds", "15", 15.0),
    "SPEEDTIER_SENTRY_CHECKIN_MARGIN_MINUTES": ("sentry_checkin_margin_minutes", "9", 9),
    "SPEEDTIER_SENTRY_MAX_RUNTIME_MINUTES": ("sentry_max_runtime_minutes", "90", 90),
    "OTEL_EXPORTER_OTLP_ENDPOINT": ("otlp_endpoint", "http://otel:4318", "http://otel:4318"),
    "RAILS_INTERNAL_URL": ("rails_internal_url", "http://rails:3000", "http://rails:3000"),
    "RAILS_INTERNAL_TOKEN": ("rails_internal_token", "r-tkn", "r-tkn"),
    "SPEEDTIER_RAILS_TIMEOUT_SECONDS": ("rails_timeout_seconds", "12", 12.0),
    "POSTHOG_HOST": ("posthog_host", "https://eu.i.posthog.com", "https://eu.i.posthog.com"),
    "POSTHOG_PROJECT_API_KEY": ("posthog_project_api_key", "phc_1", "phc_1"),
    "POSTHOG_PERSONAL_API_KEY": ("posthog_personal_api_key", "phx_1", "phx_1"),
    "SPEEDTIER_POSTHOG_POLL_SECONDS": ("posthog_poll_seconds", "15", 15.0),
    "SPEEDTIER_REGION": ("region", "eu-central-1", "eu-central-1"),
    "SLACK_BOT_TOKEN": ("slack_bot_token", "xoxb-1", "xoxb-1"),
    "SPEEDTIER_SLACK_API_URL": (
        "slack_api_url",
        "http://slack:8080/api/",
        "http://slack:8080/api/",
    ),
    "SPEEDTIER_REPORTS_SLACK_CHANNEL": ("reports_slack_channel", "C0123", "C0123"),
    "SPEEDTIER_UPLOADS_STORAGE": ("uploads_storage", "s3", "s3"),
    "SPEEDTIER_UPLOADS_SERVICE_NAME": ("uploads_service_name", "amazon", "amazon"),
    "SPEEDTIER_UPLOADS_BUCKET": ("uploads_bucket", "recordings", "recordings"),
    "SPEEDTIER_UPLOADS_ENDPOINT_URL": (
        "uploads_endpoint_url",
        "http://minio:9000",
        "http://minio:9000",
    ),
    "SPEEDTIER_UPLOADS_REGION": ("uploads_region", "eu-central-1", "eu-central-1"),
    "SPEEDTIER_UPLOADS_ROOT": ("uploads_root", "/var/speedtier/storage", "/var/speedtier/storage"),
}


def documented_variables() -> list[str]:
    """The variables of the README's configuration table; ``A_X / _Y`` names ``A_Y`` too."""
    section = README.read_text().split("\n## Configuration\n", 1)[1].split("\n## ", 1)[0]
    names: list[str] = []
    for row in re.findall(r"^\| (.+?) \|", section, flags=re.M):
        previous = ""
        for name in re.findall(r"`([A-Z_]+)`", row):
            if name.startswith("_"):
                name = previous.rsplit("_", 1)[0] + name
            names.append(name)
            previous = name
    return names


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """No speedtier variable from the machine running the tests (CI sets REDIS_URL...)."""
    known = {name.upper() for name in SAMPLES}
    for name in list(os.environ):
        if name.upper() in known or name.upper().startswith(ENV_PREFIX):
            monkeypatch.delenv(name)
    return monkeypatch


def _plain(value: Any) -> Any:
    return value.get_secret_value() if isinstance(value, SecretStr) else value


def test_the_readme_documents_every_setting_once() -> None:
    documented = documented_variables()
    assert len(documented) == len(set(documented))
    assert set(documented) == set(SAMPLES) == set(environment_variables().values())


@pytest.mark.parametrize("variable", sorted(SAMPLES))
def test_a_documented_variable_lands_in_its_field(
    clean_environment: pytest.MonkeyPatch, variable: str
) -> None:
    # Given only that variable set
    field, raw, expected = SAMPLES[variable]
    defaults = load_settings()
    clean_environment.setenv(variable, raw)
    # When the settings are read
    settings = load_settings()
    # Then its field holds the value and no other field moved
    assert _plain(getattr(settings, field)) == expected
    changed = {
        name
        for name in Settings.model_fields
        if _plain(getattr(settings, name)) != _plain(getattr(defaults, name))
    }
    assert changed == {field}
    assert environment_variables()[field] == variable


def test_an_unprefixed_field_name_is_not_a_variable(clean_environment: pytest.MonkeyPatch) -> None:
    # A Kubernetes service link (API_PORT=tcp://...) or a stray DATA_DIR is not ours.
    clean_environment.setenv("API_PORT", "tcp://10.0.0.1:8080")
    clean_environment.setenv("DATA_DIR", "/elsewhere")
    settings = load_settings()
    assert (settings.api_port, settings.data_dir) == (8080, ".speedtier")


def test_fields_can_still_be_given_by_name(clean_environment: pytest.MonkeyPatch) -> None:
    settings = load_settings(environment="production", redis_url="redis://r", flag_overrides={})
    assert (settings.environment, settings.redis_url) == ("production", "redis://r")


def test_a_tier_without_a_redis_of_its_own_uses_redis_url() -> None:
    settings = load_settings(redis_url="redis://control/0", slow_redis_url="redis://slow/0")
    assert settings.tier_redis_url("fast") == "redis://control/0"
    assert settings.tier_redis_url("slow") == "redis://slow/0"
    assert settings.tier_redis_url("maintenance") == "redis://control/0"
    # every Redis once, the control Redis first
    assert settings.redis_urls() == ["redis://control/0", "redis://slow/0"]
    same = load_settings(redis_url="redis://control/0", fast_redis_url="redis://control/0")
    assert same.redis_urls() == ["redis://control/0"]
