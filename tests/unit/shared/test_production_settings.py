"""What production refuses to start with (``shared.config.refusals``): an unset
``SPEEDTIER_ENV`` is production; a weak internal token and a missing credentials key are
refused there; private-network crawling needs its acknowledgement everywhere. Each refusal
is one line naming its variable."""

from __future__ import annotations

import os
import random
import secrets
import string

import pytest

from services.app.internal_token import MissingToken, api_token
from shared.config import InvalidSettings, load_settings
from shared.secret_strength import MIN_ENTROPY_BITS, estimated_entropy_bits, weakness

KEY = "gX3J0PZkFvAQ6oKkzSTPmOKx5Nft6xqCUVFL5nEXDVI="
STRONG = "Zt3vQ9mXc2LpR7kW1sHb8NdF4yGj6TaE0uKo5Vw"


@pytest.fixture(autouse=True)
def no_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """None of the machine's speedtier variables (the suite sets SPEEDTIER_ENV=test)."""
    for name in list(os.environ):
        if name.startswith("SPEEDTIER_") or name in ("INTERNAL_API_TOKEN", "REDIS_URL"):
            monkeypatch.delenv(name)


def refusal(**settings: object) -> str:
    with pytest.raises(InvalidSettings) as refused:
        load_settings(**settings)
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_an_unset_environment_is_production() -> None:
    settings = load_settings(connector_credentials_key=KEY)
    assert settings.environment == "production"
    assert not settings.is_development


def test_an_unset_environment_does_not_run_the_api_open() -> None:
    # Given no SPEEDTIER_ENV and no token
    settings = load_settings(connector_credentials_key=KEY)
    # Then the internal API (and the dashboard, which shares its token) refuses to start
    with pytest.raises(MissingToken, match="INTERNAL_API_TOKEN is not set"):
        api_token(settings)


@pytest.mark.parametrize("environment", ["production", "staging"])
@pytest.mark.parametrize(
    ("token", "why"),
    [
        ("x", "1 characters, at least 32"),
        ("s3cret-but-only-thirty-one-char", "31 characters"),
        ("a" * 64, "bits of entropy"),
        ("abc" * 20, "bits of entropy"),
        ("passwordpasswordpasswordpassword", "bits of entropy"),
    ],
)
def test_a_weak_token_is_refused_naming_the_variable(
    environment: str, token: str, why: str
) -> None:
    message = refusal(
        environment=environment, internal_api_token=token, connector_credentials_key=KEY
    )
    assert f"refusing to start in SPEEDTIER_ENV={environment}: INTERNAL_API_TOKEN is too weak" in (
        message
    )
    assert why in message
    assert token not in message  # the refusal does not print the secret


@pytest.mark.parametrize("environment", ["development", "test"])
def test_a_weak_token_is_accepted_where_the_environment_says_so(environment: str) -> None:
    settings = load_settings(environment=environment, internal_api_token="x")
    assert settings.internal_api_token is not None


def test_generated_tokens_pass() -> None:
    rng = random.Random(30)
    generated = [secrets.token_urlsafe(32), secrets.token_hex(32)]
    # 128-bit hex tokens (openssl rand -hex 16): the shortest a generator commonly gives.
    generated += ["".join(rng.choice("0123456789abcdef") for _ in range(32)) for _ in range(500)]
    alphabet = string.ascii_letters + string.digits
    generated += ["".join(rng.choice(alphabet) for _ in range(32)) for _ in range(200)]
    for token in generated:
        assert weakness(token) is None, (token, estimated_entropy_bits(token))
    for token in generated[:3]:
        settings = load_settings(internal_api_token=token, connector_credentials_key=KEY)
        assert api_token(settings) == token


def test_the_estimate_is_length_times_the_characters_entropy() -> None:
    assert estimated_entropy_bits("") == 0
    assert estimated_entropy_bits("aaaa") == 0
    assert estimated_entropy_bits("abab") == 4.0  # 1 bit a character
    assert estimated_entropy_bits(string.hexdigits[:16] * 2) == 128.0
    assert MIN_ENTROPY_BITS < 128


@pytest.mark.parametrize("environment", ["production", "staging"])
def test_a_missing_credentials_key_is_refused(environment: str) -> None:
    message = refusal(environment=environment, internal_api_token=STRONG)
    assert "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY is not set" in message


def test_without_a_key_development_starts() -> None:
    assert load_settings(environment="development").connector_credentials_key is None


@pytest.mark.parametrize("environment", ["development", "test", "staging", "production"])
def test_private_networks_need_their_acknowledgement_everywhere(environment: str) -> None:
    base = {
        "environment": environment,
        "connector_credentials_key": KEY,
        "crawl_allow_private_networks": True,
    }
    message = refusal(**base)
    assert "SPEEDTIER_CRAWL_ALLOW_PRIVATE_NETWORKS=true" in message
    assert "SPEEDTIER_CRAWL_PRIVATE_NETWORKS_ACKNOWLEDGED=true" in message

    settings = load_settings(**base, crawl_private_networks_acknowledged=True)
    assert settings.crawl_allow_private_networks


def test_the_refusal_reads_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERNAL_API_TOKEN", "short")
    monkeypatch.setenv("SPEEDTIER_CONNECTOR_CREDENTIALS_KEY", KEY)
    assert "INTERNAL_API_TOKEN is too weak (5 characters" in refusal()


@pytest.mark.parametrize("rate", ["0/60", "ten", "5/0"])
def test_the_failed_authentication_rate_is_a_rate(rate: str) -> None:
    message = refusal(environment="test", auth_failure_rate=rate)
    assert "SPEEDTIER_AUTH_FAILURE_RATE" in message
