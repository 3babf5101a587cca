"""``tf.nn.rnn_cell``: TensorFlow 1.x's recurrent cells, one step of a recurrent network as
graph ops, by TensorFlow's formulas, gate order and variable names.

A cell maps ``(inputs, state)`` to ``(output, new_state)``. Its variables are made by
``build(input_depth)`` under the variable scope in effect (``get_variable``: ``kernel`` and
``bias``, Glorot uniform and zeros as TensorFlow's), on the first call or by
``tf.nn.dynamic_rnn`` before its loop (a variable cannot be made inside a loop's body).

- ``BasicRNNCell``: ``h = activation([x, h] @ kernel + bias)`` (tanh).
- ``BasicLSTMCell`` and ``LSTMCell``: ``i, j, f, o`` = the four quarters of ``[x, h] @
  kernel + bias``; ``c = c * sigmoid(f + forget_bias) + sigmoid(i) * tanh(j)``, ``h =
  tanh(c) * sigmoid(o)``, the state an ``LSTMStateTuple(c, h)``. ``LSTMCell`` adds
  peepholes (``w_f_diag``, ``w_i_diag``, ``w_o_diag``), ``cell_clip``, and a projection of
  ``h`` to ``num_proj`` units (``projection/kernel``; ``proj_clip``).
- ``GRUCell``: ``r, u = sigmoid([x, h] @ gates/kernel + gates/bias)`` (the gates' bias
  starting at ones), ``c = tanh([x, r * h] @ candidate/kernel + candidate/bias)``, ``h = u
  * h + (1 - u) * c``.
- ``MultiRNNCell(cells)``: the cells stacked, each feeding the next (``cell_0``, ``cell_1``
  scopes), its state the tuple of theirs.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from flowjit.tracer.numpy import namespace as fnp
from flowjit.v1 import ops
from flowjit.v1.graph import Tensor
from flowjit.v1.variables import Variable, constant_initializer, get_variable, variable_scope, zeros_initializer


class LSTMStateTuple(NamedTuple):
    """An LSTM's state: the cell ``c`` and the output ``h``."""

    c: Any
    h: Any


def _depth(inputs: Any, who: str) -> int:
    shape = ops.convert_to_tensor(inputs)._shape
    if shape is None or len(shape) != 2 or shape[1] is None:
        raise ValueError(f"{who}: the inputs need a static last dimension (shape [batch, depth]); got "
                         f"{None if shape is None else list(shape)}")
    return int(shape[1])


def batch_zeros(batch_of: Tensor, size: int, dtype: Any) -> Tensor:
    """Zeros of ``[batch, size]``, the batch taken from ``batch_of``'s first axis when it runs."""
    return ops.apply("ZeroState", lambda x, size, dtype: fnp.zeros((fnp.shape(x)[0], size), dtype), [batch_of],
                     size=size, dtype=ops.as_dtype(dtype))


class RNNCell(abc.ABC):
    """The base of the cells: ``state_size``, ``output_size``, ``zero_state``, ``build`` and
    ``__call__(inputs, state) -> (output, new_state)``."""

    _default_name = "rnn_cell"

    def __init__(self, name: str | None = None, reuse: Any = None, dtype: Any = None):
        self.name = name or self._default_name
        self._reuse = reuse
        self._dtype = dtype or "float32"
        self.built = False
        self.variables: list[Variable] = []

    @property
    @abc.abstractmethod
    def state_size(self) -> Any:
        """Each state tensor's width: an int, an LSTMStateTuple of them, or a tuple of those."""

    @property
    @abc.abstractmethod
    def output_size(self) -> int:
        """The output's width."""

    def zero_state(self, batch_size: Any, dtype: Any) -> Any:
        """The state of zeros for ``batch_size`` rows (an int, or a tensor whose first axis is
        the batch)."""
        def zeros(size: int) -> Tensor:
            if isinstance(batch_size, int):
                return ops.zeros([batch_size, size], dtype)
            return batch_zeros(ops.convert_to_tensor(batch_size), size, dtype)
        return _map_sizes(self.state_size, zeros)

    def build(self, input_depth: int) -> None:
        """Make the variables for inputs of ``input_depth`` under the variable scope in effect."""
        with variable_scope(self.name, reuse=self._reuse):
            self._build(int(input_depth))
        self.built = True

    def _variable(self, name: str, shape: list[int], initializer: Any = None) -> Variable:
        v = get_variable(name, shape, dtype=self._dtype, initializer=initializer)
        self.variables.append(v)
        return v

    @abc.abstractmethod
    def _build(self, input_depth: int) -> None:
        """Make the cell's variables (``_variable``) for inputs of ``input_depth``."""

    def __call__(self, inputs: Any, state: Any, scope: Any = None) -> tuple[Any, Any]:
        if not self.built:
            with variable_scope(scope) if scope is not None else contextlib.nullcontext():
                self.build(_depth(inputs, type(self).__name__))
        return self.call(ops.convert_to_tensor(inputs), state)

    @abc.abstractmethod
    def call(self, inputs: Tensor, state: Any) -> tuple[Any, Any]:
        """One step on built variables: ``(output, new_state)``."""


