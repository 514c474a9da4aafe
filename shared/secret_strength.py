"""How strong a shared secret is, and the floor production and staging hold it to.

A token the deployment accepts from callers (``INTERNAL_API_TOKEN``: the internal API's bearer
token and the dashboard's sign-in) must be long and varied enough that guessing it is out of
reach, rate limit or not:

==========================  ========================================================================
rule                        why
==========================  ========================================================================
at least 32 characters      ``secrets.token_urlsafe(32)`` gives 43, ``openssl rand -hex 32`` 64
at least 96 bits estimated  length times the Shannon entropy of its own characters: a long token
                            of a few repeated characters (``aaaa...``, ``abcabc...``) is refused
==========================  ========================================================================

The estimate is an upper bound on what the string can hold, not a measure of how it was made;
it refuses what is certainly weak and lets a generated token through.
"""

from __future__ import annotations

import math
from collections import Counter

MIN_LENGTH = 32
MIN_ENTROPY_BITS = 96.0
#: What the refusal suggests.
GENERATE = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def estimated_entropy_bits(secret: str) -> float:
    """``len(secret)`` times the Shannon entropy (bits) of the secret's character frequencies."""
    if not secret:
        return 0.0
    counts = Counter(secret)
    length = len(secret)
    per_character = -sum(n / length * math.log2(n / length) for n in counts.values())
    return per_character * length


def weakness(secret: str) -> str | None:
    """Why ``secret`` is too weak to guard a production deployment, or None when it is not."""
    if len(secret) < MIN_LENGTH:
        return f"{len(secret)} characters, at least {MIN_LENGTH} are required"
    bits = estimated_entropy_bits(secret)
    if bits < MIN_ENTROPY_BITS:
        return (
            f"about {bits:.0f} bits of entropy, at least {MIN_ENTROPY_BITS:.0f} are required "
            "(too few distinct characters)"
        )
    return None
