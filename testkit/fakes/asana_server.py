"""A local HTTP server speaking the Asana REST API: workspaces, projects, tasks, stories.

Checked against Asana's published reference:

* https://developers.asana.com/docs/pagination (``limit`` 1..100, ``offset``; a paginated
  answer carries ``next_page: {offset, path, uri}``, null on the last page)
* https://developers.asana.com/reference/gettasks (``GET /tasks?project=``, ``opt_fields``,
  ``modified_since``), https://developers.asana.com/reference/gettask,
  https://developers.asana.com/reference/getstoriesfortask (``type``: ``comment`` or
  ``system``, ``text``, ``created_by``)
* https://developers.asana.com/reference/getworkspaces,
  https://developers.asana.com/reference/getprojects (``workspace``)
* https://developers.asana.com/docs/errors and https://developers.asana.com/docs/rate-limits
  (``{"errors": [{"message": ...}]}``; 429 with ``Retry-After`` seconds; 401, 403, 404)

Every answer is ``{"data": ...}``; ``opt_fields`` is honoured for the listed fields (plus
``gid`` and ``resource_type``). Authorization: ``Authorization: Bearer <token>``, else 401.
Rate limit: ``rate_limit=N`` requests per ``rate_window`` seconds, then 429 + Retry-After.

Large data sets: ``server.populate("Roadmap", tasks=1000, comments=1)``; :meth:`touch` edits.
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request, iso

PREFIX = "/api/1.0"
WORKSPACE = "1100000000000001"
BASE_TIME = 1_767_225_600


@dataclass
class FakeTask:
    gid: str
    name: str
    notes: str
    modified: float
    project: str
    comments: list[str] = field(default_factory=list)

    def resource(self) -> dict[str, Any]:
        return {
            "gid": self.gid,
            "resource_type": "task",
            "name": self.name,
            "notes": self.notes,
            "modified_at": iso(self.modified),
            "permalink_url": f"https://app.asana.com/0/{self.project}/{self.gid}",
            "parent": None,
        }


class AsanaServer(ProtocolServer):
    def __init__(
        self, token: str, *, rate_limit: int | None = None, rate_window: float = 60.0
    ) -> None:
        super().__init__()
        self.token = token
        self.projects: dict[str, str] = {}
        self.tasks: dict[str, FakeTask] = {}
        self.rate_limit = rate_limit
        self.rate_window = rate_window
        self._window: tuple[float, int] = (0.0, 0)
        self._data_lock = threading.Lock()
        self._counter = 0

    def populate(self, name: str, tasks: int, comments: int = 0) -> str:
        with self._data_lock:
            project = f"12{len(self.projects) + 1:014d}"
            self.projects[project] = name
            for i in range(tasks):
                self._counter += 1
                gid = f"13{self._counter:014d}"
                self.tasks[gid] = FakeTask(
                    gid,
                    f"Task {i}",
                    f"Notes of task {i}.",
                    BASE_TIME + self._counter,
                    project,
                    [f"Comment {c} on task {i}" for c in range(comments)],
                )
            return project

    def touch(self, gid: str, notes: str) -> None:
        with self._data_lock:
            task = self.tasks[gid]
            task.notes = notes
            task.modified = max(task.modified + 1, time.time())

    def authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}"

    def status_reply(self, status: int, message: str) -> Reply:
        return Reply(status, {"errors": [{"message": message}]})

    def route(self, request: Request) -> Reply:
        if self._over_limit():
            reply = self.status_reply(429, "You have made too many requests recently.")
            return Reply(429, reply.body, {"Retry-After": str(self._retry())})
        parts = request.path.removeprefix(PREFIX).strip("/").split("/")
        if request.method != "GET" or not request.path.startswith(PREFIX):
            return self.status_reply(404, "Not found")
        if parts == ["workspaces"]:
            rows = [{"gid": WORKSPACE, "resource_type": "workspace", "name": "Acme"}]
            return self._page(request, rows)
        if parts == ["projects"]:
            rows = [
                {"gid": gid, "resource_type": "project", "name": name}
                for gid, name in sorted(self.projects.items())
            ]
            return self._page(request, rows if request.param("workspace") == WORKSPACE else [])
        if parts == ["tasks"]:
            project = request.param("project") or ""
            if project not in self.projects:
                return self.status_reply(404, "project: Unknown object")
            since = request.param("modified_since")
            with self._data_lock:
                chosen = [
                    t.resource()
                    for t in self.tasks.values()
                    if t.project == project and (not since or iso(t.modified) >= since)
                ]
            return self._page(request, chosen)
        if len(parts) >= 2 and parts[0] == "tasks":
            task = self.tasks.get(parts[1])
            if task is None:
                return self.status_reply(404, f"task: Unknown object: {parts[1]}")
            if len(parts) == 2:
                return Reply(200, {"data": _only(task.resource(), request.param("opt_fields"))})
            if parts[2:] == ["stories"]:
                stories = [
                    {
                        "gid": f"{task.gid}{n:03d}",
                        "resource_type": "story",
                        "type": "comment",
                        "text": text,
                        "created_by": {"gid": "1", "name": "Ada"},
                    }
                    for n, text in enumerate(task.comments)
                ]
                stories.insert(0, {"gid": f"{task.gid}999", "type": "system", "text": "added"})
                return self._page(request, stories)
        return self.status_reply(404, "Not found")

    def _page(self, request: Request, rows: list[dict[str, Any]]) -> Reply:
        limit = int(request.param("limit") or 0)
        fields = request.param("opt_fields")
        if not limit:  # unpaginated (grandfathered endpoints)
            return Reply(200, {"data": [_only(r, fields) for r in rows]})
        if not 1 <= limit <= 100:
            return self.status_reply(400, "limit: Must be between 1 and 100")
        offset = int(request.param("offset") or 0)
        body: dict[str, Any] = {"data": [_only(r, fields) for r in rows[offset : offset + limit]]}
        if offset + limit < len(rows):
            token = str(offset + limit)
            query = {k: v[0] for k, v in request.query.items() if k != "offset"}
            path = f"{request.path.removeprefix(PREFIX)}?{urlencode({**query, 'offset': token})}"
            body["next_page"] = {
                "offset": token,
                "path": path,
                "uri": f"{self.base_url}{PREFIX}{path}",
            }
        else:
            body["next_page"] = None
        return Reply(200, body)

    def _over_limit(self) -> bool:
        if self.rate_limit is None:
            return False
        with self._data_lock:
            start, count = self._window
            now = time.monotonic()
            if now - start >= self.rate_window:
                start, count = now, 0
            self._window = (start, count + 1)
            return count + 1 > self.rate_limit

    def _retry(self) -> int:
        return max(1, math.ceil(self._window[0] + self.rate_window - time.monotonic()))


def _only(row: dict[str, Any], fields: str | None) -> dict[str, Any]:
    if not fields:
        return {k: row[k] for k in ("gid", "resource_type", "name") if k in row}
    wanted = {f.split(".")[0] for f in fields.split(",")} | {"gid", "resource_type"}
    return {k: v for k, v in row.items() if k in wanted}
