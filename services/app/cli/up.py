"""``speedtier up``: the whole platform in one terminal, for local use and the demo.

Redis and PostgreSQL come from the configuration, else from what answers on their default
ports, else from embedded servers whose data lives under ``SPEEDTIER_DATA_DIR``
(see :mod:`services.app.embedded`). Migrations run, then the API, the scheduler and one worker pool
per tier run as children of a :class:`~services.app.supervisor.ProcessGroup`.
"""

from __future__ import annotations

import fcntl
import logging
import os
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import IO, TYPE_CHECKING, Any

import click

from services.app.embedded import (
    EmbeddedServiceError,
    Mode,
    Origin,
    ResolvedService,
    ensure_postgres,
    ensure_redis,
)
from services.app.namespace_claim import NamespaceClaim, NamespaceTaken
from services.app.supervisor import ProcessGroup, ProcessSpec
from shared import metrics, runtime_file
from shared.config import TIER_NAMES, Settings, load_settings
from shared.errors import SpeedtierError
from shared.redis_persistence import VolatileRedis, verify_redis_persistence

if TYPE_CHECKING:
    from services.app.demo.run import DemoThread

LABEL = "up"
# Every line is "<name> | <text>", names padded alike: the group's children and "up" itself.
_WIDTH = max(
    len(name) for name in (LABEL, "api", "scheduler", *(f"worker.{t}" for t in TIER_NAMES))
)


def register(main: click.Group) -> None:
    main.add_command(up)


@click.command("up")
@click.option("--host", default=None, help="API listen address [default: SPEEDTIER_API_HOST].")
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="API port [default: SPEEDTIER_API_PORT].",
)
@click.option(
    "--no-embedded",
    is_flag=True,
    help="Never start embedded Redis/PostgreSQL: use REDIS_URL/DATABASE_URL or what answers "
    "on the default ports, and fail if there is none.",
)
@click.option(
    "--embedded",
    "force_embedded",
    is_flag=True,
    help="Always start the embedded Redis/PostgreSQL, ignoring REDIS_URL/DATABASE_URL and "
    "whatever answers on the default ports.",
)
@click.option(
    "--demo",
    is_flag=True,
    help="Once the API is ready, ingest the bundled sample knowledge base through it and "
    "search it (services/app/demo); the system keeps running afterwards. Lets this run's "
    "crawler fetch private addresses (the sample website is on 127.0.0.1).",
)
def up(
    host: str | None, port: int | None, no_embedded: bool, force_embedded: bool, demo: bool
) -> None:
    """Run the API, the scheduler and a worker per tier, on embedded Redis/PostgreSQL if needed.

    Ctrl-C (or SIGTERM) stops everything: children get SIGTERM and the drain period, embedded
    servers are shut down last, and their data is kept.
    """
    if no_embedded and force_embedded:
        raise click.UsageError("--embedded and --no-embedded exclude each other")
    _configure_logging()
    # The local all-in-one: it runs as development, like every child it starts (an unset
    # SPEEDTIER_ENV means production, which `up`'s embedded, volatile Redis is not).
    settings = load_settings(environment="development")
    mode: Mode = "external" if no_embedded else "embedded" if force_embedded else "auto"
    code = run_up(
        settings,
        host=host or settings.api_host,
        port=port or settings.api_port,
        mode=mode,
        demo=demo,
    )
    sys.exit(code)


def run_up(
    settings: Settings, *, host: str, port: int, mode: Mode = "auto", demo: bool = False
) -> int:
    """Resolve the services, migrate, run the processes until stopped; the exit status.

    With ``demo``, the children may crawl private addresses, and the demo runs in a thread
    once the API answers (:class:`services.app.demo.run.DemoThread`).
    """
    previous_term = signal.signal(signal.SIGTERM, _interrupt)  # until the group takes over
    services: list[ResolvedService] = []
    lock: IO[bytes] | None = None
    claim: NamespaceClaim | None = None
    try:
        lock = hold_data_dir(settings.data_dir)
        services.append(ensure_redis(settings, mode=mode))
        services.append(ensure_postgres(settings, mode=mode))
        redis_service, postgres_service = services
        namespace = redis_namespace(settings, redis_service)
        _say(f"Redis       {redis_service.describe()}, key namespace {namespace!r}")
        _say(f"PostgreSQL  {postgres_service.describe()}")
        claim = NamespaceClaim(redis_service.url, namespace, settings.data_dir)
        claim.acquire()
        verify_redis_persistence(settings.model_copy(update={"redis_url": redis_service.url}))
        _migrate(postgres_service.url)
        return _run_processes(
            settings, redis_service.url, postgres_service.url, namespace, host, port, demo
        )
    except (EmbeddedServiceError, DataDirInUse, NamespaceTaken, VolatileRedis) as exc:
        _say(f"error: {exc}")
        return 1
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    finally:
        runtime_file.remove(settings.data_dir)
        if claim is not None:
            claim.release()
        if lock is not None:
            lock.close()
        _stop_services(services, previous_term)


