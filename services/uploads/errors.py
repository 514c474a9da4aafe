"""How a native processing pass fails: ``ConversationUploadProcessingError(retryable,
errorClass)`` of the seed, as two outcomes the worker classification already knows.

| error_class | retryable | raised when |
| --- | --- | --- |
| ``MetadataInvalid`` | no | the upload's metadata lacks or garbles a field the processor needs |
| ``MediaInvalid`` | no | FFmpeg cannot decode the recording, or it holds no audio |
| ``ArchiveInvalid`` | no | the ZIP is corrupt, too large, or holds no / several recordings |
| ``SourceFileMissing`` | no | the upload's stored file (attachment or object) is gone |
| ``StorageUnavailable`` | yes | object storage failed (transport error, 5xx, throttling) |
| ``MediaToolUnavailable`` | yes | FFmpeg's libraries could not be loaded or ran out of resources |
| ``EnqueueFailed`` | yes | a follow-up job could not be enqueued |
"""

from __future__ import annotations

from shared.errors import Retryable, Unrecoverable


class UploadProcessingFailed(Unrecoverable):
    """A terminal processing failure: the upload is marked failed (``mark_failed`` parity)."""

    retryable = False

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(f"{error_class}: {message}")
        self.error_class = error_class


class UploadProcessingRetryable(Retryable):
    """A transient processing failure: retried inside the five-attempt budget."""

    retryable = True

    def __init__(self, error_class: str, message: str) -> None:
        super().__init__(f"{error_class}: {message}")
        self.error_class = error_class


def metadata_invalid(message: str) -> UploadProcessingFailed:
    return UploadProcessingFailed("MetadataInvalid", message)


def media_invalid(message: str) -> UploadProcessingFailed:
    return UploadProcessingFailed("MediaInvalid", message)


def archive_invalid(message: str) -> UploadProcessingFailed:
    return UploadProcessingFailed("ArchiveInvalid", message)


def source_file_missing(message: str) -> UploadProcessingFailed:
    return UploadProcessingFailed("SourceFileMissing", message)


def storage_unavailable(message: str) -> UploadProcessingRetryable:
    return UploadProcessingRetryable("StorageUnavailable", message)


def media_tool_unavailable(message: str) -> UploadProcessingRetryable:
    return UploadProcessingRetryable("MediaToolUnavailable", message)
