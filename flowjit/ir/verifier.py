"""Check the invariants every pass must preserve.

A verified Function has: every op input defined before its use (by an earlier op or as a
block argument; a nested block sees only its own arguments and ops), each value defined
once, use lists that match the inputs exactly, canonical attributes, result types equal
to what the primitive's rule gives, and returned values that are defined.
"""

from __future__ import annotations

from flowjit.ir.core import Block, Function, Op
from flowjit.ir.errors import ShapeError, VerifyError


def _where(op: Op) -> str:
    return f"{op.name}" + (f" ({op.loc})" if op.loc else "")


def verify(fn: Function) -> Function:
    """Raise VerifyError naming the first broken invariant; return ``fn`` unchanged otherwise."""
    if len(fn.is_var) != len(fn.args):
        raise VerifyError(f"@{fn.name}: {len(fn.is_var)} var flags for {len(fn.args)} arguments")
    if len(fn.donated) != len(fn.args):
        raise VerifyError(f"@{fn.name}: {len(fn.donated)} donation flags for {len(fn.args)} arguments")
    if len(fn.arg_devices) != len(fn.args):
        raise VerifyError(f"@{fn.name}: {len(fn.arg_devices)} argument devices for {len(fn.args)} arguments")
    _verify_block(fn.body, set(), set(), {})
    return fn


def _expected(op: Op, seen: dict) -> tuple[dict, list]:
    """The canonical attributes and result types of ``op`` by its primitive's rules. A
    program repeats a few signatures (one optimizer update per parameter, one elementwise
    shape per layer): an op without blocks is inferred once per signature and call."""
    key = None
    if not op.blocks:
        key = (op.primitive.name, tuple(v.type for v in op.inputs), tuple(op.attrs.items()))
        try:
            found = seen.get(key)
        except TypeError:  # an unhashable attribute: no sharing
            key, found = None, None
        if found is not None:
            return found
    attrs = op.primitive.normalize_attrs(op.attrs)
    found = (attrs, op.primitive.infer([v.type for v in op.inputs], attrs, op.blocks))
    if key is not None:
        seen[key] = found
    return found


def _verify_block(block: Block, visible: set[int], defined: set[int], seen: dict) -> None:
    scope = set(visible)
    for a in block.args:
        if a.id in defined:
            raise VerifyError(f"block argument {a} defined twice")
        defined.add(a.id)
        scope.add(a.id)
    for op in block.ops:
        if op.parent is not block:
            raise VerifyError(f"{_where(op)}: op's parent is not the block holding it")
        for i, v in enumerate(op.inputs):
            if v.id not in scope:
                raise VerifyError(f"{_where(op)}: input {i} ({v.type}) is used before it is defined "
                                  "(or is not defined in this function)")
            if (op, i) not in v.uses:
                raise VerifyError(f"{_where(op)}: input {i} is missing from its value's use list")
        try:
            attrs, expected = _expected(op, seen)
        except ShapeError as e:
            raise VerifyError(f"{_where(op)}: {e.reason}") from None
        if attrs != op.attrs:
            raise VerifyError(f"{_where(op)}: attributes {op.attrs} are not canonical ({attrs})")
        got = [r.type for r in op.results]
        if got != expected:
            raise VerifyError(f"{_where(op)}: result types {', '.join(map(str, got))} differ from "
                              f"the rule's {', '.join(map(str, expected))}")
        for b in op.blocks:
            if b.args and any(a.id in scope for a in b.args):
                raise VerifyError(f"{_where(op)}: a nested block reuses an outer value as its argument")
            # Nested blocks are isolated from above: they see only their own arguments.
            _verify_block(b, set(), defined, seen)
        for r in op.results:
            if r.producer is not op:
                raise VerifyError(f"{_where(op)}: result does not point back at its op")
            if r.id in defined:
                raise VerifyError(f"{_where(op)}: result defined twice")
            for user, j in r.uses:
                if j >= len(user.inputs) or user.inputs[j] is not r:
                    raise VerifyError(f"{_where(op)}: stale use by {user.name}")
            defined.add(r.id)
            scope.add(r.id)
    for v in block.returns:
        if v.id not in scope:
            raise VerifyError(f"returned value {v.type} is not defined in this block")
