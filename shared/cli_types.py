"""The click parameter types the ``speedtier`` commands share, so a value the database or a
timer cannot take is a usage error (exit 2, naming the option) and not a traceback."""

from __future__ import annotations

import math
from typing import Any

import click

#: The largest id a bigint column holds (``shared.inputs.MAX_ID``, repeated here so a command
#: does not import pydantic for it).
MAX_ID = 2**63 - 1

#: A record id: 1 to 2^63-1.
RECORD_ID = click.IntRange(min=1, max=MAX_ID)


class Seconds(click.FloatRange):
    """A finite number of seconds within the range (``nan`` and ``inf`` are refused: a
    range check lets ``nan`` through, and a timer cannot take ``inf``)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number of seconds", param, ctx)
        return number
