"""Factories for the ingestion tests: organizations, a text document in a new base, and a
tenant calling the public API with its own API key (provisioned through the internal
route)."""

from __future__ import annotations

import io
import json
import time
import uuid
from dataclasses import dataclass
from typing import Any

from flask.testing import FlaskClient
from sqlalchemy.orm import Session
from werkzeug.test import TestResponse

#: How long a test waits for a document to leave ``processing``.
PATIENCE = 60.0


def new_org() -> int:
    return 10**6 + uuid.uuid4().int % 10**12


def new_text_document(session: Session, org: int, name: str, text: str) -> int:
    """A document of ``text`` in a new knowledge base of ``org`` (in ``processing``); its id."""
    from services.ingestion import store

    base = store.create_knowledge_base(session, organization_id=org, name="Docs")
    return store.add_document(
        session,
        organization_id=org,
        knowledge_base_id=base.id,
        name=name,
        source=store.TextSource(text),
    ).document.id


@dataclass
class Tenant:
    """An organization with a provisioned API key, calling the API through ``client``."""

    client: FlaskClient
    organization_id: int
    key: str

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}

    def call(self, method: str, path: str, body: Any = None, **kwargs: Any) -> TestResponse:
        if body is not None:
            kwargs["data"] = body if isinstance(body, bytes | str) else json.dumps(body)
            kwargs.setdefault("content_type", "application/json")
        return self.client.open(path, method=method, headers=self.auth, **kwargs)

    def create_base(self, name: str = "Docs", **fields: Any) -> int:
        response = self.call("POST", "/knowledge-bases", {"name": name, **fields})
        assert response.status_code == 201, response.json
        return int(response.json["id"])  # type: ignore[index]

    def upload(
        self,
        base: int,
        data: bytes,
        filename: str,
        content_type: str | None = None,
        **fields: Any,
    ) -> TestResponse:
        form: dict[str, Any] = {"file": (io.BytesIO(data), filename, content_type), **fields}
        return self.client.post(
            f"/knowledge-bases/{base}/documents",
            data=form,
            headers=self.auth,
            content_type="multipart/form-data",
        )

    def add_text(self, base: int, name: str, text: str, **fields: Any) -> TestResponse:
        body = {"name": name, "text": text, **fields}
        return self.call("POST", f"/knowledge-bases/{base}/documents", body)

    def document(self, base: int, document: int) -> dict[str, Any]:
        response = self.call("GET", f"/knowledge-bases/{base}/documents/{document}")
        assert response.status_code == 200, response.json
        return response.json  # type: ignore[return-value]

    def settled(self, base: int, document: int, timeout: float = PATIENCE) -> dict[str, Any]:
        """The document once it is out of ``processing`` (the worker must be running)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = self.document(base, document)
            if found["status"] != "processing":
                return found
            time.sleep(0.05)
        raise AssertionError(f"document {document} still processing after {timeout}s")

    def search(self, query: str, base: int | None = None, **fields: Any) -> list[dict[str, Any]]:
        path = "/search" if base is None else f"/knowledge-bases/{base}/search"
        response = self.call("POST", path, {"query": query, **fields})
        assert response.status_code == 200, response.json
        return response.json["hits"]  # type: ignore[index,no-any-return]


def provision(
    client: FlaskClient, organization_id: int, internal: dict[str, str], name: str = "rails"
) -> TestResponse:
    """Provision an API key through the internal route (``internal``: its auth header)."""
    return client.post(
        "/internal/ingestion/api_keys",
        json={"organization_id": organization_id, "name": name},
        headers=internal,
    )


def new_tenant(client: FlaskClient, internal: dict[str, str]) -> Tenant:
    """A new organization with a provisioned key."""
    organization_id = new_org()
    response = provision(client, organization_id, internal)
    assert response.status_code == 201, response.json
    return Tenant(client, organization_id, response.json["key"])  # type: ignore[index]
