"""A local server speaking PostHog's local-evaluation protocol (flag definitions poll).

References: PostHog, "Server-side local evaluation"
(https://posthog.com/docs/feature-flags/local-evaluation): the server SDKs poll the flag
definitions with a personal API key and evaluate them in process. The path is
``GET /flags/definitions?token=<project API key>&send_cohorts`` in the current Python SDK
(``posthog`` 7.x, ``Client._request_flag_definitions``), formerly
``GET /api/feature_flag/local_evaluation/?token=...&send_cohorts``; both are served.
``Authorization: Bearer <personal API key>``; a wrong key answers 401 with PostHog's
``{"type": "authentication_error", "code": "invalid_api_key", "detail": ...}``. The body is
``{"flags": [...], "group_type_mapping": {"0": "organization"}, "cohorts": {}}``, each flag
``{"id", "key", "active", "filters": {"groups": [{"properties": [...],
"rollout_percentage": ...}]}}`` as the feature flags API returns it, with an ``ETag`` (this
fake never answers 304: always the full body). Failures: ``fail(path, "500" | "429" |
"slow" | "truncated")`` from :class:`~testkit.fakes.protocol_server.ProtocolServer`.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable
from typing import Any

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request

DEFINITION_PATHS = ("/flags/definitions", "/api/feature_flag/local_evaluation")


def region_flag(key: str, regions: Iterable[str], *, flag_id: int = 1) -> dict[str, Any]:
    """A flag released at 100% to the given deployment regions (the seed's counter-cache
    rollout: "a release condition for one deployment region ... with no percentage cohort")."""
    return {
        "id": flag_id,
        "name": key,
        "key": key,
        "active": True,
        "deleted": False,
        "ensure_experience_continuity": False,
        "filters": {
            "groups": [
                {
                    "properties": [
                        {
                            "key": "region",
                            "type": "person",
                            "value": list(regions),
                            "operator": "exact",
                        }
                    ],
                    "rollout_percentage": 100,
                }
            ]
        },
    }


def organization_flag(
    key: str, organization_ids: Iterable[int], *, flag_id: int = 2
) -> dict[str, Any]:
    """A flag released to listed organizations (an org-gated rollout)."""
    flag = region_flag(key, [], flag_id=flag_id)
    flag["filters"]["groups"][0]["properties"] = [
        {
            "key": "organization_id",
            "type": "person",
            "value": [str(org) for org in organization_ids],
            "operator": "exact",
        }
    ]
    return flag


class PostHogServer(ProtocolServer):
    """PostHog's flag-definitions endpoint on 127.0.0.1.

    Parameters:
      project_api_key: the ``token`` query parameter the SDK sends.
      personal_api_key: the bearer key the poll must carry.
    """

    def __init__(
        self, project_api_key: str = "phc_test", personal_api_key: str = "phx_personal"
    ) -> None:
        super().__init__()
        self.project_api_key = project_api_key
        self.personal_api_key = personal_api_key
        self._flags: list[dict[str, Any]] = []
        self._flags_lock = threading.Lock()

    def set_flags(self, *flags: dict[str, Any]) -> None:
        """Replace the flag definitions the next poll returns."""
        with self._flags_lock:
            self._flags = [json.loads(json.dumps(flag)) for flag in flags]

    def polls(self) -> int:
        return sum(len(self.requests_to(path)) for path in DEFINITION_PATHS)

    def authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.personal_api_key}"

    def status_reply(self, status: int, message: str) -> Reply:
        if status == 401:
            return Reply(
                401,
                {
                    "type": "authentication_error",
                    "code": "invalid_api_key",
                    "detail": "Invalid personal API key.",
                    "attr": None,
                },
            )
        return Reply(status, {"type": "server_error", "code": str(status), "detail": message})

    def route(self, request: Request) -> Reply:
        path = request.path.rstrip("/")
        if request.method != "GET" or path not in DEFINITION_PATHS:
            return Reply(
                404, {"type": "invalid_request", "code": "not_found", "detail": "Not found."}
            )
        if request.param("token") != self.project_api_key:
            return Reply(
                401,
                {"type": "authentication_error", "code": "invalid_token", "detail": "bad token"},
            )
        with self._flags_lock:
            body = {
                "flags": self._flags,
                "group_type_mapping": {"0": "organization"},
                "cohorts": {},
            }
        etag = (
            '"' + hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()[:16] + '"'
        )
        return Reply(200, body, {"ETag": etag})
