"""``Executable``: a Function prepared to run, and the one place that runs programs.

The reference interpreter is the only backend so far; the CPU compiler plugs in here.
Results never alias the caller's arguments or the program's constants, so a caller may
mutate what it gets back.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from flowjit.ir.core import Function
from flowjit.ir.interpreter import run_block


class Executable:
    """A program ready to run on ``device`` with ``backend``; call it with a list of arrays."""

    def __init__(self, function: Function, backend: str = "interpreter", device: str = "cpu:0"):
        self.function = function
        self.backend = backend
        self.device = device
        self._dtypes = [a.type.dtype.np for a in function.args]

    def __call__(self, args: Sequence[object]) -> list[np.ndarray]:
        arrays = [np.asarray(a).astype(d, copy=False) for a, d in zip(args, self._dtypes)]
        out = run_block(self.function.body, arrays)
        # A result that is an argument, a constant or a view of either is copied first.
        ids = {id(a) for a in arrays}
        return [x if x.flags.writeable and x.flags.owndata and id(x) not in ids else np.array(x)
                for x in out]


def compile_function(function: Function, interpret: bool = True, device: str = "cpu:0") -> Executable:
    """Prepare ``function`` to run (with the reference interpreter until a compiler is present)."""
    return Executable(function, "interpreter", device)
