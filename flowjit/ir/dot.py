"""A Function as a picture: Graphviz DOT text, and SVG through Graphviz's ``dot``.

``to_dot(function)`` draws the dataflow graph and says what the text form
(``print_function``) says: the arguments and results as ellipses, each op as a box
labelled with its results' names as the text form gives them (``%3 = mul``), its
primitive, result types and the user's line, a constant with its value (elided past a few
elements); a fusion op as a cluster holding the ops of its kernel; a
``cond``/``while``/``scan`` as a cluster with one nested cluster per block, labelled by
the block's role as its primitive declares it (``branch 0 (false)``, ``branch 1 (true)``,
``cond``, ``body``: ``Primitive.block_labels``); each device in its own colour (named in a
legend); a send/recv pair as a dashed red edge labelled with its key. Edges run from the
op that makes a value to each op that reads it (through fusion and control blocks, from
the value outside to the op inside that reads the block's argument); an op reading from
one node several times gets one edge, labelled with the count (``×2``). ``to_svg``
renders it with ``dot`` from the
system's Graphviz (the ``graphviz`` Python package builds the DOT text; both come with the
``viz`` extra and ``apt-get install graphviz``); the DOT text itself needs neither.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.errors import FlowjitError
from flowjit.ir.printer import format_literal, format_loc, format_scalar, value_names
from flowjit.ir.registry import Literal

# Fill colours of devices, in the order devices first appear.
PALETTE = ("#dbe9f6", "#fde2c8", "#d9f2d9", "#f2d9f2", "#fff3b0", "#e0e0e0")
# A constant is shown whole up to this many elements and characters, else its first
# CONSTANT_HEAD elements and "...".
CONSTANT_ELEMENTS = 8
CONSTANT_CHARS = 40
CONSTANT_HEAD = 4


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


def constant_text(a: np.ndarray) -> str:
    """A constant's value for its node: the text form's literal when short (``2.5``,
    ``[1.0, -3.0]``), else its first elements in row-major order and ``...``."""
    a = np.asarray(a)
    if a.size <= CONSTANT_ELEMENTS:
        text = format_literal(a)
        if not text.startswith('b64"') and len(text) <= CONSTANT_CHARS:
            return text
    if a.size == 0:
        return "[]"
    head = ", ".join(format_scalar(x) for x in a.reshape(-1)[:CONSTANT_HEAD])
    return f"[{head}, ...]"


def _quote(text: str) -> str:
    # DOT's quoted strings: backslash and quote escaped, "\\n" kept as DOT's line break.
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\\\\n", "\\n") + '"'


def _attrs(attrs: dict[str, str]) -> str:
    return " [" + " ".join(f"{k}={_quote(v)}" for k, v in attrs.items()) + "]" if attrs else ""


class _Graph:
    """A DOT graph or cluster being written: nodes, edges, attributes and subgraphs."""

    def __init__(self, head: str):
        self.head = head
        self.lines: list[str] = []
        self.subgraphs: list[_Graph] = []

    def attr(self, **attrs: str) -> None:
        self.lines += [f"{k}={_quote(v)}" for k, v in attrs.items()]

    def node(self, name: str, label: str, **attrs: str) -> None:
        self.lines.append(f"{name}{_attrs({'label': label, **attrs})}")

    def edge(self, a: str, b: str, **attrs: str) -> None:
        self.lines.append(f"{a} -> {b}{_attrs(attrs)}")

    def subgraph(self, name: str) -> _Graph:
        sub = _Graph(f"subgraph {name}")
        self.subgraphs.append(sub)
        return sub

    def text(self, indent: str = "") -> str:
        inner = [f"{indent}\t{line}" for line in self.lines] + [g.text(indent + "\t") for g in self.subgraphs]
        return "\n".join([f"{indent}{self.head} {{", *inner, f"{indent}}}"])


class _Drawing:
    def __init__(self, fn: Function):
        self.g = _Graph(f"digraph {_quote(fn.name)}")
        graph = {"rankdir": "TB", "fontname": "Helvetica", "label": "@" + fn.name, "labelloc": "t"}
        self.g.lines += [f"graph{_attrs(graph)}", f"node{_attrs({'fontname': 'Helvetica', 'fontsize': '10'})}",
                         f"edge{_attrs({'fontname': 'Helvetica', 'fontsize': '9'})}"]
        self.names = value_names(fn)        # value id -> its name in the text form
        self.node_of: dict[int, str] = {}   # value id -> the node that makes it
        self.edges: dict[tuple[str, str], int] = {}  # (tail, head) -> how many reads it draws
        self.colours: dict[str, str] = {}
        self.sends: dict[str, str] = {}     # send key -> its node
        self.recvs: dict[str, str] = {}
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}{self.count}"

    def ref(self, v: Value) -> str:
        """``v``'s name as the text form writes it (``%3``, ``%x``)."""
        return "%" + self.names.get(v.id, "?")

    def defines(self, op: Op) -> str:
        """``%3 = `` (``%3, %4 = ``): the start of ``op``'s line in the text form."""
        return ", ".join(self.ref(r) for r in op.results) + " = " if op.results else ""

    def connect(self, ins: list[str | None], node: str) -> None:
        """An edge from each node of ``ins`` to ``node``, one per pair however many reads."""
        for tail in ins:
            if tail is not None:
                self.edges[tail, node] = self.edges.get((tail, node), 0) + 1

    def colour(self, device: str | None) -> str:
        device = device or "default device"
        if device not in self.colours:
            self.colours[device] = PALETTE[len(self.colours) % len(PALETTE)]
        return self.colours[device]

    def block(self, g: _Graph, block: Block, inputs: list[str | None], device: str | None,
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

    def cluster(self, g: _Graph, op: Op, device: str | None, ins: list[str | None]) -> None:
        """A fusion (its kernel's ops) or a control op (a nested cluster per block)."""
        sub = g.subgraph(self.fresh("cluster_"))
        where = format_loc(op.loc) if op.loc is not None else ""
        kernel = op.primitive.role == "kernel"
        title = (f"{self.defines(op)}{op.name}: {op.attrs.get('name', op.name)}\\n{op.attrs.get('lines', where)}"
                 if kernel else f"{op.name} {where}")
        sub.attr(label=title, style="rounded,filled", fillcolor=self.colour(device), color="#555555")
        if kernel:
            outs = self.block(sub, op.blocks[0], ins, device, in_kernel=True)
            for r, node in zip(op.results, outs):
                if node is not None:
                    self.node_of[r.id] = node
            return
        head = self.fresh("n")
        sub.node(head, f"{self.defines(op)}{op.name}\\n{_types(op.results)}", shape="box3d", style="filled",
                 fillcolor="white")
        self.connect(ins, head)
        for label, block in zip(op.primitive.block_labels(len(op.blocks)), op.blocks):
            inner = sub.subgraph(self.fresh("cluster_"))
            inner.attr(label=label, style="dashed", color="#888888")
            args = [self.fresh("n") for _ in block.args]
            for a, node in zip(block.args, args):
                inner.node(node, f"{self.ref(a)}: {a.type}", shape="ellipse", fontsize="8")
            self.block(inner, block, args, device)
        for r in op.results:
            self.node_of[r.id] = head

    def op(self, g: _Graph, op: Op, device: str | None, in_kernel: bool = False) -> None:
        ins = [self.node_of.get(v.id) for v in op.inputs]
        if op.blocks:
            self.cluster(g, op, device, ins)
            return
        node = self.fresh("n")
        where = format_loc(op.loc) if op.loc is not None else ""
        attrs = {"shape": "box", "style": "filled", "fillcolor": "white" if in_kernel else self.colour(device)}
        role = op.primitive.role
        literal = op.attrs.get("value") if op.primitive.kind == "constant" else None
        value = f" {constant_text(literal.array)}" if isinstance(literal, Literal) else ""
        label = f"{self.defines(op)}{op.name}{value}\\n{_types(op.results)}" + (f"\\n{where}" if where else "")
        if role in ("send", "recv"):
            attrs.update(shape="cds", color="#c0392b")
            (self.sends if role == "send" else self.recvs)[str(op.attrs.get("key"))] = node
        elif op.primitive.kind == "constant":
            attrs.update(shape="note")
        g.node(node, label, **attrs)
        self.connect(ins, node)
        for r in op.results:
            self.node_of[r.id] = node

    def draw(self, fn: Function) -> str:
        args = []
        for i, a in enumerate(fn.args):
            node = self.fresh("arg")
            var = " var" if fn.is_var[i] else ""
            self.g.node(node, f"{self.ref(a)}: {a.type}{var}", shape="ellipse", style="filled",
                        fillcolor=self.colour(fn.arg_devices[i]))
            args.append(node)
        outs = self.block(self.g, fn.body, args, None)
        for j, node in enumerate(outs):
            result = self.fresh("result")
            returned = fn.body.returns[j]
            self.g.node(result, f"result {j}: {self.ref(returned)}\\n{returned.type}", shape="ellipse", style="bold")
            self.connect([node], result)
        for (tail, head), reads in self.edges.items():
            self.g.edge(tail, head, **({"label": f"\u00d7{reads}"} if reads > 1 else {}))
        for key, send in self.sends.items():
            if key in self.recvs:
                self.g.edge(send, self.recvs[key], label=f"send/recv {key}", style="dashed", color="#c0392b",
                            fontcolor="#c0392b", constraint="false")
        if len(self.colours) > 1:
            legend = self.g.subgraph("cluster_legend")
            legend.attr(label="devices", style="dotted")
            for device, colour in self.colours.items():
                legend.node(self.fresh("legend"), device, shape="box", style="filled", fillcolor=colour)
        return self.g.text() + "\n"


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
