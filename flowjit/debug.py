"""``fj.debug``: opt-in numerics checking.

``fj.debug.check_numerics()`` (a context manager; ``enable_check_numerics()`` and
``disable_check_numerics()`` switch it for the process, as does ``FLOWJIT_CHECK_NUMERICS=1``)
makes every ``fj.function`` call check its results, the new values of the Variables it
updates included, for NaN and Inf. When one is found, the call re-runs its traced
program op by op with the NumPy interpreter and raises a ``NumericsError`` naming the
first op whose result is not finite, its type and the user's source line, before any
Variable is updated: the parameters keep their last finite values. The check costs a
scan of the results per call, and the re-run happens only on failure (TensorFlow's
``tf.debugging.enable_check_numerics``, JAX's ``jax_debug_nans``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence

import numpy as np

from flowjit.ir.core import Function
from flowjit.ir.errors import FlowjitError
from flowjit.ir.interpreter import run_op
from flowjit.ir.printer import format_loc, op_lines
from flowjit.runtime import hooks


class NumericsError(FlowjitError, FloatingPointError):
    """A result of a checked call holds NaN or Inf; the message names the op that made it."""


# Whether calls check numerics now (they then take the slow path: runtime.hooks).
_checked = [False]


def _set(on: bool) -> None:
    _checked[0] = on
    hooks.set_reason("check_numerics", int(on))


_set(os.environ.get("FLOWJIT_CHECK_NUMERICS", "") not in ("", "0"))


def numerics_checked() -> bool:
    """Whether calls check their results for NaN and Inf now."""
    return _checked[0]


def enable_check_numerics() -> None:
    """Check every later ``fj.function`` call's results for NaN and Inf."""
    _set(True)


def disable_check_numerics() -> None:
    """Stop checking results (the default)."""
    _set(False)


@contextlib.contextmanager
def check_numerics() -> Iterator[None]:
    """Check results for NaN and Inf inside the ``with`` block."""
    before = _checked[0]
    _set(True)
    try:
        yield
    finally:
        _set(before)


def _non_finite(x: np.ndarray) -> str | None:
    if x.dtype.kind not in "fc" or x.size == 0:
        return None
    bad = ~np.isfinite(x)
    if not bad.any():
        return None
    kinds = [name for name, mask in (("nan", np.isnan(x)), ("inf", np.isposinf(x)), ("-inf", np.isneginf(x)))
             if mask.any()]
    return f"{'/'.join(kinds)} in {int(bad.sum())} of {x.size} elements"


def check_results(fn: Function, args: Sequence[np.ndarray], results: Sequence[np.ndarray]) -> None:
    """Raise ``NumericsError`` when a result of ``fn`` on ``args`` is not finite, naming the
    first op (in program order) that produced a non-finite value, or the argument that
    already held one."""
    if not any(_non_finite(np.asarray(r)) for r in results):
        return
    raise NumericsError(locate_non_finite(fn, args))


def locate_non_finite(fn: Function, args: Sequence[np.ndarray]) -> str:
    """Where ``fn`` run on ``args`` first makes NaN or Inf: a message for the user."""
    env: dict[int, np.ndarray] = {}
    for a, x in zip(fn.args, args):
        arr = np.asarray(x).astype(a.type.dtype.np, copy=False)
        what = _non_finite(arr)
        if what is not None:
            return (f"check_numerics: argument %{a.name} ({a.type}) of @{fn.name} already holds {what}; "
                    "the values passed in (or a Variable) are not finite")
        env[a.id] = arr
    with np.errstate(all="ignore"):
        for op, line in op_lines(fn):
            outs = run_op(op, [env[v.id] for v in op.inputs])
            for r, x in zip(op.results, outs):
                env[r.id] = x
                what = _non_finite(x)
                if what is not None:
                    where = f" at {format_loc(op.loc)}" if op.loc is not None else ""
                    return (f"check_numerics: {op.name}{where} produced {what} of its result {r.type}, from "
                            f"finite inputs; it is the first op of @{fn.name} whose result is not finite:\n"
                            f"    {line}\n"
                            "Guard its inputs (e.g. clip them, add an epsilon, use fj.nn.log_softmax instead "
                            "of log(softmax)) or lower the learning rate")
    return (f"check_numerics: @{fn.name} returned NaN or Inf, but its ops re-run one by one with the NumPy "
            "interpreter stay finite: the compiled kernels differ from the reference here; please report it")