def _run_processes(
    settings: Settings,
    redis_url: str,
    database_url: str,
    namespace: str,
    host: str,
    port: int,
    demo: bool,
) -> int:
    """Run the process group (and the demo) on the resolved services until it stops."""
    group = ProcessGroup(
        process_specs(
            redis_url,
            database_url,
            host=host,
            port=port,
            allow_private_crawl=demo,
            redis_namespace=namespace,
            metrics_dir=str(metrics.use_directory(Path(settings.data_dir) / "metrics", wipe=True)),
        ),
        grace_seconds=settings.worker_drain_seconds + 5,
        label=LABEL,
    )
    with group.handle_signals():
        group.start()
        runtime_file.write(
            settings.data_dir,
            redis_url=redis_url,
            database_url=database_url,
            redis_namespace=namespace,
            environment=settings.environment,
        )
        _say(f"API         http://{host}:{port}  (Ctrl-C stops everything)")
        _say("other speedtier commands run from this folder use these services")
        running_demo = _start_demo(settings, group, host, port) if demo else None
        try:
            return group.wait()
        finally:
            if running_demo is not None:
                running_demo.stop()


def _stop_services(services: list[ResolvedService], previous_term: Any) -> None:
    """Stop the servers ``up`` started, last first; a second Ctrl-C cannot cut it short."""
    previous_int = signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        for service in reversed(services):
            service.stop()
    finally:
        signal.signal(signal.SIGINT, previous_int)
        signal.signal(signal.SIGTERM, previous_term)


def process_specs(
    redis_url: str,
    database_url: str,
    *,
    host: str,
    port: int,
    allow_private_crawl: bool = False,
    redis_namespace: str | None = None,
    metrics_dir: str | None = None,
) -> list[ProcessSpec]:
    """The children of ``speedtier up``, each run as ``python -m services.app.cli ...``.

    ``allow_private_crawl`` (the demo) lets their crawler fetch loopback and private
    addresses, which the SSRF guard refuses otherwise. ``metrics_dir``: one
    ``PROMETHEUS_MULTIPROC_DIR`` for every child, so the API's ``/metrics`` shows the
    workers' and the scheduler's counts too (their own ports are off: they would collide).
    """
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_ENV": "development",
        "SPEEDTIER_METRICS_PORT": "0",
    }
    if metrics_dir is not None:
        env["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    if redis_namespace is not None:
        env["SPEEDTIER_REDIS_NAMESPACE"] = redis_namespace
    if allow_private_crawl:
        env["SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS"] = "true"
        env["SPEEDTIER_CRAWL_PRIVATE_NETWORKS_ACKNOWLEDGED"] = "true"
    cli = [sys.executable, "-m", "services.app.cli"]
    specs = [
        ProcessSpec("api", [*cli, "api", "--host", host, "--port", str(port)], env),
        ProcessSpec("scheduler", [*cli, "scheduler"], env),
    ]
    specs += [
        ProcessSpec(f"worker.{tier}", [*cli, "worker", "--tier", tier], env) for tier in TIER_NAMES
    ]
    return specs


class DataDirInUse(SpeedtierError, RuntimeError):
    """Another ``speedtier up`` runs from the same data directory."""


def hold_data_dir(data_dir: str) -> IO[bytes]:
    """Lock ``data_dir`` for this ``up`` (the kernel releases the lock when we die).

    Raises:
      DataDirInUse: another ``speedtier up`` holds it.
    """
    directory = Path(data_dir).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    lock = (directory / "up.lock").open("wb")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        running = runtime_file.read(data_dir)
        raise DataDirInUse(
            f"another `speedtier up` is already running from {directory}"
            + (f" (Redis {running['redis_url']})" if running else "")
            + "; stop it first, or give this one its own SPEEDTIER_DATA_DIR"
        ) from None
    return lock


def redis_namespace(settings: Settings, redis_service: ResolvedService) -> str:
    """The key namespace of this ``up``'s processes.

    ``SPEEDTIER_REDIS_NAMESPACE`` when set. An embedded Redis belongs to this data directory
    alone, so the default serves. Any other Redis (configured, or found on 6379) may be
    shared with another checkout's ``up``: the namespace is then this data directory's own,
    so neither consumes the other's jobs (which would run against the other's database) nor
    takes its scheduler's leader lock.
    """
    if "redis_namespace" in settings.model_fields_set or redis_service.origin is Origin.EMBEDDED:
        return settings.redis_namespace
    return runtime_file.namespace_for(settings.data_dir, prefix=settings.redis_namespace)


def _start_demo(settings: Settings, group: ProcessGroup, host: str, port: int) -> DemoThread:
    from services.app.demo.run import DemoThread

    _say(
        "demo: this run's processes have SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true, so the "
        "crawler may fetch the sample website on 127.0.0.1 (its SSRF guard refuses private "
        "addresses otherwise); the demo starts once the API is ready"
    )
    client_host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    token = settings.internal_api_token
    return DemoThread(
        f"http://{client_host}:{port}",
        internal_token=token.get_secret_value().strip() or None if token else None,
        say=lambda text: group.emit("demo", text),
        state_dir=Path(settings.data_dir).resolve(),
    ).start()


def _migrate(database_url: str) -> None:
    from shared.db.migrate import upgrade  # written alongside; imported only when needed

    _say("running migrations")
    upgrade(database_url)
    _say("migrations done")


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _say(text: str) -> None:
    click.echo(f"{LABEL.ljust(_WIDTH)} | {text}")


def _configure_logging() -> None:
    root = logging.getLogger()
    if not root.handlers:
        logging.basicConfig(level=logging.INFO, format=f"{LABEL.ljust(_WIDTH)} | %(message)s")
