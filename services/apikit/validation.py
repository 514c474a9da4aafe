"""Raw input to validated values, the same way on every route.

=======================  ===================================================================
input                    how it is read
=======================  ===================================================================
JSON body                :func:`parse_json`: the route's pydantic model, strict (no string
                         to number coercion, no unknown fields), the rules of
                         :mod:`shared.inputs` (no NUL, whole-number floats are integers)
query string, form       :func:`parse_fields`: the route's model; values are text, so
fields                   numbers are parsed from it
path ids (``<id:...>``)  :class:`IdConverter`: an integer from 1 to 2**63-1; any other
                         segment answers 404 naming the rule, on whichever method
=======================  ===================================================================

Every failure is a :class:`~shared.errors.ValidationFailed` (400 naming each field) except a
bad path id, which is a 404 like an id that names nothing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from werkzeug.exceptions import NotFound
from werkzeug.routing import BaseConverter

from services.apikit.errors import validation_failed
from shared.inputs import MAX_ID

M = TypeVar("M", bound=BaseModel)
_DIGITS = re.compile(r"[1-9][0-9]{0,18}")


def parse_json(model: type[M], raw: bytes) -> M:
    """A JSON body as ``model``. Raises ValidationFailed naming each bad field."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise validation_failed(exc) from None


def parse_fields(model: type[M], fields: Mapping[str, object]) -> M:
    """Query parameters or form fields as ``model``. Raises ValidationFailed naming each
    bad field."""
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        raise validation_failed(exc) from None


class IdConverter(BaseConverter):
    """``<id:name>``: a record id, an integer from 1 to 2**63-1 written plainly.

    The rule matches any one path segment, so ``/knowledge-bases/0`` or ``.../abc`` still
    selects its route: authentication runs first (401 without a key), then the id answers
    404, whatever the method, instead of falling through to a 404 or 405 of another rule.
    """

    regex = r"[^/]+"
    #: The path parameter's schema in the OpenAPI document.
    json_schema: dict[str, Any] = {"type": "integer", "minimum": 1, "maximum": MAX_ID}
    description = f"An id: an integer from 1 to {MAX_ID}; anything else answers 404."

    def to_python(self, value: str) -> int:
        if _DIGITS.fullmatch(value) is None or int(value) > MAX_ID:
            raise NotFound(f"{value!r} is not an id (an integer from 1 to {MAX_ID})")
        return int(value)

    def to_url(self, value: Any) -> str:
        return str(int(value))