def _map_sizes(size: Any, fn: Callable[[int], Any]) -> Any:
    if isinstance(size, int):
        return fn(size)
    if isinstance(size, LSTMStateTuple):
        return LSTMStateTuple(fn(size.c), fn(size.h))
    return tuple(_map_sizes(s, fn) for s in size)


def _linear(inputs: Sequence[Tensor], kernel: Variable, bias: Variable | None) -> Tensor:
    out = ops.matmul(ops.concat(list(inputs), 1), kernel)
    return out if bias is None else ops.add(out, bias)


class _OneStateCell(RNNCell):
    """A cell of ``num_units`` whose state is its output."""

    def __init__(self, num_units: int, activation: Callable[[Any], Any] | None = None, reuse: Any = None,
                 name: str | None = None, dtype: Any = None):
        super().__init__(name, reuse, dtype)
        self._units, self._act = int(num_units), activation or ops.tanh

    @property
    def state_size(self) -> int:
        return self._units

    @property
    def output_size(self) -> int:
        return self._units


class BasicRNNCell(_OneStateCell):
    """``h = activation([x, h] @ kernel + bias)``."""

    _default_name = "basic_rnn_cell"

    def _build(self, input_depth: int) -> None:
        self._kernel = self._variable("kernel", [input_depth + self._units, self._units])
        self._bias = self._variable("bias", [self._units], zeros_initializer())

    def call(self, inputs: Tensor, state: Any) -> tuple[Any, Any]:
        h = self._act(_linear([inputs, state], self._kernel, self._bias))
        return h, h


class BasicLSTMCell(RNNCell):
    """The LSTM of Zaremba et al.: no peepholes, ``forget_bias`` added to the forget gate."""

    _default_name = "basic_lstm_cell"

    def __init__(self, num_units: int, forget_bias: float = 1.0, state_is_tuple: bool = True,
                 activation: Callable[[Any], Any] | None = None, reuse: Any = None, name: str | None = None,
                 dtype: Any = None):
        super().__init__(name, reuse, dtype)
        if not state_is_tuple:
            raise ValueError(f"{type(self).__name__}(state_is_tuple=False): the concatenated state TensorFlow "
                             "deprecated is not supported; keep the LSTMStateTuple")
        self._units, self._forget_bias, self._act = int(num_units), float(forget_bias), activation or ops.tanh

    @property
    def state_size(self) -> LSTMStateTuple:
        return LSTMStateTuple(self._units, self._units)

    @property
    def output_size(self) -> int:
        return self._units

    def _build(self, input_depth: int) -> None:
        self._kernel = self._variable("kernel", [input_depth + self._units, 4 * self._units])
        self._bias = self._variable("bias", [4 * self._units], zeros_initializer())

    def call(self, inputs: Tensor, state: Any) -> tuple[Any, Any]:
        c, h = state
        i, j, f, o = ops.split(_linear([inputs, h], self._kernel, self._bias), 4, axis=1)
        new_c = c * ops.sigmoid(f + self._forget_bias) + ops.sigmoid(i) * self._act(j)
        new_h = self._act(new_c) * ops.sigmoid(o)
        return new_h, LSTMStateTuple(new_c, new_h)


