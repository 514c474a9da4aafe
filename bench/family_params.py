"""The benchmark families' request models.

``bench.families`` names them by reference (``"bench.family_params:NoopParams"``), as any
family may: the router imports this module when it first validates a request, and a worker
process, which never validates params, imports neither it nor pydantic.
"""

from __future__ import annotations

from pydantic import BaseModel


class NoopParams(BaseModel):
    item: str


class WorkParams(BaseModel):
    item: str
    sleep: float = 0.0


class SyncParams(BaseModel):
    document: str
    data_source: str
