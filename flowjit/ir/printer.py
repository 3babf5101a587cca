"""The text form of a Function: one op a line, which ``parser.parse`` reads back exactly.

    func @step(%x: f32[256,784], %w: f32[784,256] var) -> (f32[]) {
      %0 = matmul %x, %w : f32[256,256]                       # model.py:12
      %1 = reduce_sum %0 {axes=(0,1)} : f32[]
      return %1
    }

Arguments keep their (sanitized, unique) names; op results are numbered in program order.
Attributes are printed in declaration order and omitted when they print the same as their
default (so ``-0.0`` is kept where the default is ``0.0``). Floats print as the shortest
decimal that reads back to the same value (``nan``, ``-nan``, ``inf``, ``-inf``). Array
literals of up to ``INLINE_LITERAL_ELEMENTS`` elements print as nested lists, larger ones
(and those the short form cannot give back exactly: NaN payloads, size-0 shapes such as
``[0,3]``) as base64 of their little-endian bytes, so printing never loses a bit. Devices
print as ``@cpu:1`` (or quoted, ``@"/job:w/gpu:0"``); source locations as a trailing
``# file:line`` comment; an op without results has no ``%r =`` and no ``: types``.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from flowjit.ir.dtypes import DType
from flowjit.ir.registry import Literal

if TYPE_CHECKING:  # the printer reads Values and Ops; core prints itself through it
    from flowjit.ir.core import Block, Function, Op, SourceLoc, Value

INLINE_LITERAL_ELEMENTS = 16
LOC_COLUMN = 58
_NAME_RE = re.compile(r"[^A-Za-z0-9_.]")
_DEVICE_RE = re.compile(r"[A-Za-z0-9_.:]+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def format_scalar(x: Any) -> str:
    """A scalar in the text form: shortest round-trip decimal, ``nan``, ``-inf``, ``true``.

    NaN prints with its sign (``-nan``); its payload bits are not printed (literals whose
    NaNs are not the canonical quiet NaN print as base64 instead, see ``format_literal``).
    """
    if isinstance(x, (bool, np.bool_)):
        return "true" if x else "false"
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        if np.isnan(x):
            return "-nan" if np.signbit(x) else "nan"
        if np.isinf(x):
            return "inf" if x > 0 else "-inf"
        # NumPy's str is the shortest decimal that reads back to the same value of x's width.
        s = str(x) if isinstance(x, np.floating) else repr(float(x))
        return s if any(c in s for c in ".e") else s + ".0"
    raise TypeError(f"cannot print scalar {x!r}")


def format_string(s: str) -> str:
    r"""``s`` double-quoted, with ``\ \" \n \t \r`` and ``\xHH`` for other control characters."""
    out = []
    for c in s:
        if c in _ESCAPES:
            out.append(_ESCAPES[c])
        elif ord(c) < 0x20 or ord(c) == 0x7F:
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return '"' + "".join(out) + '"'


