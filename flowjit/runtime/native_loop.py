"""Native loops: a ``while`` or ``scan`` whose blocks compiled to kernels runs as one numba
function, so an iteration costs the kernels' work and no Python. What each op does comes
from its primitive's declared ``role`` (``branch``, ``while_loop``, ``scan_loop``,
``matrix_product``, the layout roles) and ``loop``, never from its name.

``native_loop(op, runners)`` writes one numba function per block (the block's kernels
called in its memory plan's order, outputs from ``np.empty``; a 2-D matmul as numba's
``np.dot``; a transpose left for a matmul as a contiguous copy, a reshape as a view; a
``cond``, ``while`` or ``scan`` inside as a call of its own generated function) and one
for the loop (the semantics of ``flowjit/ir/primitives/control.py``), into one module of
the kernel cache, so a new process loads it compiled, as it does kernels. The blocks'
kernels are compiled first, on both cores (``precompile``). It returns a callable with the
primitive reference's signature, or None when some step has no native form here (a random
draw, a batched matmul, a value numba cannot hold): the loop then steps in Python.
Inside, a 0-d value is a 1-element array, as kernels take it; constants a block makes
are computed once and passed in as arguments.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


class _NotNative(Exception):
    pass


def _np_dtype(dtype: Any) -> str:
    name = np.dtype(dtype).name
    return "np.bool_" if name == "bool" else f"np.{name}"


class _Module:
    """The generated module: kernel imports and functions; every function returns a tuple."""

    def __init__(self) -> None:
        self.imports: list[str] = []
        self.functions: list[str] = []
        self.count = 0
        self.kernels: list[tuple[Any, tuple]] = []  # (kernel, argument types) the functions call

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def add(self, name: str, params: list[str], lines: list[str]) -> None:
        self.functions.append("\n".join(["@njit(cache=CACHE, nogil=True)", f"def {name}({', '.join(params)}):",
                                         *("    " + x for x in lines)]))


def _library_step(op: Any, ins: list[str]) -> str:
    """The numba expression for a 2-D float matmul or a view the fusion pass left."""
    types = [v.type for v in op.inputs] + [r.type for r in op.results]
    if any(not t.shape for t in types):
        raise _NotNative(f"{op.name} on a 0-d value")
    role = op.primitive.role
    if role == "matrix_product" and all(len(t.shape) == 2 and t.dtype.is_float and t.dtype.name != "float16"
                                   for t in types):
        return f"np.dot({ins[0]}, {ins[1]})"
    if role == "permute_axes" and tuple(op.attrs["perm"]) == (1, 0):
        # A contiguous copy: kernels and np.dot then see one array type (each new type compiles again).
        return f"np.ascontiguousarray({ins[0]}.T)"
    if role in ("row_major_reshape", "unit_axes_reshape"):
        return f"np.ascontiguousarray({ins[0]}).reshape({tuple(op.results[0].type.shape)!r})"
    raise _NotNative(f"{op.name} has no native form here")


def _block_function(mod: _Module, ex: Any) -> tuple[str, list[np.ndarray]]:
    """A function running the compiled block ``ex``: ``name(args..., constants...)``;
    returns its name and the constant arrays a caller passes after the arguments."""
    if ex.backend != "numba":
        raise _NotNative("a block not compiled with numba")
    name = mod.fresh("block")
    slots = ex.memory_plan.slots
    params = [f"v{slots[a.id]}" for a in ex.function.args]
    constants: list[np.ndarray] = []
    const_params: list[str] = []
    lines: list[str] = []
    for st in ex._steps:
        ins = [f"v{s}" for s in st.ins]
        outs = [f"v{s}" for s in st.outs]
        if st.kernel is not None:
            from flowjit.runtime.executable import _signature
            mod.kernels.append((st.kernel, _signature(st)))
            kname = mod.fresh("kernel")
            module = "flowjit_kernels." + os.path.splitext(os.path.basename(st.kernel.path))[0]
            mod.imports.append(f"from {module} import {st.kernel.fname} as {kname}")
            if st.into is not None:
                lines += [f"{kname}({', '.join(ins)}, {ins[st.into]})", f"{outs[0]} = {ins[st.into]}"]
                continue
            lines += [f"{out} = np.empty({tuple(shape)!r}, {_np_dtype(dtype)})"
                      for out, (shape, dtype) in zip(outs, st.kernel._out_specs)]
            lines.append(f"{kname}({', '.join(ins + outs)})")
        elif st.op.primitive.kind == "constant":
            value = np.asarray(st.op.primitive.impl(**st.op.attrs))
            constants.append(np.ascontiguousarray(value.reshape(value.shape or (1,))))
            const_params.append(outs[0])
        elif st.op.id in ex.control_blocks:
            fname, inner = _control_function(mod, st.op, ex.control_blocks[st.op.id])
            extra = [mod.fresh("c") for _ in inner]
            constants += inner
            const_params += extra
            lines.append(f"{', '.join(outs)}, = {fname}({', '.join(ins + extra)})")
        else:
            lines.append(f"{outs[0]} = {_library_step(st.op, ins)}")
    lines.append(f"return ({', '.join(f'v{s}' for s in ex._returns)},)")
    mod.add(name, params + const_params, lines)
    return name, constants


def _control_function(mod: _Module, op: Any, runners: Sequence[Any]) -> tuple[str, list[np.ndarray]]:
    """A function with ``op``'s semantics over its compiled blocks: ``name(inputs...,
    constants...)`` returning its results; the constants are those of its blocks."""
    blocks = [_block_function(mod, r) for r in runners]
    name = mod.fresh(op.name + "_")
    ins = [mod.fresh("a") for _ in op.inputs]
    consts = [[mod.fresh("c") for _ in c] for _, c in blocks]

    def call(j: int, args: list[str]) -> str:
        return f"{blocks[j][0]}({', '.join(args + consts[j])})"

    attrs, role = op.attrs, op.primitive.role
    if role == "branch":
        lines = [f"k = {ins[0]}[0]"]
        for j in range(len(blocks) - 1):
            lines += [f"{'if' if j == 0 else 'elif'} k <= {j}:", f"    return {call(j, ins[1:])}"]
        lines.append(f"return {call(len(blocks) - 1, ins[1:])}")
    elif role == "while_loop":
        k = attrs["num_carry"]
        carry, rest = ins[:k], ins[k:]
        limit = attrs["maximum_iterations"]
        lines = ["n = 0", f"while {'True' if limit < 0 else f'n < {limit}'}:",
                 f"    if not {call(0, carry + rest)}[0][0]:", "        break",
                 f"    r = {call(1, carry + rest)}", *(f"    {c} = r[{i}]" for i, c in enumerate(carry)),
                 "    n += 1", f"return ({', '.join(carry)},)"]
    elif role == "scan_loop":
        k, n_xs, length = attrs["num_carry"], attrs["num_xs"], attrs["length"]
        carry, xs, rest = ins[:k], ins[k:k + n_xs], ins[k + n_xs:]
        slices = [f"{x}[t:t + 1]" if len(v.type.shape) == 1 else f"{x}[t]"
                  for x, v in zip(xs, op.inputs[k:k + n_xs])]
        ys = [(mod.fresh("y"), r.type) for r in op.results[k:]]
        lines = [f"{y} = np.empty({tuple(t.shape)!r}, {_np_dtype(t.dtype.np)})" for y, t in ys]
        lines += [f"for i in range({length}):", f"    t = {f'{length} - 1 - i' if attrs['reverse'] else 'i'}",
                  f"    r = {call(0, carry + slices + rest)}",
                  *(f"    {c} = r[{i}]" for i, c in enumerate(carry)),
                  *(f"    {y}[t] = r[{k + i}]{'' if t.shape[1:] else '[0]'}" for i, (y, t) in enumerate(ys)),
                  f"return ({', '.join(carry + [y for y, _ in ys])},)"]
    else:
        raise _NotNative(f"{op.name} (role {role}) has no native control flow here")
    mod.add(name, ins + [c for cs in consts for c in cs], lines)
    return name, [c for _, cs in blocks for c in cs]


def native_loop(op: Any, runners: Sequence[Any]) -> Callable[..., tuple] | None:
    """The loop ``op`` (``while`` or ``scan``: a primitive that declares a ``loop``) as one
    numba function over its compiled blocks ``runners``, or None when some step has no
    native form here."""
    from flowjit.codegen_cpu.compile import import_source, precompile, write_source

    if op.primitive.loop is None:
        return None
    mod = _Module()
    try:
        fname, constants = _control_function(mod, op, runners)
    except _NotNative:
        return None
    header = [f"# Generated by flowjit: a native {op.name} loop over its compiled blocks.", "import numpy as np",
              "from numba import njit", *dict.fromkeys(mod.imports)]
    path, _ = write_source("\n\n\n".join(["\n".join(header), *mod.functions]) + "\n")
    precompile(mod.kernels)  # on both cores, before the loop's own compile links them
    loop = getattr(import_source(path), fname)
    in_types = [v.type for v in op.inputs]
    out_types = [r.type for r in op.results]
    k = op.primitive.loop.num_carry(op.attrs)

    def run(*inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        arrays = [np.ascontiguousarray(np.asarray(x, t.dtype.np).reshape(t.shape or (1,)))
                  for x, t in zip(inputs, in_types)]
        arrays[:k] = [a.copy() for a in arrays[:k]]  # the loop rebinds the carry; the caller's stays
        outs = loop(*arrays, *constants)
        return tuple(np.asarray(o).reshape(t.shape) for o, t in zip(outs, out_types))

    run.path = path  # type: ignore[attr-defined]
    return run
