"""``tf.nn.dynamic_rnn``, ``bidirectional_dynamic_rnn``, ``static_rnn`` and
``tf.reverse_sequence``: a recurrent cell (``tf.nn.rnn_cell``) run over a sequence.

``dynamic_rnn`` is one ``tf.scan`` over time (the IR's loop: one compiled loop whatever
the length, differentiable by ``tf.gradients``), under the variable scope ``rnn`` by
default; the cell's variables are made before the loop. With ``sequence_length`` a row
past its length gives zero outputs and keeps its last state, as TensorFlow's does; the
final state is each row's state at its own length. ``static_rnn`` unrolls the cell over a
Python list of inputs, one set of ops a step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from flowjit.ir.errors import FlowjitTypeError
from flowjit.tracer import pytree
from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import ops
from flowjit.v1.control_flow import scan
from flowjit.v1.graph import Tensor
from flowjit.v1.rnn_cell import RNNCell, batch_zeros
from flowjit.v1.variables import variable_scope


def _leaves(tree: Any) -> list[Any]:
    return pytree.flatten(tree, is_leaf=lambda x: not isinstance(x, (list, tuple, dict)))[0]


def _like(tree: Any, leaves: list[Any]) -> Any:
    """``leaves`` in the structure of ``tree`` (an LSTMStateTuple stays one)."""
    return pytree.unflatten(pytree.flatten(tree, is_leaf=lambda x: not isinstance(x, (list, tuple, dict)))[1],
                            leaves)


def _initial_state(cell: RNNCell, batch_of: Tensor, initial_state: Any, dtype: Any, who: str) -> Any:
    if initial_state is not None:
        return initial_state
    if dtype is None:
        raise ValueError(f"{who}: give initial_state or dtype (the state's dtype when it starts at zero)")
    return cell.zero_state(batch_of, dtype)


def dynamic_rnn(cell: RNNCell, inputs: Any, sequence_length: Any = None, initial_state: Any = None,
                dtype: Any = None, parallel_iterations: int | None = None, swap_memory: bool = False,
                time_major: bool = False, scope: Any = None) -> tuple[Tensor, Any]:
    """Run ``cell`` over ``inputs`` ([batch, time, depth], or [time, batch, depth] with
    ``time_major``); returns ``(outputs, final_state)``, the outputs laid out as the inputs.
    ``sequence_length`` ([batch] ints): each row's length (the module docstring)."""
    x = ops.convert_to_tensor(inputs)
    shape = x._shape
    if shape is None or len(shape) != 3 or shape[2] is None:
        raise ValueError(f"tf.nn.dynamic_rnn: inputs must be [batch, time, depth] (or [time, batch, depth] with "
                         f"time_major=True) with a static depth; got {None if shape is None else list(shape)}")
    with variable_scope(scope or "rnn"):
        if not cell.built:
            cell.build(int(shape[2]))
        xt = x if time_major else ops.transpose(x, [1, 0, 2])
        state0 = _initial_state(cell, xt[0], initial_state, dtype, "tf.nn.dynamic_rnn")
        zero_out = batch_zeros(xt[0], cell.output_size, xt.dtype)
        if sequence_length is None:
            def step(carry: Any, x_t: Any) -> Any:
                return cell.call(x_t, carry[1])
            outs, states = scan(step, xt, initializer=(zero_out, state0))
        else:
            lengths = ops.cast(ops.convert_to_tensor(sequence_length), "int32")
            times = ops.apply("TimeSteps", lambda v: fnp.arange(fnp.shape(v)[0], dtype="int32"), [xt])

            def step(carry: Any, elem: Any) -> Any:
                state = carry[1]
                x_t, t = elem
                out, new = cell.call(x_t, state)
                alive = ops.expand_dims(ops.less(t, lengths), 1)   # [batch, 1]: t within the row
                kept = [ops.where(_rows(alive, n), n, o) for n, o in zip(_leaves(new), _leaves(state))]
                return _masked(alive, out), _like(state, kept)
            outs, states = scan(step, (xt, times), initializer=(zero_out, state0))
        final = _like(state0, [s[-1] for s in _leaves(states)])
        outputs = outs if time_major else ops.transpose(outs, [1, 0, 2])
    return outputs, final


def _rows(alive: Tensor, like: Tensor) -> Tensor:
    """``alive`` ([batch, 1] bools) broadcast to ``like``'s [batch, n]."""
    return ops.apply("RowMask", lambda a, v: fnp.broadcast_to(a, fnp.shape(v)), [alive, like])


