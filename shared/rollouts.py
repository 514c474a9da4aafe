"""Rollout flags: PostHog feature flags evaluated locally, per organization and region.

The seeds gate new behaviour per organization with PostHog flags (``api2_...``) and take a
deployment region as a release condition (``region = eu-central-1``). This module polls the
flag definitions with the official ``posthog`` SDK (local evaluation: the personal API key
reads ``/flags/definitions``, formerly ``/api/feature_flag/local_evaluation``, every
``SPEEDTIER_POSTHOG_POLL_SECONDS``) and evaluates them here, never calling PostHog per job.

It fails closed: a flag is **off** when PostHog is not configured (no personal API key), when
the definitions could never be loaded, when the last :data:`UNREACHABLE_AFTER_FAILED_POLLS`
polls in a row failed (PostHog unreachable: one failed poll is a blip and keeps the last
definitions), when the flag is unknown or inactive, or when evaluation raises. Callers that
must not switch engines mid-job keep their first answer on the job record.

An organization is evaluated as PostHog person ``organization:<id>`` and as group
``organization`` ``<id>``, both with the properties ``organization_id`` and ``region``, so a
flag's release condition may be written on either.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Final

log = logging.getLogger(__name__)

#: Every rollout flag seed 001 names (one place; ``speedtier maintenance check`` and the
#: reports' and uploads' families read them through ``Flags.rollout``).
DAILY_AGENT_EVALUATION_REPORT_COLLECT: Final = "api2_daily_agent_evaluation_report_collect"
COUNTER_CACHE_NATIVE_REPAIRS: Final = "api2_counter_cache_native_repairs"
CONVERSATION_UPLOAD_SYNC_COMPLETION: Final = "api2_conversation_upload_sync_completion"
CONVERSATION_UPLOAD_DURABLE_DELIVERY: Final = "api2_conversation_upload_durable_delivery"
CONVERSATION_UPLOAD_NATIVE_PROCESSING: Final = "api2_conversation_upload_native_processing"
#: Shadow runs (not a seed flag): the native report collector runs read-only beside Rails'.
DAILY_AGENT_EVALUATION_REPORT_COLLECT_SHADOW: Final = (
    "api2_daily_agent_evaluation_report_collect_shadow"
)
#: Shadow runs (not a seed flag): counter parity measured around Rails' ``#fix``.
COUNTER_CACHE_NATIVE_REPAIRS_SHADOW: Final = "api2_counter_cache_native_repairs_shadow"
#: Shadow runs (not a seed flag): native reading of Rails-processed uploads.
CONVERSATION_UPLOAD_NATIVE_PROCESSING_SHADOW: Final = (
    "api2_conversation_upload_native_processing_shadow"
)
ROLLOUT_FLAGS: Final = (
    DAILY_AGENT_EVALUATION_REPORT_COLLECT,
    COUNTER_CACHE_NATIVE_REPAIRS,
    CONVERSATION_UPLOAD_SYNC_COMPLETION,
    CONVERSATION_UPLOAD_DURABLE_DELIVERY,
    CONVERSATION_UPLOAD_NATIVE_PROCESSING,
    DAILY_AGENT_EVALUATION_REPORT_COLLECT_SHADOW,
    COUNTER_CACHE_NATIVE_REPAIRS_SHADOW,
    CONVERSATION_UPLOAD_NATIVE_PROCESSING_SHADOW,
)
ORGANIZATION_GROUP: Final = "organization"
#: Consecutive failed definition polls after which PostHog counts as unreachable (flags off).
UNREACHABLE_AFTER_FAILED_POLLS: Final = 2


def _tracking_client(project_api_key: str, **options: Any) -> Any:
    """The SDK's client, counting consecutive failed definition polls.

    The SDK swallows a failed poll (keeping the last definitions); a poll succeeded when it
    published its generation (a 200, or a 304 for the definitions held).
    """
    from posthog import Posthog

    class TrackingPosthog(Posthog):
        failed_polls = 0

        def _fetch_feature_flags_from_api(self) -> None:
            super()._fetch_feature_flags_from_api()  # type: ignore[no-untyped-call]
            published = getattr(self, "_flag_definition_published_generation", None)
            fetched = getattr(self, "_flag_definition_fetch_generation", None)
            self.failed_polls = 0 if published == fetched else self.failed_polls + 1

    return TrackingPosthog(project_api_key, **options)


class PostHogRollouts:
    """Local evaluation of PostHog flags; the SDK client is built on first use (so a process
    forked or spawned later polls from its own thread).

    Parameters:
      project_api_key: the project's API key (``phc_...``), the ``token`` of the poll.
      personal_api_key: a personal (or feature-flags secure) API key; None: every flag off.
      host: PostHog's URL.
      poll_seconds: how often the definitions are polled.
      region: the deployment region used when a caller gives none.
    """

    def __init__(
        self,
        *,
        project_api_key: str | None,
        personal_api_key: str | None,
        host: str,
        poll_seconds: float = 30.0,
        region: str | None = None,
    ) -> None:
        self.project_api_key = project_api_key
        self.personal_api_key = personal_api_key
        self.host = host
        self.poll_seconds = poll_seconds
        self.region = region
        self._client: Any = None
        self._lock = threading.Lock()

    @property
    def configured(self) -> bool:
        return bool(self.personal_api_key and self.project_api_key)

    def _sdk(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = _tracking_client(
                    self.project_api_key or "",
                    host=self.host,
                    secret_key=self.personal_api_key,  # a personal API key works here
                    poll_interval=max(1, round(self.poll_seconds)),
                    send=False,  # evaluation only: no events leave this process
                    disable_geoip=True,
                    feature_flags_request_timeout_seconds=3,
                )
                self._client.load_feature_flags()
            return self._client

    def is_enabled(self, name: str, *, organization_id: int, region: str | None = None) -> bool:
        """Whether flag ``name`` is on for the organization in ``region`` (default: this
        deployment's). False whenever it cannot be told (the module's fail-closed rules)."""
        if not self.configured:
            return False
        region = region or self.region
        properties: dict[str, Any] = {"organization_id": str(organization_id)}
        if region:
            properties["region"] = region
        try:
            client = self._sdk()
            if client.failed_polls >= UNREACHABLE_AFTER_FAILED_POLLS:
                log.warning(
                    "PostHog unreachable (%d failed polls): %s off", client.failed_polls, name
                )
                return False
            evaluated = client.evaluate_flags(
                f"organization:{organization_id}",
                groups={ORGANIZATION_GROUP: str(organization_id)},
                person_properties=properties,
                group_properties={ORGANIZATION_GROUP: properties},
                only_evaluate_locally=True,
                flag_keys=[name],
            )
            return bool(
                evaluated.is_enabled(name, default_value=False, send_feature_flag_events=False)
            )
        except Exception as exc:
            log.warning("rollout flag %s unreadable (%s): off", name, exc)
            return False

    def reload(self) -> None:
        """Poll the definitions now (tests, and the CLI check)."""
        if self.configured:
            self._sdk().load_feature_flags()

    def close(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.shutdown()
