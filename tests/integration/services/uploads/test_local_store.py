"""The local-disk object store ``make run`` uses: Active Storage's Disk layout, a missing
object terminal, keys that would leave the root refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.uploads.errors import UploadProcessingFailed, UploadProcessingRetryable
from services.uploads.object_store import LocalObjectStore, object_store
from shared.config import load_settings


def test_write_read_delete_in_active_storages_disk_layout(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path, "local")

    store.write("abcdef123", b"RIFF", "audio/x-wav")

    assert (tmp_path / "ab" / "cd" / "abcdef123").read_bytes() == b"RIFF"
    assert store.read("abcdef123") == b"RIFF"
    store.delete("abcdef123")
    store.delete("abcdef123")  # deleting twice is fine (an orphan cleanup may repeat)
    with pytest.raises(UploadProcessingFailed) as raised:
        store.read("abcdef123")
    assert raised.value.error_class == "SourceFileMissing"


@pytest.mark.parametrize("key", ["", "../etc/passwd", "/abs/key", "ab/../../x"])
def test_keys_that_would_leave_the_root_are_refused(tmp_path: Path, key: str) -> None:
    with pytest.raises(UploadProcessingFailed):
        LocalObjectStore(tmp_path).read(key)


def test_the_default_store_is_local_under_the_data_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SPEEDTIER_UPLOADS_STORAGE", raising=False)
    monkeypatch.delenv("SPEEDTIER_UPLOADS_ROOT", raising=False)

    store = object_store(load_settings(data_dir=str(tmp_path)))

    assert isinstance(store, LocalObjectStore) and store.root == tmp_path / "storage"


def test_the_storage_settings_come_from_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPEEDTIER_UPLOADS_STORAGE", "local")
    monkeypatch.setenv("SPEEDTIER_UPLOADS_ROOT", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("SPEEDTIER_UPLOADS_SERVICE_NAME", "local_disk")

    store = object_store(load_settings())

    assert isinstance(store, LocalObjectStore)
    assert (store.root, store.service_name) == (tmp_path / "elsewhere", "local_disk")


def test_s3_without_a_bucket_is_a_retryable_deployment_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SPEEDTIER_UPLOADS_STORAGE", "s3")
    monkeypatch.delenv("SPEEDTIER_UPLOADS_BUCKET", raising=False)

    with pytest.raises(UploadProcessingRetryable, match="SPEEDTIER_UPLOADS_BUCKET"):
        object_store(load_settings())
