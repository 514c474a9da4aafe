"""Which Redis and PostgreSQL a local run uses: configured, found on the default port, or
embedded (see :mod:`services.app.embedded`)."""

from __future__ import annotations

import contextlib
import enum
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import psycopg

from services.app.embedded.postgres_server import (
    DATABASE_NAME,
    POSTGRES_SUPERUSER,
    create_database,
    start_embedded_postgres,
)
from services.app.embedded.process import LOCALHOST, EmbeddedService, EmbeddedServiceError, logger
from services.app.embedded.redis_server import redis_problem, start_embedded_redis
from shared.config import Settings

Mode = Literal["auto", "embedded", "external"]
"""``auto``: configured URL, else default port, else embedded. ``embedded``: always start the
embedded server (tests). ``external``: configured URL or default port, never embedded."""

DEFAULT_REDIS_PORT = 6379
DEFAULT_POSTGRES_PORT = 5432


class Origin(enum.StrEnum):
    """Where a resolved service comes from."""

    CONFIGURED = "configured"
    DEFAULT_PORT = "default port"
    EMBEDDED = "embedded"


@dataclass
class ResolvedService:
    """A service URL and where it came from; ``stop()`` stops it only if it is embedded."""

    name: str
    url: str
    origin: Origin
    embedded: EmbeddedService | None = None

    def stop(self) -> None:
        if self.embedded is not None:
            self.embedded.stop()

    def describe(self) -> str:
        if self.embedded is not None:
            return f"{self.url} (embedded, data in {self.embedded.data_dir})"
        return f"{self.url} ({self.origin})"


def ensure_redis(
    settings: Settings, *, mode: Mode = "auto", port: int | None = None
) -> ResolvedService:
    """Resolve the Redis to use, starting the embedded one if needed.

    Parameters:
      settings: ``redis_url`` and ``data_dir`` are read.
      mode: see :data:`Mode`.
      port: TCP port for the embedded server; ``0`` picks a free one. By default the port of
        the previous run, else 16379, else a free one.

    Raises:
      EmbeddedServiceError: in ``external`` mode with nothing configured or answering, or
        when the embedded server cannot start.
    """
    if mode != "embedded" and settings.redis_url:
        return ResolvedService("redis", settings.redis_url, Origin.CONFIGURED)
    if mode != "embedded":
        url = f"redis://{LOCALHOST}:{DEFAULT_REDIS_PORT}/0"
        problem = redis_problem(url)
        if problem is None:
            logger.info(
                "REDIS_URL is not set; using the Redis that answers on %s:%s "
                "(set REDIS_URL to choose another)",
                LOCALHOST,
                DEFAULT_REDIS_PORT,
            )
            return ResolvedService("redis", url, Origin.DEFAULT_PORT)
        if mode == "external":
            raise EmbeddedServiceError(
                f"REDIS_URL is not set and no Redis answers on {LOCALHOST}:{DEFAULT_REDIS_PORT} "
                f"({problem}); set REDIS_URL or allow the embedded Redis"
            )
        logger.info("no usable Redis on %s:%s (%s)", LOCALHOST, DEFAULT_REDIS_PORT, problem)
    service = start_embedded_redis(_service_dir(settings, "redis"), port=port)
    return ResolvedService("redis", service.url, Origin.EMBEDDED, service)


def ensure_postgres(
    settings: Settings,
    *,
    mode: Mode = "auto",
    port: int | None = None,
    database: str = DATABASE_NAME,
) -> ResolvedService:
    """Resolve the PostgreSQL to use, starting the embedded one if needed.

    Parameters:
      settings: ``database_url`` and ``data_dir`` are read.
      mode: see :data:`Mode`.
      port: TCP port for the embedded server; ``0`` picks a free one. By default the port of
        the previous run, else 15432, else a free one.
      database: created when missing on a default-port or embedded server.

    Raises:
      EmbeddedServiceError: in ``external`` mode with nothing configured or answering, or
        when the embedded server cannot start.
    """
    if mode != "embedded" and settings.database_url:
        return ResolvedService("postgres", settings.database_url, Origin.CONFIGURED)
    url = _default_port_postgres(mode, database) if mode != "embedded" else None
    if url is not None:
        return ResolvedService("postgres", url, Origin.DEFAULT_PORT)
    service = start_embedded_postgres(
        _service_dir(settings, "postgres"), port=port, database=database
    )
    return ResolvedService("postgres", service.url, Origin.EMBEDDED, service)


def _default_port_postgres(mode: Mode, database: str) -> str | None:
    """The URL of ``database`` (created when missing) on the PostgreSQL that answers on the
    default port; None when none answers, or, in ``auto`` mode, it has no pgvector (the
    embedded server, which has it, is preferred)."""
    user = os.environ.get("PGUSER", POSTGRES_SUPERUSER)
    try:
        usable = create_database(
            LOCALHOST,
            DEFAULT_POSTGRES_PORT,
            user,
            database,
            timeout=2,
            require_vector=mode == "auto",
        )
    except psycopg.Error as exc:
        problem = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        if mode == "external":
            raise EmbeddedServiceError(
                f"DATABASE_URL is not set and no usable PostgreSQL on "
                f"{LOCALHOST}:{DEFAULT_POSTGRES_PORT} ({problem}); set DATABASE_URL or "
                "allow the embedded PostgreSQL"
            ) from exc
        logger.info("no usable PostgreSQL on %s:%s (%s)", LOCALHOST, DEFAULT_POSTGRES_PORT, problem)
        return None
    if not usable:
        # Retrieval wants pgvector: prefer the embedded server, which has it.
        logger.info(
            "not using the PostgreSQL on %s:%s (no pgvector); starting the embedded one",
            LOCALHOST,
            DEFAULT_POSTGRES_PORT,
        )
        return None
    logger.info(
        "DATABASE_URL is not set; using the PostgreSQL that answers on %s:%s, database %r "
        "(set DATABASE_URL to choose another)",
        LOCALHOST,
        DEFAULT_POSTGRES_PORT,
        database,
    )
    return f"postgresql://{user}@{LOCALHOST}:{DEFAULT_POSTGRES_PORT}/{database}"


def _service_dir(settings: Settings, name: str) -> Path:
    return Path(settings.data_dir).expanduser().resolve() / name


@contextlib.contextmanager
def embedded_services(
    settings: Settings, *, mode: Mode = "auto"
) -> Iterator[tuple[ResolvedService, ResolvedService]]:
    """Resolve Redis and PostgreSQL for the duration of a ``with`` block, then stop them."""
    redis_service = ensure_redis(settings, mode=mode)
    try:
        postgres_service = ensure_postgres(settings, mode=mode)
        try:
            yield redis_service, postgres_service
        finally:
            postgres_service.stop()
    finally:
        redis_service.stop()
