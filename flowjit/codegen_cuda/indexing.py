"""Number literals in scalar templates for the CUDA emitter.

The index arithmetic, casts and literals both emitters share live in
``flowjit.ir.index_source``; what is here is the CUDA emitter's own.
"""

from __future__ import annotations

import re

from flowjit.ir.dtypes import DType
from flowjit.ir.index_source import (
    literal,
)

_NUMBER = re.compile(r"(?<![\w.])(\d+(?:\.\d*)?)(?![\w.])")


def typed_numbers(template: str, d: DType) -> str:
    """A registry scalar template with its bare number literals given float dtype ``d``:
    numba would otherwise compute ``1 / x`` of a float32 in float64 (on a GPU, at a
    fraction of the float32 rate)."""
    if not d.is_float or d.name == "float16":
        return template
    return _NUMBER.sub(lambda m: literal(float(m.group(1)), d), template)

