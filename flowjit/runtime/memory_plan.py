"""Memory planning for one Executable: liveness, buffer release and in-place kernels.

The program's values live in numbered slots. ``plan_memory`` computes, from liveness over
the top-level ops:

- ``free_after[i]``: the slots whose last use is op ``i`` (never a returned value); the
  runtime drops them there, so a large temporary's buffer goes back to the pool and the
  next kernel's output reuses it within the same call;
- ``write_into[i]``: the input position whose buffer kernel ``i`` overwrites with its
  output, or None. Allowed when the kernel reads that input only at the index it writes
  (``CompiledKernel.in_place``), the input dies at op ``i``, and its buffer is owned by
  the program: made by a kernel (or written in place into one) and never passed to an
  op that may return a view of it, so never an argument, a constant, or an array
  another live value shares.

It guarantees that no slot is freed or overwritten while a later op or the result still
needs it. ``peak_bytes`` and ``unplanned_peak_bytes`` report the largest total size of
live kernel buffers with and without the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flowjit.ir.core import Function, Op


@dataclass
class MemoryPlan:
    """Where each value lives and when its buffer is released or reused."""

    slots: dict[int, int]              # value id -> slot
    free_after: list[list[int]]        # per top-level op: slots to release after it
    write_into: list[int | None]       # per top-level op: input position its output overwrites
    peak_bytes: int
    unplanned_peak_bytes: int

    def describe(self, function: Function) -> str:
        """One line per op that releases or reuses a buffer, for ``flowjit explain``-style output."""
        lines = []
        names = {s: f"%{v}" for v, s in self.slots.items()}
        for i, op in enumerate(function.body.ops):
            parts = []
            if self.write_into[i] is not None:
                parts.append(f"writes in place into {names[self.slots[op.inputs[self.write_into[i]].id]]}")
            if self.free_after[i]:
                parts.append("releases " + ", ".join(names[s] for s in self.free_after[i]))
            if parts:
                lines.append(f"{op.name} -> {', '.join('%' + str(r.id) for r in op.results)}: {'; '.join(parts)}")
        lines.append(f"peak kernel buffers: {self.peak_bytes} bytes (without the plan: {self.unplanned_peak_bytes})")
        return "\n".join(lines)


def plan_memory(function: Function, in_place: Mapping[int, Sequence[int]]) -> MemoryPlan:
    """The memory plan of ``function``'s top-level ops; ``in_place`` maps the id of each
    compiled kernel op to the input positions its output may overwrite."""
    body = function.body
    slots: dict[int, int] = {}
    for a in body.args:
        slots[a.id] = len(slots)
    for op in body.ops:
        for r in op.results:
            slots[r.id] = len(slots)
    n_ops = len(body.ops)
    returned = {v.id for v in body.returns}
    # A sent value escapes to another device, which may still read it: never overwritten.
    escaped = {v.id for op in body.ops if op.primitive.role == "send" for v in op.inputs}
    last_use: dict[int, int] = {}
    for i, op in enumerate(body.ops):
        for v in op.inputs:
            last_use[v.id] = i
    free_after: list[list[int]] = [[] for _ in range(n_ops)]
    for i, op in enumerate(body.ops):
        for r in op.results:  # results nothing reads are released at once
            if r.id not in last_use and r.id not in returned:
                free_after[i].append(slots[r.id])
    for vid, i in last_use.items():
        if vid not in returned:
            free_after[i].append(slots[vid])

    # Values some op other than a kernel may return a view of: overwriting them would
    # change that view too.
    viewed = {v.id for op in body.ops if op.id not in in_place and may_return_view(op) for v in op.inputs}
    owned: set[int] = set()
    write_into: list[int | None] = [None] * n_ops
    for i, op in enumerate(body.ops):
        if op.id not in in_place:
            continue
        for r in op.results:
            if r.id not in viewed:
                owned.add(r.id)
        for k in in_place[op.id]:
            v = op.inputs[k]
            positions = [j for j, u in enumerate(op.inputs) if u.id == v.id]
            if (v.id in owned and last_use.get(v.id) == i and v.id not in returned and v.id not in escaped
                    and all(j in in_place[op.id] for j in positions)):
                write_into[i] = k
                free_after[i].remove(slots[v.id])  # its buffer lives on as the result
                break

    peak, unplanned = _peaks(function, set(in_place), write_into, last_use, returned)
    return MemoryPlan(slots, free_after, write_into, peak, unplanned)


def may_return_view(op: Op) -> bool:
    """Whether ``op``'s NumPy reference may return a view of an input (layout ops such as
    reshape and transpose, and a cast to the same dtype) rather than a new array."""
    return op.primitive.kind == "layout" or op.primitive.role == "convert"


def _peaks(function: Function, kernel_ops: set[int], write_into: list[int | None],
           last_use: dict[int, int], returned: set[int]) -> tuple[int, int]:
    """Peak bytes of kernel-made buffers alive at once, with the plan and with none (every
    buffer kept to the end of the call)."""
    live: dict[int, int] = {}
    peak = total = 0
    for i, op in enumerate(function.body.ops):
        if op.id in kernel_ops:
            reused = op.inputs[write_into[i]].id if write_into[i] is not None else None
            for r in op.results:
                nbytes = r.type.size * r.type.dtype.itemsize
                total += nbytes
                if reused is not None:
                    live[r.id] = live.pop(reused, nbytes)
                else:
                    live[r.id] = nbytes
        peak = max(peak, sum(live.values()))
        for v in list(live):
            if v not in returned and last_use.get(v, i) <= i:
                del live[v]
    return peak, total
