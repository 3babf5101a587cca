"""Fusion: group elementwise, layout and reduction ops into ``fusion`` ops, one kernel each.

Guarantees, on a Function without nested blocks (nested blocks are left untouched):
- every op whose primitive kind is ``elementwise``, ``layout`` or ``reduction`` ends up
  inside exactly one ``fusion`` op, except a transpose or reshape read only by library
  calls (matmul, conv), which stays outside to run as a view; scalar constants they use
  are copied into each kernel that needs them; other ops (``opaque`` matmul/conv/gather,
  ``random``, ``stateful``, ``control``, large constants) stay outside;
- a group never needs its own result as an input (no cycles): an op joins the group of
  one of its users only when no path from its other users leads back into that group;
  its result then leaves the kernel as an extra output when something outside reads it;
- a group merges into the group producing its inputs when both loop over the same shape
  with the same reductions and nothing outside them lies between (a loss and the
  log-softmax it reads);
- groups whose results only leave the program (returned, or assigned to Variables: the
  optimizer's updates) merge into few kernels, whatever their shapes, but for one looping
  over APART_ELEMENTS or more, which stays a kernel of its own;
- ops are reordered only as far as a kernel's inputs and users require;
- within a group (in a merged kernel: within each group merged) every reduction has the
  same input shape (the group's loop shape) and
  the same axes, so "reduce, broadcast back, elementwise" chains such as softmax and
  layer norm become one kernel, and every op's result is no larger than that shape;
- a kernel computes each op's value at most MAX_RECOMPUTE times per element: the loop
  lowering computes an op once for each distinct position it is read at, and layout ops
  (slices, concatenations, pads, transposes; a convolution's windows, at as many positions
  an element as its primitive ``reads``) read their input at positions of their own, so
  an op read through several of them is computed again for each, and chains of such reads
  multiply (a step that slices and concatenates the result of the step before: 2**k
  expansions after k steps); an op whose count would pass the bound starts a kernel of its
  own, whose result the others read from memory;
- a group never spans two devices; the fusion op keeps its ops' device;
- transfers between devices (``send``/``recv``) keep their relative order and each recv
  stays after its send: those order edges count as dependencies, so no group or
  reordering makes one device wait for a value another device sends only later;
- the program computes exactly what it computed before (the fusion op runs its block).
Each fusion op is named after its ops in program order and lists the user lines it came
from (``lines``), and sits where its last op stood, or earlier where a user of one of
its outputs needs it sooner.

The pass also records why it left two ops in different kernels, at the decision it made
there (``FusionBoundary``, on the fused Function as ``fusion_boundaries``; read it with
``boundaries_of``): the op it never fuses (a library call, a random draw, a Variable
update, control flow, a transfer), the loop or reduction a group refused, the cycle a
join would close, the other consumer an op joined, the size limit of a merged kernel.
Recording changes nothing that fuses.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass

from flowjit.ir.builder import Builder
from flowjit.ir.core import Block, Function, Op, Value
from flowjit.ir.primitives.layout import swaps_last_two_axes
from flowjit.ir.registry import COPYING_ROLES

FUSIBLE_KINDS = ("elementwise", "layout", "reduction")
VIEW_ROLES = ("permute_axes", "unit_axes_reshape", "row_major_reshape")
MAX_NAME_PARTS = 6
# A merged kernel's size is bounded: LLVM's compile time grows with the function.
MAX_MERGED_OPS = 96
# A kernel of results looping over this many elements or more stays a kernel of its own:
# merging saves small updates a kernel each, nothing beside such a loop, and a kernel of
# one loop is what a backend splits over its threads (one of several loops runs on one:
# the zoo embedding model's Adam update of its 50,000x64 table, merged with the loss and
# the dense layer's update, took 2.1 ms of its 2.5 ms step on one thread).
APART_ELEMENTS = 1 << 19
# How many times a kernel may compute one op's value per element (see the docstring): a few
# recomputations of a cheap op (x[1:] - x[:-1] of exp(x)) beat a round trip through memory.
MAX_RECOMPUTE = 8


def _is_scalar_constant(op: Op) -> bool:
    return op.primitive.kind == "constant" and op.results[0].type.size <= 1


@dataclass(frozen=True)
class FusionBoundary:
    """Where the pass kept a producer and a consumer in different kernels, and why.

    ``producer``/``consumer`` name the two sides as the fused program shows them (a
    fusion op's kernel name, or the op left outside any kernel) and ``producer_id``/
    ``consumer_id`` are those top-level ops' ids in the fused Function; ``producer_op``/
    ``consumer_op`` are the ops at the edge the pass decided on, ``*_line`` their user
    lines; ``code`` is one of ``REASONS`` and ``reason`` says it in words."""

    producer: str
    consumer: str
    producer_op: str
    consumer_op: str
    producer_line: str
    consumer_line: str
    producer_id: int
    consumer_id: int
    code: str
    reason: str


# The reason codes a FusionBoundary carries.
REASONS = {
    "library_call": "an opaque op (matmul, conv, gather) runs as a library call or a kernel of its own",
    "library_view": "a transpose or reshape read only by library calls stays a view",
    "random": "a random draw never fuses",
    "stateful": "a Variable's read or update never fuses",
    "control": "control flow (cond, while, scan) runs its blocks as programs of their own",
    "device_change": "the two sides run on different devices (a send/recv pair, or ops placed apart)",
    "reduction_mismatch": "a kernel holds reductions of one input shape and axes only",
    "reduction_smaller": "the reduction loops over fewer elements than the kernel reading it",
    "larger_loop": "the producer loops over more elements than the consumer's kernel",
    "cycle": "fusing would close a cycle through an op outside the kernel",
    "other_consumer": "the producer joined the kernel of another of its consumers",
    "loop_mismatch": "two kernels merge only when they loop over the same shape with the same reduction",
    "size_limit": "a merged kernel holds at most MAX_MERGED_OPS ops",
    "split_apart": "a kernel of results looping over APART_ELEMENTS or more stays apart, for the threads to split",
    "recompute": "in the kernel the producer would be computed once for each position its layout readers read "
                 "it at, more than MAX_RECOMPUTE times",
}


class _Group:
    """Ops being fused, with the loop shape and reduction axes every member must fit, and how
    many times the kernel would compute each member's value per element (``computed``)."""

    def __init__(self, root: Op):
        self.ops: list[Op] = []
        self.loop_size = 0
        self.reduce_shape: tuple[int, ...] | None = None
        self.reduce_axes: tuple[int, ...] | None = None
        self.device = root.device
        self.computed: dict[int, int] = {}
        self.add(root, 1)

    def times_computed(self, op: Op, users: list[Op]) -> int:
        """How many times ``op`` would be computed per element if it joined: its users in the
        group that read it where they stand (elementwise ops, reductions) share one
        computation, each layout user reads it at positions of its own (as many an
        element as its primitive ``reads``: a window's taps)."""
        inside = [u for u in users if id(u) in self.computed]
        same = max((self.computed[id(u)] for u in inside if u.primitive.kind != "layout"), default=0)
        return same + sum(self.computed[id(u)] * (u.primitive.reads(u.attrs) if u.primitive.reads else 1)
                          for u in inside if u.primitive.kind == "layout")

    def refusal(self, op: Op, users: list[Op] = ()) -> tuple[str, str] | None:
        """Why ``op`` cannot join this group (a code of ``REASONS`` and words), or None."""
        times = self.times_computed(op, users)
        if times > MAX_RECOMPUTE:
            readers = _names([u for u in users if id(u) in self.computed])
            return "recompute", f"{op.name} is read by {readers}, layout ops reading it at positions of their " \
                                f"own: fused, it would be computed {times} times per element"
        if op.device != self.device:
            return "device_change", f"{op.name} runs on {op.device or 'the default device'}, the kernel on " \
                                    f"{self.device or 'the default device'}"
        if op.primitive.kind == "reduction":
            shape = op.inputs[0].type.shape
            axes = _axes_of(op)
            if self.reduce_shape is None:
                if math.prod(shape) >= self.loop_size:
                    return None
                return "reduction_smaller", f"{op.name} reduces {list(shape)} ({math.prod(shape)} elements), " \
                                            f"the kernel reading it loops over {self.loop_size}"
            if shape == self.reduce_shape and axes == self.reduce_axes:
                return None
            return "reduction_mismatch", f"{op.name} reduces axes {list(axes)} of {list(shape)}, the kernel " \
                                         f"already reduces axes {list(self.reduce_axes or ())} of " \
                                         f"{list(self.reduce_shape)}"
        size = _loop_elements(op)
        if size <= self.loop_size:
            return None
        return "larger_loop", f"{op.name} loops over {size} elements, the consumer's kernel over {self.loop_size}"

    def add(self, op: Op, times: int) -> None:
        self.ops.append(op)
        self.computed[id(op)] = max(1, times)
        if op.primitive.kind == "reduction":
            self.reduce_shape = op.inputs[0].type.shape
            self.reduce_axes = _axes_of(op)
        self.loop_size = max(self.loop_size, _loop_elements(op))


def _loop_elements(op: Op) -> int:
    """The elements ``op``'s loop runs over in a kernel: its largest operand or result. An
    op that copies one element of its input per result element (a slice, a transpose) or
    gathers one (an embedding lookup) computes one element per result element whatever the
    size of the array it reads from: its loop is its result's (and a gather's indices')."""
    role = op.primitive.role
    reads = op.inputs[1:] if role == "gather" else () if role in COPYING_ROLES else op.inputs
    return max([r.type.size for r in op.results] + [v.type.size for v in reads])


class _Reasons:
    """What the pass decided, as it decided it: why an op stays out of every kernel
    (``alone``, by op id), why an op did not join a user's group (``edges``, by producer
    and user op ids), why two groups did not merge (``groups``, by group ids) and which
    kernels of results the size limit or their size kept apart (``full``)."""

    def __init__(self) -> None:
        self.alone: dict[int, tuple[str, str]] = {}
        self.edges: dict[tuple[int, int], tuple[str, str]] = {}
        self.groups: dict[tuple[int, int], tuple[str, str]] = {}
        self.full: list[tuple[_Group, _Group, str, str]] = []   # (bundle, group, code, words)


# Why an op of each kind never joins a kernel.
_NEVER_FUSES = {
    "opaque": ("library_call", "{} runs as {}, outside any fused kernel: its operands and result go through "
                               "memory"),
    "random": ("random", "{} draws from the random generator's state and never fuses"),
    "stateful": ("stateful", "{} reads or updates a Variable and never fuses"),
    "control": ("control", "{} runs its blocks as programs of their own: ops inside fuse with each other, "
                           "never with ops outside"),
    "transfer": ("device_change", "{} moves the value between devices"),
    "constant": ("constant", "{} is data the kernels read"),
}


# What an opaque op runs as, by its declared role (the others: a kernel of their own, or a
# library routine such as LAPACK's for linear algebra).
_RUNS_AS = {"matrix_product": "a BLAS call", "convolution": "a BLAS product of its patches"}


def _never_fuses(op: Op) -> tuple[str, str]:
    code, words = _NEVER_FUSES.get(op.primitive.kind, _NEVER_FUSES["control"])
    runs_as = _RUNS_AS.get(op.primitive.role, "a kernel of its own or a library routine")
    return code, words.format(op.name, runs_as) if code == "library_call" else words.format(op.name)


def _loops(g: _Group) -> str:
    if g.reduce_shape is None:
        return f"{g.loop_size} elements, no reduction"
    return f"{g.loop_size} elements reducing axes {list(g.reduce_axes or ())} of {list(g.reduce_shape)}"


@dataclass
class _Boundary:
    producer: Op | _Group
    consumer: Op | _Group
    producer_op: Op
    consumer_op: Op
    code: str
    reason: str

    def resolve(self, fusion_ops: dict[int, Op]) -> FusionBoundary:
        """The boundary named by the ops of the fused program (``fusion_ops``: group id ->
        its fusion op)."""
        p, c = (fusion_ops[id(u)] if isinstance(u, _Group) else u for u in (self.producer, self.consumer))
        return FusionBoundary(p.attrs.get("name", p.name) if isinstance(self.producer, _Group) else p.name,
                              c.attrs.get("name", c.name) if isinstance(self.consumer, _Group) else c.name,
                              self.producer_op.name, self.consumer_op.name, _loc(self.producer_op),
                              _loc(self.consumer_op), p.id, c.id, self.code, self.reason)


def _names(ops: list[Op]) -> str:
    return ", ".join(f"{op.name}" + (f" ({op.loc})" if op.loc is not None else "") for op in ops[:3])


def _loc(op: Op) -> str:
    return str(op.loc) if op.loc is not None else ""


def _boundaries(block: Block, groups: list[_Group], group_of: dict[int, _Group], top: _TopLevel,
                why: _Reasons) -> list[_Boundary]:
    """Every pair of kernels (or kernel and op left outside) that a value crosses, in
    program order, with the reason the pass recorded at the edge it decided on (the first
    such edge between the pair)."""
    final: dict[int, _Group] = {id(op): g for g in groups for op in g.ops}
    found: dict[tuple[int, int], _Boundary] = {}
    for p in block.ops:
        # Constants are data, and a view read only by library calls is part of those calls.
        if p.primitive.kind == "constant" or why.alone.get(id(p), ("",))[0] == "library_view":
            continue
        up = final.get(id(p), p)
        for r in p.results:
            for u, _ in r.uses:
                c = top.get(id(u), u)
                if c.primitive.kind == "stateful" and not any(x.uses for x in c.results):
                    continue  # a Variable's last update: the value leaves the program, as a result does
                uc = final.get(id(c), c)
                key = (id(up), id(uc))
                if uc is up or key in found:
                    continue
                if isinstance(uc, _Group) and isinstance(up, _Group):
                    code, words = why.edges.get((id(p), id(c)), (
                        "other_consumer", f"{p.name} joined the kernel of another of its users; this one reads it "
                                          f"from memory"))
                    merge = why.groups.get((id(group_of[id(p)]), id(group_of[id(c)])))
                    if merge and code != "cycle":
                        # Merging the kernels was the last chance: what kept them apart then decides.
                        code = merge[0] if code == "other_consumer" else code
                        words += f"; the two kernels were not merged after: {merge[1]}"
                else:
                    code, words = why.alone.get(id(c)) or why.alone[id(p)]
                found[key] = _Boundary(up, uc, p, c, code, words)
    for bundle, g, code, words in why.full:
        found[(id(bundle), id(g))] = _Boundary(bundle, g, bundle.ops[-1], g.ops[0], code, words)
    return list(found.values())


def boundaries_of(fn: Function) -> tuple[FusionBoundary, ...]:
    """The boundaries the fusion pass recorded on ``fn`` (none when it did not run)."""
    return getattr(fn, "fusion_boundaries", ())


def _axes_of(op: Op) -> tuple[int, ...]:
    """The axes a reduction reduces, normalized; from whichever axis attribute it declares."""
    ndim = len(op.inputs[0].type.shape)
    if "axes" in op.attrs:
        return tuple(sorted(a % ndim for a in op.attrs["axes"]))
    return (op.attrs["axis"] % ndim,)


def fusion(fn: Function, record: bool = True) -> Function:
    """Group fusible ops of ``fn``'s body into ``fusion`` ops (see the module docstring);
    ``record``: keep the boundaries and their reasons on ``fn`` (``boundaries_of``)."""
    block = fn.body
    returned = {v.id for v in block.returns}
    top = _top_level_ancestors(block)
    group_of: dict[int, _Group] = {}
    groups: list[_Group] = []
    why = _Reasons()
    for op in reversed(block.ops):
        if op.primitive.kind not in FUSIBLE_KINDS or op.blocks:
            why.alone[id(op)] = _never_fuses(op)
            continue
        users = _users(op, top)
        if _feeds_library_calls_as_view(op, users, returned, why):
            why.alone[id(op)] = ("library_view", f"{op.name} is read only by library calls, as a view")
            continue
        candidates = list({id(g): g for g in (group_of.get(id(u)) for u in users) if g is not None}.values())
        candidates.sort(key=lambda g: -len(g.ops))
        for g in candidates:
            # Users outside the group read the value as an extra output of the kernel;
            # joining is only sound when none of them leads back into the group.
            outside = [u for u in users if group_of.get(id(u)) is not g]
            refused = g.refusal(op, users)
            if refused is None and _reaches(outside, g, group_of, top):
                refused = ("cycle", f"a path from {op.name}'s other user {_names(outside)} leads back into "
                                    f"the kernel: joining it would make the kernel wait for itself")
            if refused is None:
                g.add(op, g.times_computed(op, users))
                group_of[id(op)] = g
                break
            for u in users:
                if group_of.get(id(u)) is g:
                    why.edges[(id(op), id(u))] = refused
        else:
            g = _Group(op)
            groups.append(g)
            group_of[id(op)] = g
    groups = _merge_consumers(groups, group_of, top, why)
    groups = _merge_terminal_groups(groups, returned, top, why)
    found = _boundaries(block, groups, group_of, top, why) if record else []
    fusion_ops = {id(g): _outline(fn, g, returned) for g in groups}
    if record:
        fn.fusion_boundaries = tuple(b.resolve(fusion_ops) for b in found)  # type: ignore[attr-defined]
    _schedule(block)
    _drop_unused_scalar_constants(block)
    return fn


def _feeds_library_calls_as_view(op: Op, users: list[Op], returned: set[int], why: _Reasons) -> bool:
    """A matrix transpose or a reshape read only by library calls (matmul, conv) stays
    outside any kernel: BLAS reads the transposed operand in place (the native program's
    gemm flags, NumPy's views), where a kernel would copy it. So does a reshape read only by
    such views (a stack of patches flattened, then transposed for the product), or by
    loops and branches (the stacked inputs of a scan, products hoisted out of its steps)."""
    role = op.primitive.role
    if role == "permute_axes" and not swaps_last_two_axes(op.attrs["perm"]):
        return False  # any other transpose is a copy, made best by a kernel of its readers' loop

    def library(u: Op) -> bool:
        if u.primitive.kind == "opaque":
            # BLAS reads a swap of the last two axes through its transpose flag; other
            # library ops (a sort, LAPACK, cumsum) read their buffers as they are.
            return role != "permute_axes" or u.primitive.role == "matrix_product"
        # A reshape keeps its buffer: a loop reads it in place as well.
        return role != "permute_axes" and (u.primitive.kind == "control"
                                           or why.alone.get(id(u), ("",))[0] == "library_view")
    return (role in VIEW_ROLES and bool(users) and all(library(u) for u in users)
            and not any(r.id in returned for r in op.results))


class _TopLevel(dict):
    """id of every op -> its top-level op (itself, or the op owning the block it is in),
    plus the ordering edges of transfers: each ``send`` comes before the ``recv`` of its
    key, and the transfers keep their program order. Those edges are dependencies like
    data edges, so fusing or reordering never puts a recv before the send it waits for
    (which would deadlock the devices' threads)."""

    def __init__(self) -> None:
        super().__init__()
        self.after: dict[int, list[Op]] = defaultdict(list)
        self.before: dict[int, list[Op]] = defaultdict(list)
        # Each op's users (``_users``), asked for again and again by the searches for
        # paths; valid while the graph it was built from is unchanged (until outlining).
        self.users: dict[int, list[Op]] = {}


def _top_level_ancestors(block: Block) -> _TopLevel:
    """The top-level op of every op of ``block`` and the transfers' ordering edges."""
    top = _TopLevel()
    transfers: list[Op] = []
    sends: dict[str, Op] = {}
    for op in block.ops:
        top[id(op)] = op
        for b in op.blocks:
            for inner in b.walk():
                top[id(inner)] = op
        if op.primitive.kind == "transfer":
            edges = [transfers[-1]] if transfers else []
            if op.primitive.role == "recv" and op.attrs["key"] in sends:
                edges.append(sends[op.attrs["key"]])
            if op.primitive.role == "send":
                sends[op.attrs["key"]] = op
            for e in edges:
                top.after[id(e)].append(op)
                top.before[id(op)].append(e)
            transfers.append(op)
    return top


def _users(op: Op, top: _TopLevel) -> list[Op]:
    """The top-level ops that use a result of ``op`` (a use inside a nested block counts
    as a use by the op owning the block), and the transfers ordered after it."""
    found = top.users.get(id(op))
    if found is not None:
        return found
    seen: dict[int, Op] = {}
    for r in op.results:
        for u, _ in r.uses:
            t = top.get(id(u), u)
            seen[id(t)] = t
    for t in top.after.get(id(op), ()):
        seen[id(t)] = t
    found = top.users[id(op)] = list(seen.values())
    return found


def _reaches(starts: list[Op], target: _Group, group_of: dict[int, _Group], top: _TopLevel) -> bool:
    """Whether a path from ``starts`` reaches an op of ``target``, with every group formed
    so far taken as one node (a kernel runs when all its inputs are ready). A group's
    members may sit anywhere in program order, so a path may lead back to earlier ops:
    the search is not cut off by position."""
    stack = list(starts)
    seen: set[int] = set()
    while stack:
        op = stack.pop()
        g = group_of.get(id(op))
        if g is target:
            return True
        members = g.ops if g is not None else [op]
        key = id(g) if g is not None else id(op)
        if key in seen:
            continue
        seen.add(key)
        for m in members:
            stack.extend(_users(m, top))
    return False


def _merge_consumers(groups: list[_Group], group_of: dict[int, _Group], top: _TopLevel, why: _Reasons
                     ) -> list[_Group]:
    """Merge a group into the group producing its inputs when both loop over the same
    shape with the same reductions (a loss reading the log-softmax a kernel made) and no
    path through other ops leads from the producer to the consumer."""
    merged = True
    while merged:
        merged = False
        for consumer in groups:
            members = set(map(id, consumer.ops))
            producers = {id(g): g for op in consumer.ops for v in op.inputs
                         if v.producer is not None and id(v.producer) not in members
                         for g in [group_of.get(id(v.producer))] if g is not None and g is not consumer}
            for producer in producers.values():
                if not _same_loops(producer, consumer):
                    why.groups[(id(producer), id(consumer))] = _loop_difference(producer, consumer)
                    continue
                inside = set(map(id, producer.ops)) | members
                outside = [u for op in producer.ops for u in _users(op, top) if id(u) not in inside]
                if _reaches(outside, consumer, group_of, top):
                    why.groups[(id(producer), id(consumer))] = (
                        "cycle", "a path through an op outside them leads from one kernel to the other")
                    continue
                producer.ops.extend(consumer.ops)
                for op in consumer.ops:
                    group_of[id(op)] = producer
                groups.remove(consumer)
                merged = True
                break
            if merged:
                break
    return groups


def _loop_difference(a: _Group, b: _Group) -> tuple[str, str]:
    """Why producer group ``a`` and consumer group ``b`` do not loop alike (``_same_loops``)."""
    if a.device != b.device:
        code = "device_change"
    elif a.reduce_shape is not None and b.reduce_shape is not None and a.loop_size == b.loop_size:
        code = "reduction_mismatch"
    else:
        code = "loop_mismatch"
    return code, f"the kernels loop differently: {_loops(a)} and {_loops(b)}"


def _same_loops(a: _Group, b: _Group) -> bool:
    return (a.device == b.device and a.loop_size == b.loop_size and a.reduce_shape is not None
            and (a.reduce_shape, a.reduce_axes) == (b.reduce_shape, b.reduce_axes))


def _merge_terminal_groups(groups: list[_Group], returned: set[int], top: _TopLevel, why: _Reasons
                           ) -> list[_Group]:
    """Merge the groups whose results only leave the program (returned, or assigned to a
    Variable and returned): the optimizer's updates of every parameter become a few
    kernels instead of one per parameter. No path leads from such a group to another
    group, so merging them cannot form a cycle."""

    def terminal(g: _Group) -> bool:
        members = set(map(id, g.ops))
        for op in g.ops:
            for r in op.results:
                for u, _ in r.uses:
                    if id(u) in members:
                        continue
                    u = top.get(id(u), u)
                    if u.primitive.kind != "stateful" or any(x.uses for x in u.results):
                        return False
        return True

    merged: list[_Group] = []
    bundles: dict[object, _Group] = {}
    apart: list[_Group] = []
    for g in groups:
        if not terminal(g):
            merged.append(g)
            continue
        if g.loop_size >= APART_ELEMENTS:
            apart.append(g)
            merged.append(g)
            continue
        bundle = bundles.get(g.device)
        if bundle is None or len(bundle.ops) + len(g.ops) > MAX_MERGED_OPS:
            if bundle is not None:
                why.full.append((bundle, g, "size_limit",
                                 f"the kernel of the results holds {len(bundle.ops)} ops; with "
                                 f"{len(g.ops)} more it would pass the limit of {MAX_MERGED_OPS}"))
            bundles[g.device] = g
            merged.append(g)
        else:
            bundle.ops.extend(g.ops)
    for g in apart:
        bundle = bundles.get(g.device)
        if bundle is not None:
            why.full.append((bundle, g, "split_apart", f"{_names(g.ops)} loops over {g.loop_size} elements, which "
                                                       f"keeps a kernel of its own (from {APART_ELEMENTS}) to be split "
                                                       "over threads"))
    return merged


def _schedule(block: Block) -> None:
    """Order the ops so each comes after the producers of its inputs, otherwise keeping
    the current order (a kernel with several outputs may be needed earlier than where
    its last op stood)."""
    ops = list(block.ops)
    index = {id(op): i for i, op in enumerate(ops)}
    top = _top_level_ancestors(block)
    waiting = {id(op): 0 for op in ops}
    users: dict[int, list[Op]] = defaultdict(list)
    for op in ops:
        producers = set()
        for inner in [op, *(i for b in op.blocks for i in b.walk())]:
            for v in inner.inputs:
                p = v.producer
                if p is not None and id(p) in top and top[id(p)] is not op:
                    producers.add(id(top[id(p)]))
        producers.update(id(p) for p in top.before.get(id(op), ()))
        waiting[id(op)] = len(producers)
        for p in producers:
            users[p].append(op)
    ready = [(index[id(op)], op) for op in ops if waiting[id(op)] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, op = heapq.heappop(ready)
        order.append(op)
        for u in users[id(op)]:
            waiting[id(u)] -= 1
            if waiting[id(u)] == 0:
                heapq.heappush(ready, (index[id(u)], u))
    assert len(order) == len(ops), "fusion formed a cycle"
    block.ops[:] = order


def _outline(fn: Function, group: _Group, returned: set[int]) -> Op:
    """Replace the ops of ``group`` with one fusion op owning them; return that op."""
    block = fn.body
    members = set(map(id, group.ops))
    position = {id(op): i for i, op in enumerate(block.ops)}
    ops = sorted(group.ops, key=lambda op: position[id(op)])
    inputs: list[Value] = []
    seen: set[int] = set()
    for op in ops:
        for v in op.inputs:
            producer = v.producer
            inside = producer is not None and id(producer) in members
            scalar_const = producer is not None and _is_scalar_constant(producer)
            if not inside and not scalar_const and v.id not in seen:
                seen.add(v.id)
                inputs.append(v)
    outputs = [r for op in ops for r in op.results
               if r.id in returned or any(id(u) not in members for u, _ in r.uses)]

    body = Block([Value(v.type, name=v.name) for v in inputs])
    mapping = {v.id: a for v, a in zip(inputs, body.args)}

    def copy(op: Op, ins: list[Value]) -> list[Value]:
        # The ops are verified IR moving unchanged: their attributes and result types stand
        # (re-inferring them through a Builder was a third of the pass).
        c = Op(op.primitive, ins, op.attrs, [r.type for r in op.results], loc=op.loc)
        body.append(c)
        return c.results
    for op in ops:
        for v in op.inputs:
            if v.id not in mapping:  # a scalar constant: copy it into the kernel
                (mapping[v.id],) = copy(v.producer, [])
        for r, nr in zip(op.results, copy(op, [mapping[v.id] for v in op.inputs])):
            mapping[r.id] = nr
    body.set_returns([mapping[r.id] for r in outputs])

    last = ops[-1]
    outer = Builder(block, loc=ops[0].loc, device=last.device, index=position[id(last)] + 1)
    new = outer.emit("fusion", inputs, {"name": _name(ops), "lines": _lines(ops)}, blocks=[body])
    fusion_op = block.ops[position[id(last)] + 1]
    for old, nv in zip(outputs, new):
        old.replace_all_uses_with(nv)
        block.set_returns([nv if v is old else v for v in block.returns])
    for op in reversed(ops):
        block.erase(op)
    return fusion_op


def _name(ops: list[Op]) -> str:
    names = list(dict.fromkeys(op.name for op in ops))
    if len(names) > MAX_NAME_PARTS:
        return "_".join(names[:MAX_NAME_PARTS]) + f"_and_{len(names) - MAX_NAME_PARTS}_more"
    return "_".join(names)


def _lines(ops: list[Op]) -> str:
    by_file: dict[str, set[int]] = defaultdict(set)
    for op in ops:
        if op.loc is not None:
            by_file[str(op.loc).rsplit(":", 1)[0]].add(op.loc.line)
    return " ".join(f"{f}:{','.join(map(str, sorted(lines)))}" for f, lines in by_file.items())


def _drop_unused_scalar_constants(block: Block) -> None:
    returned = {v.id for v in block.returns}
    for op in reversed(list(block.ops)):
        if _is_scalar_constant(op) and not op.results[0].uses and op.results[0].id not in returned:
            block.erase(op)
