"""A small client of the ingestion API, over real HTTP: what the demo (and any caller of the
public API) does, one method per call."""

from __future__ import annotations

import mimetypes
from pathlib import Path
from typing import Any

import requests

from shared.errors import SpeedtierError

#: Types the platform extracts, by extension (``mimetypes`` may not know Markdown).
CONTENT_TYPES = {
    ".md": "text/markdown",
    ".txt": "text/plain",
    ".html": "text/html",
    ".pdf": "application/pdf",
    ".docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
}
PAGE_SIZE = 100


class ApiError(SpeedtierError, RuntimeError):
    """The API answered an unexpected status; the message carries its error body."""

    def __init__(self, response: requests.Response) -> None:
        try:
            body: Any = response.json()
        except ValueError:
            body = response.text[:300]
        request = response.request
        super().__init__(f"{request.method} {request.path_url}: {response.status_code} {body}")
        self.status = response.status_code


def content_type_of(path: Path) -> str:
    return CONTENT_TYPES.get(path.suffix.lower()) or (
        mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    )


class IngestionClient:
    """Calls to the ingestion API at ``api_url``.

    Parameters:
      internal_token: the internal bearer token for ``/internal`` routes (None when the API
        runs open, in development without ``INTERNAL_API_TOKEN``).
      timeout: seconds per request.
    """

    def __init__(
        self, api_url: str, *, internal_token: str | None = None, timeout: float = 30.0
    ) -> None:
        self.api_url = api_url.rstrip("/")
        self.internal_token = internal_token
        self.timeout = timeout
        self.api_key: str | None = None
        self._http = requests.Session()

    def close(self) -> None:
        self._http.close()

    def _call(
        self, method: str, path: str, *, expect: int, internal: bool = False, **kwargs: Any
    ) -> Any:
        token = self.internal_token if internal else self.api_key
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = self._http.request(
            method, self.api_url + path, headers=headers, timeout=self.timeout, **kwargs
        )
        if response.status_code != expect:
            raise ApiError(response)
        return response.json() if response.content else None

    def is_ready(self) -> bool:
        """``GET /readyz`` answers 200 (Redis and PostgreSQL reachable)."""
        try:
            response = self._http.get(f"{self.api_url}/readyz", timeout=5)
        except requests.RequestException:
            return False
        return response.status_code == 200

    def provision_key(self, organization_id: int, name: str) -> dict[str, Any]:
        """A new API key for the organization; later calls authenticate with it."""
        created: dict[str, Any] = self._call(
            "POST",
            "/internal/ingestion/api_keys",
            expect=201,
            internal=True,
            json={"organization_id": organization_id, "name": name},
        )
        self.api_key = created["key"]
        return created

    def knowledge_bases(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": PAGE_SIZE}
        while True:
            page = self._call("GET", "/knowledge-bases", expect=200, params=params)
            found += page["knowledge_bases"]
            if page["next_after"] is None:
                return found
            params["after"] = page["next_after"]

    def knowledge_base_named(self, name: str) -> tuple[dict[str, Any], bool]:
        """The organization's knowledge base called ``name``, created when there is none;
        and whether it was created."""
        for base in self.knowledge_bases():
            if base["name"] == name:
                return base, False
        created = self._call("POST", "/knowledge-bases", expect=201, json={"name": name})
        return created, True

    def upload_file(self, knowledge_base_id: int, path: Path) -> dict[str, Any]:
        """A multipart upload; a live document of the same name is replaced in place."""
        with path.open("rb") as stream:
            accepted: dict[str, Any] = self._call(
                "POST",
                f"/knowledge-bases/{knowledge_base_id}/documents",
                expect=202,
                files={"file": (path.name, stream, content_type_of(path))},
            )
        return accepted

    def add_url(self, knowledge_base_id: int, url: str, *, name: str) -> dict[str, Any]:
        """A URL document (one page), named so a re-run replaces it whatever the port."""
        accepted: dict[str, Any] = self._call(
            "POST",
            f"/knowledge-bases/{knowledge_base_id}/documents",
            expect=202,
            json={"url": url, "name": name},
        )
        return accepted

    def documents(self, knowledge_base_id: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        params: dict[str, Any] = {"limit": PAGE_SIZE}
        while True:
            page = self._call(
                "GET", f"/knowledge-bases/{knowledge_base_id}/documents", expect=200, params=params
            )
            found += page["documents"]
            if page["next_after"] is None:
                return found
            params["after"] = page["next_after"]

    def search(self, knowledge_base_id: int, query: str, *, top_k: int = 3) -> list[dict[str, Any]]:
        answer = self._call(
            "POST",
            f"/knowledge-bases/{knowledge_base_id}/search",
            expect=200,
            json={"query": query, "top_k": top_k},
        )
        hits: list[dict[str, Any]] = answer["hits"]
        return hits
