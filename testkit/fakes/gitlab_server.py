"""A local HTTP server speaking the GitLab REST API v4: projects, issues, merge requests, notes.

Checked against GitLab's published reference:

* https://docs.gitlab.com/api/issues/#list-project-issues (``state``, ``scope``,
  ``order_by=updated_at``, ``sort=asc|desc``, ``updated_after`` = on or after, ``iid``)
* https://docs.gitlab.com/api/merge_requests/#list-project-merge-requests
* https://docs.gitlab.com/api/notes/ (``/issues/:iid/notes``, ``/merge_requests/:iid/notes``;
  ``system`` notes are events such as "changed the description")
* https://docs.gitlab.com/api/rest/#pagination (``page``, ``per_page`` <= 100; headers
  ``x-page``, ``x-per-page``, ``x-next-page`` (empty on the last page), ``x-prev-page``,
  ``x-total``, ``x-total-pages``, and ``Link`` with ``rel="next|prev|first|last"``)
* https://docs.gitlab.com/user/gitlab_com/#rate-limits-on-gitlabcom and
  https://docs.gitlab.com/administration/settings/user_and_ip_rate_limits/ (``RateLimit-Limit``,
  ``RateLimit-Observed``, ``RateLimit-Remaining``, ``RateLimit-Reset`` (epoch seconds),
  ``RateLimit-ResetTime``; over the limit: 429, ``Retry-After``, body ``Retry later``)
* errors: ``{"message": "401 Unauthorized"}``, ``{"message": "404 Project Not Found"}``
* https://docs.gitlab.com/user/project/integrations/webhooks/ (``X-Gitlab-Token`` is the
  secret itself, ``X-Gitlab-Event``; "Delivery headers": ``Idempotency-Key`` "remains
  consistent across webhook retries", ``X-Gitlab-Event-UUID`` is shared by recursive
  webhooks, ``X-Gitlab-Webhook-UUID`` unique per webhook): :func:`signed_delivery` builds one.

Authorization: ``PRIVATE-TOKEN: <token>`` or ``Authorization: Bearer <token>``, else 401.
Failures: :meth:`ProtocolServer.fail` (404, 429, 500, truncated, slow), ``rate_limit=N``
requests per ``rate_window`` seconds.

Large data sets are cheap: ``server.populate("group/big", issues=1500, merge_requests=500,
notes=1)`` builds them in memory in milliseconds, ``updated_at`` a minute apart; :meth:`touch`
edits one afterwards.
"""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote, urlencode

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request

MAX_PER_PAGE = 100
BASE_TIME = 1_767_225_600  # 2026-01-01T00:00:00Z
KINDS = ("issues", "merge_requests")


def stamp(epoch: float) -> str:
    seconds, millis = divmod(round(epoch * 1000), 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis:03d}Z"


def _parse(value: str) -> float:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


@dataclass
class FakeNote:
    id: int
    body: str
    system: bool
    created_at: float
    updated_at: float


@dataclass
class FakeItem:
    """An issue or a merge request."""

    id: int
    iid: int
    title: str
    description: str
    created_at: float
    updated_at: float
    state: str = "opened"
    notes: list[FakeNote] = field(default_factory=list)


@dataclass
class FakeProject:
    id: int
    path: str
    items: dict[str, dict[int, FakeItem]] = field(default_factory=lambda: {k: {} for k in KINDS})


