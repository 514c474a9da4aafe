"""Conversation uploads' fixtures: a real S3-protocol server (moto's server mode, over HTTP
on a free port) and a factory of direct uploads whose file sits in it."""

from __future__ import annotations

import io
import uuid
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import boto3
import pytest
from moto.server import ThreadedMotoServer
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from services.uploads.object_store import S3ObjectStore
from shared.db.engine import session_scope
from shared.db.models import (
    ActiveStorageAttachment,
    ActiveStorageBlob,
    ConversationUpload,
    DataSource,
    Organization,
    OrganizationDataSource,
)
from testkit.media import gsm_bytes, mp4_bytes

BUCKET = "recordings"


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def s3_client(endpoint: str) -> Any:
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


@pytest.fixture
def objects(s3_endpoint: str) -> S3ObjectStore:
    client = s3_client(s3_endpoint)
    bucket = f"{BUCKET}-{uuid.uuid4().hex[:8]}"
    client.create_bucket(Bucket=bucket)
    return S3ObjectStore(client, bucket, "amazon")


def s3_settings(objects: S3ObjectStore, endpoint: str) -> dict[str, Any]:
    """The ``Settings`` fields of a platform whose object store is ``objects``' bucket (the
    credentials come from ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``)."""
    return {
        "uploads_storage": "s3",
        "uploads_bucket": objects.bucket,
        "uploads_endpoint_url": endpoint,
        "uploads_region": "us-east-1",
        "uploads_service_name": "amazon",
    }


def bucket_keys(objects: S3ObjectStore) -> set[str]:
    listing = objects.client.list_objects_v2(Bucket=objects.bucket)
    return {item["Key"] for item in listing.get("Contents", [])}


def xcally_metadata(call_id: str, **overrides: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "uniqueid": call_id,
        "agent": {"email": "Agent@Example.com", "id": "ag-7", "name": "Ann Agent"},
        "customer": {"phone": "+15550001", "email": "c@example.com", "name": "Carl"},
        "direction": "inbound",
        "start_time": "2026-11-30T10:00:00Z",
        "caller_number": "+15550001",
        "called_number": "+15559999",
    }
    metadata.update(overrides)
    return metadata


def zipped(name: str, data: bytes) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr(name, data)
    return buffer.getvalue()


@dataclass
class Uploads:
    """Creates (committed) organizations and direct uploads; one organization per test."""

    sessions: sessionmaker[Session]
    objects: S3ObjectStore
    org_id: int = 0
    data_source_ids: dict[str, int] = field(default_factory=dict)

    def organization(self) -> int:
        with session_scope(self.sessions) as session:
            org = Organization(name=f"uploads-{uuid.uuid4().hex[:6]}")
            session.add(org)
            session.flush()
            self.org_id = org.id
            for key in ("xcally", "outreach_kaia"):
                source = session.execute(select(DataSource).where(DataSource.key == key)).scalar()
                if source is None:
                    source = DataSource(key=key, name=key)
                    session.add(source)
                    session.flush()
                ods = OrganizationDataSource(organization_id=org.id, data_source_id=source.id)
                session.add(ods)
                session.flush()
                self.data_source_ids[key] = ods.id
            session.commit()
        return self.org_id

    def upload(
        self,
        metadata: dict[str, Any],
        *,
        source: str = "xcally",
        filename: str = "call.gsm",
        data: bytes | None = None,
        store_object: bool = True,
        **fields: Any,
    ) -> int:
        content = gsm_bytes(seconds=2) if data is None else data
        key = uuid.uuid4().hex[:28]
        if store_object:
            self.objects.write(key, content, "application/octet-stream")
        with session_scope(self.sessions) as session:
            upload = ConversationUpload(
                organization_id=self.org_id,
                source=source,
                metadata_=metadata,
                **{"upload_type": "direct", **fields},
            )
            blob = ActiveStorageBlob(
                key=key,
                filename=filename,
                service_name="amazon",
                byte_size=len(content),
            )
            session.add_all([upload, blob])
            session.flush()
            session.add(
                ActiveStorageAttachment(
                    name="file",
                    record_type="ConversationUpload",
                    record_id=upload.id,
                    blob_id=blob.id,
                )
            )
            session.commit()
            return upload.id


@pytest.fixture
def uploads(db_session_factory: sessionmaker[Session], objects: S3ObjectStore) -> Uploads:
    factory = Uploads(db_session_factory, objects)
    factory.organization()
    return factory


__all__ = ["gsm_bytes", "mp4_bytes"]