def _masked(alive: Tensor, out: Tensor) -> Tensor:
    return ops.where(_rows(alive, out), out, ops.zeros_like(out))


def static_rnn(cell: RNNCell, inputs: Sequence[Any], initial_state: Any = None, dtype: Any = None,
               sequence_length: Any = None, scope: Any = None) -> tuple[list[Tensor], Any]:
    """Run ``cell`` over the list ``inputs`` (each [batch, depth]), unrolled; returns the list
    of outputs and the final state."""
    if sequence_length is not None:
        raise FlowjitTypeError("tf.nn.static_rnn(sequence_length=...) is not supported; use tf.nn.dynamic_rnn, "
                               "which masks each row past its length")
    xs = [ops.convert_to_tensor(x) for x in inputs]
    if not xs:
        raise ValueError("tf.nn.static_rnn: inputs must be a non-empty list of [batch, depth] tensors")
    with variable_scope(scope or "rnn"):
        if not cell.built:
            cell.build(int(xs[0]._shape[1]))
        state = _initial_state(cell, xs[0], initial_state, dtype, "tf.nn.static_rnn")
        outputs = []
        for x in xs:
            out, state = cell.call(x, state)
            outputs.append(out)
    return outputs, state


def reverse_sequence(input: Any, seq_lengths: Any, seq_axis: int | None = None, batch_axis: int | None = None,
                     name: str | None = None, seq_dim: int | None = None, batch_dim: int | None = None) -> Tensor:
    """Reverse the first ``seq_lengths[b]`` entries along ``seq_axis`` of each slice ``b`` along
    ``batch_axis`` (0 by default); the entries past a row's length stay where they are."""
    seq_axis = seq_axis if seq_axis is not None else seq_dim
    batch_axis = batch_axis if batch_axis is not None else (batch_dim if batch_dim is not None else 0)
    if seq_axis is None:
        raise ValueError("tf.reverse_sequence needs seq_axis (the time axis)")

    def fn(x: Any, lengths: Any, seq_axis: int, batch_axis: int) -> Any:
        t = fnp.shape(x)[seq_axis]
        steps = fnp.arange(t)
        lengths = fnp.astype(lengths, steps.dtype)
        # index[b, s] = lengths[b] - 1 - s inside the row's length, s past it
        index = fnp.where(steps[None, :] < lengths[:, None], lengths[:, None] - 1 - steps[None, :], steps[None, :])
        rank = fnp.ndim(x)
        moved = fnp.moveaxis(x, (batch_axis, seq_axis), (0, 1))
        index = fnp.reshape(index, fnp.shape(index) + (1,) * (rank - 2))
        out = fnp.take_along_axis(moved, fnp.broadcast_to(index, fnp.shape(moved)), axis=1)
        return fnp.moveaxis(out, (0, 1), (batch_axis, seq_axis))
    return ops.apply("ReverseSequence", fn, [input, seq_lengths], name=name, seq_axis=int(seq_axis),
                     batch_axis=int(batch_axis))


def bidirectional_dynamic_rnn(cell_fw: RNNCell, cell_bw: RNNCell, inputs: Any, sequence_length: Any = None,
                              initial_state_fw: Any = None, initial_state_bw: Any = None, dtype: Any = None,
                              parallel_iterations: int | None = None, swap_memory: bool = False,
                              time_major: bool = False, scope: Any = None) -> tuple[tuple[Tensor, Tensor], tuple]:
    """``cell_fw`` over the sequence and ``cell_bw`` over it reversed (each row within its
    length); returns ``((outputs_fw, outputs_bw), (state_fw, state_bw))``, the backward
    outputs in the inputs' order."""
    time_axis, batch_axis = (0, 1) if time_major else (1, 0)
    x = ops.convert_to_tensor(inputs)

    def flip(t: Tensor) -> Tensor:
        if sequence_length is None:
            return ops.reverse(t, [time_axis])
        return reverse_sequence(t, sequence_length, seq_axis=time_axis, batch_axis=batch_axis)
    with variable_scope(scope or "bidirectional_rnn"):
        out_fw, state_fw = dynamic_rnn(cell_fw, x, sequence_length, initial_state_fw, dtype,
                                       time_major=time_major, scope="fw")
        out_bw, state_bw = dynamic_rnn(cell_bw, flip(x), sequence_length, initial_state_bw, dtype,
                                       time_major=time_major, scope="bw")
    return (out_fw, flip(out_bw)), (state_fw, state_bw)
