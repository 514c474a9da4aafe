"""``GET /metrics``: Prometheus exposition of the platform's metrics.

Open, like the probes: the labels are bounded (family, tier, outcome, route; never an
organization or a job id), and the port is reached only inside the cluster (the chart's
Service is ClusterIP). Under gunicorn every worker's values are summed
(``PROMETHEUS_MULTIPROC_DIR``); queue depth is read from Redis at each scrape.
"""

from __future__ import annotations

from typing import cast

from flask import Blueprint, Response

from services.apikit.context import current_platform
from services.apikit.openapi import describe
from services.app.api.platform_gauges import PostgresqlGauge, TickGauges
from services.app.bootstrap import Platform
from shared import metrics
from tiers.queue_depth import QueueDepthCollector

blueprint = Blueprint("metrics", __name__)


@blueprint.get("/metrics")
@describe(
    "Prometheus metrics (text exposition format)",
    description="Job counts, run times, window delays, group parking, enqueue latency (summed "
    "over the API's and, with a shared PROMETHEUS_MULTIPROC_DIR, the workers' processes) and "
    "queue depth per tier read from its Redis (`speedtier_queue_depth_up` is 0 when one did "
    "not answer), the oldest waiting message's age per queue, each tier's Redis memory, each "
    "tick's due and last emitted fire times, and `speedtier_postgresql_up`.",
    responses={200: ("The exposition text.", None)},
    needs_services=False,
)
def scrape() -> Response:
    platform = cast(Platform, current_platform())
    depth = QueueDepthCollector(platform.brokers, platform.router.registry.queues_of_tier)
    ticks = TickGauges(platform)
    database = PostgresqlGauge(platform.settings.database_url)
    body, content_type = metrics.render([depth, ticks, database])
    return Response(body, content_type=content_type)
