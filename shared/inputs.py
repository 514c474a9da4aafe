"""The rules every value from outside follows, as pydantic types the request models share.

The OpenAPI document is generated from the same types, so what it says is what is checked:

==================  ===========================================================================
input               rule
==================  ===========================================================================
any string          no NUL (U+0000): PostgreSQL text cannot hold it; a 400 names the field
                    (schema: ``pattern`` ``^[^\\x00]*$``)
trimmed string      ``minLength``/``maxLength`` count the string as sent; then surrounding
(names, audience,   whitespace is trimmed, and a string that is only whitespace is refused
search queries)     (schema: a ``pattern`` that asks for one non-whitespace character)
integer             a JSON number with no fraction: ``5`` and ``5.0`` are 5, ``5.5`` is refused;
                    a string (``"5"``) or a boolean is never a number (JSON Schema's ``integer``)
==================  ===========================================================================

"Whitespace" is Python's (``str.isspace``), listed in :data:`WHITESPACE` so the schema's
pattern and the trimming agree character for character.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    ConfigDict,
    Field,
    GetCoreSchemaHandler,
    GetJsonSchemaHandler,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

NUL = "\x00"
#: Every character ``str.isspace()`` holds true for, so ``str.strip()`` trims exactly these.
WHITESPACE = (
    "\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
    "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000"
)


def _character_class(characters: str) -> str:
    """``characters`` as the inside of a regular-expression class, runs as ranges, every
    character escaped as ``\\u`` and four hex digits (read the same by Python, ECMAScript
    and Rust)."""
    codes = sorted(map(ord, characters))
    runs: list[list[int]] = []
    for code in codes:
        if runs and code == runs[-1][1] + 1:
            runs[-1][1] = code
        else:
            runs.append([code, code])
    return "".join(
        f"\\u{first:04x}" if first == last else f"\\u{first:04x}-\\u{last:04x}"
        for first, last in runs
    )


_WHITESPACE_CLASS = _character_class(WHITESPACE)
#: A string without NUL.
NUL_FREE_PATTERN = r"^[^\x00]*$"
#: A string without NUL holding at least one character that is not whitespace.
NOT_BLANK_PATTERN = rf"^[^\x00]*[^\x00{_WHITESPACE_CLASS}][^\x00]*$"


def refuse_nul(value: str) -> str:
    """``value`` unchanged; a NUL in it is a validation error."""
    if NUL in value:
        raise PydanticCustomError("nul_character", "must not contain NUL (U+0000)")
    return value


def trimmed(value: str) -> str:
    """``value`` without surrounding whitespace; blank or holding NUL is an error."""
    value = refuse_nul(value).strip()
    if not value:
        raise PydanticCustomError("blank_string", "must not be blank")
    return value


def whole_number(value: Any) -> Any:
    """A float with no fraction as the int it is (JSON Schema's ``integer``); anything else
    is left for the ``int`` validation to accept or refuse."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


@dataclass(frozen=True)
class StringRule:
    """A check run after a string's own constraints, documented as the schema's
    ``pattern``: put it after the ``Field(...)`` with the lengths in an ``Annotated``."""

    check: Callable[[str], str]
    pattern: str

    def __get_pydantic_core_schema__(
        self, source: Any, handler: GetCoreSchemaHandler
    ) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self.check, handler(source))

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        document = handler(schema)
        document["pattern"] = self.pattern
        return document


#: No NUL in the string.
NUL_FREE = StringRule(refuse_nul, NUL_FREE_PATTERN)
#: No NUL, not blank; the value is trimmed.
TRIMMED = StringRule(trimmed, NOT_BLANK_PATTERN)

#: A string without NUL.
Text = Annotated[str, NUL_FREE]

#: The configuration of a family's request parameters: unknown fields are refused, and the
#: validator is built at the model's first validation (the API's, the router's), not when the
#: model is defined: a worker defines every family's models and validates none.
PARAMS_CONFIG = ConfigDict(extra="forbid", defer_build=True)

#: The pydantic error type of a value that contradicts another field of the same request (a
#: pinned id naming another record): the API answers it 409 ``conflicting_fields``, not 400,
#: since the API document cannot say one field is a function of another.
CONFLICTING: str = "conflicting_fields"


def conflicting(message: str) -> PydanticCustomError:
    """A validator's error for a value that contradicts another field (:data:`CONFLICTING`)."""
    return PydanticCustomError(CONFLICTING, message)


#: Reads a whole-number float as an int. In an ``Annotated``, put range constraints before it
#: (``Annotated[int, Field(ge=1), WHOLE_NUMBER]``) or give them as the field's own
#: ``Field(...)``: after it, pydantic documents them as ``ge``/``le``, which JSON Schema
#: does not know, instead of ``minimum``/``maximum``.
WHOLE_NUMBER = BeforeValidator(whole_number)
#: An integer as JSON Schema means it (``5.0`` is 5).
JsonInt = Annotated[int, WHOLE_NUMBER]
#: The largest id a bigint column holds: a larger one can name no record, and would fail in
#: the database instead of being refused with a 400.
MAX_ID = 2**63 - 1
#: A record id: an integer from 1 to :data:`MAX_ID`.
Id = Annotated[int, Field(ge=1, le=MAX_ID), WHOLE_NUMBER]
