"""The recording inside an upload's file: the file itself, or the one recording of a ZIP.

A ZIP must be readable, hold exactly one recording (directories, ``__MACOSX/`` and dot-files
aside) and unpack to at most ``MAX_RECORDING_BYTES``; anything else is ``ArchiveInvalid``
(terminal).
"""

from __future__ import annotations

import io
import zipfile
from pathlib import PurePosixPath

from services.uploads.errors import archive_invalid

#: The largest recording accepted from a ZIP (unpacked), against decompression bombs.
MAX_RECORDING_BYTES = 512 * 1024 * 1024
RECORDING_SUFFIXES = (".gsm", ".wav", ".mp3", ".mp4", ".m4a", ".ogg", ".opus", ".webm")


def _is_recording(name: str) -> bool:
    path = PurePosixPath(name)
    if name.endswith("/") or path.parts[0] == "__MACOSX" or path.name.startswith("."):
        return False
    return path.suffix.lower() in RECORDING_SUFFIXES


def recording_of(data: bytes, filename: str) -> tuple[bytes, str]:
    """``(bytes, filename)`` of the recording ``data`` (named ``filename``) carries."""
    if not filename.lower().endswith(".zip"):
        return data, filename
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            entries = [info for info in archive.infolist() if _is_recording(info.filename)]
            if len(entries) != 1:
                raise archive_invalid(f"{filename} holds {len(entries)} recordings, not one")
            entry = entries[0]
            if entry.file_size > MAX_RECORDING_BYTES:
                raise archive_invalid(f"{filename}: {entry.filename} unpacks too large")
            with archive.open(entry) as handle:
                content = handle.read(MAX_RECORDING_BYTES + 1)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError) as exc:
        raise archive_invalid(f"{filename} is not a readable ZIP ({exc})") from exc
    if len(content) > MAX_RECORDING_BYTES:
        raise archive_invalid(f"{filename}: {entry.filename} unpacks too large")
    return content, PurePosixPath(entry.filename).name
