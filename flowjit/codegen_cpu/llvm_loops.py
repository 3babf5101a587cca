"""A counted loop in llvmlite's IR builder, for flowjit's hand-written IR (the LAPACK
wrappers, the programs' shared entry points, a batch of matrix products in a program's
steps): kernels' loops come from loop IR (``emit.py``) instead."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def counted_loop(b: Any, count: Any, name: str, body: Callable[[Any], None], start: Any = None) -> None:
    """``for i in range(start, count): body(i)`` at builder ``b`` (an i64 ``i``; ``start``
    0 when None); ``body`` may branch out of the loop and leave ``b`` in any block that
    goes on to the next ``i``. ``b`` ends positioned after the loop."""
    from llvmlite import ir

    i64 = ir.IntType(64)
    fn = b.function
    pre = b.block
    head, inner, done = (fn.append_basic_block(f"{name}.{x}") for x in ("head", "body", "done"))
    b.branch(head)
    b.position_at_end(head)
    i = b.phi(i64, name=name)
    i.add_incoming(start if start is not None else ir.Constant(i64, 0), pre)
    b.cbranch(b.icmp_signed("<", i, count), inner, done)
    b.position_at_end(inner)
    body(i)
    i.add_incoming(b.add(i, ir.Constant(i64, 1)), b.block)
    b.branch(head)
    b.position_at_end(done)
