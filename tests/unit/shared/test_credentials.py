"""Connector credentials at rest: Fernet tokens, several keys for rotation, and the errors a
missing or dropped key gives (no I/O)."""

from __future__ import annotations

import pytest
from cryptography.fernet import Fernet

from shared.config import load_settings
from shared.credentials import (
    CredentialBox,
    CredentialsKeyMissing,
    CredentialsUnreadable,
)
from tests.fresh_process import printed_by

SECRET = {"api_token": "secret_notion_123", "email": "ops@example.com"}


def test_a_sealed_token_hides_the_credentials_and_opens_back() -> None:
    box = CredentialBox.from_setting(Fernet.generate_key().decode())
    token = box.seal(SECRET)
    assert b"secret_notion_123" not in token and b"ops@example.com" not in token
    assert box.open(token) == SECRET


def test_a_token_made_under_another_key_does_not_open() -> None:
    token = CredentialBox.from_setting(Fernet.generate_key().decode()).seal(SECRET)
    other = CredentialBox.from_setting(Fernet.generate_key().decode())
    with pytest.raises(CredentialsUnreadable, match="store them again"):
        other.open(token)


def test_a_tampered_token_does_not_open() -> None:
    box = CredentialBox.from_setting(Fernet.generate_key().decode())
    token = bytearray(box.seal(SECRET))
    token[-5] ^= 1
    with pytest.raises(CredentialsUnreadable):
        box.open(bytes(token))


def test_rotation_puts_the_new_key_first_and_reseals_under_it() -> None:
    # Given a token made under the old key
    old, new = Fernet.generate_key().decode(), Fernet.generate_key().decode()
    token = CredentialBox.from_setting(old).seal(SECRET)
    # When the new key is put first, both configured
    both = CredentialBox.from_setting(f"{new}, {old}")
    assert both.open(token) == SECRET  # the old token still opens
    rotated = both.rotate(token)
    # Then the rotated token opens under the new key alone, and new tokens use it
    assert CredentialBox.from_setting(new).open(rotated) == SECRET
    assert CredentialBox.from_setting(new).open(both.seal(SECRET)) == SECRET
    with pytest.raises(CredentialsUnreadable):
        CredentialBox.from_setting(old).open(rotated)


def test_without_a_key_nothing_is_sealed_or_opened() -> None:
    box = CredentialBox.from_setting(None)
    assert not box.configured
    with pytest.raises(CredentialsKeyMissing, match="SPEEDTIER_CONNECTOR_CREDENTIALS_KEY"):
        box.seal(SECRET)
    with pytest.raises(CredentialsKeyMissing):
        box.open(b"gAAAA")


@pytest.mark.parametrize(
    "value",
    ["not-a-key", "", " , ", Fernet.generate_key().decode()[:-4]],
    # ids of their own: the generated key differs in each xdist worker, which must agree
    ids=["not a key", "empty", "blank items", "truncated key"],
)
def test_a_malformed_key_stops_the_settings(value: str) -> None:
    with pytest.raises(ValueError, match="SPEEDTIER_CONNECTOR_CREDENTIALS_KEY"):
        load_settings(connector_credentials_key=value)


def test_the_setting_takes_several_keys() -> None:
    keys = ",".join(Fernet.generate_key().decode() for _ in range(3))
    settings = load_settings(connector_credentials_key=keys)
    assert settings.connector_credentials_key is not None
    assert (
        len(CredentialBox.from_setting(settings.connector_credentials_key.get_secret_value()).keys)
        == 3
    )


def test_cryptography_is_loaded_only_when_credentials_are_first_sealed_or_opened() -> None:
    """A process that never runs a connector sync (the API, the scheduler, most workers)
    does not carry Fernet and the OpenSSL bindings: 6.7 MiB."""
    key = Fernet.generate_key().decode()
    script = (
        "import sys\n"
        "from shared.credentials import CredentialBox\n"
        f"box = CredentialBox.from_setting({key!r})\n"
        "print('cryptography.fernet' in sys.modules)\n"
        "token = box.seal({'api_token': 'x'})\n"
        "print('cryptography.fernet' in sys.modules, box.open(token) == {'api_token': 'x'})\n"
    )
    assert printed_by(script) == ["False", "True", "True"]


def test_the_keys_never_show_in_the_boxs_repr() -> None:
    key = Fernet.generate_key().decode()
    box = CredentialBox.from_setting(key)
    assert key not in repr(box) and key not in str(box)
    assert box.configured
