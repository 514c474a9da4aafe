"""A local HTTP server speaking the GitHub REST API (issues, pull requests, comments).

Checked against GitHub's published reference:

* issues: https://docs.github.com/en/rest/issues/issues#list-repository-issues (``state``,
  ``sort`` = created|updated|comments, ``direction``, ``since`` = updated at or after,
  ``per_page`` <= 100, ``page``; pull requests are listed too, with a ``pull_request`` key),
  https://docs.github.com/en/rest/issues/issues#get-an-issue
* comments: https://docs.github.com/en/rest/issues/comments#list-issue-comments
* pulls: https://docs.github.com/en/rest/pulls/pulls#list-pull-requests
* pagination: https://docs.github.com/en/rest/using-the-rest-api/using-pagination-in-the-rest-api
  (a ``link`` header with ``rel="next"`` / ``rel="last"``, omitted on a single page)
* rate limits: https://docs.github.com/en/rest/using-the-rest-api/rate-limits-for-the-rest-api
  and https://docs.github.com/en/rest/using-the-rest-api/troubleshooting-the-rest-api
  (``x-ratelimit-limit/remaining/used/reset/resource`` on every answer; an exhausted
  primary limit is 403 with ``x-ratelimit-remaining: 0``; a secondary limit is 403 or 429
  with a message and possibly ``retry-after``)
* errors: ``{"message": "Not Found", "documentation_url": ..., "status": "404"}``,
  ``"Bad credentials"`` for 401
* webhooks: https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-deliveries
  (``X-Hub-Signature-256: sha256=<hex HMAC of the raw body>``, ``X-GitHub-Delivery``,
  ``X-GitHub-Event``): :func:`signed_delivery` builds one.

Authorization: ``Authorization: token <token>`` or ``Bearer <token>`` (PyGithub sends the
first), else 401. Failures: :meth:`ProtocolServer.fail` (404, 429, 500, truncated, slow),
``rate_limit=N`` (N requests per ``rate_window`` seconds, then 403 with remaining 0 until the
reset), :meth:`GithubServer.secondary_limit` (403 + retry-after).

Large data sets are cheap: ``server.populate("octo/big", issues=1200, pulls=800,
comments=2)`` builds 2,000 numbers in memory (~10 ms) with distinct ``updated_at`` a minute
apart; :meth:`touch` and :meth:`comment` change one afterwards, :meth:`delete` removes it.
"""

from __future__ import annotations

import hashlib
import hmac
import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request

DOCS = "https://docs.github.com/rest"
MAX_PER_PAGE = 100
BASE_TIME = 1_767_225_600  # 2026-01-01T00:00:00Z


def stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def _parse_stamp(value: str) -> float:
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


@dataclass
class FakeComment:
    id: int
    body: str
    author: str
    created_at: float
    updated_at: float


@dataclass
class FakeIssue:
    number: int
    title: str
    body: str
    is_pull: bool
    created_at: float
    updated_at: float
    state: str = "open"
    author: str = "octocat"
    comments: list[FakeComment] = field(default_factory=list)


@dataclass
class FakeRepo:
    id: int
    full_name: str
    issues: dict[int, FakeIssue] = field(default_factory=dict)


