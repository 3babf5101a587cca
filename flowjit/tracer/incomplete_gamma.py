"""The incomplete gamma sums (``flowjit/ir/incomplete_gamma.py``) traced with flowjit's own
ops and while loops: the derivative of a gamma sample in its shape (``fj.random.gamma``'s
implicit gradient), and the block ``gammainc_grad_a``'s decomposition inlines, handed down
to the IR layer at import (``provide_traced_derivative``), so that differentiating ``P(a, x)``
in its order compiles into the native program like any other loop.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from flowjit.ir.core import Block
from flowjit.ir.dtypes import float64
from flowjit.ir.incomplete_gamma import (
    ArrayOps,
    gamma_sample_derivative,
    gammainc_derivative_a,
    provide_traced_derivative,
)
from flowjit.ir.types import TensorType
from flowjit.tracer.control_flow import while_loop
from flowjit.tracer.core import Trace, bind, trace_context
from flowjit.tracer.numpy import conversion, layout, reductions, ufuncs


def lgamma(x: Any) -> Any:
    """log |Gamma(x)|, elementwise (the registry's ``lgamma``; ``fj.scipy.special.gammaln``
    sits above this layer)."""
    return bind("lgamma", [x], {})


TRACED_OPS = ArrayOps(where=ufuncs.where, log=ufuncs.log, exp=ufuncs.exp, absolute=ufuncs.absolute,
                      any=reductions.any, logical_and=ufuncs.logical_and, logical_or=ufuncs.logical_or,
                      logical_not=ufuncs.logical_not, isnan=ufuncs.isnan,
                      digamma=lambda x: bind("polygamma", [x], {"n": 0}), lgamma=lgamma)


def sample_shape_derivative(alpha: Any, x: Any) -> Any:
    """``dx/da`` of gamma samples ``x`` of shapes ``alpha`` at their fixed quantiles, summed in
    compiled while loops (float64)."""
    return gamma_sample_derivative(TRACED_OPS, while_loop, conversion.astype(alpha, float64),
                                   conversion.astype(x, float64))


@functools.lru_cache(maxsize=64)
def order_derivative_block(a: TensorType, x: TensorType) -> Block:
    """A block of arguments ``a`` and ``x`` returning ``dP(a, x)/da`` at their broadcast shape
    in ``x``'s dtype (``gammainc_grad_a``), summed in float64 in compiled while loops. Traced
    once per pair of types; each decomposition inlines a copy."""
    trace = Trace(Block(), name="gammainc_grad_a")
    shape = tuple(np.broadcast_shapes(a.shape, x.shape))
    with trace_context(trace):
        ta, tx = trace.new_arg(a, "a"), trace.new_arg(x, "x")
        a64 = layout.broadcast_to(conversion.astype(ta, float64), shape)
        x64 = layout.broadcast_to(conversion.astype(tx, float64), shape)
        out = conversion.astype(gammainc_derivative_a(TRACED_OPS, while_loop, a64, x64), x.dtype.np)
    trace.block.set_returns([out.value])
    return trace.block


provide_traced_derivative(order_derivative_block)
