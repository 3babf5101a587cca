"""The JSON form of a Function, for tools: same value names as the text form.

Non-finite floats are written as the strings ``"nan"``, ``"inf"`` and ``"-inf"`` so the
output is strict JSON.
"""

from __future__ import annotations

import math
from typing import Any

from flowjit.ir.core import Function
from flowjit.ir.dtypes import DType
from flowjit.ir.printer import _Namer
from flowjit.ir.registry import Literal


def _jsonable(x: Any) -> Any:
    if isinstance(x, Literal):
        return {"dtype": str(x.array.dtype), "shape": list(x.array.shape), "data": _jsonable(x.array.tolist())}
    if isinstance(x, DType):
        return x.short
    if isinstance(x, (tuple, list)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
    return x


def function_to_json(fn: Function) -> dict[str, Any]:
    """A JSON-ready dict: name, args (name, type, var, donated), ops (results, op, inputs, attrs,
    types, device, loc) and returns, with ``%``-less value names as in the text form."""
    namer = _Namer()
    args = [{"name": namer.arg(a), "type": str(a.type), "shape": list(a.type.shape),
             "dtype": a.type.dtype.short, "var": var, "donated": donated, "device": device}
            for a, var, device, donated in zip(fn.args, fn.is_var, fn.arg_devices, fn.donated)]
    ops = []
    for op in fn.walk():
        inputs = [namer.ref(v)[1:] for v in op.inputs]
        ops.append({
            "results": [namer.result(r) for r in op.results],
            "op": op.name,
            "inputs": inputs,
            "attrs": {k: _jsonable(v) for k, v in op.attrs.items()},
            "types": [str(r.type) for r in op.results],
            "kind": op.primitive.kind,
            "device": op.device,
            "loc": None if op.loc is None else {"file": op.loc.file, "line": op.loc.line},
        })
    return {"name": fn.name, "args": args, "ops": ops,
            "returns": [namer.ref(v)[1:] for v in fn.returns],
            "result_types": [str(t) for t in fn.result_types]}
