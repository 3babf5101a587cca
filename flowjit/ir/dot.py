"""A Function as a picture: Graphviz DOT text, and SVG through Graphviz's ``dot``.

``to_dot(function)`` draws the dataflow graph: the arguments and results as ellipses, each
op as a box labelled with its primitive, result types and the user's line; a fusion op as
a cluster holding the ops of its kernel; a ``cond``/``while``/``scan`` as a cluster with one
nested cluster per block; each device in its own colour (named in a legend); a send/recv
pair as a dashed red edge labelled with its key. Edges run from the op that makes a value
to each op that reads it (through fusion and control blocks, from the value outside to the
op inside that reads the block's argument). ``to_svg`` renders it with ``dot`` from the
system's Graphviz (the ``graphviz`` Python package builds the DOT text; both come with the
``viz`` extra and ``apt-get install graphviz``).
"""

from __future__ import annotations

from typing import Any

from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.errors import FlowjitError
from flowjit.ir.printer import format_loc

# Fill colours of devices, in the order devices first appear.
PALETTE = ("#dbe9f6", "#fde2c8", "#d9f2d9", "#f2d9f2", "#fff3b0", "#e0e0e0")


class GraphvizMissing(FlowjitError):
    """Graphviz (the Python package or the system's ``dot``) is not installed."""


def _graphviz() -> Any:
    try:
        import graphviz
    except ImportError:
        raise GraphvizMissing("drawing the IR needs the graphviz Python package: pip install 'flowjit[viz]' "
                              "(or pip install graphviz)") from None
    return graphviz


def _types(values: list[Value]) -> str:
    return ", ".join(str(v.type) for v in values)


class _Drawing:
    def __init__(self, fn: Function):
        self.graphviz = _graphviz()
        self.g = self.graphviz.Digraph(fn.name, graph_attr={"rankdir": "TB", "fontname": "Helvetica",
                                                             "label": f"@{fn.name}", "labelloc": "t"},
                                       node_attr={"fontname": "Helvetica", "fontsize": "10"},
                                       edge_attr={"fontname": "Helvetica", "fontsize": "9"})
        self.node_of: dict[int, str] = {}   # value id -> the node that makes it
        self.colours: dict[str, str] = {}
        self.sends: dict[str, str] = {}     # send key -> its node
        self.recvs: dict[str, str] = {}
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def colour(self, device: str | None) -> str:
        device = device or "default device"
        if device not in self.colours:
            self.colours[device] = PALETTE[len(self.colours) % len(PALETTE)]
        return self.colours[device]

    def block(self, g: Any, block: Block, inputs: list[str | None], device: str | None,
              in_kernel: bool = False) -> list[str | None]:
        """Draw ``block``'s ops into ``g``, its arguments bound to the nodes ``inputs``;
        returns the nodes that make its results. ``in_kernel``: the ops of a fusion,
        drawn white on their cluster's colour."""
        for a, node in zip(block.args, inputs):
            if node is not None:
                self.node_of[a.id] = node
        for op in block.ops:
            self.op(g, op, op.device or device, in_kernel)
        return [self.node_of.get(v.id) for v in block.returns]

    def op(self, g: Any, op: Op, device: str | None, in_kernel: bool = False) -> None:
        ins = [self.node_of.get(v.id) for v in op.inputs]
        where = format_loc(op.loc) if op.loc is not None else ""
        if op.blocks:
            name = self.fresh("cluster_")
            with g.subgraph(name=name) as sub:
                label = op.attrs.get("name", op.name) if op.primitive.role == "kernel" else op.name
                lines = op.attrs.get("lines", where)
                title = f"{op.name}: {label}\\n{lines}" if op.primitive.role == "kernel" else f"{op.name} {lines}"
                sub.attr(label=title, style="rounded,filled", fillcolor=self.colour(device), color="#555555")
                if op.primitive.role == "kernel":
                    outs = self.block(sub, op.blocks[0], ins, device, in_kernel=True)
                    for r, node in zip(op.results, outs):
                        if node is not None:
                            self.node_of[r.id] = node
                    return
                head = self.fresh("n")
                sub.node(head, f"{op.name}\\n{_types(op.results)}", shape="box3d", style="filled", fillcolor="white")
                for v in ins:
                    if v is not None:
                        self.g.edge(v, head)
                for k, block in enumerate(op.blocks):
                    with sub.subgraph(name=self.fresh("cluster_")) as inner:
                        inner.attr(label=f"block {k}", style="dashed", color="#888888")
                        args = [self.fresh("n") for _ in block.args]
                        for a, node in zip(block.args, args):
                            inner.node(node, str(a.type), shape="ellipse", fontsize="8")
                        self.block(inner, block, args, device)
                for r in op.results:
                    self.node_of[r.id] = head
            return
        node = self.fresh("n")
        attrs = {"shape": "box", "style": "filled", "fillcolor": "white" if in_kernel else self.colour(device)}
        role = op.primitive.role
        label = f"{op.name}\\n{_types(op.results)}" + (f"\\n{where}" if where else "")
        if role in ("send", "recv"):
            attrs.update(shape="cds", color="#c0392b")
            (self.sends if role == "send" else self.recvs)[str(op.attrs.get("key"))] = node
        elif op.primitive.kind == "constant":
            attrs.update(shape="note")
        g.node(node, label, **attrs)
        for v in ins:
            if v is not None:
                self.g.edge(v, node)
        for r in op.results:
            self.node_of[r.id] = node

    def draw(self, fn: Function) -> str:
        args = []
        for i, a in enumerate(fn.args):
            node = self.fresh("arg")
            var = " var" if fn.is_var[i] else ""
            self.g.node(node, f"%{a.name or i}: {a.type}{var}", shape="ellipse", style="filled",
                        fillcolor=self.colour(fn.arg_devices[i]))
            args.append(node)
        outs = self.block(self.g, fn.body, args, None)
        for j, node in enumerate(outs):
            result = self.fresh("result")
            self.g.node(result, f"result {j}: {fn.body.returns[j].type}", shape="ellipse", style="bold")
            if node is not None:
                self.g.edge(node, result)
        for key, send in self.sends.items():
            if key in self.recvs:
                self.g.edge(send, self.recvs[key], label=f"send/recv {key}", style="dashed", color="#c0392b",
                            fontcolor="#c0392b", constraint="false")
        if len(self.colours) > 1:
            with self.g.subgraph(name="cluster_legend") as legend:
                legend.attr(label="devices", style="dotted")
                for device, colour in self.colours.items():
                    legend.node(self.fresh("legend"), device, shape="box", style="filled", fillcolor=colour)
        return self.g.source


def to_dot(fn: Function) -> str:
    """``fn``'s dataflow graph as Graphviz DOT text (see the module docstring)."""
    return _Drawing(fn).draw(fn)


def to_svg(fn: Function) -> str:
    """``fn``'s graph rendered to SVG by Graphviz's ``dot``; GraphvizMissing names what to
    install when the package or the program is missing."""
    graphviz = _graphviz()
    try:
        return graphviz.Source(to_dot(fn)).pipe(format="svg").decode()
    except graphviz.ExecutableNotFound:
        raise GraphvizMissing("drawing SVG needs Graphviz's dot program: apt-get install graphviz "
                              "(brew install graphviz on macOS)") from None
