"""The loop IR as readable text: one statement per line, nesting by indentation."""

from __future__ import annotations

import math

from flowjit.lowering.loops import (
    Accumulator,
    AccValue,
    Const,
    Expr,
    If,
    Kernel,
    Let,
    Load,
    Loop,
    Prim,
    Store,
    Update,
    Var,
)
from flowjit.lowering.scalar import INTRINSICS

_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<",
          "le": "<=", "gt": ">", "ge": ">=", "and": "&&", "or": "||", "xor": "^",
          "idiv": "//", "irem": "%"}  # idiv and irem truncate toward zero, as C's / and %


def print_expr(e: Expr) -> str:
    """``e`` as text: infix arithmetic, ``tanh.f32(x)`` for intrinsics, ``in0[i1, i2]``."""
    if isinstance(e, Const):
        v = e.value
        if isinstance(v, float) and not math.isfinite(v):
            text = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
        elif isinstance(v, bool):
            text = repr(v).lower()
        elif isinstance(v, float):
            text = repr(float(v)) if e.dtype.itemsize == 8 else str(e.dtype.np.type(v))  # shortest repr
        else:
            text = repr(v)
        return text if e.dtype.short == "i64" else f"{text}:{e.dtype.short}"
    if isinstance(e, Var):
        return e.name
    if isinstance(e, AccValue):
        return f"{e.name}.value"
    if isinstance(e, Load):
        return f"{e.buffer}[{', '.join(print_expr(i) for i in e.index)}]"
    assert isinstance(e, Prim)
    args = [print_expr(a) for a in e.args]
    if e.op in _INFIX:
        return f"({args[0]} {_INFIX[e.op]} {args[1]})"
    if e.op == "neg":
        return f"-{args[0]}"
    if e.op == "not":
        return f"!{args[0]}"
    if e.op == "select":
        return f"({args[0]} ? {args[1]} : {args[2]})"
    if e.op == "cast":
        return f"{e.dtype.short}({args[0]})"
    if e.op in INTRINSICS:
        return f"{e.op}.{e.dtype.short}({', '.join(args)})"
    return f"{e.op}({', '.join(args)})"


def _lines(body: tuple, indent: str, out: list) -> None:
    for s in body:
        if isinstance(s, Loop):
            step = f", {s.step}" if s.step != 1 else ""
            kw = "".join(word for word, on in (("parallel ", s.parallel), ("streaming ", s.stream),
                                               ("scalar ", s.scalar), (f"block{s.block} ", s.block),
                                               (f"lanes{s.lanes} ", s.lanes)) if on) + "for"
            out.append(f"{indent}{kw} {s.var} in {print_expr(s.start)}..{print_expr(s.stop)}{step}:")
            _lines(s.body, indent + "  ", out)
        elif isinstance(s, Let):
            out.append(f"{indent}{s.name}: {s.value.dtype.short} = {print_expr(s.value)}")
        elif isinstance(s, Store):
            out.append(f"{indent}{s.buffer}[{', '.join(print_expr(i) for i in s.index)}] = {print_expr(s.value)}")
        elif isinstance(s, Accumulator):
            out.append(f"{indent}acc {s.name}: {s.kind} {s.dtype.short} = {print_expr(s.start)}")
        elif isinstance(s, Update):
            at = f" at {print_expr(s.position)}" if s.position is not None else ""
            out.append(f"{indent}{s.name} <- {print_expr(s.value)}{at}")
        elif isinstance(s, If):
            out.append(f"{indent}if {print_expr(s.cond)}:")
            _lines(s.then, indent + "  ", out)
            if s.orelse:
                out.append(f"{indent}else:")
                _lines(s.orelse, indent + "  ", out)
        else:
            raise TypeError(f"not a loop-IR statement: {s!r}")


def print_kernel(k: Kernel) -> str:
    """The kernel as text: its signature, its size variables, then its body."""
    params = ", ".join(f"{b.role} {b.name}: {b.dtype.short}[{b.rank}]" for b in k.buffers if b.role != "temp")
    out = [f"kernel {k.name}({params}):"]
    out.extend(f"  {s.name} = {s.buffer}.shape[{s.dim}]" for s in k.sizes)
    out.extend(f"  temp {b.name}: {b.dtype.short}[{', '.join(print_expr(n) for n in b.shape)}]"
               for b in k.buffers if b.role == "temp")
    for o, outs in zip(k.outputs, k.in_place):
        if outs:
            out.append(f"  # {o.name} may overwrite {', '.join(outs)}")
    _lines(k.body, "  ", out)
    return "\n".join(out) + "\n"