class LSTMCell(BasicLSTMCell):
    """The LSTM with optional peepholes (``use_peepholes``), a clipped cell (``cell_clip``)
    and a projection of the output to ``num_proj`` units (clipped to ``proj_clip``)."""

    _default_name = "lstm_cell"

    def __init__(self, num_units: int, use_peepholes: bool = False, cell_clip: float | None = None,
                 initializer: Any = None, num_proj: int | None = None, proj_clip: float | None = None,
                 num_unit_shards: Any = None, num_proj_shards: Any = None, forget_bias: float = 1.0,
                 state_is_tuple: bool = True, activation: Callable[[Any], Any] | None = None, reuse: Any = None,
                 name: str | None = None, dtype: Any = None):
        super().__init__(num_units, forget_bias, state_is_tuple, activation, reuse, name, dtype)
        self._peepholes, self._cell_clip, self._init = use_peepholes, cell_clip, initializer
        self._proj, self._proj_clip = (None if num_proj is None else int(num_proj)), proj_clip

    @property
    def state_size(self) -> LSTMStateTuple:
        return LSTMStateTuple(self._units, self._proj or self._units)

    @property
    def output_size(self) -> int:
        return self._proj or self._units

    def _build(self, input_depth: int) -> None:
        out = self._proj or self._units
        self._kernel = self._variable("kernel", [input_depth + out, 4 * self._units], self._init)
        self._bias = self._variable("bias", [4 * self._units], zeros_initializer())
        if self._peepholes:
            self._w_f, self._w_i, self._w_o = (self._variable(n, [self._units], self._init)
                                               for n in ("w_f_diag", "w_i_diag", "w_o_diag"))
        if self._proj is not None:
            with variable_scope("projection"):
                self._projection = self._variable("kernel", [self._units, self._proj], self._init)

    def call(self, inputs: Tensor, state: Any) -> tuple[Any, Any]:
        c, h = state
        i, j, f, o = ops.split(_linear([inputs, h], self._kernel, self._bias), 4, axis=1)
        if self._peepholes:
            f, i = f + self._w_f * c, i + self._w_i * c
        new_c = ops.sigmoid(f + self._forget_bias) * c + ops.sigmoid(i) * self._act(j)
        if self._cell_clip is not None:
            new_c = ops.clip_by_value(new_c, -self._cell_clip, self._cell_clip)
        if self._peepholes:
            o = o + self._w_o * new_c
        new_h = ops.sigmoid(o) * self._act(new_c)
        if self._proj is not None:
            new_h = ops.matmul(new_h, self._projection)
            if self._proj_clip is not None:
                new_h = ops.clip_by_value(new_h, -self._proj_clip, self._proj_clip)
        return new_h, LSTMStateTuple(new_c, new_h)


class GRUCell(_OneStateCell):
    """The gated recurrent unit of Cho et al., TensorFlow's variant (the reset gate applied to
    the state before the candidate's product)."""

    _default_name = "gru_cell"

    def __init__(self, num_units: int, activation: Callable[[Any], Any] | None = None, reuse: Any = None,
                 kernel_initializer: Any = None, bias_initializer: Any = None, name: str | None = None,
                 dtype: Any = None):
        super().__init__(num_units, activation, reuse, name, dtype)
        self._kinit, self._binit = kernel_initializer, bias_initializer

    def _build(self, input_depth: int) -> None:
        n = input_depth + self._units
        with variable_scope("gates"):
            self._gate_kernel = self._variable("kernel", [n, 2 * self._units], self._kinit)
            self._gate_bias = self._variable("bias", [2 * self._units], self._binit or constant_initializer(1.0))
        with variable_scope("candidate"):
            self._cand_kernel = self._variable("kernel", [n, self._units], self._kinit)
            self._cand_bias = self._variable("bias", [self._units], self._binit or zeros_initializer())

    def call(self, inputs: Tensor, state: Any) -> tuple[Any, Any]:
        r, u = ops.split(ops.sigmoid(_linear([inputs, state], self._gate_kernel, self._gate_bias)), 2, axis=1)
        c = self._act(_linear([inputs, r * state], self._cand_kernel, self._cand_bias))
        h = u * state + (1.0 - u) * c
        return h, h


class MultiRNNCell(RNNCell):
    """``cells`` stacked: each one's output is the next one's input; the state is the tuple
    of theirs."""

    _default_name = "multi_rnn_cell"

    def __init__(self, cells: Sequence[RNNCell], state_is_tuple: bool = True):
        super().__init__(None)
        if not cells:
            raise ValueError("MultiRNNCell needs at least one cell")
        if not state_is_tuple:
            raise ValueError("MultiRNNCell(state_is_tuple=False) is not supported; keep the tuple of states")
        self._cells = list(cells)

    @property
    def state_size(self) -> tuple:
        return tuple(c.state_size for c in self._cells)

    @property
    def output_size(self) -> int:
        return self._cells[-1].output_size

    def _build(self, input_depth: int) -> None:
        depth = input_depth
        for k, cell in enumerate(self._cells):
            with variable_scope(f"cell_{k}"):
                cell.build(depth)
            self.variables += cell.variables
            depth = cell.output_size

    def call(self, inputs: Tensor, state: Any) -> tuple[Any, Any]:
        out, states = inputs, []
        for cell, s in zip(self._cells, state):
            out, new = cell.call(out, s)
            states.append(new)
        return out, tuple(states)