class GitlabServer(ProtocolServer):
    """GitLab's REST API over in-memory projects."""

    def __init__(
        self,
        token: str,
        *,
        max_per_page: int = MAX_PER_PAGE,
        rate_limit: int | None = None,
        rate_window: float = 60.0,
    ) -> None:
        super().__init__()
        self.token = token
        self.max_per_page = max_per_page
        self.projects: dict[int, FakeProject] = {}
        self.rate_limit = rate_limit
        self.rate_window = rate_window
        self._observed = 0
        self._window_end = time.time() + rate_window
        self._ids = itertools.count(500)
        self._data_lock = threading.RLock()

    # -- data ------------------------------------------------------------------------

    def project(self, path: str) -> FakeProject:
        with self._data_lock:
            for project in self.projects.values():
                if project.path == path:
                    return project
            made = FakeProject(len(self.projects) + 1, path)
            self.projects[made.id] = made
            return made

    def add(
        self,
        path: str,
        kind: str,
        title: str,
        description: str = "",
        *,
        notes: list[str] | None = None,
        system_notes: list[str] | None = None,
        updated_at: float | None = None,
    ) -> FakeItem:
        project = self.project(path)
        with self._data_lock:
            table = project.items[kind]
            when = time.time() if updated_at is None else updated_at
            item = FakeItem(
                next(self._ids), max(table, default=0) + 1, title, description, when, when
            )
            item.notes = [FakeNote(next(self._ids), b, False, when, when) for b in notes or []]
            item.notes += [
                FakeNote(next(self._ids), b, True, when, when) for b in system_notes or []
            ]
            table[item.iid] = item
            return item

    def populate(
        self, path: str, *, issues: int, merge_requests: int = 0, notes: int = 0
    ) -> FakeProject:
        project = self.project(path)
        with self._data_lock:
            for kind, count in (("issues", issues), ("merge_requests", merge_requests)):
                table = project.items[kind]
                start = max(table, default=0)
                for iid in range(start + 1, start + count + 1):
                    when = BASE_TIME + 60 * iid + (0 if kind == "issues" else 30)
                    label = "Issue" if kind == "issues" else "Merge request"
                    item = FakeItem(
                        next(self._ids),
                        iid,
                        f"{label} {iid} of {path}",
                        f"{label} {iid} description in {path}.",
                        when,
                        when,
                    )
                    item.notes = [
                        FakeNote(next(self._ids), f"Note {n} on {iid}", False, when, when)
                        for n in range(notes)
                    ]
                    table[iid] = item
        return project

    def touch(self, path: str, kind: str, iid: int, *, description: str | None = None) -> FakeItem:
        with self._data_lock:
            item = self.project(path).items[kind][iid]
            item.updated_at = max(time.time(), item.updated_at + 0.001)
            if description is not None:
                item.description = description
            return item

    # -- protocol --------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        return request.headers.get("private-token") == self.token or (
            request.headers.get("authorization") == f"Bearer {self.token}"
        )

    def status_reply(self, status: int, message: str) -> Reply:
        if status == 429:
            return Reply(429, "Retry later\n", self._quota_headers())
        text = {401: "401 Unauthorized", 404: "404 Not found"}.get(status, f"{status} {message}")
        return Reply(status, {"message": text})

    def route(self, request: Request) -> Reply:
        with self._lock:
            now = time.time()
            if now >= self._window_end:
                self._observed, self._window_end = 0, now + self.rate_window
            self._observed += 1
            over = self.rate_limit is not None and self._observed > self.rate_limit
            headers = self._quota_headers()
        if over:
            return Reply(
                429,
                "Retry later\n",
                {**headers, "Retry-After": str(max(1, int(self._window_end - now)))},
            )
        reply = self._route(request)
        return Reply(reply.status, reply.body, {**headers, **reply.headers})

    def _quota_headers(self) -> dict[str, str]:
        limit = self.rate_limit if self.rate_limit is not None else 2000
        reset = int(self._window_end) + 1
        return {
            "RateLimit-Limit": str(limit),
            "RateLimit-Observed": str(self._observed),
            "RateLimit-Remaining": str(max(0, limit - self._observed)),
            "RateLimit-Reset": str(reset),
            "RateLimit-ResetTime": time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(reset)),
        }

    def _route(self, request: Request) -> Reply:
        if request.method != "GET" or not request.path.startswith("/api/v4/"):
            return self.status_reply(404, "Not found")
        parts = [unquote(p) for p in request.path[len("/api/v4/") :].split("/") if p]
        if parts == ["user"]:
            return Reply(200, {"id": 1, "username": "fake", "name": "Fake User"})
        if parts == ["projects"]:
            return self._page(
                request,
                [self._project_json(p) for p in sorted(self.projects.values(), key=lambda p: p.id)],
            )
        if len(parts) < 2 or parts[0] != "projects":
            return self.status_reply(404, "Not found")
        project = self._find_project(parts[1])
        if project is None:
            return Reply(404, {"message": "404 Project Not Found"})
        rest = parts[2:]
        if not rest:
            return Reply(200, self._project_json(project))
        kind = rest[0]
        if kind not in KINDS:
            return self.status_reply(404, "Not found")
        if len(rest) == 1:
            items = self._list(project, kind, request)
            return self._page(request, [self._item_json(project, kind, i) for i in items])
        if not rest[1].isdigit() or int(rest[1]) not in project.items[kind]:
            label = "Issue" if kind == "issues" else "Merge Request"
            return Reply(404, {"message": f"404 {label} Not Found"})
        item = project.items[kind][int(rest[1])]
        if len(rest) == 2:
            return Reply(200, self._item_json(project, kind, item))
        if rest[2:] == ["notes"]:
            notes = sorted(
                item.notes,
                key=lambda n: (n.created_at, n.id),
                reverse=request.param("sort", "desc") == "desc",
            )
            return self._page(request, [self._note_json(n) for n in notes])
        return self.status_reply(404, "Not found")

    def _find_project(self, ident: str) -> FakeProject | None:
        if ident.isdigit():
            return self.projects.get(int(ident))
        return next((p for p in self.projects.values() if p.path == ident), None)

    def _list(self, project: FakeProject, kind: str, request: Request) -> list[FakeItem]:
        state = request.param("state", "all")
        after = request.param("updated_after")
        floor = _parse(after) if after else None
        with self._data_lock:
            items = [
                i
                for i in project.items[kind].values()
                if state in ("all", i.state)
                and (floor is None or round(i.updated_at * 1000) >= round(floor * 1000))
            ]
        attr = (
            "updated_at"
            if request.param("order_by", "created_at") == "updated_at"
            else "created_at"
        )
        descending = request.param("sort", "desc") == "desc"
        items.sort(key=lambda i: (round(getattr(i, attr) * 1000), i.id), reverse=descending)
        return items

    def _page(self, request: Request, items: list[Any]) -> Reply:
        per_page = max(1, min(int(request.param("per_page", "20") or 20), self.max_per_page))
        page = max(1, int(request.param("page", "1") or 1))
        pages = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        links = [
            f'<{self._link(request, 1, per_page)}>; rel="first"',
            f'<{self._link(request, pages, per_page)}>; rel="last"',
        ]
        if page < pages:
            links.insert(0, f'<{self._link(request, page + 1, per_page)}>; rel="next"')
        if page > 1:
            links.insert(0, f'<{self._link(request, page - 1, per_page)}>; rel="prev"')
        headers = {
            "x-page": str(page),
            "x-per-page": str(per_page),
            "x-next-page": str(page + 1) if page < pages else "",
            "x-prev-page": str(page - 1) if page > 1 else "",
            "x-total": str(len(items)),
            "x-total-pages": str(pages),
            "Link": ", ".join(links),
        }
        return Reply(200, chunk, headers)

    def _link(self, request: Request, page: int, per_page: int) -> str:
        query = {k: v[0] for k, v in request.query.items()}
        query.update(page=str(page), per_page=str(per_page))
        return f"{self.base_url}{request.path}?{urlencode(query)}"

    # -- representations ---------------------------------------------------------------

    def _project_json(self, project: FakeProject) -> dict[str, Any]:
        name = project.path.rsplit("/", 1)[-1]
        return {
            "id": project.id,
            "name": name,
            "path": name,
            "path_with_namespace": project.path,
            "name_with_namespace": project.path.replace("/", " / "),
            "web_url": f"https://gitlab.example.com/{project.path}",
            "default_branch": "main",
        }

    def _item_json(self, project: FakeProject, kind: str, item: FakeItem) -> dict[str, Any]:
        web = "issues" if kind == "issues" else "merge_requests"
        body = {
            "id": item.id,
            "iid": item.iid,
            "project_id": project.id,
            "title": item.title,
            "description": item.description,
            "state": item.state,
            "created_at": stamp(item.created_at),
            "updated_at": stamp(item.updated_at),
            "author": {"id": 1, "username": "fake", "name": "Fake User"},
            "user_notes_count": sum(1 for n in item.notes if not n.system),
            "web_url": f"https://gitlab.example.com/{project.path}/-/{web}/{item.iid}",
            "references": {"short": ("#" if kind == "issues" else "!") + str(item.iid)},
        }
        if kind == "merge_requests":
            body.update(
                source_branch="topic",
                target_branch="main",
                draft=False,
                merge_status="can_be_merged",
            )
        return body

    def _note_json(self, note: FakeNote) -> dict[str, Any]:
        return {
            "id": note.id,
            "body": note.body,
            "system": note.system,
            "author": {"id": 2, "username": "reviewer", "name": "Reviewer"},
            "created_at": stamp(note.created_at),
            "updated_at": stamp(note.updated_at),
        }


