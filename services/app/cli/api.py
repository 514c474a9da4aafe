"""``speedtier api``: the internal API under gunicorn."""

from __future__ import annotations

import tempfile
from typing import Any

import click
from flask import Flask
from gunicorn.app.base import BaseApplication

from services.app.api import create_app
from services.app.api.access_log import ACCESS_LOG_FORMAT, AccessLog
from services.app.api.gunicorn_worker import WORKER_CLASS
from services.app.api.worker_listeners import WorkerListeners
from services.app.internal_token import MissingToken, api_token, warn_if_open
from shared import metrics
from shared.config import load_settings
from shared.observability import configure_logging
from shared.redis_persistence import verify_redis_persistence
from shared.runtime_file import resolve
from tiers.gc_tuning import tune_worker_collector

#: Seconds a worker gets to finish its requests after SIGTERM (under the chart's 30 s).
GRACEFUL_TIMEOUT_SECONDS = 25
#: Seconds of silence after which gunicorn restarts a worker.
WORKER_TIMEOUT_SECONDS = 30
THREADS_PER_WORKER = 4


class ApiServer(BaseApplication):  # type: ignore[misc]
    """gunicorn, configured in code; each worker builds its own app (and platform)."""

    def __init__(self, options: dict[str, Any]) -> None:
        self.options = options
        super().__init__()

    def load_config(self) -> None:
        for key, value in self.options.items():
            self.cfg.set(key, value)

    def load(self) -> Flask:
        return create_app(warn_open=False)  # `speedtier api` warned once, not per worker


def server_options(
    host: str,
    port: int,
    workers: int,
    log_level: str,
    threads: int = THREADS_PER_WORKER,
    access_log: bool = True,
) -> dict[str, Any]:
    listeners = WorkerListeners()
    return {
        "bind": f"{host}:{port}",
        "workers": workers,
        "worker_class": WORKER_CLASS,  # gthread, answering gunicorn's own refusals in JSON
        "threads": threads,
        "graceful_timeout": GRACEFUL_TIMEOUT_SECONDS,
        "timeout": WORKER_TIMEOUT_SECONDS,
        # A line per request on stdout; it costs about 0.08 ms of CPU per request (a bare
        # route under gunicorn: 0.38 ms with it, 0.30 ms without), hence --no-access-log.
        "accesslog": "-" if access_log else None,
        "access_log_format": ACCESS_LOG_FORMAT,  # no credential, escaped (access_log)
        "logger_class": AccessLog,
        "errorlog": "-",
        "loglevel": log_level.lower(),
        "proc_name": "speedtier-api",
        # A dead worker's live values leave the sums /metrics reports.
        "child_exit": lambda _server, worker: metrics.mark_dead(worker.pid),
        # A socket per worker: the kernel deals connections out instead of the first worker
        # awake taking them all (services.app.api.worker_listeners).
        "when_ready": listeners.release,
        "post_fork": listeners.open_own,
        # The app is built: freeze what start-up made, so a full collection no longer walks
        # it (a 75 ms pause of every thread of the worker) (tiers.gc_tuning).
        "post_worker_init": lambda _worker: tune_worker_collector(),
    }


@click.command("api")
@click.option("--host", help="Listen address [default: SPEEDTIER_API_HOST].")
@click.option("--port", type=click.IntRange(1, 65535), help="[default: SPEEDTIER_API_PORT]")
@click.option("--workers", type=click.IntRange(min=1), help="[default: SPEEDTIER_API_WORKERS]")
@click.option(
    "--threads",
    type=click.IntRange(min=1),
    default=THREADS_PER_WORKER,
    show_default=True,
    help="Request threads per worker.",
)
@click.option(
    "--access-log/--no-access-log",
    default=True,
    show_default=True,
    help="A line per request on stdout.",
)
def api(
    host: str | None, port: int | None, workers: int | None, threads: int, access_log: bool
) -> None:
    """Serve the internal API with gunicorn until SIGTERM (then drain for 25 s)."""
    settings = load_settings()
    try:
        api_token(settings)  # fail here, clearly, rather than in every worker
    except MissingToken as exc:
        raise click.ClickException(str(exc)) from None
    configure_logging(settings.log_level, json_lines=settings.json_logs)
    verify_redis_persistence(resolve(settings))  # here, once, rather than in every worker
    warn_if_open(settings)  # likewise
    if not metrics.directory():  # the workers' values are summed at each scrape
        metrics.use_directory(tempfile.mkdtemp(prefix="speedtier-metrics-"))
    options = server_options(
        host or settings.api_host,
        port or settings.api_port,
        workers or settings.api_workers,
        settings.log_level,
        threads,
        access_log,
    )
    ApiServer(options).run()


def register(main: click.Group) -> None:
    main.add_command(api)
