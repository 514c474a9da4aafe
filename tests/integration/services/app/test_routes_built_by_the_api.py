"""The products' routes are built when the API's app is made, not at bootstrap: a worker or
the scheduler (which bootstrap the same platform) never imports the routes nor Flask,
werkzeug and jinja2 (about 7 MiB of every worker process), and the API still serves every
product's blueprint."""

from __future__ import annotations

import textwrap

from tests.fresh_process import printed_by

LOADED = "print(*[name in sys.modules for name in ('flask', 'werkzeug', 'jinja2')])"


def test_bootstrap_leaves_flask_out_and_the_app_serves_every_product(
    redis_url: str, database_url: str, namespace: str
) -> None:
    # Given a fresh process configured as a deployed worker is
    env = {
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ALLOW_VOLATILE_REDIS": "true",
    }
    # When it bootstraps the platform (every product registered), then makes the API's app
    words = printed_by(
        textwrap.dedent(
            f"""
            import sys
            from services.app.bootstrap import bootstrap
            platform = bootstrap(component="worker-fast")
            {LOADED}
            from services.app.api import create_app
            app = create_app(platform, warn_open=False)
            {LOADED}
            print(*sorted(app.blueprints))
            print(platform.blueprints() is platform.blueprints())
            """
        ),
        env,
    )
    # Then bootstrap loaded none of Flask's stack; the app did, with each product's routes
    assert words[:6] == ["False"] * 3 + ["True"] * 3
    # (the blueprints the API served when bootstrap built them: the platform's and every
    # product's)
    assert words[6:-1] == [
        "conversation_summaries",
        "conversation_uploads",
        "counter_caches",
        "daily_agent_evaluation_reports",
        "dashboard",
        "health",
        "ingestion",
        "jobs",
        "knowledge_base_sync",
        "metrics",
        "openapi",
        "provider_conversation_sync_completions",
        "super_webhooks",
    ]
    # and the blueprints are built once per platform
    assert words[-1] == "True"