def format_attr(value: Any) -> str:
    """One attribute value in the text form."""
    if isinstance(value, Literal):
        return format_literal(value.array)
    if isinstance(value, DType):
        return value.short
    if isinstance(value, str):
        return format_string(value)
    if isinstance(value, (tuple, list)):
        inner = ",".join(format_attr(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return format_scalar(value)


def _inline_exact(a: np.ndarray) -> bool:
    """Whether the nested-list form of ``a`` reads back to the same shape and bits."""
    if a.size == 0:
        # "[]" and "[[], []]" give the shape up to the first zero dimension only.
        return a.shape.index(0) == a.ndim - 1
    if a.dtype.kind == "c":
        return False  # complex literals are written as their bytes
    if a.dtype.kind == "f":
        nan = np.isnan(a)
        if nan.any():
            # The parser makes NaNs with np.array(+-nan): anything else needs the bytes.
            canonical = np.where(np.signbit(a), -np.nan, np.nan).astype(a.dtype)
            return bool(a[nan].tobytes() == canonical[nan].tobytes())
    return True


def format_literal(a: np.ndarray) -> str:
    """An array literal: a bare scalar or nested lists when small, else ``b64"..."``.

    Base64 holds the little-endian bytes of the array in row-major order; it is used for
    more than ``INLINE_LITERAL_ELEMENTS`` elements and whenever the short form would not
    give back the same shape and bits (size-0 arrays like ``[0,3]``, NaN payloads).
    """
    if a.size > INLINE_LITERAL_ELEMENTS or not _inline_exact(a):
        data = np.ascontiguousarray(a, dtype=a.dtype.newbyteorder("<")).tobytes()
        return 'b64"' + base64.b64encode(data).decode() + '"'
    if a.ndim == 0:
        return format_scalar(a[()])

    def rec(x: np.ndarray) -> str:
        if x.ndim == 0:
            return format_scalar(x[()])
        return "[" + ", ".join(rec(x[i]) for i in range(x.shape[0])) + "]"
    return rec(a)


class _Namer:
    def __init__(self) -> None:
        self.names: dict[int, str] = {}
        self.taken: set[str] = set()
        self.counter = 0

    def arg(self, v: Value) -> str:
        base = _NAME_RE.sub("_", v.name or "arg") or "arg"
        if base[0].isdigit() or base[0] == ".":
            base = "a" + base
        name, k = base, 1
        while name in self.taken:
            name, k = f"{base}_{k}", k + 1
        self.taken.add(name)
        self.names[v.id] = name
        return name

    def result(self, v: Value) -> str:
        name = str(self.counter)
        self.counter += 1
        self.names[v.id] = name
        return name

    def ref(self, v: Value) -> str:
        return "%" + self.names.get(v.id, f"<undefined {v.id}>")


def _is_default(spec: Any, value: Any) -> bool:
    # Compared as printed, so 0.0 and -0.0 (or nan and -nan) are told apart.
    return spec is not None and not spec.required and format_attr(spec.default) == format_attr(value)


def format_loc(loc: SourceLoc) -> str:
    """``file:line`` with control characters (which would break the line) shown as ``?``."""
    return _CONTROL_RE.sub("?", str(loc))


def format_device(device: str) -> str:
    return "@" + (device if _DEVICE_RE.fullmatch(device) else format_string(device))


def format_op(op: Op, namer: _Namer, indent: str) -> list[str]:
    """The line of one op, with its source location as a trailing comment, followed by
    the blocks it owns (``^(%args)`` then ops, ``return`` and ``}``)."""
    parts = [op.name]
    if op.inputs:
        parts.append(", ".join(namer.ref(v) for v in op.inputs))
    results = ", ".join("%" + namer.result(r) for r in op.results)
    shown = {k: v for k, v in op.attrs.items() if not _is_default(op.primitive.attrs.get(k), v)}
    if shown:
        parts.append("{" + ", ".join(f"{k}={format_attr(v)}" for k, v in shown.items()) + "}")
    text = " ".join(parts)
    if op.results:
        text += " : " + ", ".join(str(r.type) for r in op.results)
    if op.device:
        text += " " + format_device(op.device)
    line = f"{indent}{results} = {text}" if op.results else f"{indent}{text}"
    if op.blocks:
        line += " {"
    if op.loc is not None:
        line = f"{line:<{LOC_COLUMN}}  # {format_loc(op.loc)}"
    lines = [line]
    for i, block in enumerate(op.blocks):
        if i:
            lines.append(f"{indent}}} {{")
        args = ", ".join(f"%{namer.result(a)}: {a.type}" for a in block.args)
        lines.append(f"{indent}  ^({args})")
        lines.extend(format_block(block, namer, indent + "  "))
    if op.blocks:
        lines.append(f"{indent}}}")
    return lines


def format_block(block: Block, namer: _Namer, indent: str) -> list[str]:
    """The ops of ``block`` and its return line."""
    lines = []
    for op in block.ops:
        lines.extend(format_op(op, namer, indent))
    ret = ", ".join(namer.ref(v) for v in block.returns)
    lines.append(f"{indent}return {ret}" if ret else f"{indent}return")
    return lines


def op_lines(fn: Function) -> Iterator[tuple[Op, str]]:
    """Each top-level op of ``fn`` with its first line as ``print_function`` writes it
    (same value names), for messages that quote one op of a program."""
    namer = _Namer()
    for a in fn.args:
        namer.arg(a)
    for op in fn.body.ops:
        yield op, format_op(op, namer, "")[0]


def value_names(fn: Function) -> dict[int, str]:
    """The name ``print_function`` gives each value of ``fn`` (arguments, op results, block
    arguments), without the ``%``, by ``Value.id``: for pictures and tools that show a
    program beside its text form."""
    namer = _Namer()
    for a in fn.args:
        namer.arg(a)
    format_block(fn.body, namer, "")
    return dict(namer.names)


def print_function(fn: Function) -> str:
    """The text form of ``fn`` (see the module docstring)."""
    namer = _Namer()
    args = []
    for a, var, device, donated in zip(fn.args, fn.is_var, fn.arg_devices, fn.donated):
        args.append(f"%{namer.arg(a)}: {a.type}" + (" var" if var else "") + (" donated" if donated else "")
                    + (" " + format_device(device) if device else ""))
    results = ", ".join(str(t) for t in fn.result_types)
    name = _NAME_RE.sub("_", fn.name) or "f"
    lines = [f"func @{name}({', '.join(args)}) -> ({results}) {{"]
    lines.extend(format_block(fn.body, namer, "  "))
    lines.append("}")
    return "\n".join(lines) + "\n"
