"""Where Active Storage objects live: S3-compatible storage (boto3) in production, a local
directory for ``make run``.

Both speak the three calls native processing needs: read the upload's file, write the WAV,
delete an orphaned WAV. A missing object is ``SourceFileMissing`` (terminal); anything else
the storage does wrong (transport error, 5xx, throttling) is ``StorageUnavailable``
(retryable).

| setting (environment) | meaning |
| --- | --- |
| ``SPEEDTIER_UPLOADS_STORAGE`` | ``s3`` or ``local`` (default ``local``) |
| ``SPEEDTIER_UPLOADS_SERVICE_NAME`` | ``active_storage_blobs.service_name`` of new blobs |
| ``SPEEDTIER_UPLOADS_BUCKET`` | the S3 bucket (``s3``) |
| ``SPEEDTIER_UPLOADS_ENDPOINT_URL`` | an S3-compatible endpoint; unset: AWS |
| ``SPEEDTIER_UPLOADS_REGION`` | the bucket's region |
| ``SPEEDTIER_UPLOADS_ROOT`` | ``local``'s directory; default ``<SPEEDTIER_DATA_DIR>/storage`` |

Credentials come from boto3's usual chain (environment, profile, instance role). The
settings are fields of :class:`shared.config.Settings` (``uploads_*``).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any, Protocol

from services.uploads.errors import source_file_missing, storage_unavailable
from shared.config import Settings


class ObjectStore(Protocol):
    service_name: str

    def read(self, key: str) -> bytes: ...

    def write(self, key: str, data: bytes, content_type: str) -> None: ...

    def delete(self, key: str) -> None: ...


class S3ObjectStore:
    """Objects of one bucket through boto3 (AWS S3 or any S3-compatible server)."""

    def __init__(self, client: Any, bucket: str, service_name: str) -> None:
        self.client = client
        self.bucket = bucket
        self.service_name = service_name

    def read(self, key: str) -> bytes:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            answer = self.client.get_object(Bucket=self.bucket, Key=key)
            return bytes(answer["Body"].read())
        except ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in ("NoSuchKey", "404", "NotFound"):
                raise source_file_missing(f"object {key} is not in {self.bucket}") from exc
            raise storage_unavailable(f"reading {key}: {code or exc}") from exc
        except BotoCoreError as exc:
            raise storage_unavailable(f"reading {key}: {exc}") from exc

    def write(self, key: str, data: bytes, content_type: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.put_object(Bucket=self.bucket, Key=key, Body=data, ContentType=content_type)
        except (ClientError, BotoCoreError) as exc:
            raise storage_unavailable(f"writing {key}: {exc}") from exc

    def delete(self, key: str) -> None:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.delete_object(Bucket=self.bucket, Key=key)
        except (ClientError, BotoCoreError) as exc:
            raise storage_unavailable(f"deleting {key}: {exc}") from exc


class LocalObjectStore:
    """Active Storage's Disk service layout: ``root/ab/cd/abcd...`` for key ``abcd...``."""

    def __init__(self, root: Path, service_name: str = "local") -> None:
        self.root = root
        self.service_name = service_name

    def path(self, key: str) -> Path:
        if not key or "/" in key[:4] or ".." in key or key.startswith("/"):
            raise source_file_missing(f"object key {key!r} is not a storage key")
        return self.root / key[:2] / key[2:4] / key

    def read(self, key: str) -> bytes:
        try:
            return self.path(key).read_bytes()
        except FileNotFoundError as exc:
            raise source_file_missing(f"object {key} is not in {self.root}") from exc
        except OSError as exc:
            raise storage_unavailable(f"reading {key}: {exc}") from exc

    def write(self, key: str, data: bytes, content_type: str) -> None:
        target = self.path(key)
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=target.parent)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temporary, target)
        except OSError as exc:
            raise storage_unavailable(f"writing {key}: {exc}") from exc

    def delete(self, key: str) -> None:
        try:
            self.path(key).unlink(missing_ok=True)
        except OSError as exc:
            raise storage_unavailable(f"deleting {key}: {exc}") from exc


def object_store(settings: Settings) -> ObjectStore:
    """The store ``settings`` configure (``SPEEDTIER_UPLOADS_*``, :mod:`shared.config`).

    Raises:
      UploadProcessingRetryable: ``s3`` without ``SPEEDTIER_UPLOADS_BUCKET`` (a deployment
        error an operator fixes; the uploads stay retryable, none is failed for it).
    """
    if settings.uploads_storage == "local":
        root = Path(settings.uploads_root or Path(settings.data_dir) / "storage")
        return LocalObjectStore(root, settings.uploads_service_name)
    if not settings.uploads_bucket:
        raise storage_unavailable("SPEEDTIER_UPLOADS_STORAGE=s3 needs SPEEDTIER_UPLOADS_BUCKET")
    import boto3

    client = boto3.client(
        "s3", endpoint_url=settings.uploads_endpoint_url, region_name=settings.uploads_region
    )
    return S3ObjectStore(client, settings.uploads_bucket, settings.uploads_service_name)
