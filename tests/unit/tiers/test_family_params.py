"""A family's params named by reference: imported when a request is first validated, so a
worker process, which only runs jobs, never imports pydantic (a smaller resident set)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from router.registry import Registry
from router.requests import JobRequest, ValidationFailed, route
from tests.fresh_process import printed_by
from tiers.families import Family

REFERENCE = f"{__name__}:ItemParams"


class ItemParams(BaseModel):
    item: str


NOT_A_MODEL = 42


def _family(params: type[BaseModel] | str, name: str = "t_ref") -> Family:
    return Family(
        name=name,
        kind=f"{name}_kind",
        handler=lambda organization_id, item: None,
        params=params,
        job_id=lambda o, p: f"ref-{o}-{p.item}",
        fixed_tier="fast",
    )


def test_a_reference_resolves_to_its_model_and_routes_like_the_class() -> None:
    by_reference, by_class = _family(REFERENCE), _family(ItemParams, name="t_cls")
    assert by_reference.params_model() is ItemParams
    assert by_class.params_model() is ItemParams

    registry = Registry()
    registry.add(by_reference)
    routed = route(registry, JobRequest("t_ref_kind", 7, {"item": "a"}))
    assert routed.params == ItemParams(item="a")
    assert routed.job_id == "ref-7-a"

    with pytest.raises(ValidationFailed) as failed:
        route(registry, JobRequest("t_ref_kind", 7, {"item": ["not", "a", "string"]}))
    assert "item" in failed.value.errors


@pytest.mark.parametrize("reference", ["tests.unit.tiers", ":ItemParams", "module:"])
def test_a_reference_without_module_and_name_is_refused_when_declared(reference: str) -> None:
    with pytest.raises(ValueError, match=r"package\.module:Model"):
        _family(reference)


@pytest.mark.parametrize(
    ("reference", "error", "says"),
    [
        ("tests.unit.tiers.no_such_module:ItemParams", LookupError, "cannot be imported"),
        (f"{__name__}:Missing", LookupError, "cannot be imported"),
        (f"{__name__}:NOT_A_MODEL", TypeError, "not a pydantic model"),
    ],
)
def test_a_reference_that_does_not_name_a_model_fails_on_first_use(
    reference: str, error: type[Exception], says: str
) -> None:
    family = _family(reference, name=f"t_bad_{abs(hash(reference))}")
    with pytest.raises(error, match=says) as raised:
        family.params_model()
    assert family.name in str(raised.value)


def test_a_worker_process_of_the_benchmark_families_never_imports_pydantic() -> None:
    """The platform's worker path (broker, middleware, worker loop) and families declared by
    reference load no pydantic; the router, on the enqueue side, does."""
    script = (
        "import sys\n"
        "from bench.families import make_broker\n"
        "import tiers.worker\n"
        "broker, families = make_broker('redis://127.0.0.1:1/0', 'never-connected')\n"
        "print('pydantic' in sys.modules)\n"
        "families['b_noop'].params_model()\n"
        "print('pydantic' in sys.modules)\n"
    )
    assert printed_by(script) == ["False", "True"]
