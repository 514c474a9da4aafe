"""The local-disk object store ``make run`` uses: Active Storage's Disk layout, a missing
object terminal, keys that would leave the root refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.uploads.errors import UploadProcessingFailed
from services.uploads.object_store import LocalObjectStore, StorageSettings, object_store


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

    store = object_store(str(tmp_path), StorageSettings())

    assert isinstance(store, LocalObjectStore) and store.root == tmp_path / "storage"
