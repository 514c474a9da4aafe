"""The tier table: which tiers exist and which provider runs in which tier.

This is data. Adding a provider is one line in ``PROVIDER_TIERS``. How many jobs of one
organization may run at once is not here: each family declares its own (``Family.group_caps``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Tier:
    """A pool of workers, deployed and scaled on its own.

    ``prefetch_per_thread``: the messages a worker process holds per thread when no prefetch
    is configured (Celery's prefetch multiplier). Two keep short jobs' threads fed while a
    fetch is on its way. One in the slow tier: its jobs are long and paced by windows, whose
    reserved starts fall due together at a window's opening; a message held there beyond the
    process's threads waits a whole job for one while another process's thread is idle.
    """

    name: str
    purpose: str
    prefetch_per_thread: int = 2

    def prefetch(self, threads: int, configured: int = 0) -> int:
        """The messages a worker process of ``threads`` threads fetches ahead per queue:
        ``configured`` when set (not 0), else ``prefetch_per_thread`` per thread."""
        return configured or threads * self.prefetch_per_thread


TIERS: dict[str, Tier] = {
    "fast": Tier("fast", "providers with generous rate limits; high concurrency"),
    "slow": Tier("slow", "providers with tight rate limits; low concurrency", 1),
    "maintenance": Tier("maintenance", "routine work that calls no provider: ticks, sweeps"),
}

#: Provider -> tier (seed 004). The knowledge providers sit where their rate windows put them:
#: Zendesk and Confluence allow thousands of calls a minute per data source, Scribe 50 a
#: minute, and a URL crawl is bound by per-host politeness.
PROVIDER_TIERS: dict[str, str] = {
    "linear": "fast",
    "github": "fast",
    "git": "fast",
    "gitlab": "fast",
    "zendesk": "fast",
    "confluence": "fast",
    "notion": "slow",
    "google_drive": "slow",
    "sharepoint": "slow",
    "attio": "slow",
    "hubspot": "slow",
    "asana": "slow",
    "website": "slow",
    "scribe": "slow",
    "url_crawl": "slow",
    "url": "slow",
}

#: Where a provider missing from the table runs.
DEFAULT_TIER = "slow"


def tier_for_provider(provider: str | None) -> str:
    """The tier a provider's work runs in; an unknown or absent provider runs in the slow tier."""
    if provider is None:
        return DEFAULT_TIER
    return PROVIDER_TIERS.get(provider.lower(), DEFAULT_TIER)


def queue_name(family: str, tier: str) -> str:
    """Queue names are ``<family>.<tier>``."""
    if tier not in TIERS:
        raise ValueError(f"unknown tier {tier!r}; known: {', '.join(TIERS)}")
    return f"{family}.{tier}"
