"""The Dramatiq boundary holds on the installed Dramatiq: every internal that
``tiers/dramatiq_boundary.py`` lists exists with the parameters and attributes the platform
relies on, ``dispatch.lua`` is the script the platform's keys and arguments follow, and the
installed version is inside the pin. An upgrade that changes one fails here, naming it."""

from __future__ import annotations

import hashlib
import importlib
import inspect
from importlib import metadata
from pathlib import Path
from queue import PriorityQueue
from typing import Any

import pytest
from dramatiq.brokers.redis import RedisBroker, _RedisConsumer
from dramatiq.worker import ConsumerThread, Worker

from tiers import dramatiq_boundary
from tiers.dramatiq_boundary import INTERNALS, Internal

ROOT = Path(__file__).resolve().parents[3]


def owner(internal: Internal) -> Any:
    module_name, _, class_name = internal.owner.partition(":")
    module = importlib.import_module(module_name)
    return getattr(module, class_name) if class_name else module


def instances() -> dict[str, Any]:
    """One instance of each owner class, built without connecting (redis-py connects lazily;
    nothing is started)."""
    broker = RedisBroker(url="redis://127.0.0.1:9/0", middleware=[])
    return {
        "dramatiq.brokers.redis:RedisBroker": broker,
        "dramatiq.brokers.redis:_RedisConsumer": _RedisConsumer(broker, "q", 1, 100),
        "dramatiq.worker:Worker": Worker(broker, worker_threads=1),
        "dramatiq.worker:ConsumerThread": ConsumerThread(
            broker=broker,
            queue_name="q",
            prefetch=1,
            work_queue=PriorityQueue(),
            worker_timeout=100,
        ),
    }


@pytest.mark.parametrize("internal", INTERNALS, ids=lambda i: f"{i.owner}.{i.name}")
def test_each_listed_internal_is_there_as_the_platform_uses_it(internal: Internal) -> None:
    found = owner(internal)
    if internal.kind != "attribute":
        assert hasattr(found, internal.name), f"{internal.owner} has no {internal.name}"
    if internal.kind == "method":
        parameters = tuple(inspect.signature(getattr(found, internal.name)).parameters)
        assert parameters == internal.parameters, (
            f"{internal.owner}.{internal.name}{parameters}: the platform expects "
            f"{internal.parameters} ({internal.why})"
        )
    elif internal.kind == "attribute":
        built = instances()[internal.owner]
        assert internal.name in vars(built), (
            f"{internal.owner}() no longer sets {internal.name} ({internal.why})"
        )
    else:
        assert internal.kind == "class" and inspect.isclass(getattr(found, internal.name))


def test_dispatch_lua_is_the_script_the_platform_follows() -> None:
    import dramatiq.brokers.redis as redis_broker

    script = Path(redis_broker.__file__).parent / "redis" / "dispatch.lua"
    digest = hashlib.sha256(script.read_bytes()).hexdigest()
    assert digest == dramatiq_boundary.DISPATCH_LUA_SHA256, (
        "Dramatiq's dispatch.lua changed: compare its keys and arguments with "
        "tiers/lua/_prelude.lua and TierBroker._dispatch, then update DISPATCH_LUA_SHA256"
    )


def test_the_installed_dramatiq_is_inside_the_pin_setup_cfg_names() -> None:
    pin = dramatiq_boundary.PINNED
    assert f"dramatiq[redis]{pin}" in (ROOT / "setup.cfg").read_text()
    low, high = (part.lstrip("<>=") for part in pin.split(","))
    installed = tuple(int(p) for p in metadata.version("dramatiq").split(".")[:2])
    assert (
        tuple(int(p) for p in low.split(".")) <= installed < tuple(int(p) for p in high.split("."))
    )


def test_the_platform_takes_the_consumer_base_from_the_boundary() -> None:
    from tiers.consumer import TierConsumer

    assert TierConsumer.__mro__[1] is dramatiq_boundary.RedisConsumer
