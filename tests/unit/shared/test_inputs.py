"""The shared input rules: what the validators accept is what the documented patterns say."""

from __future__ import annotations

import re
import sys
from typing import Annotated, Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from shared.inputs import (
    NOT_BLANK_PATTERN,
    NUL_FREE,
    NUL_FREE_PATTERN,
    TRIMMED,
    WHITESPACE,
    JsonInt,
)


class Form(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=8), TRIMMED] = "x"
    note: Annotated[str, NUL_FREE] = ""
    count: JsonInt = Field(1, ge=1, le=10)


def accepts(**fields: Any) -> bool:
    try:
        Form.model_validate(fields)
    except ValidationError:
        return False
    return True


def test_whitespace_is_exactly_what_str_strip_trims() -> None:
    every_space = {chr(code) for code in range(sys.maxunicode + 1) if chr(code).isspace()}

    assert set(WHITESPACE) == every_space
    assert "".join(sorted(every_space)).strip() == ""


# Text drawn mostly from the characters the rules are about.
interesting = st.text(
    alphabet=st.sampled_from(["\x00", "a", "é", "\u200b", "\ufeff", *WHITESPACE]), max_size=6
) | st.text(max_size=6)


@given(interesting)
def test_nul_free_accepts_what_its_pattern_matches(value: str) -> None:
    assert accepts(note=value) == (re.search(NUL_FREE_PATTERN, value) is not None)


@given(interesting)
def test_a_trimmed_string_accepts_what_its_pattern_matches(value: str) -> None:
    documented = re.search(NOT_BLANK_PATTERN, value) is not None and 1 <= len(value) <= 8

    assert accepts(name=value) == documented
    if documented:
        assert Form.model_validate({"name": value}).name == value.strip()


def test_lengths_count_the_string_as_sent_then_it_is_trimmed() -> None:
    assert Form.model_validate({"name": "  abc  "}).name == "abc"
    assert not accepts(name=" " * 6 + "abc")  # 9 characters as sent, 3 once trimmed
    assert not accepts(name="   ")


@pytest.mark.parametrize(
    ("raw", "count"),
    [("5", 5), ("5.0", 5), ("5e0", 5), ("1E1", 10)],
)
def test_a_whole_number_is_an_integer_however_it_is_written(raw: str, count: int) -> None:
    assert Form.model_validate_json(f'{{"count": {raw}}}').count == count


@pytest.mark.parametrize("raw", ["5.5", '"5"', "true", "1e400", "11.0", "0.0", "null"])
def test_anything_else_is_not_an_integer_of_the_range(raw: str) -> None:
    with pytest.raises(ValidationError):
        Form.model_validate_json(f'{{"count": {raw}}}')


def test_messages_name_the_rule() -> None:
    with pytest.raises(ValidationError) as nul:
        Form.model_validate({"note": "a\x00b"})
    with pytest.raises(ValidationError) as blank:
        Form.model_validate({"name": "\u3000"})

    assert nul.value.errors()[0]["msg"] == "must not contain NUL (U+0000)"
    assert blank.value.errors()[0]["msg"] == "must not be blank"
