"""A response's body: read within a size and a time limit, typed and decoded."""

from __future__ import annotations

import time

import requests

from shared.errors import Retryable, Unrecoverable


def _size_text(size: int) -> str:
    mib = 1024 * 1024
    return f"{size // mib} MB" if size % mib == 0 else f"{size} bytes"


def read_body(
    response: requests.Response, what: str, *, max_bytes: int, timeout: float, truncate: bool
) -> bytes:
    """At most ``max_bytes`` of the (decoded) body; more is ``Unrecoverable`` unless
    ``truncate``. ``timeout`` also bounds the whole read, against a page that trickles."""
    declared = response.headers.get("Content-Length", "")
    if not truncate and declared.isdigit() and int(declared) > max_bytes:
        raise Unrecoverable(f"{what}: content over {_size_text(max_bytes)} (Content-Length)")
    deadline = time.monotonic() + timeout
    chunks: list[bytes] = []
    size = 0
    try:
        for chunk in response.iter_content(chunk_size=64 * 1024):
            size += len(chunk)
            if size > max_bytes:
                if truncate:
                    chunks.append(chunk[: len(chunk) - (size - max_bytes)])
                    break
                raise Unrecoverable(f"{what}: content over {_size_text(max_bytes)}")
            chunks.append(chunk)
            if time.monotonic() > deadline:
                raise Retryable(f"{what}: body not read within {timeout:g}s")
    except requests.RequestException as exc:
        raise Retryable(f"{what}: {type(exc).__name__}: {exc}") from exc
    return b"".join(chunks)


def media_type_of(response: requests.Response) -> str:
    """The Content-Type without parameters, lower-case ('' when absent)."""
    return response.headers.get("Content-Type", "").split(";", 1)[0].strip().lower()


def charset_of(response: requests.Response) -> str | None:
    """The Content-Type's charset parameter, when there is one."""
    for param in response.headers.get("Content-Type", "").split(";")[1:]:
        name, _, value = param.strip().partition("=")
        if name.strip().lower() == "charset" and value.strip():
            return value.strip().strip("\"'")
    return None


def decode_text(body: bytes, charset: str | None) -> str:
    """``body`` as text in ``charset`` (UTF-8 when absent or unknown), errors replaced."""
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")
