"""The values settings hold that need parsing (rates, Fernet keys, URL schemes), and the
one-line messages of a refused value. Here rather
than in :mod:`shared.config` so that the settings model stays one screenful per concern; the
model's validators and the modules that read a rate or a key (windows, the crawler, the
embedder, connector credentials) use them."""

from __future__ import annotations

import base64
import binascii
import ipaddress
import re
from urllib.parse import urlsplit

from pydantic import ValidationError

#: What a Redis URL starts with (redis-py's schemes).
REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
#: What a database URL starts with (PostgreSQL through psycopg 3: ``shared.db.engine``).
DATABASE_SCHEMES = ("postgresql://", "postgres://", "postgresql+psycopg://")


def parse_rate(rate: str, *, field: str = "rate") -> tuple[int, float]:
    """Parse ``"LIMIT/SECONDS"`` (e.g. ``"4/60"``) into ``(limit, period_seconds)``.

    Raises:
      ValueError: when the text is not of that form or either number is not positive.
    """
    try:
        limit_text, period_text = rate.split("/", 1)
        limit, period = int(limit_text), float(period_text)
    except ValueError:
        raise ValueError(f"{field}: expected LIMIT/SECONDS such as 4/60, got {rate!r}") from None
    if limit < 1 or period <= 0:
        raise ValueError(f"{field}: limit and period must be positive, got {rate!r}")
    return limit, period


def parse_fernet_keys(value: str) -> list[bytes]:
    """The comma-separated Fernet keys of ``SPEEDTIER_CONNECTOR_CREDENTIALS_KEY``.

    Raises:
      ValueError: no key, or a part that is not url-safe base64 of 32 bytes.
    """
    keys: list[bytes] = []
    for index, part in enumerate(p.strip() for p in value.split(",")):
        if not part:
            continue
        try:
            raw = base64.urlsafe_b64decode(part.encode())
        except (ValueError, binascii.Error):
            raw = b""
        if len(raw) != 32:
            raise ValueError(
                f"SPEEDTIER_CONNECTOR_CREDENTIALS_KEY: key {index + 1} is not a Fernet key "
                "(url-safe base64 of 32 bytes)"
            )
        keys.append(part.encode())
    if not keys:
        raise ValueError("SPEEDTIER_CONNECTOR_CREDENTIALS_KEY: no key")
    return keys


def effect_names(value: str) -> tuple[str, ...]:
    """A comma-separated list of effect names (``PROVIDER_SYNC_NATIVE_EFFECTS``), in the order
    given, without blanks or repeats; a name that is not lower-case letters and underscores
    is a ValueError naming it."""
    names = [name.strip() for name in value.split(",") if name.strip()]
    for name in names:
        if not re.fullmatch(r"[a-z_]+", name):
            raise ValueError(f"PROVIDER_SYNC_NATIVE_EFFECTS: {name!r} is not an effect name")
    return tuple(dict.fromkeys(names))


def network_list(value: str, *, field: str = "networks") -> list[str]:
    """A comma-separated list of networks (CIDR) as strings; a ValueError naming ``field``
    when one is not a network."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    for item in items:
        try:
            ipaddress.ip_network(item)
        except ValueError as exc:
            raise ValueError(f"{field}: {exc}") from exc
    return items


def with_scheme(url: str | None, schemes: tuple[str, ...]) -> str | None:
    """``url`` (or None) when it starts with one of ``schemes``; a ValueError otherwise."""
    if url is not None and not url.startswith(schemes):
        raise ValueError(f"expected a URL starting with {' or '.join(schemes)}")
    return url


def url_location(url: str) -> str:
    """Where ``url`` points, without its credentials: ``host:port/path`` (a socket's path)."""
    parts = urlsplit(url)
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    return f"{parts.hostname or parts.path or '?'}{port}{parts.path if parts.hostname else ''}"


def invalid_message(error: ValidationError, variables: dict[str, str]) -> str:
    """One line naming each variable whose value ``error`` refused (``variables``: field ->
    its environment variable)."""
    problems = []
    for item in error.errors(include_input=False, include_url=False):
        field = str(item["loc"][0]) if item["loc"] else ""
        name = variables.get(field, field)
        where = "".join(f"[{part}]" for part in item["loc"][1:])
        problems.append(f"{name}{where}: {item['msg']}")
    return "invalid settings: " + "; ".join(problems)


def unparsable_message(message: str, variables: dict[str, str]) -> str:
    """pydantic-settings' message for a JSON variable it could not parse, naming the
    variable rather than the field."""
    match = re.search(r'field "([^"]+)"', message)
    if match is None:
        return f"invalid settings: {message}"
    field = match.group(1)
    return f"invalid settings: {variables.get(field, field)}: not valid JSON"