class GithubServer(ProtocolServer):
    """GitHub's REST API over an in-memory set of repositories."""

    def __init__(
        self,
        token: str,
        *,
        max_per_page: int = MAX_PER_PAGE,
        rate_limit: int | None = None,
        rate_window: float = 3600.0,
    ) -> None:
        super().__init__()
        self.token = token
        self.max_per_page = max_per_page
        self.repos: dict[str, FakeRepo] = {}
        self.rate_limit = rate_limit
        self.rate_window = rate_window
        self._used = 0
        self._window_end = time.time() + rate_window
        self._secondary: list[str] = []
        self._ids = itertools.count(1000)
        self._data_lock = threading.RLock()

    # -- data ------------------------------------------------------------------------

    def repo(self, full_name: str) -> FakeRepo:
        with self._data_lock:
            if full_name not in self.repos:
                self.repos[full_name] = FakeRepo(next(self._ids), full_name)
            return self.repos[full_name]

    def add_issue(
        self,
        full_name: str,
        title: str,
        body: str = "",
        *,
        pull: bool = False,
        updated_at: float | None = None,
        comments: list[str] | None = None,
    ) -> FakeIssue:
        repo = self.repo(full_name)
        with self._data_lock:
            number = max(repo.issues, default=0) + 1
            when = time.time() if updated_at is None else updated_at
            issue = FakeIssue(number, title, body, pull, when, when)
            for text in comments or []:
                issue.comments.append(FakeComment(next(self._ids), text, "hubot", when, when))
            repo.issues[number] = issue
            return issue

    def populate(
        self, full_name: str, *, issues: int, pulls: int = 0, comments: int = 0
    ) -> FakeRepo:
        """``issues`` issues then ``pulls`` pull requests, each with ``comments`` comments,
        ``updated_at`` one minute apart from 2026-01-01."""
        repo = self.repo(full_name)
        with self._data_lock:
            start = max(repo.issues, default=0)
            for offset in range(issues + pulls):
                number = start + offset + 1
                when = BASE_TIME + 60 * number
                pull = offset >= issues
                kind = "Pull request" if pull else "Issue"
                issue = FakeIssue(
                    number,
                    f"{kind} {number} of {full_name}",
                    f"{kind} {number} body: the {full_name} tracker, item {number}.",
                    pull,
                    when,
                    when,
                )
                issue.comments = [
                    FakeComment(next(self._ids), f"Comment {c} on {number}", "hubot", when, when)
                    for c in range(comments)
                ]
                repo.issues[number] = issue
        return repo

    def touch(self, full_name: str, number: int, *, body: str | None = None) -> FakeIssue:
        with self._data_lock:
            issue = self.repos[full_name].issues[number]
            issue.updated_at = max(time.time(), issue.updated_at + 1)
            if body is not None:
                issue.body = body
            return issue

    def comment(self, full_name: str, number: int, text: str) -> FakeComment:
        with self._data_lock:
            issue = self.repos[full_name].issues[number]
            now = max(time.time(), issue.updated_at + 1)
            made = FakeComment(next(self._ids), text, "hubot", now, now)
            issue.comments.append(made)
            issue.updated_at = now
            return made

    def delete(self, full_name: str, number: int) -> None:
        with self._data_lock:
            self.repos[full_name].issues.pop(number, None)

    def secondary_limit(self, *, retry_after: int | None = 60, times: int = 1) -> None:
        """The next ``times`` requests answer a secondary rate limit (403 + retry-after;
        ``retry_after=None``: without the header, as GitHub may answer)."""
        with self._lock:
            self._secondary.extend(["" if retry_after is None else str(retry_after)] * times)

    # -- protocol --------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        return header in (f"token {self.token}", f"Bearer {self.token}")

    def status_reply(self, status: int, message: str) -> Reply:
        text = {401: "Bad credentials", 404: "Not Found"}.get(status, message)
        return Reply(status, {"message": text, "documentation_url": DOCS, "status": str(status)})

    def route(self, request: Request) -> Reply:
        limited = self._limits()
        if limited is not None:
            return limited
        reply = self._route(request)
        return Reply(reply.status, reply.body, {**self._quota_headers(), **reply.headers})

    def _limits(self) -> Reply | None:
        with self._lock:
            if self._secondary:
                wait = self._secondary.pop(0)
                body = {
                    "message": "You have exceeded a secondary rate limit. Please wait a few "
                    "minutes before you try again.",
                    "documentation_url": DOCS,
                    "status": "403",
                }
                headers = {**self._quota_headers(), **({"retry-after": wait} if wait else {})}
                return Reply(403, body, headers)
            if time.time() >= self._window_end:
                self._used = 0
                self._window_end = time.time() + self.rate_window
            if self.rate_limit is not None and self._used >= self.rate_limit:
                body = {
                    "message": "API rate limit exceeded for user ID 1.",
                    "documentation_url": DOCS,
                    "status": "403",
                }
                return Reply(403, body, self._quota_headers())
            self._used += 1
        return None

    def _quota_headers(self) -> dict[str, str]:
        limit = self.rate_limit if self.rate_limit is not None else 5000
        used = self._used if self.rate_limit is not None else 0
        return {
            "x-ratelimit-limit": str(limit),
            "x-ratelimit-remaining": str(max(0, limit - used)),
            "x-ratelimit-used": str(used),
            "x-ratelimit-reset": str(int(self._window_end) + 1),
            "x-ratelimit-resource": "core",
        }

    def _route(self, request: Request) -> Reply:
        parts = [p for p in request.path.split("/") if p]
        if request.method != "GET":
            return self.status_reply(404, "Not Found")
        if parts == ["user", "repos"]:
            repos = sorted(self.repos.values(), key=lambda r: r.id)
            return self._page(request, [self._repo_json(r) for r in repos])
        if parts == ["rate_limit"]:
            return Reply(200, {"resources": {"core": {}}, "rate": {}})
        if len(parts) < 3 or parts[0] != "repos":
            return self.status_reply(404, "Not Found")
        repo = self.repos.get(f"{parts[1]}/{parts[2]}")
        if repo is None:
            return self.status_reply(404, "Not Found")
        rest = parts[3:]
        if not rest:
            return Reply(200, self._repo_json(repo))
        if rest == ["issues"]:
            return self._page(
                request, [self._issue_json(repo, i) for i in self._list(repo, request)]
            )
        if rest == ["pulls"]:
            pulls = [i for i in self._list(repo, request) if i.is_pull]
            return self._page(request, [self._pull_json(repo, i) for i in pulls])
        if len(rest) >= 2 and rest[0] in ("issues", "pulls") and rest[1].isdigit():
            issue = repo.issues.get(int(rest[1]))
            if issue is None or (rest[0] == "pulls" and not issue.is_pull):
                return self.status_reply(404, "Not Found")
            if len(rest) == 2:
                render = self._issue_json if rest[0] == "issues" else self._pull_json
                return Reply(200, render(repo, issue))
            if rest[2:] == ["comments"] and rest[0] == "issues":
                comments = [self._comment_json(repo, issue, c) for c in issue.comments]
                return self._page(request, comments)
        return self.status_reply(404, "Not Found")

    def _list(self, repo: FakeRepo, request: Request) -> list[FakeIssue]:
        state = request.param("state", "open")
        since = request.param("since")
        floor = _parse_stamp(since) if since else None
        with self._data_lock:
            issues = [
                i
                for i in repo.issues.values()
                if state in ("all", i.state) and (floor is None or i.updated_at >= floor)
            ]
        key = {"updated": "updated_at", "comments": "comments"}.get(
            request.param("sort", "created") or "created", "created_at"
        )
        descending = request.param("direction", "desc") == "desc"
        if key == "comments":
            issues.sort(key=lambda i: (len(i.comments), i.number), reverse=descending)
        else:
            issues.sort(key=lambda i: (int(getattr(i, key)), i.number), reverse=descending)
        return issues

    def _page(self, request: Request, items: list[Any]) -> Reply:
        per_page = min(int(request.param("per_page", "30") or 30), self.max_per_page)
        page = max(1, int(request.param("page", "1") or 1))
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        links = []
        if page < last:
            links.append(f'<{self._link(request, page + 1, per_page)}>; rel="next"')
            links.append(f'<{self._link(request, last, per_page)}>; rel="last"')
        if page > 1:
            links.append(f'<{self._link(request, 1, per_page)}>; rel="first"')
            links.append(f'<{self._link(request, page - 1, per_page)}>; rel="prev"')
        return Reply(200, chunk, {"link": ", ".join(links)} if links else {})

    def _link(self, request: Request, page: int, per_page: int) -> str:
        query = {k: v[0] for k, v in request.query.items()}
        query.update(page=str(page), per_page=str(per_page))
        return f"{self.base_url}{request.path}?{urlencode(query)}"

    # -- representations ---------------------------------------------------------------

    def _repo_json(self, repo: FakeRepo) -> dict[str, Any]:
        owner, name = repo.full_name.split("/", 1)
        api = f"{self.base_url}/repos/{repo.full_name}"
        return {
            "id": repo.id,
            "node_id": f"R_{repo.id}",
            "name": name,
            "full_name": repo.full_name,
            "private": False,
            "owner": {"login": owner, "id": 1, "type": "Organization"},
            "html_url": f"https://github.com/{repo.full_name}",
            "url": api,
            "issues_url": api + "/issues{/number}",
            "pulls_url": api + "/pulls{/number}",
            "default_branch": "main",
            "has_issues": True,
            "open_issues_count": len(repo.issues),
        }

    def _issue_json(self, repo: FakeRepo, issue: FakeIssue) -> dict[str, Any]:
        api = f"{self.base_url}/repos/{repo.full_name}/issues/{issue.number}"
        html_kind = "pull" if issue.is_pull else "issues"
        body: dict[str, Any] = {
            "id": repo.id * 100_000 + issue.number,
            "node_id": f"I_{repo.id}_{issue.number}",
            "number": issue.number,
            "title": issue.title,
            "body": issue.body,
            "state": issue.state,
            "locked": False,
            "user": {"login": issue.author, "id": 1, "type": "User"},
            "labels": [],
            "assignees": [],
            "comments": len(issue.comments),
            "created_at": stamp(issue.created_at),
            "updated_at": stamp(issue.updated_at),
            "closed_at": None,
            "url": api,
            "repository_url": f"{self.base_url}/repos/{repo.full_name}",
            "comments_url": api + "/comments",
            "html_url": f"https://github.com/{repo.full_name}/{html_kind}/{issue.number}",
        }
        if issue.is_pull:
            pulls = f"{self.base_url}/repos/{repo.full_name}/pulls/{issue.number}"
            body["pull_request"] = {"url": pulls, "html_url": body["html_url"]}
        return body

    def _pull_json(self, repo: FakeRepo, issue: FakeIssue) -> dict[str, Any]:
        body = self._issue_json(repo, issue)
        body.pop("pull_request", None)
        body["url"] = f"{self.base_url}/repos/{repo.full_name}/pulls/{issue.number}"
        body["issue_url"] = f"{self.base_url}/repos/{repo.full_name}/issues/{issue.number}"
        body.update(merged=False, draft=False, head={"ref": "topic"}, base={"ref": "main"})
        return body

    def _comment_json(self, repo: FakeRepo, issue: FakeIssue, c: FakeComment) -> dict[str, Any]:
        return {
            "id": c.id,
            "node_id": f"IC_{c.id}",
            "body": c.body,
            "user": {"login": c.author, "id": 2, "type": "User"},
            "created_at": stamp(c.created_at),
            "updated_at": stamp(c.updated_at),
            "url": f"{self.base_url}/repos/{repo.full_name}/issues/comments/{c.id}",
            "html_url": f"https://github.com/{repo.full_name}/issues/{issue.number}#issuecomment-{c.id}",
            "issue_url": f"{self.base_url}/repos/{repo.full_name}/issues/{issue.number}",
        }


def signed_delivery(
    event: str, payload: dict[str, Any], secret: str, *, delivery_id: str | None = None
) -> tuple[dict[str, str], bytes]:
    """The headers and body GitHub would POST for ``event`` with ``payload``."""
    body = json.dumps(payload).encode()
    digest = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/fake",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery_id or str(uuid.uuid4()),
        "X-GitHub-Hook-ID": "1",
        "X-Hub-Signature-256": f"sha256={digest}",
    }
    return headers, body


def issue_payload(
    full_name: str, number: int, *, action: str = "edited", pull: bool = False
) -> dict[str, Any]:
    """A minimal ``issues`` (or ``pull_request``) webhook payload."""
    item: dict[str, Any] = {"number": number, "title": f"#{number}"}
    if pull:
        return {
            "action": action,
            "number": number,
            "pull_request": item,
            "repository": {"full_name": full_name},
        }
    return {"action": action, "issue": item, "repository": {"full_name": full_name}}
