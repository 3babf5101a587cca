"""TensorFlow 1.x's run-time checks and prints: ``tf.assert_equal`` and its kin, ``tf.assert_rank``,
``tf.Print``.

An assertion is a host op (run between compiled segments, as TensorFlow runs it on the
host): with nothing to return, it is used through ``tf.control_dependencies`` or run
itself, and raises ``tf.errors.InvalidArgumentError`` when its condition fails, with the
message, the condition, the first ``summarize`` values of each operand and where the
assertion was created. A rank known when the graph is built is checked then (a
ValueError), as TensorFlow does. ``tf.Print`` passes its input through and writes its
``data`` tensors' values to stderr each time it runs (its first ``first_n`` runs).
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from flowjit.v1 import errors
from flowjit.v1.graph import Operation, Tensor
from flowjit.v1.ops import _graph_of, convert_to_tensor

_SUMMARIZE = 3   # TensorFlow's default count of values an assertion or Print shows


def _values(x: np.ndarray, summarize: int | None) -> str:
    flat = np.asarray(x).ravel()
    n = _SUMMARIZE if summarize is None else summarize
    shown = " ".join(str(v) for v in flat[:n])
    return f"[{shown}{'...' if flat.size > n else ''}]"


def _assertion(kind: str, condition: str, test: Callable[..., np.ndarray], operands: Sequence[Any],
               data: Sequence[Any] | None, summarize: int | None, message: str | None,
               name: str | None) -> Operation:
    tensors = [convert_to_tensor(x) for x in operands]
    if len(tensors) == 2 and tensors[1].dtype != tensors[0].dtype:
        tensors[1] = convert_to_tensor(operands[1], dtype=tensors[0].dtype)
    extra = [convert_to_tensor(d) for d in (data or [])]

    def check(session: Any, op: Operation, xs: list[Any]) -> list[Any]:
        vals = [np.asarray(v) for v in xs[:len(tensors)]]
        if not np.all(test(*vals)):
            shown = [f"{'xy'[k]} ({t.name}) = {_values(v, summarize)}" for k, (t, v) in enumerate(zip(tensors, vals))]
            shown += [_values(np.asarray(v), summarize) for v in xs[len(tensors):]]
            raise errors.InvalidArgumentError(
                None, op, f"{message + ' ' if message else ''}Condition {condition} did not hold element-wise: "
                          f"{' '.join(shown)} (tf.{kind} {op.name!r} created at {op.location})")
        return []
    graph = _graph_of([*tensors, *extra])
    return graph.create_op(kind.title().replace("_", ""), [*tensors, *extra], check, name=name or kind, host=True,
                           outputs=[])


def _binary(kind: str, condition: str, compare: Callable[[Any, Any], Any]) -> Callable[..., Operation]:
    def assertion(x: Any, y: Any, data: Sequence[Any] | None = None, summarize: int | None = None,
                  message: str | None = None, name: str | None = None) -> Operation:
        return _assertion(kind, condition, compare, [x, y], data, summarize, message, name)
    assertion.__name__ = kind
    assertion.__doc__ = (f"A host op raising InvalidArgumentError unless {condition} holds for every element "
                         f"(``tf.{kind}``; x and y broadcast).")
    return assertion


def _unary(kind: str, condition: str, test: Callable[[Any], Any]) -> Callable[..., Operation]:
    def assertion(x: Any, data: Sequence[Any] | None = None, summarize: int | None = None,
                  message: str | None = None, name: str | None = None) -> Operation:
        return _assertion(kind, condition, test, [x], data, summarize, message, name)
    assertion.__name__ = kind
    assertion.__doc__ = f"A host op raising InvalidArgumentError unless {condition} (``tf.{kind}``)."
    return assertion


assert_equal = _binary("assert_equal", "x == y", operator.eq)
assert_none_equal = _binary("assert_none_equal", "x != y", operator.ne)
assert_less = _binary("assert_less", "x < y", operator.lt)
assert_less_equal = _binary("assert_less_equal", "x <= y", operator.le)
assert_greater = _binary("assert_greater", "x > y", operator.gt)
assert_greater_equal = _binary("assert_greater_equal", "x >= y", operator.ge)
assert_positive = _unary("assert_positive", "x > 0", lambda x: x > 0)
assert_negative = _unary("assert_negative", "x < 0", lambda x: x < 0)
assert_non_negative = _unary("assert_non_negative", "x >= 0", lambda x: x >= 0)
assert_non_positive = _unary("assert_non_positive", "x <= 0", lambda x: x <= 0)


def assert_rank(x: Any, rank: int, data: Sequence[Any] | None = None, summarize: int | None = None,
                message: str | None = None, name: str | None = None) -> Operation:
    """``x`` has rank ``rank``: checked when the graph is built where its rank is known (a
    ValueError), else when it runs (a host op raising InvalidArgumentError)."""
    t = convert_to_tensor(x)
    if t.shape.ndims is not None and t.shape.ndims != int(rank):
        raise ValueError(f"{message + ' ' if message else ''}Tensor {t.name} must have rank {int(rank)}; "
                         f"its shape is {t.shape} (tf.assert_rank)")
    return _assertion("assert_rank", f"rank(x) == {int(rank)}", lambda v: np.ndim(v) == int(rank), [t], data,
                      summarize, message, name)


def Print(input_: Any, data: Sequence[Any], message: str | None = None, first_n: int | None = None,  # noqa: N802
          summarize: int | None = None, name: str | None = None) -> Tensor:
    """``input_`` passed through; each run (the first ``first_n`` ones, when given) writes
    ``message`` and the first ``summarize`` values of each ``data`` tensor to stderr
    (``tf.Print``)."""
    t = convert_to_tensor(input_)
    shown = [convert_to_tensor(d) for d in data]
    runs = [0]

    def compute(session: Any, op: Operation, xs: list[Any]) -> list[Any]:
        runs[0] += 1
        if first_n is None or first_n < 0 or runs[0] <= first_n:
            print((message or "") + "".join(_values(np.asarray(v), summarize) for v in xs[1:]), file=sys.stderr)
        return [np.asarray(xs[0])]
    graph = _graph_of([t, *shown])
    return graph.create_op("Print", [t, *shown], compute, name=name, host=True,
                           outputs=[(t._shape, t.dtype)]).outputs[0]
