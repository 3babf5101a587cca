"""User-defined derivatives and rematerialization: ``stop_gradient``, ``custom_vjp_call``,
``name_tag`` and ``call``.

- ``%y = stop_gradient %x``: ``x`` itself, through which no cotangent flows (an
  elementwise copy, declared non-differentiable, so ``backward`` passes it nothing).
- ``%out... = custom_vjp_call %out..., %res..., %args..., %c... {num_out=k, num_res=r,
  name=f} { bwd }``: the results are the first ``k`` inputs (the primal outputs, computed by
  ordinary ops before it); its VJP inlines ``bwd``, which takes the ``r`` residuals, the
  cotangents of the ``k`` outputs and the captures ``c``, and returns one cotangent per
  argument. The outputs and residuals get no cotangent through it, so the user's rule
  replaces the derivative of the ops that computed them. The block is traced when the
  user calls the function (``flowjit/tracer/custom_gradients.py``), so the IR stays
  printable, parseable and cacheable; the ``inline_calls`` pass replaces the op by its
  inputs before the pipeline's first pass, so fusion never sees it.
- ``%y = name_tag %x {name=s}``: ``x``, named for the remat policies
  (``fj.checkpoint_name``); ``inline_calls`` removes it.
- ``%out..., %saved... = call %in... {num_out=k, prevent_cse, recompute, policy, name} { block }``:
  the block run on the inputs (``fj.remat``, ``flowjit/tracer/remat.py``): ``k`` outputs,
  then the values the policy saved. Its VJP emits another ``call`` (recompute=true) whose
  block runs the forward again from the inputs and the saved values, then its backward; its
  JVP is one ``call`` over primals and tangents;
  ``inline_calls`` inlines the forward ones, ``inline_remat`` the recomputations after CSE.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from flowjit.ir.core import Block, Value, clone_ops_into
from flowjit.ir.dtypes import ALL_DTYPES
from flowjit.ir.errors import ShapeError
from flowjit.ir.primitives.control import _run, block_with_tangents, present, spread
from flowjit.ir.registry import attr, declare, defbatch, defjvp, defvjp, same_dtype
from flowjit.ir.types import TensorType


def _stop_gradient_rule(in_types: Sequence[TensorType]) -> TensorType:
    (t,) = in_types
    return TensorType(t.shape, same_dtype(in_types))


declare("stop_gradient", kind="elementwise", rule=_stop_gradient_rule, arity=1,
        impl=lambda x: np.array(x, copy=True), template="a", dtypes=ALL_DTYPES, differentiable=False,
        doc="stop_gradient(x): x, with a zero derivative (no cotangent flows through it)")


def _types(values: Sequence[Any]) -> str:
    return "(" + ", ".join(str(v.type if hasattr(v, "type") else v) for v in values) + ")"


def _custom_vjp_rule(in_types: Sequence[TensorType], *, blocks: Sequence[Any], num_out: int, num_res: int,
                     name: str) -> list[TensorType]:
    (bwd,) = blocks
    if num_out < 0 or num_res < 0 or num_out + num_res > len(in_types):
        raise ShapeError(f"custom_vjp_call of {name}: num_out={num_out}, num_res={num_res} with "
                         f"{len(in_types)} inputs")
    outs = list(in_types[:num_out])
    res = list(in_types[num_out:num_out + num_res])
    n_args = len(bwd.returns)
    args = list(in_types[num_out + num_res:num_out + num_res + n_args])
    caps = list(in_types[num_out + num_res + n_args:])
    want = res + outs + caps
    if [a.type for a in bwd.args] != want:
        raise ShapeError(f"custom_vjp_call of {name}: the bwd block takes {_types(bwd.args)}, but the op passes "
                         f"{_types(want)} (residuals, output cotangents, captures)")
    if [v.type for v in bwd.returns] != args:
        raise ShapeError(f"custom_vjp_call of {name}: the bwd block returns {_types(bwd.returns)}, one cotangent "
                         f"per argument {_types(args)}")
    return outs


def _custom_vjp_impl(*inputs: np.ndarray, blocks: Sequence[Any], num_out: int, num_res: int,
                     name: str) -> tuple[np.ndarray, ...]:
    return tuple(inputs[:num_out])


declare("custom_vjp_call", kind="control", role="custom_vjp", rule=_custom_vjp_rule, impl=_custom_vjp_impl,
        arity=None, num_blocks=1, block_names=("bwd",),
        attrs={"num_out": attr("int"), "num_res": attr("int"), "name": attr("str", "")},
        doc="custom_vjp_call(outs..., residuals..., args..., captures...): the outputs, differentiated by "
            "the bwd block")


def _custom_vjp_vjp(e: Any, gs: Sequence[Any], ys: Sequence[Any], *inputs: Any, blocks: Sequence[Any],
                    num_out: int, num_res: int, name: str) -> list:
    (bwd,) = blocks
    n_args = len(bwd.returns)
    res = list(inputs[num_out:num_out + num_res])
    caps = list(inputs[num_out + num_res + n_args:])
    # Cloned apart, then placed where the builder stands (it may insert mid-block).
    scratch = Block()
    grads = clone_ops_into(bwd, scratch, res + list(gs) + caps)
    b = e.builder
    for op in scratch.ops:
        if b.index is None:
            b.block.append(op)
        else:
            b.block.insert(b.index, op)
            b.index += 1
    # Outputs, residuals and captures are constants for the user's rule.
    return [None] * (num_out + num_res) + list(grads) + [None] * len(caps)


defvjp("custom_vjp_call", _custom_vjp_vjp)


# ---- rematerialization: name_tag and call (fj.remat) -----------------------------------

declare("name_tag", kind="elementwise", role="name_tag", rule=lambda in_types, name="": _stop_gradient_rule(in_types),
        arity=1,
        impl=lambda x, name="": np.array(x, copy=True), template="a", dtypes=ALL_DTYPES,
        attrs={"name": attr("str", "")},
        doc="name_tag(x) {name}: x, named for the remat policies (fj.checkpoint_name); inlined away")
defvjp("name_tag", lambda e, g, y, x, name="": [g])


def _call_rule(in_types: Sequence[TensorType], *, blocks: Sequence[Any], num_out: int, prevent_cse: bool,
               recompute: bool, policy: str, name: str) -> list[TensorType]:
    (block,) = blocks
    if [a.type for a in block.args] != list(in_types):
        raise ShapeError(f"call of {name}: the block takes {_types(block.args)}, but the op passes "
                         f"{_types(in_types)}")
    if not 0 <= num_out <= len(block.returns):
        raise ShapeError(f"call of {name}: num_out={num_out} but the block returns {len(block.returns)} values")
    return [v.type for v in block.returns]


def _call_impl(*inputs: np.ndarray, blocks: Sequence[Any], **attrs: Any) -> tuple[np.ndarray, ...]:
    return tuple(_run(blocks[0], inputs))


declare("call", kind="control", role="call", rule=_call_rule, impl=_call_impl, arity=None, num_blocks=1,
        block_names=("body",),
        attrs={"num_out": attr("int"), "prevent_cse": attr("bool", True), "recompute": attr("bool", False),
               "policy": attr("str", ""), "name": attr("str", "")},
        doc="call(inputs...): the block run on the inputs: num_out outputs, then the values the remat policy "
            "saved for the backward pass (recompute: the block recomputes a forward and runs its backward)")


def _call_vjp(e: Any, gs: Sequence[Any], ys: Sequence[Any], *xs: Any, blocks: Sequence[Any], num_out: int,
              prevent_cse: bool, recompute: bool, policy: str, name: str) -> list:
    """The block's forward run again from the inputs and the saved values, then its VJP,
    inside a new ``call`` (recompute=true), so the forward's values live only while this
    backward step runs. The saved results' cotangents join the seeds: they are zeros unless
    a second derivative differentiates a backward that read them."""
    (block,) = blocks
    saved = list(ys[num_out:])
    # A saved value's cotangent that is a literal zero (the first derivative's case) seeds
    # nothing. Exact, and safe because forward mode uses the call's own JVP rule, never
    # this rule transposed on placeholder zeros.
    seeded = [k for k, g in enumerate(gs) if k < num_out or not _is_zero(g)]
    r = Block([Value(a.type, name=a.name) for a in block.args]
              + [Value(s.type, name="saved") for s in saved]
              + [Value(gs[k].type, name="ct") for k in seeded])
    n = len(xs)
    saved_args, ct_args = r.args[n:n + len(saved)], r.args[n + len(saved):]
    rets = clone_ops_into(block, r, r.args[:n])
    wrt = [k for k, x in enumerate(xs) if x.type.dtype.is_inexact]
    grads = e.backward(r, list(r.ops), [rets[k] for k in seeded], ct_args, [r.args[k] for k in wrt])
    # Now that every rule has read what it needs, the saved values replace their recomputation:
    # the ops that only fed them go dead and are dropped.
    for old, new in zip(rets[num_out:], saved_args):
        if old.producer is not None:
            old.replace_all_uses_with(new)
    swap = {old.id: new for old, new in zip(rets[num_out:], saved_args)}
    r.set_returns([swap.get(g.id, g) for g in grads])
    _drop_dead(r)
    out = e.builder.emit("call", [*xs, *saved, *(gs[k] for k in seeded)],
                         {"num_out": len(grads), "prevent_cse": prevent_cse, "recompute": True,
                          "policy": policy, "name": name}, blocks=[r])
    cts: list[Any] = [None] * n
    for k, g in zip(wrt, out):
        cts[k] = g
    return cts


def _is_zero(v: Any) -> bool:
    """Whether ``v`` is a literal zero: a constant 0, or one broadcast (``Emitter.zeros``)."""
    op = v.producer
    while op is not None and op.primitive.role == "broadcast":
        op = op.inputs[0].producer
    return (op is not None and op.primitive.kind == "constant" and "value" in op.attrs
            and not np.any(op.attrs["value"].array))


def _drop_dead(block: Any) -> None:
    """Erase the ops of ``block`` whose results nothing uses nor returns (pure ones only)."""
    returned = {v.id for v in block.returns}
    for op in reversed(list(block.ops)):
        if op.primitive.has_side_effects or any(r.uses or r.id in returned for r in op.results):
            continue
        if any(inner.primitive.has_side_effects for b in op.blocks for inner in b.walk()):
            continue
        block.erase(op)


defvjp("call", _call_vjp)


def _call_jvp(e: Any, ts: Sequence[Any], ys: Sequence[Any], *xs: Any, blocks: Sequence[Any], num_out: int,
              **attrs: Any) -> tuple[list, list]:
    # One call over primals and tangents, as cond's rule: the block returns its outputs with
    # their tangents, then the saved values with theirs (saved too: a backward that reads a
    # saved value needs its tangent).
    new, targs, touts = block_with_tangents(e, blocks[0], [t is not None for t in ts])
    rets, k = list(new.returns), num_out
    t_out, t_saved = present(touts[:k]), present(touts[k:])
    new.args = [*new.args, *present(targs)]
    new.set_returns([*rets[:k], *t_out, *rets[k:], *t_saved])
    res = e.builder.emit("call", [*xs, *present(ts)], {"num_out": k + len(t_out), **attrs}, blocks=[new])
    outs = [*res[:k], *res[k + len(t_out):len(rets) + len(t_out)]]
    tangents = [*res[k:k + len(t_out)], *res[len(rets) + len(t_out):]]
    return outs, spread(tangents, [t is not None for t in touts])


defjvp("call", _call_jvp)


def _call_batch(e: Any, xs: Sequence[Any], batched: Sequence[bool], *, blocks: Sequence[Any],
                **attrs: Any) -> tuple[list, list[bool]]:
    # The block batched as any block; the outputs and the saved values keep the batching
    # the block gives them, so the VJP of the batched call recomputes batched.
    new, flags = e.batch_block(blocks[0], [x.type for x in xs], batched)
    return e.builder.emit("call", list(xs), attrs, blocks=[new]), flags


defbatch("call", _call_batch)