def signed_delivery(
    event: str,
    payload: dict[str, Any],
    secret: str,
    *,
    delivery_id: str | None = None,
    chain_id: str | None = None,
) -> tuple[dict[str, str], bytes]:
    """The headers and body GitLab would POST for ``event`` (``Issue Hook``...).

    ``delivery_id`` is the ``Idempotency-Key`` (the same on every retry of one event: pass
    it again for a retry); ``chain_id`` the ``X-Gitlab-Event-UUID``, which GitLab gives
    every webhook a webhook triggered (recursive webhooks share it); both default to new.
    """
    ident = delivery_id or str(uuid.uuid4())
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitLab/18.0.0",
        "X-Gitlab-Event": event,
        "X-Gitlab-Token": secret,
        "X-Gitlab-Event-UUID": chain_id or str(uuid.uuid4()),
        "X-Gitlab-Webhook-UUID": str(uuid.uuid4()),
        "Idempotency-Key": ident,
    }
    return headers, json.dumps(payload).encode()


def item_payload(project_id: int, kind: str, iid: int, *, action: str = "update") -> dict[str, Any]:
    """A minimal ``issue`` or ``merge_request`` webhook body."""
    return {
        "object_kind": kind,
        "event_type": kind,
        "project": {"id": project_id, "path_with_namespace": "group/project"},
        "object_attributes": {"iid": iid, "action": action, "title": f"#{iid}"},
    }
