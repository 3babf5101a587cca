"""A flowjit program as a TensorBoard ``GraphDef``.

Each op is a node with its primitive as the op type, its result shapes in
``_output_shapes`` (TensorBoard labels edges with them), its dtype, attributes, source
line and device. A fused kernel is a name scope (``kernel3_add_exp_reduce_sum/...``)
holding its ops, so TensorBoard draws it as one group that opens to show them; the
blocks of control ops (cond branches, loop bodies) are scopes under their op. The
program's arguments are ``Argument`` (or ``Variable``) nodes and its results ``Result``
nodes. tensorboardX's protos build it, imported when a graph is made.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from flowjit.ir.core import Block, Function, Op, Value
from flowjit.summary._tensorboardx import require_tensorboardx

# TensorFlow's DataType numbers (types.proto) for the dtypes flowjit has.
_DATA_TYPES = {"float32": 1, "float64": 2, "int32": 3, "int64": 9, "bool": 10, "float16": 19}
DT_STRING = 7


def data_type(numpy_name: str) -> int:
    """TensorFlow's DataType number for a dtype name (0, DT_INVALID, when it has none)."""
    return _DATA_TYPES.get(numpy_name, DT_STRING if numpy_name in ("object", "bytes") else 0)


def node_def(name: str, op: str, inputs: Sequence[str] = (), device: str = "",
             shapes: Sequence[Sequence[int | None] | None] = (), dtype: str | None = None,
             attrs: dict[str, Any] | None = None) -> Any:
    """One ``NodeDef``: ``shapes`` of its outputs (None: unknown rank, a None dimension:
    unknown size) into ``_output_shapes``; ``dtype`` (a NumPy name) into ``T``; each of
    ``attrs`` as its text."""
    require_tensorboardx("a TensorBoard graph")
    from tensorboardX.proto.attr_value_pb2 import AttrValue
    from tensorboardX.proto.node_def_pb2 import NodeDef
    from tensorboardX.proto.tensor_shape_pb2 import TensorShapeProto
    attr: dict[str, AttrValue] = {}
    if shapes:
        protos = []
        for shape in shapes:
            if shape is None:
                protos.append(TensorShapeProto(unknown_rank=True))
            else:
                protos.append(TensorShapeProto(dim=[TensorShapeProto.Dim(size=-1 if d is None else int(d))
                                                    for d in shape]))
        attr["_output_shapes"] = AttrValue(list=AttrValue.ListValue(shape=protos))
    if dtype is not None:
        attr["T"] = AttrValue(type=data_type(dtype))
    for key, value in (attrs or {}).items():
        attr[key] = AttrValue(s=str(value).encode())
    return NodeDef(name=name, op=op, input=list(inputs), device=device, attr=attr)


def graph_def(nodes: Sequence[Any]) -> Any:
    """A ``GraphDef`` of ``nodes`` (TensorFlow's producer version, which TensorBoard reads)."""
    require_tensorboardx("a TensorBoard graph")
    from tensorboardX.proto.graph_pb2 import GraphDef
    from tensorboardX.proto.versions_pb2 import VersionDef
    return GraphDef(node=list(nodes), versions=VersionDef(producer=22))


def _clean(name: str) -> str:
    # TensorBoard splits node names at '/' into scopes and reads ':' as an output index.
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", name) or "_"


class _Builder:
    def __init__(self) -> None:
        self.nodes: list[Any] = []
        self.names: dict[int, str] = {}   # Value.id -> the input name that reads it
        self.taken: set[str] = set()

    def unique(self, scope: str, base: str) -> str:
        stem = f"{scope}{_clean(base)}"
        name, k = stem, 1
        while name in self.taken:
            name, k = f"{stem}_{k}", k + 1
        self.taken.add(name)
        return name

    def read(self, v: Value) -> str:
        return self.names.get(v.id, f"unknown_{v.id}")

    def add(self, name: str, op: str, inputs: list[str], values: Sequence[Value], device: str,
            attrs: dict[str, Any]) -> None:
        dtype = values[0].type.dtype.name if values else None
        self.nodes.append(node_def(name, op, inputs, device, [v.type.shape for v in values], dtype, attrs))
        for i, v in enumerate(values):
            self.names[v.id] = name if i == 0 else f"{name}:{i}"

    def block(self, block: Block, scope: str, device: str) -> None:
        kernels = 0
        for op in block.ops:
            where = op.device or device
            if op.primitive.role == "kernel":
                kernels += 1
                self.kernel(op, scope, kernels, where)
                continue
            name = self.unique(scope, op.name)
            self.add(name, op.name, [self.read(v) for v in op.inputs], op.results, where, _attrs(op))
            for k, inner in enumerate(op.blocks):
                # A block's arguments stand for what its op passes in; they are drawn inside it.
                inner_scope = f"{name}_blocks/block{k}/"
                for j, arg in enumerate(inner.args):
                    self.add(self.unique(inner_scope, f"arg{j}"), "BlockArgument", [], [arg], where, {})
                self.block(inner, inner_scope, where)
                for j, ret in enumerate(inner.returns):
                    self.add(self.unique(inner_scope, f"return{j}"), "BlockResult", [self.read(ret)], [ret], where, {})

    def kernel(self, op: Op, scope: str, index: int, device: str) -> None:
        (body,) = op.blocks
        inner_scope = self.unique(scope, f"kernel{index}_{op.attrs.get('name', op.name)}") + "/"
        for arg, outer in zip(body.args, op.inputs):
            self.names[arg.id] = self.read(outer)
        for inner in body.ops:
            name = self.unique(inner_scope, inner.name)
            attrs = {**_attrs(inner), "_kernel": inner_scope.rstrip("/")}
            self.add(name, inner.name, [self.read(v) for v in inner.inputs], inner.results, device, attrs)
        for result, ret in zip(op.results, body.returns):
            self.names[result.id] = self.read(ret)


def _attrs(op: Op) -> dict[str, Any]:
    attrs = {k: v for k, v in op.attrs.items() if not isinstance(v, (bytes, bytearray))}
    if op.loc is not None:
        attrs["_source"] = str(op.loc)
    return attrs


def function_graph_def(function: Function, default_device: str = "cpu:0") -> Any:
    """``function`` (any stage: traced, fused...) as a TensorBoard ``GraphDef``; an op with
    no device runs on ``default_device``."""
    b = _Builder()
    for k, arg in enumerate(function.args):
        kind = "Variable" if function.is_var[k] else "Argument"
        device = function.arg_devices[k] or default_device
        b.add(b.unique("inputs/", arg.name or f"arg{k}"), kind, [], [arg], device, {})
    b.block(function.body, "", default_device)
    for k, ret in enumerate(function.returns):
        b.add(b.unique("outputs/", f"result{k}"), "Result", [b.read(ret)], [ret], default_device, {})
    return graph_def(b.nodes)
