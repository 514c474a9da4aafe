"""Stored credentials at rest: Fernet tokens under a key from the environment.

One key ring seals every credential the platform stores: knowledge-base connections
(``api2.kb_connections``) and super-source connections' credentials and webhook secrets
(``api2.super_source_connections``).

``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY`` holds one or more Fernet keys (url-safe base64 of
32 bytes, ``Fernet.generate_key()``), comma-separated. The first key encrypts; every key
decrypts (``MultiFernet``), so a key is rotated by putting the new one first, re-encrypting
the stored tokens (``speedtier ingestion connections rotate-key``), then dropping the old
one. Fernet is AES-128-CBC with an HMAC-SHA256 over the token: a token altered or made under
another key does not decrypt at all.

=======================================  ==============================================
situation                                 what happens
=======================================  ==============================================
no key configured                         storing credentials answers 503; a sync job
                                          fails unrecoverable naming the variable
a stored token no configured key opens    the sync fails unrecoverable ("credentials
(its key was dropped)                     unreadable: store them again")
a malformed key                           the process does not start (settings check)
=======================================  ==============================================

Decrypted credentials live only in the sync job that calls the provider; no route answers
them and nothing logs them (a connection shows the *names* of its credential fields).

``cryptography`` is imported when credentials are first sealed or opened (6.7 MiB of a
process's memory): a worker that never runs a connector sync does not load it.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from shared.config import parse_fernet_keys
from shared.errors import Unrecoverable

if TYPE_CHECKING:
    from cryptography.fernet import MultiFernet

SETTING = "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY"


class CredentialsKeyMissing(Unrecoverable):
    """No credentials key is configured, so credentials can be neither stored nor read."""


class CredentialsUnreadable(Unrecoverable):
    """A stored token does not decrypt under any configured key."""


@dataclass(frozen=True)
class CredentialBox:
    """Seals and opens connection credentials (a JSON object of strings).

    Attributes:
      keys: the Fernet keys (url-safe base64), the first one encrypting; kept out of the
        box's repr, which tracebacks and Sentry's frame variables would otherwise show.
    """

    keys: tuple[bytes, ...] = field(default=(), repr=False)

    @classmethod
    def from_setting(cls, value: str | None) -> CredentialBox:
        """A box over the setting's keys; an empty box when it is unset."""
        return cls(tuple(parse_fernet_keys(value))) if value else cls()

    @property
    def configured(self) -> bool:
        return bool(self.keys)

    def _fernet(self) -> MultiFernet:
        if not self.keys:
            raise CredentialsKeyMissing(f"connector credentials need {SETTING} to be set")
        return _multi_fernet(self.keys)

    def seal(self, credentials: Mapping[str, str]) -> bytes:
        """The credentials as a token under the first key. Raises CredentialsKeyMissing."""
        return self.seal_value(dict(credentials))

    def open(self, token: bytes) -> dict[str, str]:
        """The credentials a token holds.

        Raises:
          CredentialsKeyMissing: no key is configured.
          CredentialsUnreadable: no configured key opens the token.
        """
        value = self.open_value(token)
        return {str(k): str(v) for k, v in value.items()}

    def seal_value(self, value: object) -> bytes:
        """Any JSON value as a token under the first key. Raises CredentialsKeyMissing."""
        plain = json.dumps(value, sort_keys=True, separators=(",", ":")).encode()
        return self._fernet().encrypt(plain)

    def open_value(self, token: bytes) -> Any:
        """The JSON value a token holds (:meth:`seal_value`).

        Raises:
          CredentialsKeyMissing: no key is configured.
          CredentialsUnreadable: no configured key opens the token.
        """
        fernet = self._fernet()
        from cryptography.fernet import InvalidToken

        try:
            plain = fernet.decrypt(bytes(token))
        except InvalidToken:
            raise CredentialsUnreadable(
                "connection credentials unreadable (encrypted under a key no longer "
                f"configured in {SETTING}): store them again"
            ) from None
        return json.loads(plain)

    def rotate(self, token: bytes) -> bytes:
        """The token re-encrypted under the first key (unchanged content)."""
        fernet = self._fernet()
        from cryptography.fernet import InvalidToken

        try:
            return fernet.rotate(bytes(token))
        except InvalidToken:
            raise CredentialsUnreadable("a stored token opens under no configured key") from None


@functools.cache
def _multi_fernet(keys: tuple[bytes, ...]) -> MultiFernet:
    from cryptography.fernet import Fernet, MultiFernet

    return MultiFernet([Fernet(key) for key in keys])
