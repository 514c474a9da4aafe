"""``python -m services.app.demo``: run the demo against a system that is already running.

``speedtier up --demo`` runs it for you; this entry point is for a second run against the
same system (it reuses the knowledge base and replaces the documents by name). The system's
workers must have been started with ``SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true`` (as
``up --demo`` does) for the loopback website's pages to be fetched.
"""

from __future__ import annotations

import sys

import click

from services.app.demo.client import ApiError
from services.app.demo.run import run_demo
from shared.config import load_settings


@click.command("demo")
@click.option(
    "--api-url",
    default=None,
    help="The running API [default: http://SPEEDTIER_API_HOST:SPEEDTIER_API_PORT].",
)
def main(api_url: str | None) -> None:
    """Ingest the sample knowledge base through the API, then search it."""
    settings = load_settings(environment="development")  # a local client of a local system
    host = "127.0.0.1" if settings.api_host in ("0.0.0.0", "::") else settings.api_host
    token = settings.internal_api_token
    try:
        result = run_demo(
            api_url or f"http://{host}:{settings.api_port}",
            internal_token=token.get_secret_value() if token else None,
            say=lambda line: click.echo(line),
            show_progress=True,
        )
    except (ApiError, TimeoutError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    sys.exit(0 if result.ready == len(result.documents) else 1)


if __name__ == "__main__":
    main()
