"""The ``done=`` banner: a message an action's redirect carries to the next page, signed so
that only the server can write one. A link crafted elsewhere (``?done=Your session expired,
sign in at evil.example``) shows nothing.

The value is ``<message>|<signature>``; the key derives from ``INTERNAL_API_TOKEN`` like the
session's, or, with no token (development and test), from a key drawn when the process
starts. A message is one line of at most 300 characters.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from services.apikit.auth import token_matches

_PROCESS_KEY = secrets.token_bytes(32)


def _key(token: str | None) -> bytes:
    if token is None:
        return _PROCESS_KEY
    return hashlib.sha256(f"speedtier-dashboard-banner|{token}".encode()).digest()


def _signature(token: str | None, message: str) -> str:
    return hmac.new(_key(token), message.encode(), hashlib.sha256).hexdigest()


def sign(token: str | None, message: str) -> str:
    """``message`` (made one line, at most 300 characters) with its signature."""
    line = " ".join(message.split())[:300]
    return f"{line}|{_signature(token, line)}"


def read(token: str | None, value: str) -> str:
    """The message of a signed ``value``; "" when it is absent or not signed by us."""
    message, _, signature = value.rpartition("|")
    if not message or not token_matches(signature, _signature(token, message)):
        return ""
    return message
